#!/usr/bin/env bash
# The hybrid preset's target (issue 51): keel train --preset nam-s for the default job's 600
# steps on the default corpus reaches validation bits per byte below 2.5, with 4 programs each
# compiled once, all before step 1. make stress runs it (about 7 minutes on 2 cores).
# Usage: nam_job.sh KEEL [STEPS]
set -u
keel="$1"
steps="${2:-600}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! out=$("$keel" train --preset nam-s --steps "$steps" --cache-dir "$tmp/cache" \
  --run-dir "$tmp/run" 2>&1); then
  echo "FAIL nam-s job: $(echo "$out" | tail -3)"
  exit 1
fi
field() { sed -n "s/^  \"$1\": \([0-9.e+-]*\),\{0,1\}$/\1/p" "$tmp/run/record.json"; }
fails=0
bpb=$(sed -n "s/^done: steps 1\.\.$steps, .*validation \([0-9.]*\) bits\/byte.*/\1/p" <<<"$out")
awk -v b="$bpb" 'BEGIN { exit !(b != "" && b < 2.5) }' ||
  { echo "FAIL nam-s job: validation bits/byte '$bpb', want below 2.5"; fails=$((fails + 1)); }
[[ $(field programs) -eq 4 && $(field compiles) -eq 4 ]] ||
  { echo "FAIL nam-s job: programs $(field programs), compiles $(field compiles)"; fails=$((fails + 1)); }
[[ $(grep -vc '"step":0,' "$tmp/run/compiles.jsonl") -eq 0 ]] ||
  { echo "FAIL nam-s job: a compile after step 1"; fails=$((fails + 1)); }
[[ $fails -eq 0 ]] && echo "nam-s job: $steps steps, validation $bpb bits/byte, 4 programs"
[[ $fails -eq 0 ]]
