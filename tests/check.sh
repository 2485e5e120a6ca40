# Sourced by the shell tests: check NAME WANT_CODE PATTERN -- CMD... runs CMD and counts a pass
# when it exits WANT_CODE and its output (stdout and stderr) matches the extended regex PATTERN;
# tiny_run_inputs DIR writes a small corpus (DIR/corpus) and a one-layer code-s (DIR/tiny.json);
# pid_of_rank R PATTERN prints the pid of MPI world rank R among processes matching PATTERN.
# With CHECK_TIMES=FILE, each check appends "SECONDS SCRIPT NAME" to FILE (where a suite's time goes).
fails=0
passes=0

check() {
  local name=$1 want=$2 pattern=$3
  shift 4
  local out code start=$EPOCHREALTIME
  out=$("$@" 2>&1)
  code=$?
  [[ -n ${CHECK_TIMES:-} ]] &&
    awk -v a="$start" -v b="$EPOCHREALTIME" -v s="${0##*/}" -v n="$name" \
      'BEGIN { printf "%.2f %s %s\n", b - a, s, n }' >>"$CHECK_TIMES"
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $code (want $want), output:"
    echo "$out" | tail -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

tiny_run_inputs() {
  local dir=$1 i=0 f
  mkdir -p "$dir/corpus"
  for f in /usr/include/c++/12/bits/*.h; do
    i=$((i + 1))
    [[ $i -gt 30 ]] && break
    head -c 4000 "$f" >"$dir/corpus/doc$i.txt"
  done
  cat >"$dir/tiny.json" <<'JSON'
{"name": "code-s", "layers": 1, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2}
JSON
}

pid_of_rank() {
  local r=$1 pattern=$2 p
  for p in $(pgrep -f "$pattern"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
      echo "$p"
      return
    fi
  done
}

# same_run NAME A B STEP counts a pass when run directories A and B hold the same figures
# (every metrics line without its timings) and, at checkpoint STEP, the same state bytes.
figures() { sed -E 's/,"ms_per_step":.*$//' "$1/metrics.jsonl"; }
same_run() {
  local name=$1 a=$2 b=$3 step=$4
  if ! diff <(figures "$a") <(figures "$b") >/dev/null; then
    echo "FAIL $name: metrics differ"
    diff <(figures "$a") <(figures "$b") | head -6
    fails=$((fails + 1))
    return
  fi
  for f in model.safetensors optimizer.safetensors; do
    if ! cmp -s "$a/checkpoints/step-$step/$f" "$b/checkpoints/step-$step/$f"; then
      echo "FAIL $name: $f of step $step differs"
      fails=$((fails + 1))
      return
    fi
  done
  passes=$((passes + 1))
}
