#!/usr/bin/env bash
# run_fuzz.sh BINARY NAME FUZZ_SOURCE_DIR WORK_DIR [libFuzzer flags...]: one fuzz target over
# its checked-in seeds (FUZZ_SOURCE_DIR/corpus/NAME) with its dictionary. New inputs go to
# WORK_DIR/NAME, never into the source tree; a crash, leak or timeout input is saved as
# WORK_DIR/NAME-crash-* (add it to the seeds once fixed, as a regression input).
set -eu
bin=$1 name=$2 src=$3 work=$4
shift 4
case $name in
  ir_text) dict=ir.dict ;;
  profile) dict=toml.dict ;;
  *) dict=json.dict ;;
esac
mkdir -p "$work/$name"
# Targets whose readers take paths write every input to files under $TMPDIR: give them a
# private directory on tmpfs when there is one, removed on exit. On /tmp (ext4 here) the
# rewrites kept the fuzzer waiting on the disk: corpus ran 1,961 inputs/s there, 6,013 on
# /dev/shm.
base=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then base=/dev/shm; fi
scratch=$(mktemp -d "$base/keel-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 143' TERM INT
status=0
TMPDIR=$scratch "$bin" "$work/$name" "$src/corpus/$name" -dict="$src/$dict" \
  -artifact_prefix="$work/$name-" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 "$@" || status=$?
exit $status
