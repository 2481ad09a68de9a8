#!/usr/bin/env bash
# Brings the plane up in the space `demo`, in operator mode, on its embedded nats-server:
# installs the pinned server into .tools/ when missing (scripts/nats-server.sh), serves the
# state root's DEVELOPMENT IdP on 127.0.0.1:4190 (`cotal-authd dev-idp`: it signs in anyone, so
# it is for walk-throughs only; set COTAL_IDP_URL to pin a real IdP instead), creates the space's
# trust root under the git-ignored .cotal/ once (`cotal-authd init`, idempotent, pinning that
# IdP), then runs `cotal-authd up`. Extra arguments are passed to `up` (e.g. --server
# nats://host:4222 to use a server started from `cotal-authd broker-config --space demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
COTAL_NATS_SERVER="$(scripts/nats-server.sh)"
export COTAL_NATS_SERVER
cargo build --quiet -p cotal-authd
authd="${CARGO_TARGET_DIR:-target}/debug/cotal-authd"
idp="${COTAL_IDP_URL:-}"
if [ -z "$idp" ]; then
  idp="http://127.0.0.1:4190"
  "$authd" dev-idp --port 4190 &
  dev_idp=$!
  trap 'kill "$dev_idp" 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/4190) 2>/dev/null && break
    kill -0 "$dev_idp" 2>/dev/null || { echo "error: the development IdP did not start" >&2; exit 1; }
    sleep 0.1
  done
fi
"$authd" init --space demo --idp "$idp"
"$authd" up --space demo "$@"
