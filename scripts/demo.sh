#!/usr/bin/env bash
# Sets up sevents and runs the demo on the embedded default: bash scripts/demo.sh [demo args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/sevents-demo "$@"
