#!/usr/bin/env bash
# scripts/bench-report: a page from a directory of logs, in make bench's order; one section
# replaced from a log of its own re-run (named as such, the other sections byte for byte as they
# were, a missing one inserted in order); bad arguments exit 2 and leave the page alone.
# Usage: bench_report_test.sh SOURCE_DIR
set -uo pipefail
report="$1/scripts/bench-report"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/logs"
echo "gemm figures" >"$tmp/logs/gemm_bench.log"
echo "share figures" >"$tmp/logs/share_bench.log"
page="$tmp/performance.md"
check whole 0 'wrote .* \(2 benchmarks' -- "$report" "$tmp/logs" "$page"
check order 0 '^gemm_bench share_bench Earlier figures $' -- bash -c \
  "sed -n 's/^## //p' '$page' | tr '\n' ' '"
section() { sed -n "/^## $1\$/,/^## /p" "$2" | sed '$d'; }
section gemm_bench "$page" >"$tmp/gemm.before"
echo "zero figures, first" >"$tmp/zero.log"
check insert 0 'replaced section zero_bench' -- "$report" --section zero_bench "$tmp/zero.log" "$page"
check inserted-in-order 0 '^gemm_bench zero_bench share_bench Earlier figures $' -- bash -c \
  "sed -n 's/^## //p' '$page' | tr '\n' ' '"
echo "zero figures, second" >"$tmp/zero.log"
check replace 0 'replaced section zero_bench' -- "$report" --section zero_bench "$tmp/zero.log" "$page"
check replaced 0 '^1 0 1$' -- bash -c "echo \$(grep -c 'zero figures, second' '$page') \
  \$(grep -c 'zero figures, first' '$page') \$(grep -c '^Re-run alone on .*, commit ' '$page')"
check others-unchanged 0 '^same$' -- bash -c \
  "diff <(sed -n '/^## gemm_bench\$/,/^## /p' '$page' | sed '\$d') '$tmp/gemm.before' && echo same"
cp "$page" "$tmp/page.before"
check no-log 2 'is not a benchmark log' -- "$report" --section zero_bench "$tmp/missing.log" "$page"
check no-page 2 'does not exist; run make bench first' -- "$report" --section zero_bench \
  "$tmp/zero.log" "$tmp/none.md"
check usage 2 'usage: scripts/bench-report' -- "$report" --section zero_bench
check page-kept 0 '^kept$' -- bash -c "cmp -s '$page' '$tmp/page.before' && echo kept"
echo "bench_report_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
