#!/usr/bin/env bash
# Run a command on a ROS 2 graph that cannot leave the machine: in a fresh network namespace
# whose only interface is loopback (as root, or as a user where user namespaces are allowed).
# DDS discovery is also told to stay on this host, for the namespace's own loopback.
#
#   bash scripts/isolated.sh COMMAND [ARG...]
set -euo pipefail
if [ "${1:-}" = --inside ]; then
    shift
    ip link set lo up
    export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
    exec "$@"
fi
if ! command -v ip >/dev/null 2>&1; then
    echo "isolated: needs ip (Debian: iproute2; . scripts/setup.sh test installs it)" >&2
    exit 1
fi
if unshare -n true 2>/dev/null; then
    exec unshare -n bash "$0" --inside "$@"
elif unshare -rn true 2>/dev/null; then
    exec unshare -rn bash "$0" --inside "$@"
fi
echo "isolated: cannot create a network namespace here (needs root or user namespaces);" >&2
echo "isolated: refusing to run a ROS 2 graph that could reach the network" >&2
exit 1
