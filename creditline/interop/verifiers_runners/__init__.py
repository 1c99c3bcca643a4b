"""Scripts that run a verifiers environment against an OpenAI-compatible endpoint and save its output.

They run with the interpreter of a venv that has verifiers installed (`[verifiers] python`), never inside
creditline's own process, so they import nothing from creditline: `classic.py` for verifiers ≤ 0.3.x
(`vf.load_environment` + `Environment.generate`, writes `results.jsonl`), `v1.py` for verifiers ≥ 0.4
(`run_eval(EvalConfig)` with the training client, writes `traces.jsonl`).
`creditline.interop.verifiers_source` starts them; their command line is the contract:

    PYTHON RUNNER --base-url URL --model NAME --policy FOLDER --env-id ID --env-args JSON
                  [--split train|eval] [--select JSON]
                  --num-examples N --rollouts-per-example G --temperature T --max-tokens M --seed S
                  --out DIR [--path DIR ...]

`--split` is the examples' split: a round's rollouts play "train", its evaluation "eval" (classic: the
environment's `dataset` or `eval_dataset`, each falling back to the other; a v1 taskset has none).
`--select` (v1) is verifiers' `SelectConfig` keys `include` / `exclude` / `skip`, which pick a taskset's
tasks. A temperature of 0 is greedy decoding (the evaluation).
"""

from pathlib import Path

RUNNERS = {"classic": Path(__file__).with_name("classic.py"), "v1": Path(__file__).with_name("v1.py")}
