#!/usr/bin/env bash
# The run report in a real browser: a short run writes report.html and trace.json; headless
# Chromium renders the page without console errors and the plotted numbers read back from the
# DOM equal the run's files; a failed run still gets a report naming what is missing.
# Usage: report_browser_test.sh KEEL SCREENSHOT_DIR
set -u
keel="$1"
shots="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
export KEEL_COMPILE_CACHE_DIR="$tmp/cache"
tiny_run_inputs "$tmp"
mkdir -p "$shots"

chrome=(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage
  --user-data-dir="$tmp/chrome" --hide-scrollbars)
command -v chromium >/dev/null || { echo "FAIL chromium is not installed (scripts/install-deps)"; exit 1; }

# render HTML OUT_DOM: the DOM after the page's scripts ran; console lines go to OUT_DOM.log.
render() {
  "${chrome[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$1" >"$2" 2>"$2.log"
}

run=(--config "$tmp/tiny.json" --data "$tmp/corpus" --eval-batches 2)
check train 0 "report $tmp/run/report.html" -- \
  "$keel" train "${run[@]}" --steps 4 --eval-every 2 --ckpt-every 2 --sample-bytes 8 --run-dir "$tmp/run"

# trace.json: a Chrome trace with a span of every kind the run went through.
kinds=$(jq -r '[.traceEvents[] | select(.ph == "X") | .cat] | unique | join(",")' "$tmp/run/trace.json")
check trace-kinds 0 '^checkpoint,compile,data,dispatch,eval,execute,init,(lookup,)?sample,step,trace$' -- echo "$kinds"
check trace-steps 0 '^4$' -- jq '[.traceEvents[] | select(.cat == "step")] | length' "$tmp/run/trace.json"
check trace-tracks 0 '^main,device$' -- \
  jq -r '[.traceEvents[] | select(.ph == "M" and .name == "thread_name") | .args.name] | join(",")' "$tmp/run/trace.json"
# A step's programs may run after its call returns: its span (on the device track) ends when
# they have run, no earlier than its dispatch, and starts no earlier than the step before ends.
check trace-step-spans 0 '^true$' -- jq '[.traceEvents[] | select(.ph == "X")] as $x |
  ([$x[] | select(.cat == "step")] | sort_by(.ts)) as $s |
  ([$x[] | select(.cat == "dispatch")] | sort_by(.ts)) as $d |
  ($d | length) == 4 and all($s[]; .dur > 0 and .tid != $d[0].tid) and
  all(range(0; 4); $s[.].ts + $s[.].dur >= $d[.].ts + $d[.].dur - 1) and
  all(range(1; 4); $s[.].ts >= $s[. - 1].ts + $s[. - 1].dur - 1)' "$tmp/run/trace.json"
check trace-compile-reason 0 'first compile|changed' -- \
  jq -r '.traceEvents[] | select(.cat == "compile") | .args.reason' "$tmp/run/trace.json"

render "$tmp/run/report.html" "$tmp/dom.html"
check rendered 0 'data-rendered="ok"' -- cat "$tmp/dom.html"
check no-console-messages 0 '^0$' -- sh -c "grep -c CONSOLE '$tmp/dom.html.log' || true"
sed -n 's/.*<pre id="keel-check">\([^<]*\)<\/pre>.*/\1/p' "$tmp/dom.html" >"$tmp/check.json"
check charts-drawn 0 '^(8|9|1[0-9])$' -- jq '.charts' "$tmp/check.json"
check no-page-errors 0 '^0$' -- jq '.errors | length' "$tmp/check.json"
# The plotted numbers are the run's: losses, learning rates, programs, memory.
# same SERIES JQ_FILTER_OVER_METRICS: the chart's points equal the metrics' values.
same() {
  local want
  want=$(jq -sc "$2" "$tmp/run/metrics.jsonl")
  check "plotted-$1" 0 '^true$' -- jq --argjson want "$want" --arg s "$1" \
    '.series[$s][0] as $got | ($got | length) == ($want | length) and
     ([$got, $want] | transpose | all(.[0] - .[1] | fabs < 1e-9))' "$tmp/check.json"
}
same loss '[.[] | select(.loss != null) | .loss]'
same bpb '[.[] | select(.val_loss != null) | .val_bits_per_byte]'
same lr '[.[] | select(.lr != null) | .lr]'
same gnorm '[.[] | select(.grad_norm != null) | .grad_norm]'
want=$(jq '.programs' "$tmp/run/record.json")
check plotted-programs 0 "^$want\$" -- jq '.series.programs[0][-1]' "$tmp/check.json"
want=$(jq '[.[] | select(.tier == "compiled") | .seconds] | add' -s "$tmp/run/compiles.jsonl")
check plotted-compile-seconds 0 '^true$' -- \
  jq --argjson want "$want" '((.series.timeline[0] | add) - $want | fabs) < 1e-9' "$tmp/check.json"
check plotted-memory 0 '^true$' -- jq --argjson obs "$(jq '.memory.observed_peak_bytes' "$tmp/run/record.json")" \
  '(.series.memory[1][0] * 1048576 - $obs | fabs) < 1' "$tmp/check.json"
want=$(jq '.state.tensors | length' "$tmp/run/record.json")
check state-table 0 "^$want\$" -- jq '.state_rows' "$tmp/check.json"
"${chrome[@]}" --window-size=1280,2400 --screenshot="$shots/report.png" "file://$tmp/run/report.html" \
  >/dev/null 2>&1
# A PNG (signature, then the IHDR's width 1280 and height 2400).
check screenshot 0 '^89504e470d0a1a0a0000000d494844520000050000000960$' -- \
  sh -c "head -c 24 '$shots/report.png' | od -An -tx1 | tr -d ' \n'"

