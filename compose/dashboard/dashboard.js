// huntlb dashboard: the panels of panels.json (the Grafana dashboard is built from
// the same file), drawn from Prometheus' HTTP API on this page's own origin.
// No library: line and bar charts are a few canvas calls each.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
// a front's colour is fixed by its name, so every panel agrees
const FRONT_COLORS = {
  "envoy-hunting": "#1f77b4", "envoy-least": "#17becf", "envoy-least-req": "#17becf", "envoy-random": "#9e9e9e",
  "haproxy-hunting": "#d62728", "haproxy-least": "#ff7f0e", "haproxy-leastconn": "#ff7f0e", "haproxy-random": "#bcbd22",
};

function colorOf(name, i) { return FRONT_COLORS[name] || COLORS[i % COLORS.length]; }

function legendOf(template, metric) {
  return template.replace(/\{\{(\w+)\}\}/g, (_, k) => metric[k] || "");
}

async function prom(path, params) {
  const r = await fetch("../api/v1/" + path + "?" + new URLSearchParams(params));
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  const j = await r.json();
  if (j.status !== "success") throw new Error(j.error || "query failed");
  return j.data.result;
}

function fmt(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  if (v === 0) return unit ? "0 " + unit : "0";
  if (Number.isInteger(v) && !unit) return String(v);  // counts (fronts, errors) as counts
  const a = Math.abs(v);
  const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
  return unit ? s + " " + unit : s;
}

function setupCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  g.font = "11px 'DejaVu Sans', sans-serif";
  return [g, w, h];
}

function drawLines(canvas, series, unit, t0, t1) {
  const [g, w, h] = setupCanvas(canvas);
  const L = 52, R = 8, T = 8, B = 20;
  let max = 0;
  for (const s of series) for (const [, v] of s.points) if (Number.isFinite(v)) max = Math.max(max, v);
  max = max > 0 ? max * 1.1 : 1;
  const x = t => L + (t - t0) / (t1 - t0) * (w - L - R);
  const y = v => T + (1 - v / max) * (h - T - B);
  g.strokeStyle = "#e3e6ea"; g.fillStyle = "#666"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    g.beginPath(); g.moveTo(L, y(v)); g.lineTo(w - R, y(v)); g.stroke();
    g.fillText(fmt(v, ""), 4, y(v) + 4);
  }
  for (let m = 0; m <= 5; m++) {
    const t = t0 + (t1 - t0) * m / 5;
    g.fillText("-" + Math.round((t1 - t) / 60 * 10) / 10 + " min", x(t) - 18, h - 5);
  }
  g.lineWidth = 1.8;
  for (const s of series) {
    g.strokeStyle = s.color; g.beginPath();
    let pen = false, prev = null;
    for (const [t, v] of s.points) {
      if (!Number.isFinite(v) || (prev !== null && t - prev > 10)) { pen = false; }
      if (Number.isFinite(v)) { pen ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v)); pen = true; }
      prev = t;
    }
    g.stroke();
  }
  if (!series.length) { g.fillStyle = "#888"; g.fillText("no data yet", w / 2 - 30, h / 2); }
}

function drawBars(canvas, bars, unit, maxHint) {
  const [g, w, h] = setupCanvas(canvas);
  const L = 8, T = 14, B = 30;
  let max = Math.max(maxHint || 0, ...bars.map(b => b.value), 1e-9);
  const n = Math.max(bars.length, 1), slot = (w - L * 2) / n, bw = Math.min(56, slot * 0.7);
  bars.forEach((b, i) => {
    const cx = L + slot * (i + 0.5), bh = (h - T - B) * b.value / max;
    g.fillStyle = b.color; g.fillRect(cx - bw / 2, h - B - bh, bw, bh);
    g.fillStyle = "#222"; g.textAlign = "center";
    g.fillText(fmt(b.value, ""), cx, h - B - bh - 3);
    g.fillStyle = "#666"; g.fillText(b.label, cx, h - B + 13);
  });
  g.textAlign = "left";
  if (maxHint) { g.fillStyle = "#888"; g.fillText("max " + fmt(maxHint, unit), 4, 11); }
  if (!bars.length) { g.fillStyle = "#888"; g.fillText("no backends scraped yet", w / 2 - 60, h / 2); }
}

