#!/usr/bin/env bash
# The web page that checks a proof or an evidence directory in the browser (web/, docs/VIZ.md):
# sion_verify compiled to WebAssembly (crates/sion_web) and written with the page into
# web/dist/, which a browser opens from disk or `sion serve-ui` serves on loopback.
#
#   bash scripts/web.sh            # builds web/dist/ (needs the wasm32-unknown-unknown target)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "web: adding the Rust target wasm32-unknown-unknown (rustup)" >&2
    rustup target add wasm32-unknown-unknown >/dev/null
fi
# The module is built on its own: no lint wrapper, the release profile (small and fast).
RUSTC_WORKSPACE_WRAPPER= cargo build --locked --quiet -p sion_web --target wasm32-unknown-unknown --release
target="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p web/dist
cp web/index.html web/app.js web/dist/
# The module inline, as base64: a page opened from disk can load scripts, not fetch files.
python3 - "$target/wasm32-unknown-unknown/release/sion_web.wasm" web/dist/sion_verify_wasm.js <<'PY'
import base64, sys
wasm = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "w") as f:
    f.write("// sion_verify as WebAssembly (crates/sion_web), built by scripts/web.sh.\n")
    f.write(f'const SION_VERIFY_WASM_BASE64 = "{base64.b64encode(wasm).decode()}";\n')
PY
echo "web: wrote web/dist/ (open web/dist/index.html, or: sion serve-ui)" >&2
