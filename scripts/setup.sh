#!/usr/bin/env bash
# Sourced by the other scripts: checks the toolchain this package needs is here.
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "sion_memory needs a Rust toolchain (1.95 or newer): https://rustup.rs" >&2
        exit 1
    fi
fi
# Lints run through clippy; a rustup toolchain may lack the component.
if ! command -v clippy-driver >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi
