#!/usr/bin/env bash
# Regenerate the proof-file seeds of the fuzz corpus in the current formats, from a simulated
# run remembered and committed by the `sion` binary; every seed written is verified.
#
#   cargo build --release --bin sion && bash fuzz/seeds/make.sh [path/to/sion]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sion=${1:-"$here/../../target/release/sion"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data=$tmp/memory
out=$here/proof_file

"$sion" memory open --data "$data" >/dev/null
"$sion" sim --atoms 12000 --seed 7 | "$sion" memory remember --data "$data" >/dev/null
"$sion" memory commit --data "$data" >/dev/null

t0=1767225600000000000 # the simulated run's first second
ten_minutes=600000000000
first=$("$sion" memory dump --data "$data" | sed -n '1s/.*"id":"\([0-9a-f]*\)".*/\1/p')
"$sion" memory prove inclusion --data "$data" --position 10003 --out "$out/inclusion-10003.sionproof" >/dev/null
"$sion" memory prove consistency --data "$data" --from 8192 --out "$out/consistency-8192.sionproof" >/dev/null
"$sion" memory recall --data "$data" --frame map --box 350000,350000,0,450000,450000,3000 \
    --from "$t0" --to $((t0 + ten_minutes / 4)) --proof "$out/recall.sionproof" >/dev/null
"$sion" memory recall --data "$data" --frame map --box -90000,-90000,0,-80000,-80000,3000 \
    --from "$t0" --to $((t0 + ten_minutes)) --proof "$out/nothing-there.sionproof" >/dev/null
"$sion" memory recall --data "$data" --frame nowhere --box 0,0,0,1000,1000,1000 \
    --from "$t0" --to $((t0 + ten_minutes)) --proof "$out/absent-frame.sionproof" >/dev/null
"$sion" memory subject --data "$data" pallet-174 --proof "$out/subject.sionproof" >/dev/null
"$sion" memory links --data "$data" "$first" --proof "$out/links.sionproof" >/dev/null

for seed in "$out"/*.sionproof; do
    "$sion" memory verify "$seed" >/dev/null
    echo "$(basename "$seed"): $(wc -c <"$seed") bytes, verified"
done
