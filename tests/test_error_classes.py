"""Every exception class of the product code is a `CreditlineError`, or is named in NOT_EXPECTED with why not.

A `CreditlineError` is an expected failure: the CLI prints its message as `error:` lines and exits 2, and a
round whose step failed with one says its message alone. A new exception class without the base would be
printed as a bug (class named, exit 1), so this test makes its author choose. Classes are found on the source
(AST, module level) and checked on the class itself (imported), so a base reached through another module counts.
"""

import ast
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from creditline.errors import CreditlineError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("creditline", "pipelines", "assets", "resources", "schemas")

NOT_EXPECTED = {
    "pipelines.round_runner.RoundInterrupted": "an interrupt (KeyboardInterrupt): Ctrl-C or SIGTERM during a run, "
    "exit 130",
    "pipelines.round_runner._WokenToStop": "an interrupt (KeyboardInterrupt) raised while a step waits for a pool slot",
    "creditline.serve.serving_requests.RequestError": "an HTTP client's bad request: the policy server answers it with "
    "status 400 and an OpenAI-style error body; it never reaches the CLI",
    # Not expected today: each fails a round (or a command) as a bug does, its class named, exit 1. Giving one
    # the base would change that output to its message alone, exit 2: a decision of its own, not made here.
    "creditline.rollout.branching.ReplayDivergence": "not expected today: a branched round whose replay differs from "
    "its recording fails the round",
    "creditline.engines.endpoints.EndpointError": "not expected today: a generation replica that fails mid-round "
    "fails the round (one that is down before it is a StoreUnreachable)",
    "creditline.interop.verifiers_source.VerifiersRunError": "not expected today: a verifiers environment run that "
    "fails fails the round",
    "creditline.interop.imported_rollouts.SourceError": "not expected today in a round; `creditline import` turns it into "
    "a UsageError",
    "creditline.envs.registry.UnknownEnvironment": "not expected today past the config checks, which report it "
    "as a ConfigError's problem",
    "creditline.credit.rubric_registry.UnknownRubric": "not expected today past the config checks, which report it "
    "as a ConfigError's problem (`creditline rescore` and `export` turn it into a UsageError)",
    "creditline.rollout.conversation.ChatTemplateError": "not expected today past the config checks, which refuse a "
    "chat config whose tokenizer has no chat template",
    "pipelines.instance.InstanceDamagedError": "not expected today: a Dagster storage no repair can settle",
    "pipelines.dagster_client.DagsterGraphQLError": "not expected today: the Dagster webserver answered a "
    "GraphQL query with an error",
}
"""Exception classes of the product code that are not `CreditlineError`s, by qualified name: why not."""


def module_classes() -> list[tuple[str, str]]:
    """(module, class name) of every module-level class with a base, in the product packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text())
            found += [
                (module, node.name) for node in tree.body if isinstance(node, ast.ClassDef) and node.bases
            ]
    return found


def exception_classes() -> dict[str, type]:
    """{qualified name: class} of every exception class defined at module level in the product packages."""
    classes = {}
    for module, name in module_classes():
        cls = getattr(importlib.import_module(module), name)
        if issubclass(cls, BaseException):
            classes[f"{module}.{name}"] = cls
    return classes


@pytest.fixture(scope="module")
def classes() -> dict[str, type]:
    return exception_classes()


def test_every_exception_class_is_a_creditline_error_or_says_why_not(classes):
    unexplained = [name for name, cls in classes.items()
                   if not issubclass(cls, CreditlineError) and name not in NOT_EXPECTED]  # fmt: skip
    assert unexplained == [], "derive from creditline.errors.CreditlineError, or add to NOT_EXPECTED with why"


def test_the_allow_list_names_classes_that_exist_and_lack_the_base(classes):
    assert {
        name for name in NOT_EXPECTED if name not in classes or issubclass(classes[name], CreditlineError)
    } == set()


def test_the_checker_sees_the_classes_it_judges(classes):
    assert classes["creditline.store.errors.ChangedInputError"].__mro__[1] is CreditlineError
    assert issubclass(classes["pipelines.cli.UsageError"], ValueError)  # the builtin second base is kept
    assert "schemas.tables.StepsTable" not in classes  # a class with bases that is not an exception


def _step_failure(exc: BaseException) -> SimpleNamespace:
    """A failed step's event as `execute_in_process` returns it, for `exc` raised in the step."""
    from dagster._utils.error import serializable_error_info_from_exc_info

    try:
        raise exc
    except BaseException:
        error = serializable_error_info_from_exc_info(sys.exc_info())
    return SimpleNamespace(is_step_failure=True, event_specific_data=SimpleNamespace(error=error))


