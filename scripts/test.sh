#!/usr/bin/env bash
# Sets up the test tools, checks lint and types, and runs the whole test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "[test] ruff and mypy" >&2
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy
echo "[test] pytest" >&2
exec .venv/bin/python -m pytest "$@"
