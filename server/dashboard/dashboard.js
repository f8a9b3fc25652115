// rollgym dashboard: polls /dashboard/data and draws plain SVG charts (no libraries).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const POLL_MS = 2000;
const STAGES = ["sampling", "environment", "buffer", "training"];
const COLORS = {
  sampling: "#4e79a7", environment: "#59a14f", buffer: "#f28e2b", training: "#e15759",
  model: "#4e79a7", ready: "#f28e2b", leased: "#edc948", inflight: "#76b7b2",
  stale: "#e15759", zero_variance: "#9c755f", too_few_valid: "#b07aa1", invalid: "#59a14f",
  server: "#4e79a7", trainer: "#e15759", lag: "#76b7b2",
};
const ENV_COLORS = ["#f28e2b", "#59a14f", "#b07aa1", "#9c755f", "#edc948", "#76b7b2"];

function node(tag, attrs, parent, text) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  if (parent) parent.appendChild(element);
  return element;
}

function box(svg) {
  const [, , w, h] = svg.getAttribute("viewBox").split(" ").map(Number);
  return { w, h, left: 52, right: w - 12, top: 26, bottom: h - 24 };
}

// About `count` round ticks in [min, max]. A span below the values' float resolution
// (0.7 against 0.7000000000000001, or two timestamps one ulp apart) counts as flat: a step
// smaller than an ulp would never move `v` and the loop would fill memory.
function ticks(min, max, count) {
  const resolution = Math.max(Math.abs(min), Math.abs(max)) * 1e-9;
  const span = max - min > resolution ? max - min : 1;
  const raw = span / count;
  const step = [1, 2, 2.5, 5, 10].map((m) => m * 10 ** Math.floor(Math.log10(raw)))
    .find((s) => s >= raw);
  if (!Number.isFinite(step) || step <= 0) return [];
  const out = [];
  const first = Math.ceil(min / step);
  for (let i = 0; i <= 4 * count; i += 1) {
    const v = (first + i) * step;
    if (v > max + step * 1e-9) break;
    out.push(v);
  }
  return out;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
}

function seconds(s) {
  if (s === null || s === undefined) return "-";
  if (s === 0) return "0";
  const [value, unit] = s < 1e-3 ? [s * 1e6, "µs"] : s < 1 ? [s * 1e3, "ms"]
    : s < 120 ? [s, "s"] : [s / 60, "min"];
  return `${+value.toFixed(value < 10 ? 1 : 0)} ${unit}`;
}

function empty(svg, message) {
  const f = box(svg);
  node("text", { x: f.w / 2, y: f.h / 2, "text-anchor": "middle", class: "empty" }, svg,
    message || "waiting for data");
}

function legend(svg, series) {
  const f = box(svg);
  const group = node("g", { class: "legend" }, svg);
  let x = f.left;
  for (const s of series) {
    node("rect", { x, y: 6, width: 10, height: 10, rx: 2, fill: s.color }, group);
    node("text", { x: x + 14, y: 15 }, group, s.name);
    x += 22 + s.name.length * 6.5;
  }
}

// series: [{name, color, values}] aligned with xs; null values leave gaps.
// The reward curve: all sampled trajectories, then each env's of a mixture (a gap where a
// version sampled none of that env).
function rewardSeries(rewards) {
  const envs = [...new Set(rewards.flatMap((r) => Object.keys(r.per_env || {})))].sort();
  return [{ name: "sampled (server)", color: COLORS.server, values: rewards.map((r) => r.mean) },
    ...envs.map((env, i) => ({
      name: env, color: ENV_COLORS[i % ENV_COLORS.length],
      values: rewards.map((r) => r.per_env?.[env] ?? null),
    }))];
}

