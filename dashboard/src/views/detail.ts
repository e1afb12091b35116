// Job details: every config, the status timeline, progress/ETA, checkpoints, placement, loss curves, cost, parent and
// child jobs, queue position; logs with a level filter, follow and download; the verbs.
import type uPlot from "uplot";
import { actionsFor, type Job } from "../actions";
import { lossChart } from "../chart";
import { clear, h } from "../dom";
import { absoluteTime, bytes, duration, MACHINE_LINE_PREFIXES, money, num, relativeTime, TERMINAL } from "../format";
import { api, toast } from "../ui";
import { priorityText, progressBar, statusBadge } from "./jobs";
import { positionText } from "./queues";
import { renderPlacement } from "./placement";
import { gpuPanel } from "./gpu";
import { WAIT_REASON_TEXT, waitBadge } from "./teams";
import { renderTracking } from "./tracking";
import type { View } from "./view";

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"] as const;
const LEVEL_RE = /\b(DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL|FATAL|Traceback)\b/;

/** A line written for the plane, not a person: a TRAINPLANE_EVENT report or a metric line. */
export function isMachineLine(message: string): boolean {
  const text = message.trimStart();
  return MACHINE_LINE_PREFIXES.some((prefix) => text.startsWith(prefix));
}

export function levelOf(message: string): string {
  const m = LEVEL_RE.exec(message);
  if (!m) return "INFO";
  const word = m[1];
  if (word === "WARN") return "WARNING";
  if (word === "CRITICAL" || word === "FATAL" || word === "Traceback") return "ERROR";
  return word;
}

function dl(rows: [string, unknown][]): HTMLElement {
  return h("dl", { class: "kv" }, rows.filter(([, v]) => v !== undefined).map(([k, v]) => [h("dt", null, k), h("dd", null, v instanceof Node ? v : v === null || v === "" ? "—" : String(v))]));
}

