"""Playing episodes: a round's rollouts and its held-out evaluation.

`episodes` plays tasks with an engine and writes the episodes and steps tables (token ids, sampling
log-probs, anchor keys); `conversation` renders turns as one growing chat with every sampled token kept;
`branching` restarts continuations from chosen steps; `turn_packing` merges a conversation's turns into one
training row; `tool_calls` parses a completion's tool calls; `tasks` draws a round's task ids; `evaluation`
plays the held-out tasks greedily. It imports the engines and environments, never the store, Dagster or
MLflow.
"""