function lineChart(svg, { xs, series, yMin, yMax, yFormat, xFormat }) {
  svg.replaceChildren();
  const values = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
  if (!xs.length || !values.length) return empty(svg);
  const f = box(svg);
  const lo = yMin ?? Math.min(0, ...values);
  let hi = yMax ?? Math.max(...values);
  if (hi <= lo) hi = lo + 1;
  const x0 = xs[0], x1 = xs[xs.length - 1] > x0 ? xs[xs.length - 1] : x0 + 1;
  const sx = (x) => f.left + ((x - x0) / (x1 - x0)) * (f.right - f.left);
  const sy = (y) => f.bottom - ((y - lo) / (hi - lo)) * (f.bottom - f.top);
  for (const v of ticks(lo, hi, 4)) {
    node("line", { x1: f.left, x2: f.right, y1: sy(v), y2: sy(v), class: "gridline" }, svg);
    node("text", { x: f.left - 6, y: sy(v) + 4, "text-anchor": "end" }, svg, (yFormat || String)(v));
  }
  for (const v of ticks(x0, x1, 4)) {
    const anchor = sx(v) > f.right - 30 ? "end" : sx(v) < f.left + 30 ? "start" : "middle";
    node("text", { x: sx(v), y: f.bottom + 16, "text-anchor": anchor }, svg, (xFormat || clock)(v));
  }
  node("line", { x1: f.left, x2: f.right, y1: f.bottom, y2: f.bottom, class: "axis" }, svg);
  for (const s of series) {
    let d = "", pen = "M";
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = "M"; return; }
      d += `${pen}${sx(xs[i]).toFixed(1)},${sy(v).toFixed(1)}`;
      pen = "L";
    });
    if (d) node("path", { d, stroke: s.color, class: "series", "data-series": s.name }, svg);
  }
  legend(svg, series);
}

// Grouped bars; with log=true the y axis is logarithmic (model and env differ by decades).
function barChart(svg, { categories, series, log, yFormat }) {
  svg.replaceChildren();
  const values = series.flatMap((s) => s.values).filter((v) => Number.isFinite(v) && v > 0);
  if (!categories.length || !values.length) return empty(svg);
  const f = box(svg);
  const scale = log
    ? { lo: Math.floor(Math.log10(Math.min(...values))), hi: Math.ceil(Math.log10(Math.max(...values))) }
    : { lo: 0, hi: Math.max(...values) };
  if (scale.hi <= scale.lo) scale.hi = scale.lo + 1;
  const level = (v) => (log ? Math.log10(v) : v);
  const sy = (v) => f.bottom - ((level(v) - scale.lo) / (scale.hi - scale.lo)) * (f.bottom - f.top);
  const marks = log ? Array.from({ length: scale.hi - scale.lo + 1 }, (_, i) => 10 ** (scale.lo + i))
    : ticks(0, scale.hi, 4);
  for (const v of marks) {
    node("line", { x1: f.left, x2: f.right, y1: sy(v), y2: sy(v), class: "gridline" }, svg);
    node("text", { x: f.left - 6, y: sy(v) + 4, "text-anchor": "end" }, svg, (yFormat || String)(v));
  }
  const slot = (f.right - f.left) / categories.length;
  const width = Math.min(40, (slot * 0.8) / series.length);
  categories.forEach((category, c) => {
    const start = f.left + c * slot + (slot - width * series.length) / 2;
    series.forEach((s, i) => {
      const v = s.values[c];
      if (v === null || v === undefined || v <= 0) return;
      const y = Math.min(sy(v), f.bottom - 1);
      node("rect", { x: start + i * width, y, width: width - 2, height: f.bottom - y,
        fill: s.color, class: "bar", "data-series": s.name }, svg);
      if (series.length * categories.length <= 12) {
        node("text", { x: start + i * width + width / 2, y: y - 3, "text-anchor": "middle" }, svg,
          (yFormat || String)(v));
      }
    });
    node("text", { x: f.left + c * slot + slot / 2, y: f.bottom + 16, "text-anchor": "middle" }, svg,
      String(category));
  });
  node("line", { x1: f.left, x2: f.right, y1: f.bottom, y2: f.bottom, class: "axis" }, svg);
  legend(svg, series);
}

function text(id, value) {
  document.getElementById(id).textContent = value;
}

function header(data) {
  const s = data.series, last = s.t.length - 1;
  const totals = data.totals;
  const dropped = (totals.stale || 0) + (totals.zero_variance || 0) + (totals.too_few_valid || 0);
  text("model", data.model);
  text("policy-version", String(data.policy_version));
  text("trainer-step", data.trainer_step === null ? "-" : String(data.trainer_step));
  text("trajectories", String(Math.round(totals.trajectories || 0)));
  text("buffer", last < 0 ? "-" : `${s.buffer_ready[last]} / ${s.buffer_leased[last]}`);
  text("dropped", `${Math.round(dropped)} / ${Math.round(totals.invalid || 0)}`);
  text("context-cut", String(Math.round(totals.truncated_by_context || 0)));
  text("uptime", seconds(data.now - data.started_at));
}

