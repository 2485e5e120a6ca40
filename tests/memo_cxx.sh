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
# version and -march=native's description are asked once per compiler file (device, inode, size,
# time; a wrapper such as ccache is known by its own file).
compiler=$cxx
if [[ $cxx != */* ]]; then  # the PATH lookup without a subshell
  hash -- "$cxx" 2>/dev/null || exec "$cxx" "$@"
  compiler=${BASH_CMDS[$cxx]}
fi
target="$memo/target-$(stat -L -c '%d-%i-%s-%Y' "$compiler")"
# The version must come; the -march=native description is g++'s (clang has none).
if [[ ! -s $target ]]; then
  ( "$cxx" --version || exit; "$cxx" -march=native -Q --help=target || true ) >"$target.$$" 2>/dev/null &&
    mv "$target.$$" "$target"
  rm -f "$target.$$"
fi
[[ -s $target ]] || exec "$cxx" "$@"
# The first processor's description (x86's model name and flags, Arm's parts and features).
cpu=""
while IFS= read -r line && [[ -n $line ]]; do
  case $line in "model name"* | flags* | Features* | "CPU implementer"* | "CPU part"*) cpu+=$line$'\n' ;; esac
done </proc/cpuinfo
printf -v flag_lines '%s\n' "${flags[@]}"
hashes=$(sha256sum - "$target" "$src" <<<"$cpu$flag_lines")
key=""
while read -r h _; do key+=${h:0:16}; done <<<"$hashes"
# Three whole hashes or no memo (a missing source or sha256sum).
[[ ${#key} -eq 48 && $key =~ ^[0-9a-f]+$ ]] || exec "$cxx" "$@"
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
