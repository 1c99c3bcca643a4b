"""Shared fixtures: a tiny built-in policy folder, made once per test session."""

from __future__ import annotations

import faulthandler
import importlib.util
import os
import signal

import pytest
import torch

from creditline.policy.models import TinyPolicyConfig, build_tiny_policy, load_policy

torch.set_num_threads(1)

if _stacks := os.environ.get("CREDITLINE_TEST_STACKS"):
    # `make test` stops a pytest that runs past its stream's limit with SIGUSR2 (`timeout -s USR2`): every
    # thread's stack goes to the file named first (the test's own stderr is captured, and lost with it), then
    # the signal's default action ends the process. Not SIGTERM: code and tests that save and restore
    # SIGTERM's handler would drop faulthandler's, which `signal` does not see. A child forked from pytest does
    # not inherit the dump (its stacks are not the stopped stream's).
    faulthandler.register(signal.SIGUSR2, file=open(_stacks, "a"), all_threads=True, chain=True)
    os.register_at_fork(after_in_child=lambda: faulthandler.unregister(signal.SIGUSR2))

collect_ignore = [] if importlib.util.find_spec("vllm") else ["vllm_engine"]
"""tests/vllm_engine/ runs the real vLLM engine: `make test` runs it in .venv-vllm, where vLLM is installed."""


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    return build_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny", TinyPolicyConfig(seed=0))


@pytest.fixture()
def tiny_policy(tiny_policy_dir):
    return load_policy(tiny_policy_dir)


@pytest.fixture(scope="session")
def postgres():
    """One Postgres server for the session (tests/servers.py); a test takes a fresh database of it."""
    from tests.servers import ServerUnavailable, postgres_server, unavailable

    try:
        with postgres_server() as server:
            yield server
    except ServerUnavailable as error:
        unavailable(f"Postgres could not start: {error}")


_DATABASES = iter(range(1_000_000))


@pytest.fixture()
def postgres_catalog(postgres) -> str:
    """The URI of a new, empty Postgres database for one test's lineage catalog."""
    return postgres.create_database(f"catalog_{next(_DATABASES)}")


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One S3-compatible server (moto) for the session; a test takes a fresh bucket of it."""
    from tests.servers import ServerUnavailable, s3_server, unavailable

    try:
        with s3_server(tmp_path_factory.mktemp("s3")) as server:
            yield server
    except ServerUnavailable as error:
        unavailable(f"the S3 server (moto) could not start: {error}")
