#!/usr/bin/env bash
# Run every fuzz target for a bounded time (FUZZ_SECONDS each, default 20), starting from the
# committed corpus (seeds and every crash found so far, so old crashes are replayed first).
# A crash fails the run; its input is left in fuzz/artifacts/TARGET/ — add it to
# fuzz/corpus/TARGET/ with the fix. Longer runs: FUZZ_SECONDS=3600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1   # cargo fuzz passes -Z flags; this lets stable accept them
status=0
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target"
  work="$(mktemp -d)"
  # New inputs go to a scratch corpus; the committed one is read, not rewritten.
  if cargo fuzz run "$target" "$work" "corpus/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 \
      >"/tmp/fuzz-$target.log" 2>&1; then
    # libFuzzer's closing line; the dictionary it prints before may hold `#` and digits too.
    echo "fuzz $target: $(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "/tmp/fuzz-$target.log" | tail -n1) runs, no crash"
  else
    echo "fuzz $target: FAILED"; tail -n 30 "/tmp/fuzz-$target.log"; status=1
  fi
  rm -rf "$work"
done
exit "$status"
