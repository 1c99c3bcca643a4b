"""transformers as creditline imports it: its models without scikit-learn's metrics.

Every model class of transformers imports `transformers.generation`, whose `candidate_generator` imports
`sklearn.metrics.roc_curve` when scikit-learn is installed (MLflow brings it). That one import is 805 modules
and 1.15–1.5 s of every process that loads a policy or a reward model (`python -X importtime`, 2026-11-27,
AMD EPYC), for one feature creditline never uses: assisted generation with a confidence threshold.

So `candidate_generator` is imported here first, with `sklearn` hidden: a `None` in `sys.modules`, which
Python's import system (and transformers' `find_spec` check) reads as "not installed". Then `sklearn` is
unhidden, and the module gets a `roc_curve` that imports scikit-learn's on its first call: assisted
generation with a threshold still works. Where the module was imported already (by another package in the
process), nothing changes. The policy and credit modules import transformers' names from here.
"""

from __future__ import annotations

import sys
from typing import Any


def _roc_curve(*args: Any, **kwargs: Any) -> Any:
    """scikit-learn's `roc_curve`, imported when assisted generation first asks for it."""
    from sklearn.metrics import roc_curve

    return roc_curve(*args, **kwargs)


def _import_generation_without_sklearn_metrics() -> None:
    if "transformers.generation.candidate_generator" in sys.modules:
        return
    hidden = "sklearn" not in sys.modules
    if hidden:
        sys.modules["sklearn"] = None  # type: ignore[assignment]
    try:
        import transformers.generation.candidate_generator as candidate_generator
    finally:
        if hidden:  # nothing can replace the None: an `import sklearn` under it fails
            del sys.modules["sklearn"]
    if not hasattr(candidate_generator, "roc_curve"):
        candidate_generator.roc_curve = _roc_curve


_import_generation_without_sklearn_metrics()

from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX  # noqa: E402
from transformers.utils import logging  # noqa: E402

__all__ = [
    "PRETOKENIZE_REGEX",
    "AutoModelForCausalLM",
    "AutoModelForSequenceClassification",
    "AutoTokenizer",
    "LlamaConfig",
    "LlamaForCausalLM",
    "PreTrainedTokenizerBase",
    "PreTrainedTokenizerFast",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "logging",
]