function stagesTable(stages) {
  const body = document.querySelector("#stages-table tbody");
  body.replaceChildren();
  for (const name of STAGES) {
    const t = stages.totals[name];
    const share = t.busy_s + t.waiting_s > 0 ? t.busy_s / (t.busy_s + t.waiting_s) : 0;
    const row = document.createElement("tr");
    row.innerHTML = `<td><span class="swatch" style="background:${COLORS[name]}"></span>${name}</td>` +
      `<td>${seconds(t.busy_s)}</td><td>${seconds(t.waiting_s)}</td>` +
      `<td>${(100 * share).toFixed(0)}%</td>` +
      `<td><span class="share"><span style="width:${(100 * share).toFixed(1)}%;background:${COLORS[name]}"></span></span></td>`;
    body.appendChild(row);
  }
}

function draw(data) {
  const s = data.series, st = data.stages;
  const percent = (v) => `${Math.round(v)}%`;
  lineChart(document.getElementById("stages-chart"), {
    xs: st.t.map((t) => t + st.bucket_s / 2),
    series: STAGES.map((name) => ({ name, color: COLORS[name],
      values: st.busy[name].map((b) => (100 * b) / st.bucket_s) })),
    yMin: 0, yMax: 100, yFormat: percent,
  });
  stagesTable(st);
  const lat = data.latency;
  const pick = (key) => ["p50", "p90", "p99"].map((p) => (lat[key] ? lat[key][p] : null));
  barChart(document.getElementById("latency-bars"), {
    categories: ["p50", "p90", "p99"], log: true, yFormat: seconds,
    series: [{ name: "model", color: COLORS.model, values: pick("model") },
      { name: "environment", color: COLORS.environment, values: pick("environment") }],
  });
  lineChart(document.getElementById("latency-chart"), {
    xs: s.t, yFormat: seconds,
    series: [{ name: "model p50", color: COLORS.model, values: s.model_p50 },
      { name: "model p90", color: "#a0cbe8", values: s.model_p90 },
      { name: "env p50", color: COLORS.environment, values: s.env_p50 },
      { name: "env p90", color: "#8cd17d", values: s.env_p90 }],
  });
  lineChart(document.getElementById("buffer-chart"), {
    xs: s.t, yMin: 0,
    series: [{ name: "ready groups", color: COLORS.ready, values: s.buffer_ready },
      { name: "leased groups", color: COLORS.leased, values: s.buffer_leased },
      { name: "episodes in flight", color: COLORS.inflight, values: s.inflight }],
  });
  barChart(document.getElementById("lag-chart"), {
    categories: data.version_lag.map(([lag]) => lag),
    series: [{ name: "trajectories", color: COLORS.lag, values: data.version_lag.map(([, n]) => n) }],
  });
  lineChart(document.getElementById("dropped-chart"), {
    xs: s.t, yMin: 0,
    series: Object.entries(s.dropped).map(([name, values]) => ({ name, color: COLORS[name] || "#999", values })),
  });
  const versions = data.rewards.map((r) => r.policy_version);
  lineChart(document.getElementById("reward-chart"), {
    xs: versions, xFormat: (v) => `v${Math.round(v)}`, yFormat: (v) => v.toFixed(2),
    series: rewardSeries(data.rewards),
  });
  const steps = data.alarms.map((a) => a.step), metric = (k) => data.alarms.map((a) => a.metrics[k] ?? null);
  lineChart(document.getElementById("alarms-chart"), {
    xs: steps, xFormat: (v) => `step ${Math.round(v)}`, yMin: 0, yFormat: (v) => v.toFixed(2),
    series: [{ name: "KL behaviour||trainer", color: COLORS.trainer, values: metric("kl_behaviour") },
      { name: "entropy", color: COLORS.server, values: metric("entropy") },
      { name: "grad norm", color: COLORS.lag, values: metric("grad_norm") },
      { name: "clip ratio", color: "#f28e2b", values: metric("clip_ratio") },
      { name: "IS ratio p99", color: "#b07aa1", values: metric("is_ratio_p99") },
      { name: "step KL (trust region)", color: "#59a14f", values: metric("step_kl") },
      { name: "served-weights mismatch (canary)", color: "#e15759", values: metric("served_weights_mismatch") }],
  });
}

// --- the cost board (data.cost; definitions in rollgym/contract/cost.py) ----------------

