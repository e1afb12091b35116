// Compare runs (#/compare?jobs=a,b,c; issue 27.2): loss and eval-loss overlaid (the job page's reduction:
// the API's min/max per bucket at 2 points per pixel), by step or by tokens; the config entries that
// differ; final metrics and cost side by side.
import uPlot from "uplot";
import type { Job } from "../actions";
import { clear, h } from "../dom";
import { duration, money, num } from "../format";
import { api } from "../ui";
import { statusBadge } from "./jobs";
import type { View } from "./view";

const PALETTE = ["#2f81f7", "#e36209", "#1a7f37", "#a371f7", "#cf222e", "#0598bc", "#bf8700", "#6e7781"];
const CONFIGS = ["training_config", "data_config", "resource_config", "output_config", "scheduling_config", "labels"];
export const MAX_COMPARED = 8;

type Point = Record<string, any>;

/** Every leaf of an object as a dotted key. */
export function flatten(value: unknown, prefix = "", out: Record<string, string> = {}): Record<string, string> {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) out[prefix] = JSON.stringify(value);
  return out;
}

/** The dotted keys whose values are not the same in every job (absent counts as a value). */
export function configDiff(jobs: Job[]): { key: string; values: (string | undefined)[] }[] {
  const flat = jobs.map((j) => flatten(Object.fromEntries(CONFIGS.map((c) => [c, j[c]]))));
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  return keys.map((key) => ({ key, values: flat.map((f) => f[key]) })).filter((row) => new Set(row.values).size > 1);
}

/**
 * Tokens per step when the points do not carry `tokens_seen` (only RLHF's do): batch size x sequence
 * length x gradient accumulation x GPUs, the most a step can see (padding included): an estimate.
 */
function tokensPerStep(job: Job): number {
  const hp = job.training_config?.hyperparameters ?? {};
  const accumulation = Number(hp.gradient_accumulation_steps) || 1;
  const devices = Math.max(1, Number(job.resource_config?.gpu_count) || 1) * Math.max(1, Number(job.resource_config?.instance_count) || 1);
  return (Number(job.data_config?.batch_size) || 1) * (Number(job.data_config?.max_seq_length) || 1) * accumulation * devices;
}

/** One aligned uPlot table: x, then loss and eval loss of each run (null where a run has no point). */
export function overlay(runs: { job: Job; points: Point[] }[], by: "step" | "tokens"): { data: uPlot.AlignedData; estimated: boolean } {
  let estimated = false;
  const rows = new Map<number, (number | null)[]>();
  runs.forEach(({ job, points }, r) => {
    const perStep = tokensPerStep(job);
    for (const p of points) {
      let x = p.step as number;
      if (by === "tokens") {
        if (typeof p.tokens_seen === "number") x = p.tokens_seen;
        else { x = p.step * perStep; estimated = true; }
      }
      let row = rows.get(x);
      if (!row) rows.set(x, (row = new Array(runs.length * 2).fill(null)));
      if (typeof p.loss === "number") row[2 * r] = p.loss;
      if (typeof p.eval_loss === "number") row[2 * r + 1] = p.eval_loss;
    }
  });
  const xs = [...rows.keys()].sort((a, b) => a - b);
  const data: (number | null)[][] = [xs];
  for (let s = 0; s < runs.length * 2; s++) data.push(xs.map((x) => rows.get(x)![s]));
  return { data: data as uPlot.AlignedData, estimated };
}

