"""The policies: `models` builds, loads and saves HF-format checkpoints (the built-in tiny policy, a user's
model), `chat_policy` the built-in chat model with its tokenizer, `initial_policy` round 0's policy."""

BUILTIN_POLICY = "builtin:tiny"
"""`initial_policy` naming the built-in tiny policy, built from its config on first use."""
BUILTIN_CHAT_POLICY = "builtin:chat"
"""`initial_policy` naming the built-in chat model with its trained tokenizer."""
BUILTIN_POLICIES = (BUILTIN_POLICY, BUILTIN_CHAT_POLICY)
