#!/usr/bin/env bash
# Sets up the test tools, checks lint and types, and runs the test suite in parallel (pytest-xdist):
#   bash scripts/test.sh [pytest args]          the whole suite, as CI runs it (.ci/run: bash scripts/test.sh -q)
#   bash scripts/test.sh --fast [pytest args]   the inner loop: the pure tier and the quick edges (no chDB, not slow)
#   bash scripts/test.sh --pure [pytest args]   pure cores and unit tests only: no chDB, socket or subprocess (``io``)
# The tiers, their markers and the watch that keeps ``io`` true: tests/tiers.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "[test] ruff and mypy" >&2
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy
# Compiled and assertion-rewritten modules are cached under .venv (not in the tree), so each pytest worker and
# each collector subprocess a test starts loads them instead of compiling them again: about a third of the fast
# tier's CPU on a machine that sets PYTHONDONTWRITEBYTECODE.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
tier=()
workers=(-n auto)
case "${1:-}" in
  # the quick edges mostly wait on loopback servers and subprocesses: twice as many workers as cores
  --fast) tier=(-m "not slow and not engine and not benchmark") workers=(-n "$(($(nproc) * 2))") ;;
  --pure) tier=(-m "not io and not slow and not engine and not benchmark") ;;
esac
if [ ${#tier[@]} -gt 0 ]; then
  export SEVENTS_TEST_TIER="${1#--}"  # property tests search less hard (tests/tiers.py)
  shift
fi
echo "[test] pytest ${tier[*]:-(full suite)}" >&2
# worksteal: test durations range from milliseconds to a minute, so idle workers take queued tests from busy ones.
exec .venv/bin/python -m pytest "${workers[@]}" --dist worksteal "${tier[@]}" "$@"
