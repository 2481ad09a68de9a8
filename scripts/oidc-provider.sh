#!/usr/bin/env bash
# Installs the pinned oidc-provider (npm, panva's certified OpenID Connect provider) into the
# project-local, git-ignored .tools/oidc when it is missing or of another version, then prints
# the install directory's absolute path (the only thing this script writes to stdout).
#
# tests/oidc/provider.mjs imports it from .tools/oidc/node_modules; the real-IdP test
# (io-http/tests/oidc_provider.rs) runs this script first. Needs only node (20 or later) and npm.
# The 9.x line prints an "Unsupported runtime" warning on Node 20 (its maintainer supports 22+
# LTS) and runs there all the same; the warning goes to the provider's stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

version="9.13.3"
dir="$PWD/.tools/oidc"
pkg="$dir/node_modules/oidc-provider/package.json"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: $tool is not on PATH (oidc-provider $version, for the real-IdP test, needs Node.js 20 or later with npm)" >&2
    exit 1
  fi
done

installed() {
  [ -f "$pkg" ] && [ "$(node -p "require(process.argv[1]).version" "$pkg" 2>/dev/null)" = "$version" ]
}

if ! installed; then
  echo "installing oidc-provider $version (npm) into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error \
    "oidc-provider@$version" >&2
  if ! installed; then
    echo "error: $pkg does not report $version after npm install oidc-provider@$version" >&2
    exit 1
  fi
fi
echo "$dir"
