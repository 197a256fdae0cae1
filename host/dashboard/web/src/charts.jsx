// The task history's charts, drawn as inline SVG: executions that
// succeeded and failed per step, schedule-to-start latency (p50, p95) and
// the queue depth, over the last hour, day or week, of one lambda or of
// every lambda. Each chart has a title, labelled axes and a tooltip per
// point, and a table of the same numbers for screen readers and copying.
import { useState } from "preact/hooks";
import { call, num } from "./api.js";
import { Failure, useData } from "./ui.jsx";

const RANGES = [
  ["1h", 3_600_000],
  ["24h", 86_400_000],
  ["7d", 604_800_000],
];

const W = 420;
const H = 150;
const PAD = { left: 50, right: 8, top: 10, bottom: 30 };

/** A step's start as the axis reads it: time of day, or the date for a week. */
function label(ms, range) {
  const d = new Date(ms);
  const hm = `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
  return range > 86_400_000 ? `${d.getMonth() + 1}/${d.getDate()} ${hm}` : hm;
}

/** Milliseconds as a latency reads: 850 ms, 2.4 s, 3.1 min. */
export function latency(ms) {
  if (ms === undefined || ms === null) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

/** A round top for an axis holding `max`. */
function niceMax(max) {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

/** One chart: `series` are { name, cls, value(point), bars? }; bars stack. */
function Chart({ id, title, unit, points, series, range, format = String }) {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const n = points.length;
  const slot = plotW / Math.max(n, 1);
  const bars = series.filter((s) => s.bars);
  const lines = series.filter((s) => !s.bars);
  const stacked = points.map((p) => bars.reduce((sum, s) => sum + (s.value(p) ?? 0), 0));
  const lineMax = Math.max(0, ...points.flatMap((p) => lines.map((s) => s.value(p) ?? 0)));
  const top = niceMax(Math.max(lineMax, ...stacked));
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  const x = (i) => PAD.left + i * slot;
  const totals = Object.fromEntries(series.map((s) => [s.name,
    points.reduce((sum, p) => sum + (s.value(p) ?? 0), 0)]));
  const tip = (p) => `${label(num(p.atMs), range)} — ${series
    .map((s) => `${s.name}: ${s.value(p) === undefined ? "–" : format(s.value(p))}`).join(", ")}`;
  const ticks = n > 0 ? [0, Math.floor(n / 2), n - 1] : [];
  return (
    <figure class="chart" data-chart={id}
      {...Object.fromEntries(series.map((s) => [`data-${s.cls}`, totals[s.name]]))}>
      <figcaption>{title}
        <span class="legend">{series.map((s) => <span class={`key k-${s.cls}`}>{s.name}</span>)}</span>
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${id}-title ${id}-desc`}>
        <title id={`${id}-title`}>{title}</title>
        <desc id={`${id}-desc`}>{series.map((s) => `${s.name} ${s.bars ? "total" : "peak"} ${
          format(s.bars ? totals[s.name] : Math.max(0, ...points.map((p) => s.value(p) ?? 0)))}`).join("; ")}
          {`, ${n} points`}</desc>
        <line class="axis" x1={PAD.left} y1={PAD.top + plotH} x2={W - PAD.right} y2={PAD.top + plotH} />
        <line class="axis" x1={PAD.left} y1={PAD.top} x2={PAD.left} y2={PAD.top + plotH} />
        <line class="grid" x1={PAD.left} y1={y(top / 2)} x2={W - PAD.right} y2={y(top / 2)} />
        <text class="tick" x={PAD.left - 4} y={y(top) + 4} text-anchor="end">{format(top)}</text>
        <text class="tick" x={PAD.left - 4} y={y(top / 2) + 4} text-anchor="end">{format(top / 2)}</text>
        <text class="tick" x={PAD.left - 4} y={y(0) + 4} text-anchor="end">0</text>
        <text class="axis-label" x={9} y={PAD.top + plotH / 2} text-anchor="middle"
          transform={`rotate(-90 9 ${PAD.top + plotH / 2})`}>{unit}</text>
        {ticks.map((i) => (
          <text class="tick" x={x(i) + slot / 2} y={H - 14}
            text-anchor={i === 0 ? "start" : i === n - 1 ? "end" : "middle"}>{label(num(points[i].atMs), range)}</text>
        ))}
        <text class="axis-label" x={PAD.left + plotW / 2} y={H - 2} text-anchor="middle">time (local)</text>
        {points.map((p, i) => {
          let base = 0;
          return bars.map((s) => {
            const v = s.value(p) ?? 0;
            if (v === 0) return null;
            const rect = <rect class={`bar k-${s.cls}`} x={x(i) + slot * 0.1} width={Math.max(slot * 0.8, 0.8)}
              y={y(base + v)} height={y(base) - y(base + v)} />;
            base += v;
            return rect;
          });
        })}
        {lines.map((s) => {
          const pts = points.map((p, i) => [i, s.value(p)]).filter(([, v]) => v !== undefined);
          if (pts.length === 0) return null;
          const d = pts.map(([i, v], k) => `${k === 0 ? "M" : "L"}${(x(i) + slot / 2).toFixed(1)},${y(v).toFixed(1)}`).join("");
          return <>
            <path class={`line k-${s.cls}`} d={d} />
            {pts.length < 3 ? pts.map(([i, v]) => <circle class={`dot k-${s.cls}`} cx={x(i) + slot / 2} cy={y(v)} r="2.5" />) : null}
          </>;
        })}
        {points.map((p, i) => (
          <rect class="hover" x={x(i)} y={PAD.top} width={slot} height={plotH}><title>{tip(p)}</title></rect>
        ))}
      </svg>
    </figure>
  );
}

