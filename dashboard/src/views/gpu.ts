// What the job's GPUs did (issue 27.3): GET /jobs/{id}/metrics/system, the trainer's NVML samples (every
// 10 s) per attempt and device: utilization and memory over time, the latest reading of each device; a job
// whose trainer had no NVML says so.
import uPlot from "uplot";
import { clear, h } from "../dom";
import { num } from "../format";
import { api } from "../ui";

const PALETTE = ["#2f81f7", "#e36209", "#1a7f37", "#a371f7", "#cf222e", "#0598bc", "#bf8700", "#6e7781"];

type Sample = { time: number; utilization_pct?: number | null; memory_used_mib?: number | null; memory_total_mib?: number | null; power_w?: number | null; sm_clock_mhz?: number | null };
type Device = { node: number; index: number; name?: string | null; samples: Sample[] };
type Attempt = { attempt: number; available: boolean; reason?: string | null; devices: Device[] };

/** [times, one series per device] aligned on the union of the sample times. */
export function gpuSeries(devices: Device[], value: (s: Sample) => number | null): uPlot.AlignedData {
  const times = [...new Set(devices.flatMap((d) => d.samples.map((s) => s.time)))].sort((a, b) => a - b);
  const at = new Map(times.map((t, i) => [t, i]));
  const series = devices.map((d) => {
    const ys: (number | null)[] = new Array(times.length).fill(null);
    for (const s of d.samples) ys[at.get(s.time)!] = value(s);
    return ys;
  });
  return [times, ...series] as uPlot.AlignedData;
}

export function gpuPanel(jobId: string) {
  const section = h("section", { class: "panel wide", "aria-labelledby": "h-gpu", "data-testid": "gpu-panel" });
  const charts: uPlot[] = [];

  function chart(box: HTMLElement, devices: Device[], label: string, value: (s: Sample) => number | null): void {
    const dark = document.documentElement.dataset.theme === "dark";
    const axis = { stroke: dark ? "#c9d1d9" : "#333", grid: { stroke: dark ? "#30363d" : "#e5e5e5" } };
    const width = Math.max(260, Math.min(1100, (section.clientWidth || 900) - 40));
    charts.push(new uPlot({
      width, height: 200, scales: { y: { range: label.endsWith("%") ? [0, 100] : undefined } },
      axes: [axis, { ...axis, label }],
      series: [{}, ...devices.map((d, i) => ({ label: `node ${d.node} GPU ${d.index}`, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true, points: { show: false } }))],
    }, gpuSeries(devices, value), box));
  }

  function render(attempts: Attempt[], sampleSeconds: number): void {
    charts.splice(0).forEach((c) => c.destroy());
    const latest = attempts[attempts.length - 1];
    section.hidden = false;
    if (!latest) {
      clear(section, h("h2", { id: "h-gpu" }, "GPUs"), h("p", { class: "empty", "data-gpu": "none" }, `No GPU sample yet: the trainer reports one every ${sampleSeconds} s while it runs on a GPU.`));
      return;
    }
    if (!latest.available) {
      clear(section, h("h2", { id: "h-gpu" }, "GPUs"), h("p", { class: "empty", "data-gpu": "unavailable" }, `No GPU telemetry for attempt ${latest.attempt}: ${latest.reason ?? "the trainer had no NVML (no GPU or no driver)"}.`));
      return;
    }
    const util = h("div", { class: "chart", "data-testid": "gpu-utilization" });
    const memory = h("div", { class: "chart", "data-testid": "gpu-memory" });
    const rows = latest.devices.map((d) => {
      const s = d.samples[d.samples.length - 1] ?? ({} as Sample);
      return h("tr", { "data-device": `${d.node}-${d.index}` },
        h("td", null, `node ${d.node} GPU ${d.index}`), h("td", null, d.name ?? "—"), h("td", { "data-col": "utilization" }, s.utilization_pct == null ? "—" : `${num(s.utilization_pct)}%`),
        h("td", null, s.memory_used_mib == null ? "—" : `${num(s.memory_used_mib)} / ${num(s.memory_total_mib)} MiB`),
        h("td", null, s.power_w == null ? "—" : `${num(s.power_w)} W`), h("td", null, s.sm_clock_mhz == null ? "—" : `${num(s.sm_clock_mhz)} MHz`));
    });
    clear(section,
      h("h2", { id: "h-gpu" }, `GPUs (attempt ${latest.attempt}, every ${sampleSeconds} s)`),
      h("h3", null, "Utilization (%)"), util,
      h("h3", null, "Memory used (MiB)"), memory,
      h("table", { class: "compact", "aria-label": "Latest GPU readings" },
        h("thead", null, h("tr", null, ["Device", "Name", "Utilization", "Memory", "Power", "SM clock"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", null, rows)));
    chart(util, latest.devices, "utilization %", (s) => s.utilization_pct ?? null);
    chart(memory, latest.devices, "MiB", (s) => s.memory_used_mib ?? null);
    section.dataset.devices = String(latest.devices.length);
  }

  async function load(maxSamples: number): Promise<void> {
    const answer = await api().get(`/jobs/${encodeURIComponent(jobId)}/metrics/system`, { max_samples: maxSamples });
    render(answer.attempts ?? [], answer.sample_seconds ?? 10);
  }

  section.hidden = true;
  return { section, load, dispose: () => charts.splice(0).forEach((c) => c.destroy()) };
}
