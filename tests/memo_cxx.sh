#!/usr/bin/env bash
# A C++ compiler that remembers its outputs, as ccache does, for the script tests (ctest sets it as
# KEEL_CPU_COMPILER, with KEEL_MEMO_CXX_DIR under the build tree): they compile the same programs
# again in fresh cache directories, and g++ took most of their time. Compiling a source already
# seen with the same flags and the same c++ copies the earlier shared object; keel still runs the
# compiler process, checks its output and publishes it, so a compile is still a compile to keel.
# Anything else goes to c++.
set -u
memo=${KEEL_MEMO_CXX_DIR:?KEEL_MEMO_CXX_DIR names the directory of remembered outputs}
args=("$@")
out="" src="" flags=()
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    -o) out=${args[i + 1]}; i=$((i + 1)) ;;
    *.cpp) src=${args[i]} ;;
    *) flags+=("${args[i]}") ;;
  esac
done
[[ -n $out && -n $src ]] || exec c++ "$@"
# The key holds what -march=native means on this CPU too: the memo outlives a run (build/tests).
key=$({
  c++ --version | head -1
  c++ -march=native -Q --help=target 2>/dev/null
  printf '%s\n' "${flags[@]}"
  cat "$src"
} | sha256sum | cut -c1-40)
if [[ -f $memo/$key.so ]]; then
  exec cp "$memo/$key.so" "$out"
fi
c++ "$@" || exit
# A memo that cannot be written (a full disk) only forgets: the compile itself succeeded.
{ mkdir -p "$memo" && cp "$out" "$memo/$key.so.$$" && mv "$memo/$key.so.$$" "$memo/$key.so"; } 2>/dev/null ||
  rm -f "$memo/$key.so.$$"
exit 0
