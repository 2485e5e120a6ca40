#!/usr/bin/env bash
# A C++ compiler that remembers its outputs, as ccache does, for the script tests (ctest sets it as
# KEEL_CPU_COMPILER, with KEEL_MEMO_CXX_DIR under the build tree): they compile the same programs
# again in fresh cache directories, and g++ took most of their time. Compiling a source already
# seen with the same flags and the same c++ copies the earlier shared object; keel still runs the
# compiler process, checks its output and publishes it, so a compile is still a compile to keel.
# Anything else goes to c++ (MEMO_CXX_REAL, for the memo's own test).
set -u
memo=${KEEL_MEMO_CXX_DIR:?KEEL_MEMO_CXX_DIR names the directory of remembered outputs}
cxx=${MEMO_CXX_REAL:-c++}
args=("$@")
out="" src="" flags=()
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    -o) out=${args[i + 1]}; i=$((i + 1)) ;;
    *.cpp) src=${args[i]} ;;
    *) flags+=("${args[i]}") ;;
  esac
done
[[ -n $out && -n $src ]] || exec "$cxx" "$@"
[[ -d $memo ]] || mkdir -p "$memo" 2>/dev/null
# The key holds the compiler and what -march=native means on this CPU: the memo outlives a run
# (build/tests). A hit costs five processes (this one, stat, sha256sum, flock, cp): each process
# took 5 to 20 ms here, and the memo runs about a thousand times in make test. The compiler's
# version and -march=native's description are asked once per compiler file (size, time, inode).
compiler=$(type -P "$cxx") || exec "$cxx" "$@"
target="$memo/target-$(stat -L -c '%s-%Y-%i' "$compiler")"
if [[ ! -s $target ]]; then
  { "$cxx" --version && "$cxx" -march=native -Q --help=target; } >"$target.$$" 2>/dev/null &&
    mv "$target.$$" "$target"
  rm -f "$target.$$"
fi
cpu=""
while IFS= read -r line; do
  case $line in "model name"* | flags*) cpu+=$line$'\n' ;; esac
  [[ $line == flags* ]] && break
done </proc/cpuinfo
printf -v flag_lines '%s\n' "${flags[@]}"
hashes=$(sha256sum - "$target" "$src" <<<"$cpu$flag_lines")
key=""
while read -r h _; do key+=${h:0:16}; done <<<"$hashes"
# Processes compiling the same source at once (a launch's ranks on separate caches, two tests)
# take turns, so the later ones find the first one's output. The wait is bounded: a holder that
# was stopped (SIGSTOP) only costs the others their memo, never their compile.
exec 9>"$memo/$key.lock" && flock -w 60 9
if [[ -f $memo/$key.so ]]; then
  exec cp "$memo/$key.so" "$out"
fi
"$cxx" "$@" 9>&- || exit
# A memo that cannot be written (a full disk) only forgets: the compile itself succeeded.
{ cp "$out" "$memo/$key.so.$$" && mv "$memo/$key.so.$$" "$memo/$key.so"; } 2>/dev/null ||
  rm -f "$memo/$key.so.$$"
exit 0
