# creditline: the handful of verbs. Everything installs itself into .venv on first use.
#   make run    the default experiment (maze, GiGPO), then its report
#   make test   the test suite (unit, schema, asset, end-to-end)
#   make ui     dagster dev on 127.0.0.1:3000 over the same instance `make run` used
#   make bench  advantage estimators vs plain loops, 1M rows (~20 s)
#   make bench-learning  the learning table: every estimator, 5 seeds, 4 tasks (hours; runs are kept)
#   make bench-overhead  a Dagster round vs the same round's core work: the per-round overhead share
#   make bench-trainer   one training step at vocabulary 151,936: chunked vs full-vocabulary log-probs
#   make lint   ruff check + format check

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA_ROOT ?= $(CURDIR)/creditline-data
UI_PORT ?= 3000
export CREDITLINE_DATA_ROOT := $(DATA_ROOT)

.PHONY: run test servers ui bench bench-learning bench-overhead bench-trainer bench-chat lint install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine has; then the project, constrained so pip never
# swaps torch for a CUDA build (see constraints.txt).
$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

# The test extras, and a user's environment package (tests/plugins/countdown) that the plugin tests
# find through its entry point, as a real user's would be.
$(VENV)/.installed-test: $(VENV)/.installed tests/plugins/countdown/pyproject.toml .venv-verifiers-0.3/.installed .venv-verifiers-0.4/.installed
	$(BIN)/pip install -q -c constraints.txt -e '.[test,server]' -e tests/plugins/countdown
	touch $@

# verifiers 0.3.1 (classic API) and 0.4.0 (v1) in venvs of their own (their pins are not ours), at the
# versions the test data was made with (scripts/verifiers/requirements-*.txt): the rounds whose rollouts a
# verifiers environment plays run in them (tests/e2e/test_verifiers_rollout_source.py).
.venv-verifiers-%/.installed: scripts/verifiers/requirements-%.txt
	$(PYTHON) -m venv .venv-verifiers-$*
	.venv-verifiers-$*/bin/pip install -q --upgrade pip
	.venv-verifiers-$*/bin/pip install -q -r $<
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(BIN)/creditline run
	$(BIN)/creditline report

# The server the scale-out and store tests start themselves (tests/servers.py): Debian's Postgres, installed
# once. moto (S3) and MLflow's server come with the test extras. Under `make test` the servers are required:
# a test whose server cannot start fails instead of skipping.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
servers:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }

test: install-test servers
	CREDITLINE_REQUIRE_SERVERS=1 $(BIN)/python -m pytest -q --durations=10

ui: install
	$(BIN)/python -c "from pipelines.instance import dagster_home; dagster_home('$(DATA_ROOT)')"
	DAGSTER_HOME=$(DATA_ROOT)/dagster_home $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

bench: install-test
	$(BIN)/python bench/advantages.py

bench-learning: install-test
	$(BIN)/python bench/learning.py

bench-overhead: install-test
	$(BIN)/python bench/overhead.py

bench-trainer: install-test
	$(BIN)/python bench/trainer.py

bench-chat: install-test
	$(BIN)/python bench/chat_round.py

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) creditline-data

# Regenerate tests/data/verifiers/ with verifiers 0.3.1 and 0.4.0 themselves (own venvs) against
# `creditline serve` (scripts/verifiers/README.md). Not part of `make test`.
verifiers-data: install
	scripts/verifiers/make_test_data.sh

.PHONY: verifiers-data
