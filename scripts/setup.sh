#!/usr/bin/env bash
# Sets up everything sevents needs on a fresh machine, idempotently.
#   bash scripts/setup.sh          the package with its central side (.[central]: ingest, chDB, dashboards) in .venv
#   bash scripts/setup.sh --test   also the test tools (.[central,dev]), Azurite (npm), headless Chromium (apt)
# A VM that runs only the collector needs neither: `pip install .` (or scripts/bundle-collector.sh offline).
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

say() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $(python3 --version)"
  python3 -m venv .venv
fi
extras=".[central]"
[ $want_test = 1 ] && extras=".[central,dev]"
say "installing sevents ($extras) into .venv"
.venv/bin/pip install --quiet --disable-pip-version-check --upgrade pip 2>/dev/null || true
.venv/bin/pip install --quiet --disable-pip-version-check -e "$extras"

if [ $want_test = 1 ]; then
  if [ ! -x .node/node_modules/.bin/azurite-blob ]; then
    say "installing Azurite (Azure Storage emulator) into .node"
    npm install --silent --no-audit --no-fund --prefix .node azurite@3 >/dev/null
  fi
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing headless Chromium (Debian package) for the report test"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      say "chromium is missing and cannot be installed without root: the report rendering test will fail"
    fi
  fi
fi
say "ready"
