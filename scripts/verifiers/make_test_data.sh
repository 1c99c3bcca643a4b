#!/usr/bin/env bash
# Regenerate tests/data/verifiers/{v03,v04}/<case>/ with verifiers itself, against `creditline serve`.
#
#   scripts/verifiers/make_test_data.sh            (or: make verifiers-data)
#
# 1. creates .venv-verifiers-0.3 (verifiers==0.3.1) and .venv-verifiers-0.4 (verifiers==0.4.0) if missing;
# 2. builds the served policy into tests/data/verifiers/policy (scripts/verifiers/make_policy.py, project venv)
#    unless it exists (VF_REBUILD_POLICY=1 forces it);
# 3. for each version and case: starts `creditline serve --port 0 --seed 0` in the background (a fresh
#    server per case, so each case's samples do not depend on the others), reads the port it announces,
#    waits for /health, runs the case's script, stops the server by its PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PROJECT_PY="$ROOT/.venv/bin/python"
CREDITLINE="$ROOT/.venv/bin/creditline"
POLICY="$ROOT/tests/data/verifiers/policy"
MODEL="creditline-verifiers-policy"
OUT="$ROOT/tests/data/verifiers"
CASES=(single_turn tool_calls step_rewards)
LOG_DIR="$(mktemp -d)"
SERVER_PID=""

stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap 'stop_server; rm -rf "$LOG_DIR"' EXIT

make_venv() {  # folder, version: the Makefile's rule (pinned by scripts/verifiers/requirements-VERSION.txt)
  make -C "$ROOT" --no-print-directory "$1/.installed"
}

start_server() {  # -> sets SERVER_PID, BASE_URL
  local log="$LOG_DIR/serve-$1.log"
  "$CREDITLINE" serve --policy "$POLICY" --port 0 --seed 0 --model-name "$MODEL" >"$log" 2>&1 &
  SERVER_PID=$!
  BASE_URL=""
  for _ in $(seq 1 120); do
    BASE_URL="$(grep -o 'http://[0-9.]*:[0-9]*/v1' "$log" | head -n1 || true)"
    if [[ -n "$BASE_URL" ]] && curl -sf "${BASE_URL%/v1}/health" >/dev/null; then
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; echo "creditline serve died" >&2; exit 1; }
    sleep 1
  done
  cat "$log"; echo "creditline serve did not become healthy" >&2; exit 1
}

make_venv .venv-verifiers-0.3
make_venv .venv-verifiers-0.4

if [[ ! -f "$POLICY/config.json" || "${VF_REBUILD_POLICY:-0}" == "1" ]]; then
  echo "== building the policy in $POLICY"
  "$PROJECT_PY" scripts/verifiers/make_policy.py "$POLICY"
fi

for case in "${CASES[@]}"; do
  start_server "v03-$case"
  echo "== verifiers 0.3.1 $case ($BASE_URL)"
  .venv-verifiers-0.3/bin/python scripts/verifiers/v03/run_case.py "$case" \
    --base-url "$BASE_URL" --model "$MODEL" --out "$OUT/v03/$case"
  stop_server

  start_server "v04-$case"
  echo "== verifiers 0.4.0 $case ($BASE_URL)"
  .venv-verifiers-0.4/bin/python scripts/verifiers/v04/run_case.py "$case" \
    --base-url "$BASE_URL" --model "$MODEL" --policy "$POLICY" --out "$OUT/v04/$case"
  stop_server
done

echo "== written:"
find "$OUT" -type f | sort | while read -r f; do
  printf '%8d bytes %5d lines  %s\n' "$(wc -c <"$f")" "$(wc -l <"$f")" "${f#$ROOT/}"
done
