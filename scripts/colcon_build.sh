#!/usr/bin/env bash
# Builds sion_memory the way ROS users build it, then checks what got installed: a colcon
# workspace holding sion_memory_msgs and this package, `colcon build` through colcon-cargo and
# colcon-ros-cargo (which run `cargo ament-build`), and the installed layout `ros2 launch`
# expects (docs/ROS.md, "Building with colcon").
#
#   bash scripts/colcon_build.sh [--release] [--target-dir DIR]
#
# The workspace is .ros/colcon_ws; its src/ links to the repository (sion_memory), to msg/
# (sion_memory_msgs) and, where the ROS 2 lacks them, to scripts/tf2_msgs and
# scripts/vision_msgs. It is built on the bare ROS 2: the prefixes scripts/ros.sh installs into
# .ros/install (the same interfaces, and the node's prefix) are taken off the environment, so
# r2r generates its bindings from the interfaces this workspace built, and the node links their
# libraries.
#
# --target-dir DIR  cargo builds in DIR, e.g. the test build's target/. colcon-ros-cargo puts
#                   `--target-dir build/sion_memory` on cargo's command line, which overrides
#                   CARGO_TARGET_DIR, so build/sion_memory becomes a link to DIR; and cargo is
#                   asked for the features and targets `cargo test --workspace --all-features`
#                   built, so that nothing is compiled again but what depends on the
#                   workspace's own interfaces (r2r, whose build scripts watch
#                   AMENT_PREFIX_PATH, and this package). Run it in the environment of that
#                   build (scripts/test.sh does: its RUSTC_WORKSPACE_WRAPPER too).
# Without it, the workspace builds in build/sion_memory, as colcon does (4 to 6.5 minutes on
# 2 cores the first time, what changed after). Times with either: docs/ROS.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

profile=debug target_dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --release) profile=release ;;
        --target-dir) target_dir="$(mkdir -p "${2:?--target-dir needs a directory}" && cd "$2" && pwd)"; shift ;;
        *) echo "usage: bash scripts/colcon_build.sh [--release] [--target-dir DIR]" >&2; exit 2 ;;
    esac
    shift
done
started=$SECONDS
say() { echo "colcon_build: [$((SECONDS - started)) s] $*" >&2; }
fail() { echo "colcon_build: FAILED: $*" >&2; exit 1; }

. scripts/setup.sh

# colcon-cargo and colcon-ros-cargo, into the Python colcon runs in. colcon-ros-cargo requires
# the Python package cargo-ament-build (a prebuilt copy of the same binary): it is installed
# with cargo below instead, so --no-deps; colcon-ros-cargo's other requirements are part of
# the ROS 2 already, but for toml.
colcon_python="$(sed -n '1s/^#! *//p' "$(command -v colcon)")"
if ! "$colcon_python" -c '
import importlib.metadata as m, sys
try:
    sys.exit(0 if all(m.version(p) == "0.2.0" for p in ("colcon-cargo", "colcon-ros-cargo")) else 1)
except m.PackageNotFoundError:
    sys.exit(1)' || ! "$colcon_python" -c 'import toml' 2>/dev/null; then
    [ -n "${SION_ROS_WHEELS:-}" ] ||
        fail "colcon lacks colcon-cargo 0.2.0 and colcon-ros-cargo 0.2.0: $colcon_python -m pip install colcon-cargo==0.2.0 colcon-ros-cargo==0.2.0"
    say "installing colcon-cargo 0.2.0 and colcon-ros-cargo 0.2.0 into $(dirname "$(dirname "$colcon_python")")"
    "$colcon_python" -m pip install --quiet --disable-pip-version-check --no-deps \
        colcon-cargo==0.2.0 colcon-ros-cargo==0.2.0 toml==0.10.2
fi
if ! grep -qx 'cargo-ament-build v0.1.11:' <<<"$(cargo install --list)"; then
    say "installing cargo-ament-build 0.1.11 with cargo"
    cargo install cargo-ament-build --locked --version 0.1.11
fi

# The workspace's environment: the bare ROS 2, without what scripts/ros.sh installed into
# .ros/install.
without_ros_install() {
    local name="$1" kept="" item IFS=:
    for item in ${!name:-}; do
        case "$item" in "$root/.ros/install" | "$root/.ros/install/"*) ;; *) kept="${kept:+$kept:}$item" ;; esac
    done
    if [ -n "$kept" ]; then export "$name=$kept"; else unset "$name"; fi
}
for name in AMENT_PREFIX_PATH CMAKE_PREFIX_PATH COLCON_PREFIX_PATH LD_LIBRARY_PATH PYTHONPATH SION_ROS_LIBS; do
    without_ros_install "$name"
done
ws="$root/.ros/colcon_ws"
install="$ws/install"
prefix="$install/sion_memory"
if [ -n "${SION_ROS_WHEELS:-}" ]; then
    # The node finds the workspace's interface libraries by rpath (build.rs, docs/ROS.md).
    export SION_ROS_LIBS="$SION_ROS_LIBS:$install/tf2_msgs/lib:$install/vision_msgs/lib:$install/sion_memory_msgs/lib"
fi

mkdir -p "$ws/src" "$ws/build"
ln -sfn "$root" "$ws/src/sion_memory"
ln -sfn "$root/msg" "$ws/src/sion_memory_msgs"
for interfaces in tf2_msgs vision_msgs; do
    if ros2_has_package "$interfaces"; then
        rm -f "$ws/src/$interfaces"
    else
        ln -sfn "$root/scripts/$interfaces" "$ws/src/$interfaces"
    fi
done

