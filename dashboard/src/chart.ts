import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Point {
  step: number;
  loss?: number | null;
  eval_loss?: number | null;
}

/**
 * Min/max downsampling: at most 2 points per bucket (the bucket's lowest and highest, in step order), so a
 * 100,000-point curve draws from ~2 x buckets points and a spike still shows. Input sorted by x.
 */
export function downsample(xs: number[], ys: number[], buckets: number): [number[], number[]] {
  const n = xs.length;
  if (n <= buckets * 2) return [xs, ys];
  const outX: number[] = [];
  const outY: number[] = [];
  const size = n / buckets;
  for (let b = 0; b < buckets; b++) {
    const start = Math.floor(b * size);
    const end = Math.min(n, Math.floor((b + 1) * size));
    if (start >= end) continue;
    let lo = start;
    let hi = start;
    for (let i = start + 1; i < end; i++) {
      if (ys[i] < ys[lo]) lo = i;
      if (ys[i] > ys[hi]) hi = i;
    }
    const [first, second] = lo <= hi ? [lo, hi] : [hi, lo];
    outX.push(xs[first]);
    outY.push(ys[first]);
    if (second !== first) {
      outX.push(xs[second]);
      outY.push(ys[second]);
    }
  }
  return [outX, outY];
}

function series(points: Point[], key: "loss" | "eval_loss"): [number[], number[]] {
  const xs: number[] = [];
  const ys: number[] = [];
  for (const p of points) {
    const v = p[key];
    if (typeof v === "number" && Number.isFinite(v)) {
      xs.push(p.step);
      ys.push(v);
    }
  }
  return [xs, ys];
}

/** Aligned uPlot data [steps, loss, eval_loss] from the /metrics points, each series downsampled. */
export function chartData(points: Point[], buckets: number): uPlot.AlignedData {
  const sorted = points.slice().sort((a, b) => a.step - b.step);
  const [lx, ly] = downsample(...series(sorted, "loss"), buckets);
  const [ex, ey] = downsample(...series(sorted, "eval_loss"), buckets);
  const byStep = new Map<number, [number | null, number | null]>();
  lx.forEach((x, i) => byStep.set(x, [ly[i], null]));
  ex.forEach((x, i) => {
    const row = byStep.get(x);
    if (row) row[1] = ey[i];
    else byStep.set(x, [null, ey[i]]);
  });
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  return [steps, steps.map((s) => byStep.get(s)![0]), steps.map((s) => byStep.get(s)![1])];
}

export function lossChart(target: HTMLElement, points: Point[], width: number): uPlot {
  const dark = document.documentElement.dataset.theme === "dark";
  const axis = { stroke: dark ? "#c9d1d9" : "#333", grid: { stroke: dark ? "#30363d" : "#e5e5e5" } };
  const opts: uPlot.Options = {
    width,
    height: 260,
    scales: { x: { time: false } },
    axes: [{ ...axis, label: "step" }, { ...axis, label: "loss" }],
    series: [
      { label: "step" },
      { label: "loss", stroke: "#2f81f7", width: 1.5, spanGaps: true, points: { show: false } },
      { label: "eval loss", stroke: "#e36209", width: 2, spanGaps: true, points: { show: true, size: 5 } },
    ],
  };
  return new uPlot(opts, chartData(points, Math.max(100, Math.floor(width))), target);
}
