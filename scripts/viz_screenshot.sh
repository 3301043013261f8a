#!/usr/bin/env bash
# A screenshot of a recording in the Rerun viewer, as tests/viewers/test_rerun.py takes it (and
# docs/viz-demo.png was made: that test with SION_SCREENSHOT_OUT, then `convert -resize 1400x
# -colors 256`). The viewer is Rerun's web viewer, served by the `rerun` of the Python
# package rerun-sdk (pinned to the SDK's version, installed into .rerun-venv/ once), shown
# in Chromium on a virtual display (Xvfb) with its software WebGL (SwiftShader). The native
# viewer draws only black under Xvfb with Mesa's software Vulkan, so the web one is used.
#
#   bash scripts/viz_screenshot.sh FILE.rrd [OUT.png] [SECONDS_TO_SETTLE]
set -euo pipefail
cd "$(dirname "$0")/.."
rrd=$(realpath "$1") out=${2:-docs/viz-demo.png} settle=${3:-40}
venv=.rerun-venv
if [ ! -x "$venv/bin/rerun" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet rerun-sdk==0.36.3
fi
if ! command -v Xvfb >/dev/null || ! command -v import >/dev/null || ! command -v chromium >/dev/null; then
    apt-get install -y --no-install-recommends xvfb imagemagick chromium >/dev/null
fi
display=:77 port=9090
pids=()
# The viewer's own process is a child of the Python entry point: kill the whole group.
trap 'kill "${pids[@]}" 2>/dev/null || true; pkill -f "rerun_cli/rerun $rrd" || true' EXIT
Xvfb "$display" -screen 0 1600x1000x24 >/dev/null 2>&1 &
pids+=($!)
# Loopback only: the viewer listens on every interface unless told.
DISPLAY= "$venv/bin/rerun" "$rrd" --bind 127.0.0.1 --web-viewer --web-viewer-port "$port" >/tmp/rerun-viewer.log 2>&1 &
pids+=($!)
sleep 5
profile=$(mktemp -d)
DISPLAY=$display chromium --no-sandbox --use-angle=swiftshader --enable-unsafe-swiftshader \
    --ignore-gpu-blocklist --no-first-run --disable-background-networking --disable-component-update \
    --disable-sync --user-data-dir="$profile" --window-position=0,0 --window-size=1600,1000 --kiosk \
    "http://127.0.0.1:$port?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A9876%2Fproxy" >/tmp/rerun-chromium.log 2>&1 &
pids+=($!)
sleep "$settle"
DISPLAY=$display import -window root "$out"
rm -rf "$profile"
echo "wrote $out"
