#!/usr/bin/env bash
# Install what icicle needs on a fresh machine of this kind and build it (release).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/pkg.sh
. scripts/pkg.sh
need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# MPI for plugins/prism-mpi (swiftload): the mpi crate's bindgen needs libclang.
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
# TLS and SASL (SCRAM, OAUTHBEARER/OIDC) in librdkafka: plugins/kafka's rdkafka features
# `ssl` and `curl` link the system OpenSSL and libcurl (docs/gpfs-monitor.md).
for p in libopenmpi-dev libclang-dev libssl-dev pkg-config libcurl4-openssl-dev; do
  if pkg_missing "$p"; then need+=("$p"); fi
done
command -v cc >/dev/null 2>&1 || need+=(build-essential)
# Headless Chromium drives the web page of `icicle serve` (tests/web_page.rs, over the DevTools pipe).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
pkg_install "${need[@]}"
command -v cargo >/dev/null 2>&1 || { echo "cargo is required (rustup toolchain)"; exit 1; }

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
bash scripts/services.sh install >/dev/null || echo "tansu or moto (the Kafka-protocol broker and the S3 server for the demo and tests) could not be installed"
cargo build --release --workspace --bins
