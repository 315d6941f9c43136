#!/usr/bin/env bash
# Builds an offline bundle of the collector for VMs without package access:
#   bash scripts/bundle-collector.sh [--python PYTHON] [--out DIR]
# PYTHON (default python3) is the interpreter the VMs run: wheels with compiled parts (cryptography, cffi)
# are taken for its version and this machine's platform, so build one bundle per Python version and CPU.
# The tarball holds wheelhouse/ (sevents and every dependency), install.sh, the systemd unit and a sample
# configuration; on the VM: tar xzf BUNDLE && sudo ./sevents-collector-*/install.sh --systemd
set -euo pipefail
cd "$(dirname "$0")/.."
python=python3
out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: bash scripts/bundle-collector.sh [--python PYTHON] [--out DIR]" >&2; exit 2 ;;
  esac
done
say() { printf '[bundle] %s\n' "$*" >&2; }

version=$("$python" -c 'import sys; sys.exit("Python 3.9 or newer is needed") if sys.version_info < (3, 9) else None
import platform; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{sys.platform}-{platform.machine()}")')
release=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
name="sevents-collector-$release-$version"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/$name/wheelhouse"
say "building wheels of sevents and its collector dependencies for $("$python" --version)"
"$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/$name/wheelhouse" .
cp scripts/install-collector.sh "$work/$name/install.sh"
cp infra/systemd/sevents-collector.service infra/systemd/collector.toml infra/systemd/collector-eventhubs.toml \
  "$work/$name/"
chmod 0755 "$work/$name/install.sh"
mkdir -p "$out"
tar -C "$work" -czf "$out/$name.tar.gz" "$name"
say "$(du -h "$out/$name.tar.gz" | cut -f1) $out/$name.tar.gz"
echo "$out/$name.tar.gz"
