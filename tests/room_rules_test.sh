#!/usr/bin/env bash
# The dependency rule of docs/architecture.md, checked on the includes: a room includes only
# headers of rooms below it. Backends are named only through backend/registry.h: nothing above
# backend/ includes a header of backend/cpu or backend/ref (backend/builtin registers them),
# the two backends do not include each other, and nothing below backend/ includes backend/.
# backend/c_source, what the CPU and CUDA code generators write alike, includes no backend.
# Usage: room_rules_test.sh SOURCE_DIR
set -u
src=$1
fails=0
# forbid ROOMS -- PATTERN WHY: no file in ROOMS includes a header matching PATTERN.
forbid() {
  local rooms=() pattern why hits
  while [[ $1 != -- ]]; do rooms+=("$1"); shift; done
  pattern=$2
  why=$3
  local room
  for room in "${rooms[@]}"; do
    if [[ ! -d $src/$room ]]; then
      echo "FAIL the rule names $room/, which is not a folder of $src"
      fails=$((fails + 1))
    fi
  done
  hits=$(cd "$src" && grep -rnE "^#include [\"<]($pattern)" --include='*.h' --include='*.cpp' \
    "${rooms[@]}" 2>/dev/null)
  if [[ -n $hits ]]; then
    echo "FAIL $why:"
    sed 's/^/  /' <<<"$hits"
    fails=$((fails + 1))
  fi
}
above_backend=(runtime cache dist diag nn optim data train tools)
forbid "${above_backend[@]}" -- 'backend/cpu/|backend/ref/|backend/cuda/|backend/c_source/' \
  "rooms above backend/ name a backend (use backend/registry.h and launch.backend)"
forbid backend/cpu -- 'backend/ref/|backend/cuda/' "backend/cpu includes another backend"
forbid backend/ref -- 'backend/cpu/|backend/cuda/' "backend/ref includes another backend"
forbid backend/cuda -- 'backend/cpu/|backend/ref/' "backend/cuda includes another backend"
# What the code generators share is below every backend: it names none of them.
forbid backend/c_source -- 'backend/(cpu|ref|cuda|builtin)/|backend/[a-z_]+\.h' \
  "backend/c_source includes a backend or the boundary"
forbid ir trace autodiff passes policy files -- 'backend/' "rooms below backend/ include it"
forbid ir -- 'trace/|autodiff/|passes/|policy/|files/|runtime/|cache/|dist/|diag/|train/|nn/|optim/|data/' \
  "ir/ includes a room above it"
# forbid_text PATTERN WHY ROOMS...: no line of code in ROOMS matches PATTERN (grep -E).
forbid_text() {
  local pattern=$1 why=$2 hits
  shift 2
  hits=$(cd "$src" && grep -rnE "$pattern" --include='*.h' --include='*.cpp' "$@")
  if [[ -n $hits ]]; then
    echo "FAIL $why:"
    sed 's/^/  /' <<<"$hits"
    fails=$((fails + 1))
  fi
}
# expect_text PATTERN FILE: the rule's own check, that PATTERN finds what it forbids elsewhere.
expect_text() {
  if ! (cd "$src" && grep -qE "$1" "$2"); then
    echo "FAIL the rule's own check: $2 should match $1"
    fails=$((fails + 1))
  fi
}
# A backend's own settings are declared by the backend (policy::register_backend_keys), not by
# the policy: no key of a backend's group in policy/.
declares='(key|integer|choice)\("(cpu|ref)"'
forbid_text "$declares" "policy/ declares a backend's keys (the backend registers them)" policy
expect_text "$declares" backend/cpu/policy_keys.cpp
# Nor does a room above backend/ (or policy/) read or name a backend's key in its code: a string
# "cpu.x" outside a comment. The backend judges its own keys (BackendSpec::check_launch).
names_key='^[^/]*"(cpu|ref)\.[a-z_]+'
forbid_text "$names_key" "a room above backend/ names a backend's key (let the backend check it)" \
  "${above_backend[@]}" policy
expect_text "$names_key" backend/cpu/features.cpp
# A check that cannot fail is no check: the rule must see the includes it forbids.
probe=$(cd "$src" && grep -rlE '^#include "backend/cpu/' backend/builtin | head -1)
if [[ -z $probe ]]; then
  echo "FAIL the rule's own check: backend/builtin should include backend/cpu headers"
  fails=$((fails + 1))
fi
echo "room rules: $((fails == 0 ? 1 : 0)) passed, $fails failed"
[[ $fails -eq 0 ]]
