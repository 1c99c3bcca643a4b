"""The base class of the failures a user causes and can fix, and their one rule: a message, not a traceback.

A bad config, argument or input file, a store that cannot be reached or is held by another writer, a changed
input, a failed blocking check: the CLI prints such an error's message as `error:` lines and exits 2, and a
round whose step failed with one says its message alone (`pipelines.round_runner.failure_lines`). Any other
exception is a bug: its class is named, with a hint to rerun with `--debug`, exit 1.

Each subclass keeps its builtin second base (ValueError, RuntimeError, ConnectionError, ...) where callers
and tests catch that. This module imports nothing, so catching `CreditlineError` costs a command no import
(`creditline report`'s one-line error imports neither Dagster nor pandera).
"""


class CreditlineError(Exception):
    """An expected failure: the CLI prints its message as `error:` lines, exit 2 (anything else is a bug)."""
