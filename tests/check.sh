# Sourced by the shell tests: check NAME WANT_CODE PATTERN -- CMD... runs CMD and counts a pass
# when it exits WANT_CODE and its output (stdout and stderr) matches the extended regex PATTERN.
fails=0
passes=0

check() {
  local name=$1 want=$2 pattern=$3
  shift 4
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $code (want $want), output:"
    echo "$out" | tail -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
