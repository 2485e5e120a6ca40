#!/usr/bin/env bash
# tests/memo_cxx.sh as the unit tests reach it (tests/memo-bin/c++ first on PATH): it passes what
# is not a compile to the real c++ without finding itself again, remembers a compile's output, and
# hands it back for the same source and flags, but not for another source.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
export KEEL_MEMO_CXX_DIR="$tmp/memo" PATH="$(realpath "$(dirname "$0")")/memo-bin:$PATH"
printf 'extern "C" int f() { return 7; }\n' >"$tmp/a.cpp"
printf 'extern "C" int f() { return 8; }\n' >"$tmp/b.cpp"
cxx() { timeout 10 c++ -O1 -shared -fPIC "$@"; }
check version 0 "$(/usr/bin/env -i PATH=/usr/bin:/bin c++ --version | head -1 | sed 's/[][().+*]/./g')" -- \
  timeout 10 c++ --version
check first-compile 0 '' -- cxx "$tmp/a.cpp" -o "$tmp/a1.so"
check remembered 0 '^1$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
check handed-back 0 '' -- cxx "$tmp/a.cpp" -o "$tmp/a2.so"
check same-bytes 0 '' -- cmp "$tmp/a1.so" "$tmp/a2.so"
check still-one 0 '^1$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
check other-source 0 '' -- cxx "$tmp/b.cpp" -o "$tmp/b.so"
check two 0 '^2$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
check differs 1 '' -- cmp -s "$tmp/a1.so" "$tmp/b.so"
check error-passes-through 1 'error' -- sh -c "echo 'int x = ;' >'$tmp/bad.cpp' && timeout 10 c++ -c '$tmp/bad.cpp' -o '$tmp/bad.o'"
echo "memo_cxx_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