function fixed(v, digits, suffix) {
  return v === null || v === undefined ? "-" : `${v.toFixed(digits)}${suffix || ""}`;
}

function rows(id, entries) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  for (const cells of entries) {
    const row = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = cell;
      row.appendChild(td);
    }
    body.appendChild(row);
  }
}

let pricePerHour = null;  // what the user typed; the server's setting until then

function price(cost) {
  const typed = document.getElementById("price");
  if (pricePerHour === null && cost.price_per_hour !== null && document.activeElement !== typed) {
    typed.value = cost.price_per_hour;
  }
  const value = parseFloat(typed.value);
  return Number.isFinite(value) ? value : null;
}

function priced(machineS, p) {
  return machineS === null || machineS === undefined || p === null ? "-" : (machineS * p / 3600).toPrecision(3);
}

function costBoard(cost) {
  if (!cost) return;
  text("cost-window", seconds(cost.window_s));
  const unit = cost.device === "gpu" ? "GPU-s" : "CPU-s";
  rows("cost-table", [
    ["generated tokens/s", fixed(cost.generated_tokens_per_s, 1)],
    ["prompt tokens/s", fixed(cost.prompt_tokens_per_s, 1)],
    [`${unit} per 1k generated tokens`, fixed(cost.device_s_per_1k_tokens, 2)],
    ["long tail (group time on the slowest 10%)", cost.long_tail_share === null ? "-" : `${(100 * cost.long_tail_share).toFixed(0)}%`],
    ["sampling : training (busy s)", cost.sampling_training_ratio === null ? "-" : `${cost.sampling_training_ratio.toFixed(2)} : 1`],
    ["prefix-cache hit rate", cost.prefix_cache_hit_rate === null ? "-" : `${(100 * cost.prefix_cache_hit_rate).toFixed(0)}%`],
    ["serving precision", cost.serving_dtype],
    ["behaviour -> training KL per token (precision gate)", cost.precision_kl === null ? "-" : cost.precision_kl.toExponential(2)],
  ]);
  const p = price(cost);
  rows("budget-table", [
    [`machine (${cost.devices} ${cost.device === "gpu" ? "GPUs" : "cores"})-s per 1k tokens`, fixed(cost.machine_s_per_1k_tokens, 3)],
    ["cost per 1k tokens", priced(cost.machine_s_per_1k_tokens, p)],
    [`cost per trained sample (${cost.trained_samples} trained)`, priced(cost.machine_s_per_trained_sample, p)],
  ]);
  rows("savings-table", cost.savings.map((s) => [
    s.name.replace("_", " "), fixed(s.machine_s, 2), priced(s.machine_s, p), s.note,
  ]));
  const spec = cost.speculation;
  rows("speculation-table", spec.enabled ? [
    ["state", `${spec.state}${spec.drafting ? " (drafting)" : ""}`],
    ["acceptance, last window / since start", `${fixed(spec.acceptance, 2)} / ${fixed(spec.acceptance_total, 2)}`],
    ["would-be acceptance / speed-up, last plain window", `${fixed(spec.shadow_acceptance, 2)} / ${fixed(spec.would_be_speedup, 2)}`],
    ["a drafting step's cost (plain steps)", fixed(spec.draft_step_cost, 2)],
    ["tokens/s per sequence: plain / drafting", `${fixed(spec.plain_tokens_per_s, 1)} / ${fixed(spec.drafting_tokens_per_s, 1)}`],
    ["drafted / accepted tokens", `${spec.drafted_tokens} / ${spec.accepted_tokens}`],
    ["switches", String(spec.switches)],
    ["drafting may be tried again in", spec.next_probe_in_s === null ? "-" : seconds(spec.next_probe_in_s)],
  ] : [["off", "start with ROLLGYM_ENGINE__SPECULATION__ENABLED=true"]]);
}

document.getElementById("price").addEventListener("input", (event) => {
  pricePerHour = parseFloat(event.target.value);
});

async function poll() {
  const status = document.getElementById("status");
  try {
    const answer = await fetch("/dashboard/data?buckets=60&points=600", { cache: "no-store" });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const data = await answer.json();
    header(data);
    draw(data);
    costBoard(data.cost);
    status.textContent = `live · updated ${clock(data.now)}`;
    status.classList.remove("stale");
  } catch (error) {
    status.textContent = `not updating: ${error.message}`;
    status.classList.add("stale");
  }
  setTimeout(poll, POLL_MS);
}

poll();
