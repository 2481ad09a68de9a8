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
  log="$(mktemp)"
  status=0
  cargo fuzz run "$target" --sanitizer none "corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec|panicked|ERROR' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "fuzz target $target failed (exit $status); crash inputs, if any, are in fuzz/artifacts/$target" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
done
