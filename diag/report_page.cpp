// The report page: static HTML and CSS, Chart.js inlined, the run's data as JSON, and the script
// that draws it. After drawing, the script writes what each chart holds into #keel-check, so a
// browser test reads the plotted numbers back from the DOM.
#include <fmt/format.h>

#include "diag/run_report.h"
#include "files/read.h"

namespace keel::diag {
namespace {

constexpr const char* kStyle = R"css(
body { font: 14px/1.4 "DejaVu Sans", sans-serif; margin: 24px; color: #1c2430; background: #fafbfc; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.sub { color: #5a6472; margin-bottom: 16px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
.card { background: #fff; border: 1px solid #dde2e8; border-radius: 6px; padding: 12px; }
.card h3 { font-size: 14px; margin: 0 0 6px; }
.plot { position: relative; height: 260px; }
.none { color: #8a94a3; font-style: italic; }
table { border-collapse: collapse; font-size: 12px; width: 100%; }
td, th { border-bottom: 1px solid #eef1f4; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.problems { background: #fff4e5; border: 1px solid #f0b35b; padding: 8px 12px; border-radius: 6px; }
.summary td:first-child { color: #5a6472; width: 45%; }
code { font-size: 12px; }
#keel-check { display: none; }
)css";

// Draws every chart the data allows; a part whose data is missing says so in its card.
constexpr const char* kScript = R"js(
(function () {
  'use strict';
  const errors = [];
  window.addEventListener('error', (e) => errors.push(String(e.message || e)));
  const consoleError = console.error;
  console.error = function () { errors.push(Array.from(arguments).join(' ')); consoleError.apply(console, arguments); };
  const D = JSON.parse(document.getElementById('keel-data').textContent);
  const charts = {};
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const card = (parent, id, title) => {
    const c = el('div', { class: 'card', id: 'card-' + id });
    c.appendChild(el('h3', {}, title));
    parent.appendChild(c);
    return c;
  };
  const none = (c, why) => c.appendChild(el('div', { class: 'none' }, why));
  function table(parent, headers, body) {
    const t = el('table');
    const h = el('tr');
    for (const x of headers) h.appendChild(el('th', {}, x));
    t.appendChild(h);
    for (const r of body) { const tr = el('tr'); for (const x of r) tr.appendChild(el('td', {}, typeof x === 'string' ? x : JSON.stringify(x))); t.appendChild(tr); }
    parent.appendChild(t);
  }
  const fixed = (x, digits, unit) => (typeof x === 'number' ? x.toFixed(digits) + (unit || '') : 'unknown');
  // A part that cannot be drawn from damaged data is named in its place; the others still are.
  const section = (name, draw) => {
    try { draw(); } catch (e) { errors.push(name + ': ' + e); }
  };
  const hasChart = typeof Chart !== 'undefined';

  function plot(c, id, config) {
    if (!hasChart) { none(c, 'Chart.js was not available when this report was written; see the tables.'); return; }
    const box = el('div', { class: 'plot' });
    const canvas = el('canvas', { id: 'chart-' + id });
    box.appendChild(canvas);
    c.appendChild(box);
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false,
                                     interaction: { mode: 'nearest', intersect: false } }, config.options || {});
    charts[id] = new Chart(canvas.getContext('2d'), config);
  }
  const xy = (rows, x, y) => rows.map((r) => ({ x: r[x], y: r[y] }));
  const linear = (title) => ({ type: 'linear', title: { display: true, text: title } });
  function lineChart(parent, id, title, datasets, ytitle, opts) {
    const c = card(parent, id, title);
    if (!datasets.some((d) => d.data.length)) { none(c, 'no points in this run'); return; }
    plot(c, id, { type: 'line', data: { datasets: datasets },
                  options: Object.assign({ scales: { x: linear('step'), y: Object.assign(linear(ytitle), (opts || {}).y || {}) } }, (opts || {}).options || {}) });
  }
  const line = (label, data, color, extra) => Object.assign({ label: label, data: data, borderColor: color,
    backgroundColor: color, pointRadius: 2, borderWidth: 2, tension: 0 }, extra || {});

  // Summary.
  const rec = D.record || {};
  const m = rec.metrics || {};
  const summary = $('summary');
  const rows = [
    ['steps', m.first_step !== undefined ? m.first_step + '..' + m.last_step + (m.stopped_by_signal ? ' (stopped by signal ' + m.stopped_by_signal + ', checkpointed)' : '') : 'unknown'],
    ['final training loss', fixed(m.train_loss, 4)],
    ['final validation bits/byte', m.val_bits_per_byte === null ? 'none (no evaluation ran)' : fixed(m.val_bits_per_byte, 3) + (m.val_step ? ' (step ' + m.val_step + ')' : '')],
    ['time to first step', fixed(rec.time_to_first_step_s, 2, ' s')],
    ['median step', fixed(typeof m.median_step_seconds === 'number' ? 1000 * m.median_step_seconds : null, 0, ' ms')],
    ['programs / compiles', rec.programs !== undefined ? rec.programs + ' / ' + rec.compiles : 'unknown'],
    ['cache (memory hits, disk loads, compiled)', rec.cache ? [rec.cache.memory_hits, rec.cache.disk_hits, rec.cache.compiled].join(', ') : 'unknown'],
    ['mesh', rec.mesh || 'unknown'],
  ];
  const st = el('table', { class: 'summary' });
  for (const [k, v] of rows) { const tr = el('tr'); tr.appendChild(el('td', {}, k)); tr.appendChild(el('td', {}, String(v))); st.appendChild(tr); }
  summary.appendChild(st);

  if ((D.problems || []).length) {
    const p = $('problems');
    p.className = 'problems';
    p.appendChild(el('strong', {}, 'Missing or damaged inputs: the parts they feed are left out.'));
    const ul = el('ul');
    for (const line of D.problems) ul.appendChild(el('li', {}, line));
    p.appendChild(ul);
  }

  // Training curves.
  section('training', () => {
  const train = $('training');
  const steps = D.steps || [], evals = D.evals || [];
  lineChart(train, 'loss', 'Loss', [line('training loss', xy(steps, 'step', 'loss'), '#2f6fdf'),
                                    line('validation loss', xy(evals, 'step', 'val_loss'), '#e0672f')], 'nats/token');
  lineChart(train, 'bpb', 'Validation bits per byte', [line('validation bits/byte', xy(evals, 'step', 'val_bits_per_byte'), '#e0672f')], 'bits/byte');
  lineChart(train, 'lr', 'Learning rate', [line('learning rate', xy(steps, 'step', 'lr'), '#7a4fd0')], 'lr');
  lineChart(train, 'gnorm', 'Gradient norm (before clipping)', [line('grad norm', xy(steps, 'step', 'grad_norm'), '#2a9d6f')], 'norm');

  });

  // Where the time went.
  section('time', () => {
  const time = $('time');
  const tl = D.timeline || [];
  {
    const c = card(time, 'timeline', 'Step timeline: compile, load and execute seconds per step (hover a bar for the reasons)');
    if (!tl.length) none(c, 'no steps or compiles recorded');
    else plot(c, 'timeline', { type: 'bar', data: { labels: tl.map((r) => r.step), datasets: [
        { label: 'compile', data: tl.map((r) => r.compile_s), backgroundColor: '#e0672f' },
        { label: 'load', data: tl.map((r) => r.load_s), backgroundColor: '#f0b35b' },
        { label: 'execute', data: tl.map((r) => r.execute_s), backgroundColor: '#2f6fdf' }] },
      options: { scales: { x: { stacked: true, title: { display: true, text: 'step (0: before step 1)' } },
                           y: { stacked: true, title: { display: true, text: 'seconds' } } },
                 plugins: { tooltip: { callbacks: { afterBody: (items) => (tl[items[0].dataIndex].compiles || []) } } } } });
  }
  {  // data parallel: the process the others wait for draws the highest line
    const busy = (D.steps || []).filter((s) => Array.isArray(s.rank_busy_ms));
    const colors = ['#2f6fdf', '#e0672f', '#2a9d6f', '#7a4fd0', '#c43d6b', '#f0b35b', '#3a9fb0', '#8c6d31'];
    const sets = [];
    const n = busy.reduce((m, s) => Math.max(m, s.rank_busy_ms.length), 0);
    for (let r = 0; r < n; ++r) {
      sets.push(line('rank ' + r, busy.map((s) => ({ x: s.step, y: s.rank_busy_ms[r] })), colors[r % colors.length]));
    }
    if (n) lineChart(time, 'busy', 'Busy time per process: its steps, less its waits for the others (the highest line is the one they wait for)', sets, 'ms per step');
  }
  lineChart(time, 'programs', 'Programs over steps (must flatten after step 1)',
            [line('distinct programs', xy(D.programs || [], 'step', 'programs'), '#c43d6b', { stepped: true })], 'programs',
            { y: { beginAtZero: true, ticks: { precision: 0 } } });
  {
    const c = card(time, 'compiles', 'Compiles and loads');
    const list = D.compiles || [];
    if (!list.length) none(c, 'none recorded');
    else {
      const t = el('table');
      t.appendChild(el('tr')).append(el('th', {}, 'step'), el('th', {}, 'function'), el('th', {}, 'tier'), el('th', {}, 'seconds'), el('th', {}, 'reason'));
      for (const e of list) {
        const tr = el('tr');
        tr.append(el('td', { class: 'num' }, e.step), el('td', {}, e.function), el('td', {}, e.tier),
                  el('td', { class: 'num' }, e.seconds.toFixed(2)), el('td', {}, e.reason));
        t.appendChild(tr);
      }
      c.appendChild(t);
    }
  }

  });

  // Memory.
  section('memory', () => {
  const mem = $('memory');
  const ranks = (D.memory || {}).ranks || [];
  {
    const c = card(mem, 'memory', 'Peak memory per rank: predicted by the planner vs observed');
    if (!ranks.length) none(c, 'record.json has no memory figures');
    else plot(c, 'memory', { type: 'bar', data: { labels: ranks.map((r) => 'rank ' + r.rank + ' (' + r.host + ')'), datasets: [
        { label: 'predicted MiB', data: ranks.map((r) => r.predicted_peak_bytes / (1 << 20)), backgroundColor: '#7a4fd0' },
        { label: 'observed MiB', data: ranks.map((r) => r.observed_peak_bytes / (1 << 20)), backgroundColor: '#2a9d6f' }] },
      options: { scales: { y: { beginAtZero: true, title: { display: true, text: 'MiB' } } } } });
  }
  {
    // Each tensor of the training state: whole, or split over the data or model axis (the part held).
    const st = D.state || {};
    const model = st.model_processes > 1 ? ', the blocks split over ' + st.model_processes + ' processes of model' : '';
    const c = card(mem, 'state', 'Training state a process' + (st.tensors ? ' (sharding.zero = ' + st.zero + ', the ' + st.axis + ' axis of ' + st.processes + ' processes' + model + '): ' + fixed(st.bytes_per_process / 1e6, 3, ' MB') : ''));
    const split = (p) => !p || !p.split || p.split === 'whole' ? 'whole' : p.split + '/' + p.processes + ' [' + p.local_shape.join(', ') + ']';
    if (!st.tensors) none(c, 'record.json has no state listing');
    else table(c, ['tensor', 'shape', 'parameter', 'gradient', 'moments (m, v)', 'bytes a process'],
               st.tensors.map((t) => [t.name, '[' + t.shape.join(', ') + ']', split(t.parameter), split(t.gradient), split(t.moments), String(t.bytes_per_process)]));
  }
  {
    const cal = (D.calibration || {}).history || [];
    const c = card(mem, 'calibration', 'Calibration history of this config (one point per run)');
    if (!cal.length) none(c, 'no calibration records for this config');
    else plot(c, 'calibration', { type: 'line', data: { labels: cal.map((_, i) => 'run ' + (i + 1)), datasets: [
        line('predicted MiB', cal.map((r) => r.predicted_peak_bytes / (1 << 20)), '#7a4fd0'),
        line('observed MiB', cal.map((r) => r.observed_peak_bytes / (1 << 20)), '#2a9d6f')] },
      options: { scales: { y: { title: { display: true, text: 'MiB' } } } } });
    if (cal.length) c.appendChild(el('div', { class: 'sub' }, 'file ' + D.calibration.file + ', config ' + D.calibration.config_id));
  }

  });

  // MoE expert loads, when the model has MoE layers.
  section('moe', () => {
  const moe = D.moe || [];
  if (moe.length) {
    const sec = $('moe');
    sec.appendChild(el('h2', {}, 'Mixture of experts'));
    const grid = el('div', { class: 'grid' });
    sec.appendChild(grid);
    const c = card(grid, 'moe-load', 'Expert load per layer over time (share of the layer\'s token choices)');
    const points = [];
    const experts = Math.max(1, (moe[0].load[0] || []).length);
    let rowsN = 0;
    for (const p of moe) {
      p.load.forEach((layer, l) => {
        const total = layer.reduce((a, b) => a + b, 0) || 1;
        layer.forEach((v, e) => points.push({ x: p.step, y: l * layer.length + e, v: v / total, label: 'layer ' + l + ' expert ' + e }));
        rowsN = Math.max(rowsN, moe[0].load.length * layer.length);
      });
    }
    const maxV = Math.max(...points.map((p) => p.v), 1e-9);
    plot(c, 'moe-load', { type: 'scatter', data: { datasets: [{ label: 'load share', data: points, pointStyle: 'rect',
        radius: Math.max(3, Math.min(12, 220 / Math.max(rowsN, 1))),
        backgroundColor: (ctx) => { const v = (ctx.raw && ctx.raw.v) / maxV || 0; return 'rgba(196,61,107,' + (0.08 + 0.92 * v).toFixed(3) + ')'; } }] },
      options: { plugins: { legend: { display: false }, tooltip: { callbacks: { label: (i) => i.raw.label + ': ' + (100 * i.raw.v).toFixed(1) + '%' } } },
                 scales: { x: linear('step'), y: Object.assign(linear('layer, expert'), { reverse: true, ticks: { precision: 0, stepSize: 1,
                   callback: (v) => 'L' + Math.floor(v / experts) + ' e' + (v % experts) } }) } } });
    lineChart(grid, 'moe-dropped', 'Dropped fraction of token choices (capacity)', [line('dropped', xy(moe, 'step', 'dropped_fraction'), '#e0672f')], 'fraction');
  }

  });

  // Launch policy with origins, and the bundle.
  section('launch', () => {
  const launch = $('launch');
  {
    const c = card(launch, 'policy', 'Launch policy (value and where it came from)');
    const p = D.policy || {};
    if (!Object.keys(p).length) none(c, 'record.json has no policy');
    else table(c, ['key', 'value', 'origin'], Object.keys(p).map((k) => [k, p[k].value, p[k].origin]));
  }
  {
    const c = card(launch, 'bundle', 'Compatibility bundle (part of every cache key)');
    const b = D.bundle || {};
    if (!Object.keys(b).length) none(c, 'record.json has no bundle');
    else table(c, ['field', 'value'], Object.keys(b).map((k) => [k, b[k]]));
  }
  if (D.compare) {
    const c = card(launch, 'compare', 'Differences from ' + D.compare.run_dir);
    let any = false;
    for (const part of ['policy', 'bundle', 'config']) {
      const rows = D.compare[part] || [];
      if (!rows.length) continue;
      any = true;
      c.appendChild(el('h3', {}, part));
      table(c, ['key', 'this run', 'other run'], rows.map((r) => [r.key, r.this === null ? '(absent)' : r.this, r.other === null ? '(absent)' : r.other]));
    }
    if (!any) none(c, 'policy, bundle and config are the same');
  }

  });

  // What each chart holds, for tests that read the page back.
  const check = { charts: Object.keys(charts).length, chart_ids: Object.keys(charts), errors: errors, problems: (D.problems || []).length, series: {},
                  state_rows: document.querySelectorAll('#card-state tr').length - 1 };
  // Points as plotted: y, or for the heatmap its value.
  const value = (p) => (p !== null && typeof p === 'object') ? (p.v !== undefined ? p.v : p.y) : p;
  for (const id in charts) check.series[id] = charts[id].data.datasets.map((d) => d.data.map(value));
  $('keel-check').textContent = JSON.stringify(check);
  document.body.setAttribute('data-rendered', errors.length ? 'with-errors' : 'ok');
})();
)js";

// Text for inside <script>: a "</script" in it would end the element early.
std::string script_safe(std::string text) {
  for (size_t at = 0; (at = text.find("</", at)) != std::string::npos; at += 3) {
    text.replace(at, 2, "<\\/");
  }
  return text;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_run_report(const RunReportData& report, const std::string& chart_js_path) {
  std::string chart_js;
  try {
    chart_js = files::read_file(chart_js_path, 16 << 20, "Chart.js (libjs-chart.js)");
  } catch (const std::exception&) {
    chart_js = "";  // the page says so and shows its tables
  }
  // Every '<' (only ever inside a JSON string) as \u003c, so no text of the run can end or
  // re-open a script element.
  std::string data;
  for (char c : report.data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    if (c == '<') {
      data += "\\u003c";
    } else {
      data += c;
    }
  }
  const std::string title = report.data.value("run_dir", std::string("run"));
  return fmt::format(
      R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>keel run report: {0}</title>
<style>{1}</style>
<script>{2}</script>
</head><body>
<h1>keel run report</h1>
<div class="sub">{0}</div>
<div id="problems"></div>
<h2>Summary</h2><div id="summary" class="card"></div>
<h2>Training</h2><div id="training" class="grid"></div>
<h2>Time and programs</h2><div id="time" class="grid"></div>
<h2>Memory</h2><div id="memory" class="grid"></div>
<div id="moe"></div>
<h2>Launch</h2><div id="launch" class="grid"></div>
<pre id="keel-check"></pre>
<script id="keel-data" type="application/json">{3}</script>
<script>{4}</script>
</body></html>
)",
      html_escape(title), kStyle, script_safe(chart_js), data, kScript);
}

}  // namespace keel::diag