export function compareView(params: URLSearchParams): View {
  const ids = (params.get("jobs") ?? "").split(",").map((s) => s.trim()).filter(Boolean).slice(0, MAX_COMPARED);
  let by: "step" | "tokens" = params.get("by") === "tokens" ? "tokens" : "step";
  let chart: uPlot | null = null;
  let runs: { job: Job; points: Point[]; total: number }[] = [];
  const chartBox = h("div", { class: "chart", "data-testid": "compare-chart" });
  const note = h("p", { class: "small" });
  const align = h("select", { name: "align", "aria-label": "Align by" }, h("option", { value: "step", selected: by === "step" }, "by step"), h("option", { value: "tokens", selected: by === "tokens" }, "by tokens"));
  align.addEventListener("change", () => {
    by = align.value as "step" | "tokens";
    history.replaceState(null, "", `#/compare?jobs=${ids.map(encodeURIComponent).join(",")}${by === "tokens" ? "&by=tokens" : ""}`);
    draw();
  });
  const diffBox = h("div", { class: "table-wrap" });
  const finalBox = h("div", { class: "table-wrap" });

  function width(): number {
    return Math.max(280, Math.min(1100, (document.querySelector("#main")?.clientWidth ?? 1000) - 64));
  }

  function draw(): void {
    chart?.destroy();
    chart = null;
    const started = performance.now();
    const { data, estimated } = overlay(runs, by);
    const series: uPlot.Series[] = [{ label: by }];
    runs.forEach(({ job }, r) => {
      const colour = PALETTE[r % PALETTE.length];
      series.push({ label: `${job.name} loss`, stroke: colour, width: 1.5, spanGaps: true, points: { show: false } });
      series.push({ label: `${job.name} eval`, stroke: colour, width: 2, dash: [6, 4], spanGaps: true, points: { show: true, size: 4 } });
    });
    const dark = document.documentElement.dataset.theme === "dark";
    const axis = { stroke: dark ? "#c9d1d9" : "#333", grid: { stroke: dark ? "#30363d" : "#e5e5e5" } };
    clear(chartBox);
    chart = new uPlot({ width: width(), height: 300, scales: { x: { time: false } }, axes: [{ ...axis, label: estimated ? "tokens (estimated: batch × sequence length × accumulation × GPUs per step)" : by }, { ...axis, label: "loss" }], series }, data, chartBox);
    // Read by scripts/bench_dashboard.py.
    performance.measure("compare-chart", { start: started, end: performance.now() });
    chartBox.dataset.runs = String(runs.length);
    chartBox.dataset.points = String(runs.reduce((n, r) => n + r.total, 0));
    note.textContent = `${runs.map((r) => `${r.job.name}: ${r.total} points`).join("; ")}. Solid: loss; dashed: eval loss.`;
  }

  function renderTables(): void {
    const jobs = runs.map((r) => r.job);
    const head = h("thead", null, h("tr", null, h("th", { scope: "col" }, ""), jobs.map((j, r) => h("th", { scope: "col", style: { color: PALETTE[r % PALETTE.length] } }, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.name)))));
    const diff = configDiff(jobs);
    clear(diffBox, diff.length
      ? h("table", { class: "compact", "aria-label": "Config differences", "data-rows": diff.length }, head.cloneNode(true),
          h("tbody", null, diff.map((row) => h("tr", { "data-key": row.key }, h("th", { scope: "row", class: "mono" }, row.key), row.values.map((v) => h("td", { class: "mono" }, v ?? "—"))))))
      : h("p", { class: "empty" }, "The runs' configs are the same."));
    const lastEval = (points: Point[]) => [...points].reverse().find((p) => typeof p.eval_loss === "number")?.eval_loss;
    const rows: [string, (r: (typeof runs)[number]) => unknown][] = [
      ["Status", (r) => statusBadge(r.job.status)],
      ["Steps", (r) => `${r.job.progress?.step ?? 0}${r.job.progress?.total_steps ? ` of ${r.job.progress.total_steps}` : ""}`],
      ["Final loss", (r) => num(r.job.progress?.loss ?? [...r.points].reverse().find((p) => typeof p.loss === "number")?.loss)],
      ["Final eval loss", (r) => num(lastEval(r.points))],
      ["Best checkpoint", (r) => Object.entries((r.job.checkpoints ?? []).find((c: Job) => c.checkpoint_id === r.job.best_checkpoint_id)?.metrics ?? {}).map(([k, v]) => `${k} ${num(v)}`).join(", ") || "—"],
      ["Tokens/s", (r) => num(r.job.progress?.tokens_per_second)],
      ["Estimated cost", (r) => money(r.job.cost?.estimated_cost_usd)],
      ["GPU hours", (r) => num(r.job.cost?.gpu_hours)],
      ["Billable time", (r) => duration(r.job.cost?.billable_seconds)],
      ["Attempts", (r) => r.job.attempt],
    ];
    clear(finalBox, h("table", { class: "compact", "aria-label": "Final metrics and cost" }, head,
      h("tbody", null, rows.map(([label, cell]) => h("tr", { "data-row": label }, h("th", { scope: "row" }, label), runs.map((r) => { const v = cell(r); return h("td", null, v instanceof Node ? v : String(v ?? "—")); }))))));
  }

  async function load(): Promise<void> {
    const max = 2 * width();
    runs = await Promise.all(ids.map(async (id) => {
      const [job, metrics] = await Promise.all([api().get(`/jobs/${encodeURIComponent(id)}`), api().get(`/jobs/${encodeURIComponent(id)}/metrics`, { max_points: max })]);
      return { job, points: metrics.points, total: metrics.total_points ?? metrics.points.length };
    }));
  }

  return {
    title: "Compare runs",
    async render(main) {
      if (ids.length < 2) {
        clear(main, h("div", { class: "panel empty" }, h("h1", null, "Compare runs"), h("p", null, "Tick two or more jobs in the list (up to 8) and choose “Compare”."), h("a", { class: "button", href: "#/jobs" }, "Jobs")));
        return;
      }
      await load();
      clear(main, h("div", { class: "view-head" }, h("h1", null, `Compare ${runs.length} runs`), h("a", { class: "button", href: "#/jobs" }, "Jobs")),
        h("div", { class: "grid" },
          h("section", { class: "panel wide", "aria-labelledby": "h-curves" }, h("h2", { id: "h-curves" }, "Loss and eval loss"), h("div", { class: "log-tools" }, align), chartBox, note),
          h("section", { class: "panel wide", "aria-labelledby": "h-final" }, h("h2", { id: "h-final" }, "Final metrics and cost"), finalBox),
          h("section", { class: "panel wide", "aria-labelledby": "h-diff" }, h("h2", { id: "h-diff" }, "Config: what differs"), diffBox)));
      draw();
      renderTables();
    },
    dispose() {
      chart?.destroy();
    },
  };
}
