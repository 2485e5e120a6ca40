#!/usr/bin/env bash
# tests/memo_cxx.sh, which the script tests compile through: it remembers a compile's output and
# hands it back for the same source and flags, compiles another source, and passes everything
# else (a failing compile, --version) to c++.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
memo_cxx=$(realpath "$(dirname "$0")/memo_cxx.sh")
export KEEL_MEMO_CXX_DIR="$tmp/memo"
printf 'extern "C" int f() { return 7; }\n' >"$tmp/a.cpp"
printf 'extern "C" int f() { return 8; }\n' >"$tmp/b.cpp"
cxx() { timeout 60 "$memo_cxx" -O1 -shared -fPIC "$@"; }
check version 0 "^$(c++ --version | head -1 | sed 's/[][().+*]/./g')$" -- sh -c "'$memo_cxx' --version | head -1"
check first-compile 0 '' -- cxx "$tmp/a.cpp" -o "$tmp/a1.so"
check remembered 0 '^1$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
# What the memo holds is what comes back: a marker put in its place is handed back.
echo marker >"$(ls "$tmp"/memo/*.so)"
check handed-back 0 '' -- cxx "$tmp/a.cpp" -o "$tmp/a2.so"
check from-memo 0 '^marker$' -- cat "$tmp/a2.so"
check other-flags 0 '' -- timeout 60 "$memo_cxx" -O2 -shared -fPIC "$tmp/a.cpp" -o "$tmp/a3.so"
check other-flags-compiled 1 '' -- grep -q marker "$tmp/a3.so"
check other-source 0 '' -- cxx "$tmp/b.cpp" -o "$tmp/b.so"
check three 0 '^3$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
check error-passes-through 1 'error' -- sh -c "echo 'int x = ;' >'$tmp/bad.cpp' && timeout 60 '$memo_cxx' -c '$tmp/bad.cpp' -o '$tmp/bad.o'"
check error-not-remembered 0 '^3$' -- sh -c "ls '$tmp/memo' | grep -c '\.so$'"
# Two compiles of one source at once: one runs the compiler, the other waits and is handed its
# output (a compiler of its own version that counts its compiles and takes a second over each).
cat >"$tmp/slow_cxx" <<SLOW
#!/usr/bin/env bash
[[ \$1 == --version ]] && { echo "slow c++ 1.0"; exit; }
for a in "\$@"; do [[ \$a == *.cpp ]] && { echo >>"$tmp/compiles"; sleep 1; }; done
exec c++ "\$@"
SLOW
chmod +x "$tmp/slow_cxx"
printf 'extern "C" int f() { return 9; }\n' >"$tmp/c.cpp"
MEMO_CXX_REAL="$tmp/slow_cxx" cxx "$tmp/c.cpp" -o "$tmp/c1.so" &
MEMO_CXX_REAL="$tmp/slow_cxx" cxx "$tmp/c.cpp" -o "$tmp/c2.so"
wait
check one-compile-for-two 0 '^1$' -- grep -c '' "$tmp/compiles"
check both-outputs 0 '' -- cmp "$tmp/c1.so" "$tmp/c2.so"
# The compiler is in the key: a source remembered from c++ compiles again with another compiler.
MEMO_CXX_REAL="$tmp/slow_cxx" cxx "$tmp/b.cpp" -o "$tmp/b2.so"
check other-compiler 0 '^2$' -- grep -c '' "$tmp/compiles"
echo "memo_cxx_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
