// The charts of /admin/v1/series: cost, requests, and errors with 429s per hour, as inline SVG
// bar charts, each with a text summary (what a screen reader reads, and the exact figures).
import { el, num, usd } from "./render.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 480;
const H = 170;
const PAD = { left: 52, right: 8, top: 10, bottom: 26 };

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function hourLabel(ms) {
  return `${String(new Date(ms).getHours()).padStart(2, "0")}:00`;
}

/** A bar chart of `series` (each: name and values per hour) over `hours`, grouped bars. */
function chart(id, title, hours, series, format) {
  const max = Math.max(0, ...series.flatMap((s) => s.values));
  const top = max > 0 ? max : 1;
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const slot = plotW / Math.max(1, hours.length);
  const bar = Math.max(1, (slot - 2) / series.length);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${id}-title ${id}-desc` });
  root.append(svg("title", { id: `${id}-title` }, title));
  const totals = series.map((s) => `${s.name} ${format(s.values.reduce((a, b) => a + b, 0))}`).join(", ");
  const busiest = max > 0 ? `; busiest hour ${format(max)}` : "";
  const summary = `Over ${hours.length} hours: ${totals}${busiest}.`;
  root.append(svg("desc", { id: `${id}-desc` }, summary));
  // Axes: zero and the maximum on the left, the first, middle and last hour below.
  const base = PAD.top + plotH;
  root.append(svg("line", { x1: PAD.left, y1: base, x2: W - PAD.right, y2: base, stroke: "#6b7280" }));
  root.append(svg("line", { x1: PAD.left, y1: PAD.top, x2: W - PAD.right, y2: PAD.top, stroke: "#e5e7eb" }));
  root.append(svg("text", { x: PAD.left - 4, y: base, "text-anchor": "end" }, format(0)));
  root.append(svg("text", { x: PAD.left - 4, y: PAD.top + 9, "text-anchor": "end" }, format(top)));
  for (const i of [0, Math.floor(hours.length / 2), hours.length - 1]) {
    if (i < 0 || i >= hours.length) continue;
    root.append(svg("text", { x: PAD.left + slot * i + slot / 2, y: H - 8, "text-anchor": "middle" }, hourLabel(hours[i])));
  }
  series.forEach((s, k) => {
    s.values.forEach((v, i) => {
      if (v <= 0) return;
      const h = Math.max(1, (v / top) * plotH);
      const rect = svg("rect", { class: `s${k}`, x: PAD.left + slot * i + 1 + bar * k, y: base - h, width: bar, height: h });
      rect.append(svg("title", {}, `${hourLabel(hours[i])}: ${s.name} ${format(v)}`));
      root.append(rect);
    });
  });
  const legend = series.length > 1
    ? el("p", { class: "legend" }, series.map((s, k) => el("span", {}, el("span", { class: `swatch s${k}`, "aria-hidden": "true" }), s.name)))
    : null;
  return el("figure", { id }, el("figcaption", {}, title), root, legend, el("p", {}, summary));
}

/** `/admin/v1/series`. */
export function renderCharts(body) {
  const note = document.getElementById("charts-note");
  const box = document.getElementById("charts");
  if (!body.usage) {
    note.textContent = "This gateway keeps no usage records (usage: none), so there is nothing to chart.";
    box.replaceChildren();
    return;
  }
  note.textContent = "Per hour, by the hour each request ended (your time zone). Errors: requests that failed; 429s: requests that failed for want of capacity (the provider's 429 or llmroute's own).";
  const hours = body.data.map((h) => h.start_ms);
  const ints = (n) => num(n);
  box.replaceChildren(
    chart("chart-cost", "Cost per hour", hours, [{ name: "cost", values: body.data.map((h) => h.cost_usd) }], usd),
    chart("chart-requests", "Requests per hour", hours, [{ name: "requests", values: body.data.map((h) => h.requests) }], ints),
    chart("chart-errors", "Errors and 429s per hour", hours, [
      { name: "errors", values: body.data.map((h) => h.errors) },
      { name: "429s", values: body.data.map((h) => h.limited) },
      { name: "provider 429s retried", values: body.data.map((h) => h.upstream_429) },
    ], ints));
}
