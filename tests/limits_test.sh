#!/usr/bin/env bash
# Readers cannot be made to hang or exhaust memory (issue 17): every file keel reads has a size
# cap and is refused when it is not a regular file. Each reader gets a file one byte over its cap
# (sparse: no disk used) and a FIFO (which would block a naive open or read forever); each must
# end within the timeout with one line naming the file and the limit. The waits (locks,
# compilers, collectives) have their deadline tests in cache_test, cli_test and dp_fault_test;
# the compiler's include-directory probe in data_test.
set -u
keel="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
tiny_run_inputs "$tmp"
run=(--config "$tmp/tiny.json" --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0)
"$keel" train "${run[@]}" --steps 2 --run-dir "$tmp/run" --cache-dir "$tmp/cache" >/dev/null 2>&1 ||
  { echo "FAIL setup run"; exit 1; }
ckpt="$tmp/run/checkpoints/step-2"

MiB=$((1 << 20))
GiB=$((1 << 30))
over() {  # over FILE CAP: a sparse file one byte over the cap
  rm -f "$1"
  truncate -s $(($2 + 1)) "$1"
}
fifo() {  # fifo FILE: a FIFO nobody writes
  rm -f "$1"
  mkfifo "$1"
}
limited() {  # limited NAME WANT_CODE PATTERN -- CMD...: check, under a 60 s deadline
  local name=$1 want=$2 pattern=$3
  shift 4
  check "$name" "$want" "$pattern" -- timeout 60 "$@"
}
cap_text() { echo "is $(($1 + 1)) bytes, over the cap of $1 bytes"; }

# The model config (--config), 4 MiB.
over "$tmp/big.json" $((4 * MiB))
limited config-cap 2 "^\[files\] cannot read the model config \(--config\): .*big.json $(cap_text $((4 * MiB)))" -- \
  "$keel" train --config "$tmp/big.json" --run-dir "$tmp/x"
# A launch profile, 4 MiB.
over "$tmp/big.toml" $((4 * MiB))
limited profile-cap 2 "^\[files\] cannot read the profile: .*big.toml $(cap_text $((4 * MiB)))" -- \
  "$keel" --profile "$tmp/big.toml" policy show
fifo "$tmp/fifo.toml"
limited profile-fifo 2 '^\[files\] cannot read the profile: .*fifo.toml is a FIFO' -- \
  "$keel" --profile "$tmp/fifo.toml" policy show
# The program text of keel ir check, 1 GiB.
over "$tmp/big.kir" "$GiB"
limited ir-cap 2 "^\[files\] cannot read the program text: .*big.kir $(cap_text "$GiB")" -- "$keel" ir check "$tmp/big.kir"
fifo "$tmp/fifo.kir"
limited ir-fifo 2 '^\[files\] cannot read the program text: .*fifo.kir is a FIFO' -- "$keel" ir check "$tmp/fifo.kir"
# A corpus file (--data), 256 MiB each.
mkdir -p "$tmp/bigcorpus"
over "$tmp/bigcorpus/huge.txt" $((256 * MiB))
limited corpus-cap 2 "^\[files\] cannot read a corpus file \(--data\): .*huge.txt $(cap_text $((256 * MiB)))" -- \
  "$keel" train --config "$tmp/tiny.json" --data "$tmp/bigcorpus" --run-dir "$tmp/x" --cache-dir "$tmp/cache"
fifo "$tmp/fifo.txt"
limited corpus-fifo 2 'fifo.txt' -- \
  "$keel" train --config "$tmp/tiny.json" --data "$tmp/fifo.txt" --run-dir "$tmp/x" --cache-dir "$tmp/cache"
# A prompts file (keel sample --prompts-file), 4 MiB.
over "$tmp/prompts.txt" $((4 * MiB))
limited prompts-cap 2 "^\[files\] cannot read the prompts file: .*prompts.txt $(cap_text $((4 * MiB)))" -- \
  "$keel" sample --checkpoint "$ckpt" --prompts-file "$tmp/prompts.txt" --cache-dir "$tmp/cache"
