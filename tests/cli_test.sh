#!/usr/bin/env bash
# CLI integration: exit codes, one-line errors, and a demo whose program text round-trips.
set -u
keel="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KEEL_CACHE_DIR="$tmp/democache"
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
check demo-warm 0 'compiles 0, disk loads 2, memory hits 11' -- "$keel" demo --steps 12
check demo-ref 0 'traced 1 time.*compiles 2, disk loads 0' -- "$keel" demo --steps 3 --backend ref \
  --cache-dir "$tmp/refcache"
check demo-run-dir 0 'loss' -- "$keel" demo --steps 2 --run-dir "$tmp/run"
check explain-run 0 'train_step: 1 program' -- "$keel" explain "$tmp/run"
check demo-bad-backend 2 '^\[keel\].*--backend' -- "$keel" demo --backend gpu
key=$("$keel" demo --steps 2 | sed -n 's/.*key \([0-9a-f]\{32\}\).*/\1/p')
check ir-check 0 "ok, graph train_step, .* key $key" -- "$keel" ir check "$tmp/step.kir"
check ir-print 0 '^graph train_step \{' -- "$keel" ir print --no-locations "$tmp/step.kir"
check ir-missing 2 '^\[keel\] cannot read .*nope.kir' -- "$keel" ir check "$tmp/nope.kir"
printf 'graph g {\n  %%0 = bogus() : f32[]\n' >"$tmp/bad.kir"
check ir-bad 2 '^\[ir.parse\] .*bad.kir:2:' -- "$keel" ir check "$tmp/bad.kir"
# keel explain: a run's compile log summarised; a missing or bad log is one line and exit 2.
check explain-missing 2 '^\[diag\] .*/no-run is not a run directory: it does not exist$' -- \
  "$keel" explain "$tmp/no-run"
mkdir -p "$tmp/run" "$tmp/badrun"
{
  echo '{"step":0,"function":"train_step","key":"aaaa","tier":"compiled","seconds":2.5,"reason":"first compile"}'
  echo '{"step":12,"function":"train_step","key":"bbbb","tier":"compiled","seconds":2,"reason":"input 0 shape f32[8] -> f32[4]"}'
} >"$tmp/run/compiles.jsonl"
check explain-run 0 'train_step: 2 programs; 2 compiles \(4\.50 s\).*last new program at step 12' -- \
  "$keel" explain "$tmp/run"
check explain-reason 0 '^  step 12 .*input 0 shape f32\[8\] -> f32\[4\]$' -- "$keel" explain "$tmp/run"
printf '{oops\n' >"$tmp/badrun/compiles.jsonl"
check explain-bad 2 '^\[diag\] .*compiles\.jsonl:1: not JSON at column 2' -- "$keel" explain "$tmp/badrun"
check explain-no-log 2 '^\[diag\] cannot read .*/compiles\.jsonl: No such file' -- \
  "$keel" explain "$tmp/badrun/.."
# keel cache on an empty directory, then one bad entry.
cache="$tmp/cache"
check cache-verify-empty 0 '^ok: 0 entries verified$' -- "$keel" cache verify --dir "$cache"
check cache-ls-empty 0 '^no entries in .*/cache/v1$' -- "$keel" cache ls --dir "$cache"
check cache-ls-json 0 '^\[\]$' -- env KEEL_CACHE_DIR="$cache" "$keel" cache ls --json
check cache-stats-empty 0 'cache/v1: 0 entries, 0 B, .*0 quarantined$' -- \
  env KEEL_CACHE_DIR="$cache" "$keel" cache stats
check cache-stats-json 0 '^\{"bytes":0,.*"entries":0,.*"quarantined":0\}$' -- \
  "$keel" cache stats --json --dir "$cache"
check cache-prune-needs-size 2 '^\[keel\] --max-bytes is required' -- "$keel" cache prune --dir "$cache"
check cache-prune 0 '^freed 0 B; .* holds 0 B in 0 entries$' -- \
  "$keel" cache prune --max-bytes 0 --dir "$cache"
check cache-explain-none 2 "^\[keel\] no cache entry in .* has a key starting with 'abc'" -- \
  "$keel" cache explain abc --dir "$cache"
echo '{"key":' >"$cache/v1/entries/0123456789abcdef0123456789abcdef.json"
check cache-verify-bad 1 'entry 0123456789abcdef0123456789abcdef .*quarantined to ' -- \
  "$keel" cache verify --dir "$cache"
check cache-stats-quarantined 0 ', 1 quarantined$' -- "$keel" cache stats --dir "$cache"
mkdir -m 777 "$tmp/open-cache"
check cache-unsafe 2 '^\[cache\] .*open-cache is writable by others' -- \
  "$keel" cache ls --dir "$tmp/open-cache"
[[ -z $(ls "$tmp" | grep '\.tmp\.') ]] || { echo "FAIL stray temporary files"; fails=$((fails + 1)); }

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