export function detailView(jobId: string): View {
  let job: Job | null = null;
  let points: any[] = [];
  let totalPoints = 0; // how many the job has: the API sends at most ~2 per pixel of the chart (max_points)
  let chart: uPlot | null = null;
  let logLines: { attempt: number; message: string; timestamp: number; stream?: string | null }[] = [];
  let logsSince: number | undefined;
  let level = "ALL";
  let streamShown = "ALL";
  let follow = true;
  let machineShown = false;

  const head = h("div", { class: "view-head" });
  const actionBar = h("div", { class: "action-bar", role: "toolbar", "aria-label": "Job actions" });
  const overview = h("section", { class: "panel", "aria-labelledby": "h-overview" });
  const progress = h("section", { class: "panel", "aria-labelledby": "h-progress" });
  const chartBox = h("div", { class: "chart", "data-testid": "loss-chart" });
  const chartNote = h("p", { class: "muted" });
  const checkpoints = h("section", { class: "panel", "aria-labelledby": "h-checkpoints" });
  const tracking = h("section", { class: "panel", "aria-labelledby": "h-tracking", hidden: true });
  const placement = h("section", { class: "panel", "aria-labelledby": "h-placement", hidden: true });
  const timeline = h("section", { class: "panel", "aria-labelledby": "h-timeline" });
  const cost = h("section", { class: "panel", "aria-labelledby": "h-cost" });
  const related = h("section", { class: "panel", "aria-labelledby": "h-related" });
  const configs = h("section", { class: "panel wide", "aria-labelledby": "h-configs" });
  const gpu = gpuPanel(jobId);
  const logBox = h("pre", { class: "logs", tabindex: "0", "aria-label": "Log lines", "data-testid": "logs" });
  const levelSelect = h("select", { "aria-label": "Log level", name: "level" }, h("option", { value: "ALL" }, "All levels"), LEVELS.map((l) => h("option", { value: l }, `${l} and above`)));
  const followBox = h("input", { type: "checkbox", name: "follow", checked: true });
  levelSelect.addEventListener("change", () => { level = levelSelect.value; renderLogs(); });
  // stdout / stderr: known for local runs; SageMaker and EC2 merge the two (the lines say no stream).
  const streamSelect = h("select", { "aria-label": "Log stream", name: "stream" }, h("option", { value: "ALL" }, "All streams"), h("option", { value: "stdout" }, "stdout"), h("option", { value: "stderr" }, "stderr"));
  streamSelect.addEventListener("change", () => { streamShown = streamSelect.value; renderLogs(); });
  followBox.addEventListener("change", () => { follow = followBox.checked; });
  const download = h("button", { onclick: () => downloadLogs() }, "Download");
  // The trainer's reports and metric lines are for the plane; a person reads the rest (issue 27.5).
  const machineBox = h("input", { type: "checkbox", name: "machine_lines" });
  machineBox.addEventListener("change", () => { machineShown = machineBox.checked; renderLogs(); });

  function renderHead(j: Job): void {
    clear(
      head,
      h("div", null, h("a", { href: "#/jobs", class: "back" }, "← Jobs"), h("h1", null, j.name, " ", statusBadge(j.status))),
      h("div", { class: "head-links" },
        h("a", { class: "button", href: `#/create?from=${encodeURIComponent(j.job_id)}` }, "Duplicate"),
        h("a", { class: "button", href: `#/sweeps/new?from=${encodeURIComponent(j.job_id)}`, "data-testid": "sweep-from-job" }, "Sweep from this job")),
    );
    const actions = actionsFor(j, (what, child) => {
      toast(`${j.name}: ${what}`);
      if (what === "deleted") location.hash = "#/jobs";
      else if (child) location.hash = `#/jobs/${encodeURIComponent(child.job_id)}`;
      else void refresh();
    });
    clear(
      actionBar,
      actions.map((a) =>
        h("span", { class: "action", title: a.disabledReason ?? "" },
          h("button", { "data-action": a.id, disabled: a.disabledReason !== null, class: a.id === "delete" || a.id === "cancel" ? "danger-outline" : "", onclick: () => void a.run(), "aria-describedby": a.disabledReason ? `why-${a.id}` : null }, a.label)),
      ),
      h("ul", { class: "reasons" }, actions.filter((a) => a.disabledReason).map((a) => h("li", { id: `why-${a.id}`, "data-reason-for": a.id }, h("strong", null, `${a.label}: `), a.disabledReason))),
    );
  }

  function renderOverview(j: Job): void {
    const waiting = j.status === "QUEUED" || j.status === "PENDING";
    clear(
      overview,
      h("h2", { id: "h-overview" }, "Basic information"),
      dl([
        ["Job id", j.job_id],
        ["Description", j.description],
        ["Type", j.training_config?.training_type],
        ["Priority", priorityText(j)],
        ["Experiment", j.labels?.experiment],
        ...(j.labels?.sweep_id ? ([["Sweep", h("a", { href: `#/sweeps/${encodeURIComponent(j.labels.sweep_id)}` }, `${j.labels.sweep_id} (trial ${j.labels.trial ?? "?"})`)]] as [string, unknown][]) : []),
        ["Labels", Object.entries(j.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(", ")],
        ["Queue", j.scheduling_config?.queue],
        ["Owner", j.owner],
        ["Created", h("time", { datetime: j.created_at, title: absoluteTime(j.created_at) }, `${relativeTime(j.created_at)} (${absoluteTime(j.created_at)})`)],
        ["Attempt", j.attempt],
        ...(waiting ? ([["Queue position", j.queue_position === null || j.queue_position === undefined ? "—" : `${positionText(j.queue_position)} (1 = next)`], ["Estimated wait", duration(j.estimated_wait_seconds)], ["Waiting because", j.wait_reason ? h("span", null, waitBadge(j), ` ${WAIT_REASON_TEXT[j.wait_reason as keyof typeof WAIT_REASON_TEXT] ?? ""}`) : j.pending_reason]] as [string, unknown][]) : []),
        ...(j.error_type ? ([["Error", `${j.error_type}: ${j.error_message ?? ""}`]] as [string, unknown][]) : []),
      ]),
    );
    overview.dataset.status = j.status;
  }

  function renderProgress(j: Job): void {
    const p = j.progress ?? {};
    clear(
      progress,
      h("h2", { id: "h-progress" }, "Progress"),
      progressBar(j),
      dl([
        ["Step", `${p.step ?? 0}${p.total_steps ? ` of ${p.total_steps}` : ""}`],
        ["Epoch", num(p.epoch)],
        ["Loss", num(p.loss)],
        ["Tokens/s", num(p.tokens_per_second)],
        ["ETA", TERMINAL.has(j.status) ? "—" : duration(p.eta_seconds)],
      ]),
      h("h3", null, "Loss and eval loss"),
      chartBox,
      chartNote,
    );
  }

  function renderChart(): void {
    chart?.destroy();
    chart = null;
    const usable = points.filter((p) => typeof p.loss === "number" || typeof p.eval_loss === "number");
    if (!usable.length) {
      chartBox.dataset.points = "0";
      clear(chartBox, h("p", { class: "empty" }, "No metrics yet: the curve appears with the first logged step."));
      return;
    }
    clear(chartBox);
    const width = chartWidth();
    const started = performance.now();
    chart = lossChart(chartBox, usable, width);
    // Read by scripts/bench_dashboard.py: the downsampling and drawing alone.
    performance.measure("loss-chart", { start: started, end: performance.now() });
    const total = Math.max(totalPoints, usable.length);
    chartBox.dataset.points = String(total);
    chartNote.textContent = `${total} points${total > chart.data[0].length ? ` (drawn min/max per pixel: ${chart.data[0].length} points)` : ""}.`;
  }

  /** The chart's width in pixels; before the first render, the width it will get (the page's). */
  function chartWidth(): number {
    const room = chartBox.parentElement?.clientWidth ?? Math.min(document.documentElement.clientWidth, 1200) - 64;
    return Math.max(280, Math.min(900, room - 24));
  }

  /** The job's metric points, reduced by the API to ~2 per pixel of the chart (min/max per bucket). */
  function fetchMetrics(): Promise<any> {
    return api().get(`/jobs/${encodeURIComponent(jobId)}/metrics`, { max_points: 2 * chartWidth() });
  }

  function renderCheckpoints(j: Job): void {
    const list: Job[] = (j.checkpoints ?? []).slice().sort((a: Job, b: Job) => a.step - b.step);
    clear(
      checkpoints,
      h("h2", { id: "h-checkpoints" }, `Checkpoints (${list.length})`),
      list.length
        ? h("table", { class: "compact" },
            h("thead", null, h("tr", null, ["Step", "Saved", "Metrics", "Best", "Size", "Attempt", "Location"].map((t) => h("th", null, t)))),
            h("tbody", null, list.map((c) =>
              h("tr", { "data-checkpoint-id": c.checkpoint_id },
                h("td", null, c.step),
                h("td", null, c.created_at ? h("time", { title: absoluteTime(c.created_at) }, relativeTime(c.created_at)) : "—"),
                h("td", null, Object.entries(c.metrics ?? {}).map(([k, v]) => `${k} ${num(v)}`).join(", ") || "—"),
                h("td", null, c.checkpoint_id === j.best_checkpoint_id ? h("span", { class: "badge badge-ok" }, "best") : c.checkpoint_id === j.latest_checkpoint_id ? "latest" : ""),
                h("td", { "data-size": c.size_bytes ?? "" }, bytes(c.size_bytes)),
                h("td", null, c.attempt),
                h("td", { class: "mono small" }, c.uri)))))
        : h("p", { class: "empty" }, "No checkpoint yet."),
    );
  }

  function renderTimeline(events: Job[]): void {
    clear(
      timeline,
      h("h2", { id: "h-timeline" }, "Status timeline"),
      h("ol", { class: "timeline" }, events.map((e) =>
        h("li", null,
          h("time", { datetime: e.at, title: absoluteTime(e.at) }, absoluteTime(e.at)), " ",
          e.from ? [statusBadge(e.from), " → "] : null, statusBadge(e.to),
          e.reason ? h("span", { class: "reason" }, ` ${e.reason}`) : null,
          e.actor ? h("span", { class: "actor" }, ` by ${e.actor}`) : null))),
    );
  }

  function renderCost(j: Job): void {
    const c = j.cost ?? {};
    clear(
      cost,
      h("h2", { id: "h-cost" }, "Cost"),
      dl([["Estimated total", money(c.estimated_cost_usd)], ["GPU hours", num(c.gpu_hours)], ["Billable time", duration(c.billable_seconds)], ["Spot savings", money(c.spot_savings_usd)], ["Budget", j.scheduling_config?.max_cost_usd ? money(j.scheduling_config.max_cost_usd) : "none"]]),
      (c.attempts ?? []).length
        ? h("table", { class: "compact" },
            h("thead", null, h("tr", null, ["Attempt", "Instance", "Run time", "Cost"].map((t) => h("th", null, t)))),
            h("tbody", null, c.attempts.map((a: Job) => h("tr", null, h("td", null, a.attempt), h("td", null, `${a.instance_count ?? 1} × ${a.instance_type ?? "local"}${a.spot ? " (spot)" : ""}`), h("td", null, duration(a.run_seconds)), h("td", null, money(a.estimated_cost_usd))))))
        : h("p", { class: "empty" }, "No run has ended yet."),
    );
  }

  async function renderRelated(j: Job): Promise<void> {
    const same = await api().get("/jobs", { name: j.name, limit: 200 });
    const children: Job[] = same.jobs.filter((c: Job) => c.parent_job_id === j.job_id);
    clear(
      related,
      h("h2", { id: "h-related" }, "Parent and child jobs"),
      dl([["Parent", j.parent_job_id ? h("a", { href: `#/jobs/${encodeURIComponent(j.parent_job_id)}` }, j.parent_job_id) : "none (an original submission)"]]),
      children.length
        ? h("ul", null, children.map((c) => h("li", null, h("a", { href: `#/jobs/${encodeURIComponent(c.job_id)}` }, c.job_id), " ", statusBadge(c.status))))
        : h("p", { class: "empty" }, "No retries of this job."),
    );
  }

  function renderConfigs(j: Job): void {
    clear(
      configs,
      h("h2", { id: "h-configs" }, "Configuration"),
      ["training_config", "data_config", "resource_config", "output_config", "scheduling_config"].map((k) =>
        h("details", { open: k === "training_config" }, h("summary", null, k), h("pre", { class: "mono" }, JSON.stringify(j[k], null, 2)))),
    );
  }

  function shownLines() {
    const min = LEVELS.indexOf(level as (typeof LEVELS)[number]);
    return logLines.filter(
      (l) => (machineShown || !isMachineLine(l.message)) && (streamShown === "ALL" || l.stream === streamShown) && (level === "ALL" || LEVELS.indexOf(levelOf(l.message) as (typeof LEVELS)[number]) >= min),
    );
  }

  function renderLogs(): void {
    const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
    const lines = shownLines();
    // stdout lines as plain text, stderr lines marked (a tag and a colour): one node per run of lines.
    const nodes: Node[] = [];
    let plain = "";
    for (const l of lines) {
      if (l.stream === "stderr") {
        if (plain) nodes.push(document.createTextNode(plain));
        plain = "";
        nodes.push(h("span", { class: "log-stderr", "data-stream": "stderr" }, `[${l.attempt} stderr] ${l.message}`), document.createTextNode("\n"));
      } else plain += `[${l.attempt}] ${l.message}\n`;
    }
    if (plain) nodes.push(document.createTextNode(plain));
    if (lines.length) logBox.replaceChildren(...nodes);
    else logBox.textContent = logLines.length ? "(no line matches the filters)" : "(no log lines)";
    logBox.dataset.lines = String(lines.length);
    logBox.dataset.hidden = String(logLines.length - lines.length);
    if (follow && atBottom) logBox.scrollTop = logBox.scrollHeight;
  }

  async function loadLogs(): Promise<void> {
    let token: string | undefined;
    for (let i = 0; i < 20; i++) {
      const page = await api().get(`/jobs/${encodeURIComponent(jobId)}/logs`, { since: logsSince, next_token: token, limit: 5000 });
      const seen = new Set(logLines.slice(-200).map((l) => `${l.timestamp}|${l.message}`));
      for (const line of page.lines) if (!seen.has(`${line.timestamp}|${line.message}`)) logLines.push(line);
      token = page.next_token ?? undefined;
      if (!token) break;
    }
    if (logLines.length) logsSince = logLines[logLines.length - 1].timestamp;
    renderLogs();
  }

  function downloadLogs(): void {
    const text = logLines.map((l) => `${new Date(l.timestamp * 1000).toISOString()} [attempt ${l.attempt}${l.stream === "stderr" ? " stderr" : ""}] ${l.message}`).join("\n") + "\n";
    const url = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
    const a = h("a", { href: url, download: `${jobId}.log` });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  async function refresh(): Promise<void> {
    const wasTerminal = job !== null && TERMINAL.has(job.status);
    // The curve's points come with the job, not after it: a long curve costs one round trip, not two.
    const wantMetrics = job === null || !wasTerminal;
    const [j, events, fetched] = await Promise.all([
      api().get(`/jobs/${encodeURIComponent(jobId)}`),
      api().get(`/jobs/${encodeURIComponent(jobId)}/events`),
      wantMetrics ? fetchMetrics() : Promise.resolve(null),
    ]);
    const changed = !job || job.version !== j.version || job.status !== j.status;
    job = j;
    if (changed || !wasTerminal) {
      const metrics = fetched ?? (await fetchMetrics());
      const total = metrics.total_points ?? metrics.points.length;
      const moved = total !== totalPoints || metrics.points.length !== points.length;
      points = metrics.points;
      totalPoints = total;
      renderProgress(j);
      if (moved || !chart) renderChart();
      await gpu.load(Math.max(100, chartWidth()));
    }
    if (changed) {
      // Only when the job changed: a focused button or an open <details> is not reset every tick.
      renderHead(j);
      renderOverview(j);
      renderCheckpoints(j);
      renderTracking(tracking, j);
      renderPlacement(placement, j);
      renderTimeline(events.events);
      renderCost(j);
      renderConfigs(j);
      await renderRelated(j);
    }
    if (follow || !logLines.length) await loadLogs();
  }

  return {
    title: "Job",
    async render(main) {
      clear(
        main,
        head,
        actionBar,
        h("div", { class: "grid" },
          overview, progress, gpu.section, checkpoints, tracking, placement, timeline, cost, related,
          h("section", { class: "panel wide", "aria-labelledby": "h-logs" },
            h("h2", { id: "h-logs" }, "Logs"),
            h("div", { class: "log-tools" }, levelSelect, streamSelect, h("label", { class: "check" }, followBox, " Follow"), h("label", { class: "check", title: "TRAINPLANE_EVENT reports and metric lines" }, machineBox, " Machine lines"), download),
            logBox),
          configs),
      );
      await refresh();
    },
    refresh,
    dispose() {
      chart?.destroy();
      gpu.dispose();
    },
  };
}