# cargo's arguments. The node needs feature `ros`; cargo-ament-build installs a binary only if
# every feature it requires was named with --features, so `ros` is named even beside
# --all-features.
cargo_args=(--locked)
[ "$profile" = release ] && cargo_args+=(--release)
if [ -n "$target_dir" ]; then
    [ -L "$ws/build/sion_memory" ] || rm -rf "$ws/build/sion_memory"
    ln -sfn "$target_dir" "$ws/build/sion_memory"
    # --examples: the examples need the dev-dependencies, so their features unify as in the
    # test build; with --bins alone, shared dependencies would be compiled again.
    cargo_args+=(--workspace --all-features --features ros --bins --examples)
    say "cargo builds in $target_dir ($profile)"
else
    [ ! -L "$ws/build/sion_memory" ] || rm "$ws/build/sion_memory"
    cargo_args+=(--features ros)
fi

# A bare `colcon build`, as a ROS user types it: the Cargo workspace's member crates hold a
# COLCON_IGNORE, so colcon finds this package and the interfaces, nothing else.
listed="$(cd "$ws" && colcon list --names-only | sort | tr '\n' ' ')"
case "$listed" in
    "sion_memory sion_memory_msgs " | "sion_memory sion_memory_msgs tf2_msgs " | \
        "sion_memory sion_memory_msgs vision_msgs " | "sion_memory sion_memory_msgs tf2_msgs vision_msgs ") ;;
    *) fail "colcon finds other packages than sion_memory, sion_memory_msgs (and tf2_msgs, vision_msgs): $listed" ;;
esac
say "colcon build --cargo-args ${cargo_args[*]}"
log="$ws/colcon_build.log"
build_started=$SECONDS
rm -rf "$prefix" # cargo ament-build copies over what is there: nothing stale is left to check
# Under a pseudo-terminal, as a user's terminal runs it: colcon-cargo 0.2.0 reads `cargo
# metadata` line by line, and without a terminal through asyncio's 64 KiB line limit, which
# this workspace's one-line metadata passes (about 69 KB since the store's rooms became crates:
# the build then fails with a JSONDecodeError). docs/ROS.md says so, and how to build in a
# container or CI without a terminal.
colcon_cmd=(colcon build --event-handlers console_cohesion+ status- \
    --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$(command -v python3)" \
    --cargo-args "${cargo_args[@]}")
(cd "$ws" && script -qefc "$(printf '%q ' "${colcon_cmd[@]}")" /dev/null </dev/null) >"$log" 2>&1 || {
    grep -v '^{"packages"' "$log" | tail -60 >&2
    fail "colcon build (full log: $log)"
}
grep -E '^(Finished|Summary)' "$log" >&2 || true
say "colcon build took $((SECONDS - build_started)) s"
if [ -n "$target_dir" ]; then
    # r2r 0.9.7 caches its generated bindings by the environment's hash and, when it takes a
    # cached set, prints none of its `rustc-cfg`s: the test build's environment, seen before
    # this one, would then get an r2r without /clock support (use_sim_time silently ignored:
    # found by a second test.sh run in one tree). Built afresh next time in whatever
    # environment builds next.
    (cd "$root" && cargo clean -q --target-dir "$target_dir" -p r2r $([ "$profile" = release ] && echo --release)) ||
        fail "cargo clean -p r2r in $target_dir"
fi

# What got installed: the executables in lib/<package>/ (where ros2 run and launch_ros look),
# install_to_share beside package.xml, the ament index entry.
node="$prefix/lib/sion_memory/sion_memory_node"
share="$prefix/share/sion_memory"
[ -x "$node" ] || fail "$node was not installed"
for item in launch config package.xml; do
    diff -r "$root/$item" "$share/$item" >/dev/null || fail "$share/$item is not the package's $item"
done
[ -e "$prefix/share/ament_index/resource_index/packages/sion_memory" ] ||
    fail "the ament index does not list sion_memory ($prefix/share/ament_index/resource_index/packages)"
# r2r read the interfaces of this workspace, not those of .ros/install.
build_env="$ws/build/sion_memory/colcon_command_prefix_build.sh.env"
grep -q "^AMENT_PREFIX_PATH=$install/" "$build_env" && ! grep -q "^AMENT_PREFIX_PATH=.*$root/.ros/install/" "$build_env" ||
    fail "sion_memory was not built against this workspace's interfaces ($build_env)"
(
    set +u
    # shellcheck disable=SC1091
    . "$install/setup.bash"
    set -u
    "$node" --help >/dev/null || fail "$node --help"
    grep -q "=> $install/sion_memory_msgs/lib/libsion_memory_msgs__rosidl_typesupport_c.so" <<<"$(ldd "$node")" ||
        fail "$node does not load this workspace's sion_memory_msgs"
    python3 - "$prefix" <<'EOF' || fail "the ament index does not resolve sion_memory to $prefix"
import sys
from ament_index_python.packages import get_package_prefix, get_package_share_directory
prefix = sys.argv[1]
assert get_package_prefix('sion_memory') == prefix, get_package_prefix('sion_memory')
assert get_package_share_directory('sion_memory') == prefix + '/share/sion_memory'
EOF
    # The command `ros2 launch sion_memory robot.launch.py` runs (scripts/launch.py reads the
    # launch file as ros2 launch does, where launch_ros is missing).
    launched="$(python3 "$root/scripts/launch.py" "$share/launch/robot.launch.py" --print)"
    case "$launched" in *"$node --ros-args "*"--params-file $share/config/robot.yaml"*) ;;
        *) fail "the launch file does not start the installed node with its installed parameters: $launched" ;;
    esac
    say "installed: $node (--help runs; links $install/sion_memory_msgs), $share/{launch,config,package.xml}, the ament index entry"
    say "launch: $launched"
)
say "done"
