#!/usr/bin/env bash
# Set-up command 2: run the whole test suite. The services the tests need (a Kafka-protocol
# broker, tansu; an S3 server, moto) are installed if missing, started on 127.0.0.1 here, and
# stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# A one-off build gains nothing from incremental caches, which cost ~1.3 GB of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# shellcheck source=scripts/pkg.sh
. scripts/pkg.sh
need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# useradd, groupadd, userdel for the real accounts of tests/visibility_users.rs.
command -v useradd >/dev/null 2>&1 || need+=(passwd)
# MPI for plugins/prism-mpi (swiftload): the mpi crate's bindgen needs libclang.
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
# TLS and SASL in librdkafka (plugins/kafka's rdkafka features `ssl`, `curl`).
for p in libopenmpi-dev libclang-dev libssl-dev pkg-config libcurl4-openssl-dev; do
  if pkg_missing "$p"; then need+=("$p"); fi
done
# deploy/ and scripts/ checked with the tools a site runs (tests/deploy.rs): systemd-analyze,
# promtool, shellcheck.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# `icicle man`'s pages rendered as a reader would (tests/cli.rs).
command -v man >/dev/null 2>&1 || need+=(man-db)
# Headless Chromium drives the web page of `icicle serve` (tests/web_page.rs, over the DevTools pipe).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
pkg_install "${need[@]}"
# In a virtualenv under .tools (not the system Python): the reference Prometheus text parser
# the metrics test checks /metrics with, and stock globus-sdk, which the file sink's documents
# must suit (tests/globus_sdk.rs). The tests run it as ICICLE_TEST_PYTHON.
py_venv .tools/py prometheus_client globus-sdk botocore
export ICICLE_TEST_PYTHON="$PWD/.tools/py/bin/python3"
bash scripts/services.sh install
# A second broker that requires SASL/SCRAM over TLS (tests/kafka_sasl.rs); built once per machine.
bash scripts/services.sh install kafka-sasl
trap 'bash scripts/services.sh stop; bash scripts/services.sh stop kafka-sasl' EXIT
services="$(bash scripts/services.sh start)"
ICICLE_TEST_KAFKA="$(echo "$services" | sed -n 's/^KAFKA=//p')"
ICICLE_TEST_S3="$(echo "$services" | sed -n 's/^S3=//p')"
sasl="$(bash scripts/services.sh start kafka-sasl)"
ICICLE_TEST_KAFKA_SASL="${ICICLE_SERVICES_RUN:-$PWD/.tools/run}/kafka-sasl"
export ICICLE_TEST_KAFKA ICICLE_TEST_S3 ICICLE_TEST_KAFKA_SASL
echo "Kafka broker (tansu) on $ICICLE_TEST_KAFKA, S3 server (moto) on $ICICLE_TEST_S3, SASL_SSL broker on ${sasl#KAFKA_SASL=}"
# The tests drive the real binaries; `cargo test` builds them (icicle-testkit's too, for its
# own tests), so there is no separate `cargo build` with other features to store twice.
df -h . | tail -1 | awk '{print "disk free before the build: " $4}'
# Formatting (seconds) and lints before the tests; either fails the run.
if ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then rustup component add rustfmt clippy; fi
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --all-targets --no-fail-fast 2>&1
# The lustre,globus slice (README, "Each plugin family is a Cargo feature"): no Kafka, S3,
# SQLite, tantivy, dashboard or plotters in it; it must lint clean and pass the tests that need
# only it (tests/features.rs, lustre_globus.rs, ...; Cargo.toml's [[test]] required-features).
# Most of its dependencies are the full build's; those built with fewer features in it (a
# quarter of its units: serde, tokio, hyper, reqwest, ...) are compiled again, a few minutes.
slice=(-p icicle --no-default-features --features "lustre,globus")
cargo clippy "${slice[@]}" --all-targets --quiet -- -D warnings
cargo test "${slice[@]}" --tests 2>&1
