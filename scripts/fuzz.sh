#!/usr/bin/env bash
# Runs every fuzz target for N seconds (default 60) on stable Rust (--sanitizer none).
# Installs cargo-fuzz into the project-local, git-ignored .tools/ when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

tools="$PWD/.tools"
if ! command -v cargo-fuzz >/dev/null 2>&1 && [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "installing cargo-fuzz into $tools (one time)"
  cargo install --locked --root "$tools" cargo-fuzz
fi
export PATH="$tools/bin:$PATH"

cd fuzz
for target in $(cargo fuzz list); do
  echo "-- fuzz $target (${seconds}s)"
  # New inputs go to the git-ignored corpus; the committed seeds reach the accepting paths early.
  mkdir -p "corpus/$target"
  seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  cargo fuzz run "$target" --sanitizer none "corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec|Done|ERROR|panicked' || true
  # grep swallows the exit status; re-check that no crash artifact was written.
  if ls "artifacts/$target"/crash-* >/dev/null 2>&1; then
    echo "fuzz target $target found a crash: see fuzz/artifacts/$target" >&2
    exit 1
  fi
done