function legendHtml(series) {
  return series.map(s => `<span><i style="background:${s.color}"></i>${s.name} <b>${fmt(s.last, "")}</b></span>`).join("");
}

async function renderLines(p, el, now, range) {
  const step = Math.max(2, Math.round(range / 200));
  const series = [];
  for (const q of p.queries) {
    const res = await prom("query_range", { query: q.expr, start: now - range, end: now, step });
    for (const r of res) {
      const name = legendOf(q.legend, r.metric);
      const points = r.values.map(([t, v]) => [t, parseFloat(v)]);
      series.push({ name, points, last: points.length ? points[points.length - 1][1] : NaN });
    }
  }
  series.sort((a, b) => a.name.localeCompare(b.name));
  series.forEach((s, i) => { s.color = colorOf(s.name, i); });
  drawLines(el.querySelector("canvas"), series, p.unit, now - range, now);
  el.querySelector(".legend").innerHTML = legendHtml(series);
}

async function renderBars(p, el) {
  const res = await prom("query", { query: p.queries[0].expr });
  const bars = res.map(r => ({ label: legendOf(p.queries[0].legend, r.metric).replace(/:\d+$/, ""), value: parseFloat(r.value[1]) }))
    .filter(b => Number.isFinite(b.value))
    .sort((a, b) => a.label.localeCompare(b.label, undefined, { numeric: true }));
  bars.forEach((b, i) => { b.color = COLORS[i % COLORS.length]; });
  let maxHint = 0;
  if (p.max_expr) { const m = await prom("query", { query: p.max_expr }); if (m.length) maxHint = parseFloat(m[0].value[1]); }
  drawBars(el.querySelector("canvas"), bars, p.unit, maxHint);
  el.querySelector(".legend").textContent = bars.length + " backends";
}

async function renderTable(p, el) {
  const rows = {};
  for (const [i, q] of p.queries.entries()) {
    for (const r of await prom("query", { query: q.expr })) {
      const key = r.metric[p.row_label];
      (rows[key] = rows[key] || {})[i] = parseFloat(r.value[1]);
    }
  }
  const names = Object.keys(rows).sort();
  const head = `<tr><th>${p.row_label}</th>` + p.queries.map(q => `<th>${q.legend}</th>`).join("") + "</tr>";
  const body = names.map(n => `<tr class="${n.endsWith("hunting") ? "hunting" : ""}"><td><i style="display:inline-block;width:10px;height:10px;background:${colorOf(n, 0)}"></i> ${n}</td>` +
    p.queries.map((_, i) => `<td>${fmt(rows[n][i], "")}</td>`).join("") + "</tr>").join("");
  el.querySelector(".body").innerHTML = names.length ? `<table>${head}${body}</table>` : `<div class="empty">no load window finished yet</div>`;
}

async function main() {
  const cfg = await (await fetch("panels.json")).json();
  document.getElementById("title").textContent = cfg.title;
  document.title = cfg.title;
  const root = document.getElementById("panels");
  const els = cfg.panels.map(p => {
    const s = document.createElement("section");
    s.id = "panel-" + p.id;
    s.innerHTML = `<h2>${p.title}</h2>` + (p.kind === "table" ? `<div class="body"></div>` : `<canvas></canvas><div class="legend"></div>`);
    root.appendChild(s);
    return s;
  });
  const status = document.getElementById("status");
  async function tick() {
    const now = Date.now() / 1000;
    const errors = [];
    await Promise.all(cfg.panels.map(async (p, i) => {
      try {
        if (p.kind === "lines") await renderLines(p, els[i], now, cfg.range_s);
        else if (p.kind === "bars") await renderBars(p, els[i]);
        else await renderTable(p, els[i]);
      } catch (e) { errors.push(p.id + ": " + e.message); }
    }));
    status.textContent = errors.length ? "errors: " + errors.join("; ") : "live, updated " + new Date().toLocaleTimeString();
    status.className = errors.length ? "bad" : "";
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }
  await tick();
  setInterval(tick, cfg.refresh_s * 1000);
}

main().catch(e => { const s = document.getElementById("status"); s.textContent = "error: " + e.message; s.className = "bad"; });
