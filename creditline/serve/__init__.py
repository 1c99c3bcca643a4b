"""`creditline serve`: a checkpoint behind an OpenAI-compatible HTTP server (vLLM's routes).

`serving` turns chat and completion requests into engine calls and back, `serving_requests` checks the
requests, `serving_http` is the server itself.
"""
