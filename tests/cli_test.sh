#!/usr/bin/env bash
# CLI integration: exit codes, one-line errors, and a demo whose program text round-trips.
set -u
keel="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

check() {  # check NAME WANT_CODE PATTERN -- CMD...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $code (want $want), output:"
    echo "$out" | head -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

check help 0 'demo' -- "$keel" --help
check version 0 'keel 0\.1\.0' -- "$keel" --version
check no-subcommand 2 '^\[keel\].*subcommand' -- "$keel"
check unknown-flag 2 '^\[keel\].*--bogus' -- "$keel" demo --bogus
check bad-steps 2 '^\[keel\].*--steps' -- "$keel" demo --steps 0
check demo 0 'loss [0-9.]+ -> [0-9.]+ over 12 steps; train_step traced 1 time' -- \
  "$keel" demo --steps 12 --dump-ir "$tmp/step.kir"
check demo-falls 0 'step +12/12' -- "$keel" demo --steps 12
key=$("$keel" demo --steps 2 | sed -n 's/.*key \([0-9a-f]\{32\}\).*/\1/p')
check ir-check 0 "ok, graph train_step, .* key $key" -- "$keel" ir check "$tmp/step.kir"
check ir-print 0 '^graph train_step \{' -- "$keel" ir print --no-locations "$tmp/step.kir"
check ir-missing 2 '^\[keel\] cannot read .*nope.kir' -- "$keel" ir check "$tmp/nope.kir"
printf 'graph g {\n  %%0 = bogus() : f32[]\n' >"$tmp/bad.kir"
check ir-bad 2 '^\[ir.parse\] .*bad.kir:2:' -- "$keel" ir check "$tmp/bad.kir"
[[ -z $(ls "$tmp" | grep '\.tmp\.') ]] || { echo "FAIL stray temporary files"; fails=$((fails + 1)); }

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