# A model with MoE layers: the expert-load heatmap holds each layer's load shares per log point.
# The shape cli_test's moe-200 trains: the suite's memo compiles its programs once.
check train-moe 0 "report $tmp/moe/report.html" -- "$keel" train --preset code-moe-s --batch-size 2 \
  --seq-len 64 --steps 2 --log-every 1 --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0 \
  --run-dir "$tmp/moe"
render "$tmp/moe/report.html" "$tmp/moe-dom.html"
check moe-rendered 0 'data-rendered="ok"' -- cat "$tmp/moe-dom.html"
sed -n 's/.*<pre id="keel-check">\([^<]*\)<\/pre>.*/\1/p' "$tmp/moe-dom.html" >"$tmp/moe-check.json"
want=$(jq -sc '[.[] | select(.moe != null) | .moe.load[] | (add) as $t | .[] / $t]' "$tmp/moe/metrics.jsonl")
check moe-heatmap 0 '^true$' -- jq --argjson want "$want" \
  '.series["moe-load"][0] as $got | ($got | length) == ($want | length) and
   ([$got, $want] | transpose | all(.[0] - .[1] | fabs < 1e-9))' "$tmp/moe-check.json"
want=$(jq -sc '[.[] | select(.moe != null) | .moe.dropped_fraction]' "$tmp/moe/metrics.jsonl")
check moe-dropped 0 "^true\$" -- jq --argjson want "$want" '.series["moe-dropped"][0] == $want' "$tmp/moe-check.json"

# Two processes: the busy-time chart holds each rank's figures from metrics.jsonl.
check train-dp 0 "report $tmp/dp/report.html" -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${run[@]}" --steps 3 --log-every 1 --sample-bytes 0 --run-dir "$tmp/dp"
render "$tmp/dp/report.html" "$tmp/dp-dom.html"
check dp-rendered 0 'data-rendered="ok"' -- cat "$tmp/dp-dom.html"
sed -n 's/.*<pre id="keel-check">\([^<]*\)<\/pre>.*/\1/p' "$tmp/dp-dom.html" >"$tmp/dp-check.json"
want=$(jq -sc '[.[] | select(.rank_busy_ms != null) | .rank_busy_ms] | transpose' "$tmp/dp/metrics.jsonl")
check dp-busy 0 '^true$' -- jq --argjson want "$want" \
  '(.series.busy | length) == 2 and ($want | length) == 2 and ($want[0] | length) == 3 and
   ([.series.busy, $want] | transpose | all(transpose | all(.[0] - .[1] | fabs < 1e-9)))' "$tmp/dp-check.json"
check no-busy-chart-alone 0 '^false$' -- jq '.series | has("busy")' "$tmp/check.json"

# A job that fails after it started (its program is over the memory budget): the report of
# what there is, naming what is missing. Its own cache has no calibration record to refuse it
# earlier, as bad input, and its state alone (about 320 KB) is under the budget.
check failed-run 1 "report of the failed run $tmp/failed/report.html" -- \
  "$keel" train "${run[@]}" --steps 2 --run-dir "$tmp/failed" --cache-dir "$tmp/cache2" \
  --set launch.memory_budget_bytes=400000
render "$tmp/failed/report.html" "$tmp/failed-dom.html"
check failed-rendered 0 'data-rendered="ok"' -- cat "$tmp/failed-dom.html"
check failed-names-missing 0 'record.json: missing' -- cat "$tmp/failed-dom.html"

# A run stopped by SIGTERM: its report says so, and that no evaluation ran.
"$keel" train "${run[@]}" --steps 1000000 --ckpt-every 20 --eval-every 0 --sample-bytes 0 \
  --run-dir "$tmp/stopped" >"$tmp/stopped.out" 2>&1 &
pid=$!
for _ in $(seq 600); do compgen -G "$tmp/stopped/checkpoints/step-*" >/dev/null && break; sleep 0.1; done
kill -TERM $pid
timeout 60 tail --pid=$pid -f /dev/null
kill -KILL $pid 2>/dev/null
wait $pid
check stopped-exit 0 '^143$' -- echo $?
render "$tmp/stopped/report.html" "$tmp/stopped-dom.html"
# The rendered cells (the page's own script holds these words too).
check stopped-steps 0 '<td>steps</td><td>1\.\.[0-9]+ \(stopped by signal 15, checkpointed\)</td>' -- \
  cat "$tmp/stopped-dom.html"
check stopped-no-eval 0 '<td>final validation bits/byte</td><td>none \(no evaluation ran\)</td>' -- \
  cat "$tmp/stopped-dom.html"
check run-eval-step 0 '<td>final validation bits/byte</td><td>[0-9.]+ \(step 4\)</td>' -- cat "$tmp/dom.html"

# keel report: another output file, a comparison, and bad arguments.
check report-compare 0 "^report $tmp/cmp.html" -- \
  "$keel" report "$tmp/run" -o "$tmp/cmp.html" --compare "$tmp/failed"
render "$tmp/cmp.html" "$tmp/cmp-dom.html"
check compare-rendered 0 'data-rendered="ok"' -- cat "$tmp/cmp-dom.html"
check compare-table 0 'Differences from' -- cat "$tmp/cmp-dom.html"
check report-not-a-dir 2 '^\[report\] .*/nope is not a directory' -- "$keel" report "$tmp/nope"
printf '{"step":' >>"$tmp/run/metrics.jsonl"
check report-damaged 0 '1 missing or damaged input, named on the page' -- "$keel" report "$tmp/run"

echo "report_browser_test: $passes passed, $fails failed"
((fails == 0))