/** The history of `lambda` (every lambda when undefined), with its range switch. */
export function History({ lambda }) {
  const [range, setRange] = useState(RANGES[0][1]);
  const { data, error } = useData(
    () => call("taskHistory", { lambda: lambda ?? "", rangeMs: BigInt(range) }),
    [lambda, range],
    10_000,
  );
  const points = data?.points ?? [];
  const count = (field) => (p) => num(p[field]) ?? 0;
  const maybe = (field) => (p) => (p[field] === undefined ? undefined : num(p[field]));
  return (
    <section class="history" aria-label="Task history">
      <div class="history-head">
        <h2>History {lambda ? "" : <span class="muted">(every lambda)</span>}</h2>
        <div class="range" role="group" aria-label="Range">
          {RANGES.map(([name, ms]) => (
            <button type="button" class={range === ms ? "on" : ""} aria-pressed={range === ms}
              data-range={name} onClick={() => setRange(ms)}>{name}</button>
          ))}
        </div>
        {data ? <span class="muted">a point every {Number(data.stepMs) / 60_000} min</span> : null}
      </div>
      <Failure error={error} />
      <div class="charts">
        <Chart id={`executions-${lambda ?? "all"}`} title="Executions" unit="per step" points={points} range={range}
          series={[
            { name: "succeeded", cls: "ok", value: count("succeeded"), bars: true },
            { name: "failed", cls: "bad", value: count("failed"), bars: true },
          ]} />
        <Chart id={`latency-${lambda ?? "all"}`} title="Schedule → start latency" unit="latency" points={points}
          range={range} format={latency}
          series={[
            { name: "p50", cls: "p50", value: maybe("latencyP50Ms") },
            { name: "p95", cls: "p95", value: maybe("latencyP95Ms") },
          ]} />
        <Chart id={`depth-${lambda ?? "all"}`} title="Queue depth (due, waiting to start)" unit="tasks" points={points}
          range={range}
          series={[{ name: "depth", cls: "depth", value: maybe("depth") }]} />
      </div>
      <details class="history-table">
        <summary>The numbers, as a table</summary>
        <table>
          <thead><tr><th>From</th><th>Succeeded</th><th>Failed</th><th>Dead</th><th>Latency p50</th>
            <th>p95</th><th>p99</th><th>Depth</th></tr></thead>
          <tbody>
            {points.filter((p) => num(p.succeeded) || num(p.failed) || p.latencyP50Ms !== undefined || num(p.depth))
              .map((p) => (
                <tr>
                  <td>{label(num(p.atMs), range)}</td><td>{num(p.succeeded)}</td><td>{num(p.failed)}</td>
                  <td>{num(p.dead)}</td><td>{latency(p.latencyP50Ms)}</td><td>{latency(p.latencyP95Ms)}</td>
                  <td>{latency(p.latencyP99Ms)}</td><td>{p.depth === undefined ? "–" : num(p.depth)}</td>
                </tr>
              ))}
          </tbody>
        </table>
      </details>
    </section>
  );
}
