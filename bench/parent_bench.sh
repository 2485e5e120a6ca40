#!/usr/bin/env bash
# make bench: this build of keel against the commit it builds on, in one run. The base commit
# (HEAD's parent unless given) is exported and built beside it (Release, the keel binary only,
# reused while the commit is the same); then each binary trains gpt2-s (or --preset) in turn,
# A B in odd rounds and B A in even ones, each on its own cache: cold runs (an empty cache:
# trace and compile) and warm ones (load from disk). Figures come from each run's record.json:
# the median step and the time to first step from process start. Each ratio is the median of
# the per-round ratios, so drift on the host cancels.
# Usage: parent_bench.sh KEEL SOURCE_DIR [--base COMMIT] [--base-keel PATH] [--rounds N]
#                        [--steps N] [--preset NAME]
#   --base-keel: the base's keel, already built (the build is skipped; --base only names it).
set -euo pipefail
usage() {
  echo "usage: parent_bench.sh KEEL SOURCE_DIR [--base COMMIT] [--base-keel PATH] [--rounds N] [--steps N] [--preset NAME]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
keel=$(realpath "$1")
src=$(realpath "$2")
shift 2
base_name=HEAD^ base_keel="" rounds=4 steps=8 preset=gpt2-s
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage
  case $1 in
    --base) base_name=$2 ;;
    --base-keel) base_keel=$(realpath "$2") ;;
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --preset) preset=$2 ;;
    *) echo "parent_bench: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
base=$(git -C "$src" rev-parse --verify --quiet "$base_name^{commit}") || {
  echo "parent_bench: no commit $base_name in $src; give --base a commit the clone has" >&2
  exit 2
}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^([2-9]|[1-9][0-9]+)$ ]] || {
  echo "parent_bench: --rounds must be >= 1 and --steps >= 2 (got '$rounds', '$steps')" >&2
  exit 2
}
short=$(git -C "$src" rev-parse --short "$base")
here=$(git -C "$src" rev-parse --short HEAD)
[[ -n $(git -C "$src" status --porcelain --untracked-files=no) ]] && here="$here-dirty"

# The base's keel, built once per commit under the build directory's parent-bench/.
out=$(dirname "$keel")/parent-bench/$short
if [[ -z $base_keel && ! -x $out/build/keel ]]; then
  rm -rf "$out" && mkdir -p "$out/src"
  git -C "$src" archive "$base" | tar -x -C "$out/src"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$out/src" -B "$out/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DKEEL_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 ||
    { echo "parent_bench: configuring $short failed; see $out/configure.log" >&2; exit 1; }
  cmake --build "$out/build" --target keel >"$out/build.log" 2>&1 ||
    { echo "parent_bench: building $short failed; see $out/build.log" >&2; exit 1; }
fi
[[ -n $base_keel ]] || base_keel=$out/build/keel

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run LABEL KEEL CACHE: one training run; $tmp/LABEL.fig gets "median_step_s time_to_first_step_s".
run() {
  local dir=$tmp/$1
  "$2" train --preset "$preset" --steps "$steps" --eval-batches 1 --sample-bytes 0 \
    --cache-dir "$3" --run-dir "$dir" >"$dir.log" 2>&1 ||
    { echo "parent_bench: $2 train failed:" >&2; tail -5 "$dir.log" >&2; exit 1; }
  jq -r '"\(.metrics.median_step_seconds) \(.time_to_first_step_s)"' "$dir/record.json" >"$dir.fig"
}
# pair KIND R: this build and the base, A B in odd rounds and B A in even ones.
pair() {
  if (($2 % 2)); then
    run "a-$1-$2" "$keel" "$tmp/$1-a"
    run "b-$1-$2" "$base_keel" "$tmp/$1-b"
  else
    run "b-$1-$2" "$base_keel" "$tmp/$1-b"
    run "a-$1-$2" "$keel" "$tmp/$1-a"
  fi
}
: >"$tmp/figures"
for ((r = 1; r <= rounds; r++)); do
  rm -rf "$tmp/cold-a" "$tmp/cold-b"  # a new cache each: trace and compile
  pair cold "$r"
  [[ -d $tmp/warm-a ]] || cp -r "$tmp/cold-a" "$tmp/warm-a"  # the first cold run fills it
  [[ -d $tmp/warm-b ]] || cp -r "$tmp/cold-b" "$tmp/warm-b"
  pair warm "$r"
  read -r sa wa <"$tmp/a-warm-$r.fig"
  read -r sb wb <"$tmp/b-warm-$r.fig"
  read -r _ ca <"$tmp/a-cold-$r.fig"
  read -r _ cb <"$tmp/b-cold-$r.fig"
  echo "$sa $sb $wa $wb $ca $cb" >>"$tmp/figures"
done

host=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
echo "keel $here against $short, $preset, $rounds rounds of $steps steps, A B then B A ($host, $(nproc) cores):"
awk '
  function median(v, n,   i, j, t) {
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  { n++; for (k = 1; k <= 6; k++) f[k, n] = $k }
  END {
    split("step (median of the run)|time to first step, warm cache|time to first step, cold cache", name, "|")
    printf "%-32s %12s %12s %10s\n", "", "this build", "base", "this/base"
    for (m = 1; m <= 3; m++) {
      for (i = 1; i <= n; i++) { a[i] = f[2 * m - 1, i]; b[i] = f[2 * m, i]; q[i] = a[i] / b[i] }
      ma = median(a, n); mb = median(b, n); mq = median(q, n)
      if (m == 1) printf "%-32s %9.0f ms %9.0f ms %9.2fx\n", name[m], ma * 1000, mb * 1000, mq
      else printf "%-32s %10.3f s %10.3f s %9.2fx\n", name[m], ma, mb, mq
    }
  }' "$tmp/figures"
