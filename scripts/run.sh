#!/usr/bin/env bash
# Brings the plane up in the space `demo`, in operator mode, on its embedded nats-server:
# installs the pinned server into .tools/ when missing (scripts/nats-server.sh), creates the
# space's trust root under the git-ignored .cotal/ once (`cotal-authd init`, idempotent; the IdP
# pin is a loopback URL until a development IdP ships), then runs `cotal-authd up`.
# Extra arguments are passed to `up` (e.g. --server nats://host:4222 to use a server started
# from `cotal-authd broker-config --space demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
COTAL_NATS_SERVER="$(scripts/nats-server.sh)"
export COTAL_NATS_SERVER
cargo build --quiet -p cotal-authd
authd=target/debug/cotal-authd
"$authd" init --space demo --idp "${COTAL_IDP_URL:-http://127.0.0.1:4190}"
exec "$authd" up --space demo "$@"
