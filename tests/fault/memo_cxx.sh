#!/usr/bin/env bash
# A C++ compiler that remembers its outputs, for fault_sweep.sh: every trial of the cache writer
# compiles the same programs again, and g++ took most of the sweep's time. Compiling a source
# already seen with the same flags copies the earlier shared object (keel still runs the compiler
# process, checks its output and publishes it); anything else goes to c++. KEEL_MEMO_CXX_DIR
# holds the outputs.
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
key=$({ printf '%s\n' "${flags[@]}"; cat "$src"; } | sha256sum | cut -c1-40)
if [[ -f $memo/$key.so ]]; then
  exec cp "$memo/$key.so" "$out"
fi
c++ "$@" || exit
mkdir -p "$memo" && cp "$out" "$memo/$key.so.$$" && mv "$memo/$key.so.$$" "$memo/$key.so"
