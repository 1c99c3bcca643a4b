"""The policies: `models` builds, loads and saves HF-format checkpoints (the built-in tiny policy, a user's
model), `chat_policy` the built-in chat model with its tokenizer, `initial_policy` round 0's policy."""
