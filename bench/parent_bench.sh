#!/usr/bin/env bash
# make bench: this build of keel against the commit it builds on, in one run. The base commit
# (HEAD for a tree with local edits, else HEAD^, unless given) is checked out and built under
# SOURCE_DIR/build/parent-bench/ (Release, the keel binary only, once per commit); then each
# binary trains gpt2-s (or --preset) in turn, A B in odd rounds and B A in even ones, each on its
# own cache: cold runs (an empty cache: trace and compile) and warm ones (load from disk).
# Figures come from each run's record.json: the median step and the time to first step from
# process start. Each ratio is the median of the per-round ratios, so drift on the host cancels.
# Usage: parent_bench.sh KEEL SOURCE_DIR [--base COMMIT] [--base-keel PATH] [--rounds N]
#                        [--steps N] [--preset NAME|CONFIG.json]
#   --base-keel: the base's keel, already built (the build is skipped; --base only names it).
set -euo pipefail
usage() {
  echo "usage: parent_bench.sh KEEL SOURCE_DIR [--base COMMIT] [--base-keel PATH] [--rounds N] [--steps N] [--preset NAME|CONFIG.json]" >&2
  exit 2
}
executable() {  # executable WHAT PATH: PATH made absolute, or a one-line refusal
  [[ -x $2 && -f $2 ]] || { echo "parent_bench: $1 $2 is not an executable file" >&2; exit 2; }
  realpath "$2"
}
[[ $# -ge 2 ]] || usage
keel=$(executable KEEL "$1")
[[ -d $2 ]] || { echo "parent_bench: SOURCE_DIR $2 is not a directory" >&2; exit 2; }
src=$(realpath "$2")
shift 2
base_name="" base_keel="" rounds=4 steps=8 preset=gpt2-s
while [[ $# -gt 0 ]]; do
  case $1 in
    --base | --base-keel | --rounds | --steps | --preset) [[ $# -ge 2 ]] || usage ;;
    *) echo "parent_bench: unknown option $1" >&2; usage ;;
  esac
  case $1 in
    --base) base_name=$2 ;;
    --base-keel) base_keel=$(executable --base-keel "$2") ;;
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --preset) preset=$2 ;;
  esac
  shift 2
done
model=(--preset "$preset")  # a model config file instead where the name ends in .json
if [[ $preset == *.json ]]; then
  [[ -f $preset ]] || { echo "parent_bench: --preset $preset is not a file" >&2; exit 2; }
  model=(--config "$(realpath "$preset")")
  preset=$(basename "$preset" .json)
fi
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^([2-9]|[1-9][0-9]+)$ ]] || {
  echo "parent_bench: --rounds must be >= 1 and --steps >= 2 (got '$rounds', '$steps')" >&2
  exit 2
}
here=$(git -C "$src" rev-parse --short HEAD 2>/dev/null) || {
  echo "parent_bench: $src is not a git checkout; the base is a commit of its history" >&2
  exit 2
}
if [[ -n $(git -C "$src" status --porcelain --untracked-files=no) ]]; then
  here="$here-dirty"
  : "${base_name:=HEAD}"  # local edits build on HEAD itself
fi
: "${base_name:=HEAD^}"
base=$(git -C "$src" rev-parse --verify --quiet "$base_name^{commit}") || {
  echo "parent_bench: no commit $base_name in $src; give --base a commit the clone has" >&2
  exit 2
}
short=$(git -C "$src" rev-parse --short "$base")

# The base's keel: a clone sharing the objects, checked out at the base, so its bundle names the
# base's revision.
out=$src/build/parent-bench/$short
if [[ -z $base_keel && ! -x $out/build/keel ]]; then
  rm -rf "$out" && mkdir -p "$out"
  git clone -q --shared --no-checkout "$src" "$out/src" &&
    git -C "$out/src" checkout -q --detach "$base" ||
    { echo "parent_bench: checking out $short failed" >&2; exit 1; }
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
  "$2" train "${model[@]}" --steps "$steps" --eval-batches 1 --sample-bytes 0 \
    --cache-dir "$3" --run-dir "$dir" >"$dir.log" 2>&1 ||
    { echo "parent_bench: $2 train failed:" >&2; tail -5 "$dir.log" >&2; exit 1; }
  jq -r '[.metrics.median_step_seconds, .time_to_first_step_s] | map(numbers) |
         select(length == 2 and .[0] > 0 and .[1] > 0) | "\(.[0]) \(.[1])"' \
    "$dir/record.json" >"$dir.fig"
  [[ -s $dir.fig ]] || {
    echo "parent_bench: $dir/record.json ($2) has no positive median step or time to first step" >&2
    exit 1
  }
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
  [[ -d $tmp/warm-a ]] || cp -a "$tmp/cold-a" "$tmp/warm-a"  # the first cold run fills it
  [[ -d $tmp/warm-b ]] || cp -a "$tmp/cold-b" "$tmp/warm-b"
  pair warm "$r"
  read -r sa wa <"$tmp/a-warm-$r.fig"
  read -r sb wb <"$tmp/b-warm-$r.fig"
  read -r _ ca <"$tmp/a-cold-$r.fig"
  read -r _ cb <"$tmp/b-cold-$r.fig"
  echo "$sa $sb $wa $wb $ca $cb" >>"$tmp/figures"
done

# The first match only, read to the end of no pipe (a closed pipe would fail under pipefail).
host=$(sed -n '/^model name/{s/^[^:]*:[[:space:]]*//p;q}' /proc/cpuinfo)
echo "keel $here against $short, $preset, $rounds rounds of $steps steps, A B then B A (${host:-unknown CPU}, $(nproc) cores):"
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
