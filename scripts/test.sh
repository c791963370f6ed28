#!/usr/bin/env bash
# Set-up command 2: run the whole test suite. Services the tests need are started on
# 127.0.0.1 here and stopped on exit (none yet: the Lustre stand-in is a testkit binary).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
command -v sqlite3 >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3; }
# The tests drive the real binaries, icicle-testkit's too (the fake `lfs`): build them first.
cargo build --workspace --bins
cargo test --workspace --all-targets 2>&1