# A checkpoint's trainer.json (64 MiB) and safetensors (what the process may use, MemTotal at
# most; its header 100 MB).
for i in 1 2 3; do mkdir -p "$tmp/ck$i" && cp -r "$ckpt" "$tmp/ck$i/"; done
over "$tmp/ck1/step-2/trainer.json" $((64 * MiB))
limited trainer-json-cap 2 "trainer.json $(cap_text $((64 * MiB)))" -- \
  "$keel" sample --checkpoint "$tmp/ck1/step-2" --bytes 1
mem=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
over "$tmp/ck2/step-2/model.safetensors" "$mem"
limited safetensors-cap 2 "model.safetensors.*more than the [0-9]+ bytes of memory this process may use" -- \
  "$keel" sample --checkpoint "$tmp/ck2/step-2" --bytes 1
fifo "$tmp/ck3/step-2/model.safetensors"
limited safetensors-fifo 2 'model.safetensors: is a FIFO, not a regular file' -- \
  "$keel" sample --checkpoint "$tmp/ck3/step-2" --bytes 1
# A run's compile log (keel explain, 256 MiB) and the inputs of keel report (1 GiB each; a
# refused input is one problem line on the page, the report is still written).
cp -r "$tmp/run" "$tmp/run1"
over "$tmp/run1/compiles.jsonl" $((256 * MiB))
limited compile-log-cap 2 "^\[files\] cannot read the compile log: .*compiles.jsonl $(cap_text $((256 * MiB)))" -- \
  "$keel" explain "$tmp/run1"
cp -r "$tmp/run" "$tmp/run2"
over "$tmp/run2/metrics.jsonl" "$GiB"
tb=$(ls "$tmp/run2/tb/"events.out.tfevents.* | head -1)
over "$tb" "$GiB"
fifo "$tmp/run2/trace.json"
limited report-metrics-cap 0 "metrics.jsonl $(cap_text "$GiB")" -- "$keel" report "$tmp/run2" -o "$tmp/r.html"
limited report-tb-cap 0 "tb/events.out.tfevents.*$(cap_text "$GiB")" -- "$keel" report "$tmp/run2" -o "$tmp/r.html"
limited report-trace-fifo 0 'trace.json is a FIFO' -- "$keel" report "$tmp/run2" -o "$tmp/r.html"
# A program record (keel cache prewarm, 1 GiB).
cp -r "$tmp/run" "$tmp/run3"
rec=$(ls "$tmp/run3/programs/"*.json | head -1)
over "$rec" "$GiB"
limited program-record-cap 2 "^\[files\] cannot read the program record: .*$(cap_text "$GiB")" -- \
  "$keel" cache prewarm "$tmp/run3" --cache-dir "$tmp/cache"
# The memory calibration record beside the cache (256 MiB).
cp -r "$tmp/cache" "$tmp/cache2"
over "$tmp/cache2/calibration.jsonl" $((256 * MiB))
limited calibration-cap 2 "^\[files\] cannot read the memory calibration record: .*calibration.jsonl $(cap_text $((256 * MiB)))" -- \
  "$keel" train "${run[@]}" --steps 1 --run-dir "$tmp/x2" --cache-dir "$tmp/cache2"
# A cache manifest (16 MiB): the entry is quarantined, named; a FIFO in its place too.
cp -r "$tmp/cache" "$tmp/cache3"
m=$(ls "$tmp/cache3/v1/entries/"*.json | head -1)
over "$m" $((16 * MiB))
limited manifest-cap 1 "$(cap_text $((16 * MiB))).*quarantined" -- "$keel" cache verify --cache-dir "$tmp/cache3"
m=$(ls "$tmp/cache3/v1/entries/"*.json | head -1)
fifo "$m"
limited manifest-fifo 1 'is a FIFO.*quarantined' -- "$keel" cache verify --cache-dir "$tmp/cache3"
# A signing key (4 KiB).
over "$tmp/big.key" 4096
limited signing-key-cap 2 "^\[files\] cannot read the cache signing key: .*big.key $(cap_text 4096)" -- \
  "$keel" cache sign --key "$tmp/big.key" --cache-dir "$tmp/cache"
fifo "$tmp/fifo.key"
limited signing-key-fifo 2 '^\[files\] cannot read the cache signing key: .*fifo.key is a FIFO' -- \
  "$keel" cache sign --key "$tmp/fifo.key" --cache-dir "$tmp/cache"

echo "limits_test: $passes passed, $fails failed"
((fails == 0))
