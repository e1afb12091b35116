// Canvas plots uPlot does not draw: parallel coordinates, and many short lines (a sweep's intermediate
// values, one per trial). Drawn straight on a canvas: 1,000 trials are 1,000 paths, no DOM per line.

export interface Axis {
  name: string;
  /** A number per row, or a category (drawn at evenly spaced positions). */
  values: (number | string | boolean | null | undefined)[];
}

const PAD = { left: 48, right: 24, top: 34, bottom: 26 };

function canvas(target: HTMLElement, width: number, height: number): CanvasRenderingContext2D {
  const el = document.createElement("canvas");
  const ratio = window.devicePixelRatio || 1;
  el.width = width * ratio;
  el.height = height * ratio;
  el.style.width = `${width}px`;
  el.style.height = `${height}px`;
  target.replaceChildren(el);
  const ctx = el.getContext("2d")!;
  ctx.scale(ratio, ratio);
  return ctx;
}

function colours(): { ink: string; grid: string } {
  const dark = document.documentElement.dataset.theme === "dark";
  return { ink: dark ? "#c9d1d9" : "#333", grid: dark ? "#30363d" : "#d0d0d0" };
}

/** A value's colour on a blue (low) to orange (high) ramp. */
export function ramp(t: number, alpha = 0.7): string {
  const c = Math.max(0, Math.min(1, t));
  return `hsla(${Math.round(215 - c * 190)}, 80%, 50%, ${alpha})`;
}

/** Each axis scaled to 0..1: numbers by their range (log when `log` and all positive), categories evenly. */
function normalise(axis: Axis, log: boolean): { at: (v: Axis["values"][number]) => number | null; ticks: [number, string][] } {
  const numeric = axis.values.every((v) => v === null || v === undefined || typeof v === "number");
  if (!numeric) {
    const cats = [...new Set(axis.values.filter((v) => v !== null && v !== undefined).map(String))].sort();
    const pos = (i: number) => (cats.length === 1 ? 0.5 : i / (cats.length - 1));
    return { at: (v) => (v === null || v === undefined ? null : pos(cats.indexOf(String(v)))), ticks: cats.map((c, i) => [pos(i), c]) };
  }
  const nums = axis.values.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  const useLog = log && nums.length > 0 && nums.every((v) => v > 0);
  const f = (v: number) => (useLog ? Math.log10(v) : v);
  let lo = Math.min(...nums.map(f));
  let hi = Math.max(...nums.map(f));
  if (!nums.length) [lo, hi] = [0, 1];
  if (lo === hi) [lo, hi] = [lo - 1, hi + 1];
  const at = (v: Axis["values"][number]) => (typeof v === "number" && Number.isFinite(v) ? (f(v) - lo) / (hi - lo) : null);
  const show = (x: number) => (useLog ? 10 ** x : x);
  return { at, ticks: [[0, short(show(lo))], [1, short(show(hi))]] };
}

function short(v: number): string {
  return Math.abs(v) >= 1000 || Number.isInteger(v) ? String(v) : v.toPrecision(3);
}

/**
 * Parallel coordinates: one vertical axis per entry of `axes` (the last is the objective), one polyline per
 * row coloured by the objective; `highlight` (a row index) drawn last and thick.
 */
export function parallelCoordinates(target: HTMLElement, axes: Axis[], width: number, height: number, highlight: number | null, logAxes: Set<string>): void {
  const ctx = canvas(target, width, height);
  const { ink, grid } = colours();
  const scaled = axes.map((a) => normalise(a, logAxes.has(a.name)));
  const n = axes[0]?.values.length ?? 0;
  const xOf = (i: number) => PAD.left + (axes.length === 1 ? 0 : (i * (width - PAD.left - PAD.right)) / (axes.length - 1));
  const yOf = (t: number) => height - PAD.bottom - t * (height - PAD.top - PAD.bottom);
  const objective = scaled[scaled.length - 1];
  const line = (row: number) => {
    ctx.beginPath();
    let started = false;
    for (let a = 0; a < axes.length; a++) {
      const t = scaled[a].at(axes[a].values[row]);
      if (t === null) { started = false; continue; }
      if (started) ctx.lineTo(xOf(a), yOf(t));
      else ctx.moveTo(xOf(a), yOf(t));
      started = true;
    }
    ctx.stroke();
  };
  ctx.lineWidth = 1;
  for (let row = 0; row < n; row++) {
    if (row === highlight) continue;
    const t = objective.at(axes[axes.length - 1].values[row]);
    ctx.strokeStyle = t === null ? grid : ramp(t, 0.45);
    line(row);
  }
  if (highlight !== null && highlight < n) {
    ctx.lineWidth = 3;
    ctx.strokeStyle = "#d4a72c";
    line(highlight);
  }
  ctx.fillStyle = ink;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "center";
  axes.forEach((axis, a) => {
    ctx.strokeStyle = ink;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(xOf(a), yOf(0));
    ctx.lineTo(xOf(a), yOf(1));
    ctx.stroke();
    ctx.fillText(axis.name, xOf(a), 12);
    for (const [t, label] of scaled[a].ticks) ctx.fillText(label, xOf(a), Math.min(height - 4, yOf(t) + (t === 0 ? 14 : t === 1 ? -2 : 4)));
  });
}

export interface Line {
  xs: number[];
  ys: number[];
  colour: string;
  width?: number;
  /** Draw each point as a dot instead of joining them. */
  dots?: boolean;
}

/** Many lines on shared axes (x and y from the data's range), with axis labels. */
export function manyLines(target: HTMLElement, lines: Line[], width: number, height: number, xLabel: string, yLabel: string): void {
  const ctx = canvas(target, width, height);
  const { ink, grid } = colours();
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const l of lines) {
    for (const x of l.xs) { if (x < x0) x0 = x; if (x > x1) x1 = x; }
    for (const y of l.ys) { if (y < y0) y0 = y; if (y > y1) y1 = y; }
  }
  if (!Number.isFinite(x0)) [x0, x1, y0, y1] = [0, 1, 0, 1];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
  const X = (x: number) => PAD.left + ((x - x0) / (x1 - x0)) * (width - PAD.left - PAD.right);
  const Y = (y: number) => height - PAD.bottom - ((y - y0) / (y1 - y0)) * (height - PAD.top - PAD.bottom);
  ctx.strokeStyle = grid;
  ctx.strokeRect(PAD.left, PAD.top, width - PAD.left - PAD.right, height - PAD.top - PAD.bottom);
  for (const l of lines) {
    if (l.dots || l.xs.length === 1) {
      ctx.fillStyle = l.colour;
      l.xs.forEach((x, i) => ctx.fillRect(X(x) - 2, Y(l.ys[i]) - 2, 4, 4));
      continue;
    }
    ctx.strokeStyle = l.colour;
    ctx.lineWidth = l.width ?? 1;
    ctx.beginPath();
    l.xs.forEach((x, i) => (i ? ctx.lineTo(X(x), Y(l.ys[i])) : ctx.moveTo(X(x), Y(l.ys[i]))));
    ctx.stroke();
  }
  ctx.fillStyle = ink;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "left";
  ctx.fillText(short(y1), 2, PAD.top + 4);
  ctx.fillText(short(y0), 2, height - PAD.bottom);
  ctx.fillText(yLabel, PAD.left + 4, 14);
  ctx.textAlign = "center";
  ctx.fillText(`${xLabel} ${short(x0)} … ${short(x1)}`, width / 2, height - 6);
}
