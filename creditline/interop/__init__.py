"""What other tools write and read: verifiers' rollouts and environments in, prime-rl's and verifiers' formats
out.

`verifiers_import` with `verifiers_classic` and `verifiers_v1` reads verifiers' saved rollouts into a round
(`imported_rollouts`); `verifiers_source` and `verifiers_evaluation` run a verifiers environment in its own
venv (`verifiers_runners`) to play or evaluate a round; `export` writes a round as prime-rl samples
(`export_prime_rl`), verifiers PR #941 rollouts (`export_pr941`) or verifiers v1 traces.
"""
