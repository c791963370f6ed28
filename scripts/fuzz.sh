#!/usr/bin/env bash
# Run every fuzz target (fuzz/fuzz_targets) under libFuzzer for SECONDS each (default 600),
# one after another, and print one line of figures per target. New corpus entries go to
# fuzz/corpus/<target> (not committed); crashes to fuzz/artifacts/<target>.
# Needs cargo-fuzz (installed if missing); the stable toolchain runs it with RUSTC_BOOTSTRAP=1.
# The test suite runs the same harnesses as bounded properties (testkit/fuzz/tests).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tsv mmapplypolicy gufi_row gufi_db lustre_changelog gpfs_event time name prism_catalog)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1 CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
(cd fuzz && cargo fuzz build -O)
bin=fuzz/target/x86_64-unknown-linux-gnu/release
mkdir -p fuzz/logs
status=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  log="fuzz/logs/$t.log"
  # The binaries built above, so that editing the tree meanwhile changes nothing.
  began=$SECONDS
  if "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 -timeout=10 "fuzz/corpus/$t" "fuzz/seeds/$t" >"$log" 2>&1; then
    result="no finding"
  else
    result="FINDING (see $log and fuzz/artifacts/$t)"
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1 || true)
  cov=$( (grep -o 'cov: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
  echo "$t: $((SECONDS - began))s, ${execs:-?} execs (${rate:-?}/s), coverage ${cov:-?} edges, corpus $corpus, $result"
done
exit $status
