"""Errors the store raises on purpose, so callers can catch them by name instead of parsing messages."""

from __future__ import annotations

from creditline.errors import CreditlineError


class ExperimentConfigMismatch(CreditlineError, ValueError):
    """An experiment name is already registered with a different configuration.

    Results of two configurations must never share a name (their rounds would interleave in lineage),
    so the user has to pick a new experiment name.
    """

    def __init__(self, name: str, stored_hash: str, new_hash: str) -> None:
        self.name = name
        self.stored_hash = stored_hash
        self.new_hash = new_hash
        super().__init__(
            f"experiment {name!r} is registered with config {stored_hash}, not {new_hash}; "
            "use a new experiment name for a different configuration"
        )


class StoreLockedError(CreditlineError, TimeoutError):
    """The DuckDB file stayed locked by another writer for longer than the store is willing to wait."""

    def __init__(self, path: str, waited_s: float, attempts: int, last_error: BaseException) -> None:
        from creditline.config.deployment import redact

        self.path = path
        self.waited_s = waited_s
        self.attempts = attempts
        shown = redact(path)
        last = str(last_error).replace(path, shown)
        if path.startswith(("postgresql://", "postgres://")):
            super().__init__(
                f"lineage store {shown}: transactions kept conflicting with other writers' "
                f"for {waited_s:.1f} s ({attempts} attempts). Last error: {last}"
            )
        else:
            super().__init__(
                f"lineage store {path} stayed locked for {waited_s:.1f} s ({attempts} attempts); "
                f"another process holds it open for writing. Last error: {last}"
            )


class CatalogTooNewError(CreditlineError, ValueError):
    """The catalog file was written by a newer DuckDB than the one installed, which cannot read it.

    creditline pinned DuckDB 2.0.0 until the server profile needed 1.5.5 (the newest with its extensions on
    PyPI); a 2.0 file moves over with DuckDB's own export and import, as the message says.
    """

    def __init__(self, path: str, version: str) -> None:
        super().__init__(
            f"lineage catalog {path} was written by a newer DuckDB than this one ({version}); move it over: "
            f"in a spare venv with duckdb==2.0.0 run EXPORT DATABASE 'catalog-export' (FORMAT parquet) "
            f"on it, then IMPORT DATABASE 'catalog-export' into a new file with this DuckDB "
            f"and put that file in its place"
        )


class CatalogUnreachableError(CreditlineError, ConnectionError):
    """The Postgres lineage catalog could not be attached (down, refused, wrong credentials); password
    hidden."""


class CatalogDamagedError(CreditlineError, RuntimeError):
    """The DuckDB catalog file exists but DuckDB cannot open it: truncated, overwritten, or not a catalog at
    all."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(
            f"lineage catalog {path} cannot be opened, it is damaged ({detail}); restore it from a backup: "
            f"creditline cannot rebuild it from the data files "
            f"(their lineage, round commits and runs live only in it)"
        )


class TrackingStoreError(CreditlineError, RuntimeError):
    """The embedded MLflow tracking store (`<data_root>/mlflow.db`) cannot be read or written."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(
            f"MLflow tracking store {path} cannot be written ({detail}); nothing of the round was written: "
            f"restore the file from a backup (or, if it is only read-only, make it writable)"
        )


class ChangedInputError(CreditlineError, ValueError):
    """A recorded input is missing, or its bytes no longer hash to its record: refused rather than read."""
