#!/usr/bin/env bash
# Sets up the test tools, checks lint and types, and runs the test suite in parallel (pytest-xdist):
#   bash scripts/test.sh [pytest args]          the whole suite, as CI runs it (.ci/run: bash scripts/test.sh -q)
#   bash scripts/test.sh --fast [pytest args]   the inner loop: pure cores and unit tests, no slow/end-to-end tests
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "[test] ruff and mypy" >&2
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow and not benchmark")
  export SEVENTS_TEST_TIER=fast  # property tests search a tenth as hard (tests/tiers.py)
fi
echo "[test] pytest ${tier[*]:-(full suite)}" >&2
# worksteal: test durations range from milliseconds to a minute, so idle workers take queued tests from busy ones.
exec .venv/bin/python -m pytest -n auto --dist worksteal "${tier[@]}" "$@"
