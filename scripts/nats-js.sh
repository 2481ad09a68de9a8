#!/usr/bin/env bash
# Installs the official NATS JS client libraries the reference's manager and endpoints use
# (@nats-io/transport-node, @nats-io/jetstream, @nats-io/kv; exact versions pinned by
# tests/reference-client/package-lock.json) into the git-ignored
# tests/reference-client/node_modules with `npm ci`, when they are missing or of another
# version, then prints that directory's absolute path (the only thing this script writes to
# stdout).
#
# tests/reference-client/manager-calls.mjs and agent-watch.mjs import them; the reference-client
# tests (daemon/tests/reference_manager_client.rs, reference_agent_watch.rs) run this script
# first. Needs only node (20 or later) and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$PWD/tests/reference-client"
packages=(@nats-io/transport-node @nats-io/jetstream @nats-io/kv)

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: $tool is not on PATH (the NATS JS client libraries of the reference-client test need Node.js 20 or later with npm)" >&2
    exit 1
  fi
done

# Every pinned package is present at the version package.json pins.
installed() {
  node - "$dir" "${packages[@]}" <<'EOF'
const [dir, ...names] = process.argv.slice(2);
const path = require("node:path");
const pins = require(path.join(dir, "package.json")).dependencies;
for (const name of names) {
  let version;
  try {
    version = require(path.join(dir, "node_modules", name, "package.json")).version;
  } catch {
    process.exit(1);
  }
  if (version !== pins[name]) process.exit(1);
}
EOF
}

if ! installed; then
  echo "installing ${packages[*]} (npm ci, pinned by package-lock.json) into $dir/node_modules" >&2
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
  if ! installed; then
    echo "error: $dir/node_modules does not hold the versions package.json pins after npm ci" >&2
    exit 1
  fi
fi
echo "$dir"
