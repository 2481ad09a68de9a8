#!/usr/bin/env bash
# Brings the plane up in the space `demo` on its embedded nats-server: installs the pinned
# server into .tools/ when missing (scripts/nats-server.sh), then runs `cotal-authd up` with its
# state (identity, embedded store, discovery file) under the git-ignored .state/demo.
# Extra arguments are passed to `up` (e.g. --server nats://host:4222 to use a running server).
set -euo pipefail
cd "$(dirname "$0")/.."
COTAL_NATS_SERVER="$(scripts/nats-server.sh)"
export COTAL_NATS_SERVER
exec cargo run --quiet -p cotal-authd -- up --space demo --state-dir .state/demo "$@"
