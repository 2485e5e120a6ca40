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
mkdir -p "$memo" 2>/dev/null
# The key holds what -march=native means on this CPU too: the memo outlives a run (build/tests).
# That description costs a compiler process, so it is kept per compiler and CPU.
version=$("$cxx" --version | head -1)
cpu=$(grep -m2 -E '^(model name|flags)' /proc/cpuinfo)
target="$memo/target-$(printf '%s\n' "$version" "$cpu" | sha256sum | cut -c1-16)"
if [[ ! -s $target ]]; then
  "$cxx" -march=native -Q --help=target >"$target.$$" 2>/dev/null && mv "$target.$$" "$target"
  rm -f "$target.$$"
fi
key=$({
  echo "$version"
  cat "$target" 2>/dev/null
  printf '%s\n' "${flags[@]}"
  cat "$src"
} | sha256sum | cut -c1-40)
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
