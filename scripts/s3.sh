#!/usr/bin/env bash
# Sourced by scripts/test.sh: a real S3-compatible server for the archive tests
# (crates/sion_archive/tests/archive.rs start it on a loopback port). s3s-fs serves S3 over
# HTTP with SigV4 from a directory; it installs from crates.io (0.14.1 is the last release
# that builds with Rust 1.95) into .tools/, once.
_sion_s3_root="$PWD/.tools/s3s-fs"
if [ ! -x "$_sion_s3_root/bin/s3s-fs" ] && ! command -v s3s-fs >/dev/null 2>&1; then
    echo "s3: installing s3s-fs 0.14.1 from crates.io into $_sion_s3_root" >&2
    cargo install --locked --quiet s3s-fs@0.14.1 --features binary --root "$_sion_s3_root"
fi
[ -x "$_sion_s3_root/bin/s3s-fs" ] && export PATH="$_sion_s3_root/bin:$PATH"
unset _sion_s3_root
