#!/usr/bin/env bash
# Installs the sevents collector from this bundle's wheelhouse, with no package index (shipped as install.sh
# in the tarball scripts/bundle-collector.sh builds):
#   ./install.sh [--prefix DIR] [--python PYTHON] [--systemd]
# --prefix   the virtualenv to create (default /opt/sevents/.venv, where the systemd unit looks)
# --python   the interpreter, 3.9 or newer, of the version the bundle was built for (default python3)
# --systemd  also install the unit and, if none exists, /etc/sevents/collector.toml; then enable and start it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=/opt/sevents/.venv
python=python3
systemd=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --systemd) systemd=1; shift ;;
    *) echo "usage: install.sh [--prefix DIR] [--python PYTHON] [--systemd]" >&2; exit 2 ;;
  esac
done
say() { printf '[install] %s\n' "$*" >&2; }

"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else "the collector needs Python 3.9 or newer")'
if [ ! -x "$prefix/bin/python" ]; then
  say "creating $prefix with $("$python" --version)"
  "$python" -m venv "$prefix"
fi
say "installing sevents from $here/wheelhouse (no package index)"
# No index and no configuration of this machine's pip: only the wheels in the bundle are used.
env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
  "$prefix/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
  --find-links "$here/wheelhouse" --upgrade sevents
"$prefix/bin/sevents-collector" --help >/dev/null

if [ $systemd = 1 ]; then
  install -d -m 0755 /etc/sevents
  if [ ! -e /etc/sevents/collector.toml ]; then
    install -m 0644 "$here/collector-eventhubs.toml" /etc/sevents/collector.toml
    say "wrote /etc/sevents/collector.toml: set eventhubs_namespace and eventhubs_name"
  fi
  sed "s#/opt/sevents/.venv/#$prefix/#" "$here/sevents-collector.service" >/etc/systemd/system/sevents-collector.service
  systemctl daemon-reload
  systemctl enable --now sevents-collector
  say "sevents-collector enabled and started (journalctl -u sevents-collector)"
fi
say "done: $prefix/bin/sevents-collector"