def test_a_round_failed_step_is_expected_when_its_class_is_a_creditline_error():
    """Dagster keeps an error's class name and message; `expected_failures` finds the class from them."""
    from creditline.interop.imported_rollouts import SourceError
    from creditline.store.errors import ChangedInputError
    from pipelines.round_runner import expected_failures

    failures = [ChangedInputError("changed"), SourceError("f", "json", "bad"), ValueError("bug")]
    result = SimpleNamespace(all_events=[_step_failure(exc) for exc in failures])
    assert expected_failures(result) == {"ChangedInputError"}


def test_a_step_stopped_by_an_interrupt_that_a_library_wrapped_is_an_interrupted_round():
    """SIGTERM inside a step's DuckDB query: Dagster raises its interrupt there, DuckDB turns it into a
    RuntimeError; the run's record of it makes the round interrupted, as the signal itself does."""
    from dagster._core.errors import DagsterExecutionInterruptedError

    from pipelines.round_runner import _stopped_by_an_interrupt

    def wrapped() -> RuntimeError:
        try:
            raise DagsterExecutionInterruptedError()
        except DagsterExecutionInterruptedError as interrupt:
            error = RuntimeError("Query interrupted")
            error.__cause__ = interrupt
            return error

    assert _stopped_by_an_interrupt(SimpleNamespace(all_events=[_step_failure(wrapped())]))
    assert _stopped_by_an_interrupt(
        SimpleNamespace(all_events=[_step_failure(DagsterExecutionInterruptedError())])
    )
    assert not _stopped_by_an_interrupt(SimpleNamespace(all_events=[_step_failure(RuntimeError("a bug"))]))


def test_sigterm_keeps_its_handler_after_a_run_in_a_process_started_with_sigint_ignored():
    """Dagster gives SIGTERM SIGINT's handler when a run ends. A process started with SIGINT ignored (a
    background job of a script) would then ignore SIGTERM between rounds; the run's block restores it."""
    import signal

    from dagster._utils.interrupts import capture_interrupts

    from pipelines.round_runner import _interrupt_signals

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with _interrupt_signals(), capture_interrupts():  # what execute_in_process does around a run
            pass
        assert signal.getsignal(signal.SIGTERM) is on_sigterm
        with capture_interrupts():  # without the block, Dagster's restore leaves SIGTERM ignored
            pass
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_once_interrupted_no_log_record_reaches_a_stream_and_the_handlers_are_restored(capsys, tmp_path):
    """Before the interrupt a library's record is printed; after it, none is, whether the logger has a stream
    handler of its own or falls to Python's last-resort handler; a handler that writes elsewhere (a log file
    too) still gets every record; after the block nothing is held back."""
    import logging

    from pipelines.interrupts import logs_quiet_once_interrupted

    own, bare, kept = logging.getLogger("lib.own"), logging.getLogger("lib.bare"), []
    stream = logging.StreamHandler()  # sys.stderr, as a library sets one up
    elsewhere = logging.Handler()
    elsewhere.emit = kept.append  # type: ignore[method-assign]
    log_file = logging.FileHandler(tmp_path / "lib.log")
    own.addHandler(stream), own.addHandler(elsewhere), own.addHandler(log_file)
    own.propagate = bare.propagate = False  # pytest's own capture handlers on the root stay out of it
    interrupted = False
    try:
        with logs_quiet_once_interrupted(lambda: interrupted):
            own.error("before, own"), bare.error("before, bare")
            interrupted = True
            own.error("after, own"), bare.error("after, bare")
        own.error("outside, own"), bare.error("outside, bare")
    finally:
        own.removeHandler(stream), own.removeHandler(elsewhere), own.removeHandler(log_file)
        log_file.close()
    assert capsys.readouterr().err.splitlines() == [
        "before, own", "before, bare", "outside, own", "outside, bare"
    ]  # fmt: skip
    assert [r.getMessage() for r in kept] == ["before, own", "after, own", "outside, own"]
    assert (tmp_path / "lib.log").read_text().splitlines() == ["before, own", "after, own", "outside, own"]
    assert stream.filters == [] and logging.lastResort.filters == []
