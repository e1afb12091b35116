// Sweeps (issue 27.1): the list, and a sweep's page: trials table with the best highlighted, optimization
// history (value per trial and the running best), parallel coordinates, intermediate values (what pruning
// saw), pause / resume / cancel.
import { clear, h } from "../dom";
import { absoluteTime, num, relativeTime, SWEEP_TERMINAL, type TRIAL_STATES } from "../format";
import { manyLines, parallelCoordinates, ramp, type Line } from "../plots";
import { api, dialog, field, reportError, toast } from "../ui";
import { statusBadge } from "./jobs";
import type { View } from "./view";

type Sweep = Record<string, any>;
type Trial = Record<string, any>;

const TRIAL_FAMILY: Record<(typeof TRIAL_STATES)[number], string> = { COMPLETE: "ok", PRUNED: "muted", FAIL: "bad", RUNNING: "run", SUBMITTING: "wait" };

const COUNTED = 50;

function trialBadge(state: string): HTMLElement {
  return h("span", { class: `badge badge-${TRIAL_FAMILY[state as (typeof TRIAL_STATES)[number]] ?? "muted"}`, "data-state": state }, state);
}

function config(s: Sweep): Record<string, any> {
  return s.hyperParameterTuningConfig ?? {};
}

function trialsDone(s: Sweep): string {
  const c = s.counts ?? {};
  return `${(c.completed ?? 0) + (c.pruned ?? 0) + (c.failed ?? 0)} / ${config(s).maxTrials ?? "?"}`;
}

export function sweepsView(): View {
  const body = h("div", { class: "table-wrap" });
  const ended = new Map<string, Sweep>();
  async function load(): Promise<void> {
    const sweeps: Sweep[] = [];
    let token: string | undefined;
    for (let i = 0; i < 5; i++) {
      const page = await api().get("/sweeps", { limit: 200, next_token: token });
      sweeps.push(...page.sweeps);
      token = page.next_token ?? undefined;
      if (!token) break;
    }
    // GET /sweeps leaves the trial counts at zero (they are counted from the trials, which a listing does
    // not read): ask each of the first COUNTED sweeps for its own.
    // An ended sweep's counts do not change: asked once, not every refresh.
    const counted = await Promise.all(sweeps.slice(0, COUNTED).map((s) => {
      const known = ended.get(s.sweep_id);
      if (known && known.version === s.version) return known;
      return api().get(`/sweeps/${encodeURIComponent(s.sweep_id)}`).catch(() => s);
    }));
    counted.forEach((s, i) => {
      sweeps[i] = s;
      if (SWEEP_TERMINAL.has(s.status)) ended.set(s.sweep_id, { ...s, trials: [] });
    });
    if (!sweeps.length) {
      clear(body, h("div", { class: "empty" }, h("p", null, "No sweeps yet. Open a job and choose “Sweep from this job” to search its hyperparameters.")));
      return;
    }
    clear(
      body,
      h("table", { class: "jobs", "aria-label": "Sweeps" },
        h("thead", null, h("tr", null, ["Sweep", "Status", "Method", "Metric", "Trials done", "Best value", "Created"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", null, sweeps.map((s) =>
          h("tr", { "data-sweep-id": s.sweep_id },
            h("td", { class: "job-name" }, h("a", { href: `#/sweeps/${encodeURIComponent(s.sweep_id)}` }, s.name), h("small", null, s.sweep_id)),
            h("td", null, statusBadge(s.status)),
            h("td", null, config(s).method),
            h("td", null, `${config(s).metric?.name ?? ""} (${config(s).metric?.goal ?? ""})`),
            h("td", { "data-testid": "trials-done" }, sweeps.indexOf(s) < COUNTED ? trialsDone(s) : "—"),
            h("td", { "data-testid": "best-value" }, s.best_trial ? num(s.best_trial.value) : "—"),
            h("td", null, h("time", { datetime: s.created_at, title: absoluteTime(s.created_at) }, relativeTime(s.created_at))))))),
    );
  }
  return {
    title: "Sweeps",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Sweeps")), body);
      await load();
    },
    refresh: load,
  };
}

/** The sweep's parameter names, in the config's order. */
function paramNames(s: Sweep): string[] {
  const declared = Object.keys(config(s).parameters ?? {});
  const seen = new Set(declared);
  for (const t of s.trials ?? []) for (const k of Object.keys(t.params ?? {})) if (!seen.has(k)) { seen.add(k); declared.push(k); }
  return declared;
}

/** The step a pruned trial stopped at: its last intermediate value's step. */
export function prunedAt(t: Trial): number | null {
  if (t.state !== "PRUNED") return null;
  const steps = Object.keys(t.intermediate_values ?? {}).map(Number).filter(Number.isFinite);
  return steps.length ? Math.max(...steps) : null;
}

/** Each finished trial's value in trial order and the best so far (by the goal). */
export function history(trials: Trial[], goal: string): { xs: number[]; ys: number[]; best: number[] } {
  const done = trials.filter((t) => typeof t.value === "number").sort((a, b) => a.number - b.number);
  const better = (a: number, b: number) => (goal === "maximize" ? a > b : a < b);
  const xs: number[] = [], ys: number[] = [], best: number[] = [];
  for (const t of done) {
    xs.push(t.number);
    ys.push(t.value);
    best.push(best.length && !better(t.value, best[best.length - 1]) ? best[best.length - 1] : t.value);
  }
  return { xs, ys, best };
}

const TRIALS_PAGE = 100;

export function sweepView(sweepId: string): View {
  let sweep: Sweep | null = null;
  let trialsPage = 0;
  const head = h("div", { class: "view-head" });
  const actions = h("div", { class: "action-bar", role: "toolbar", "aria-label": "Sweep actions" });
  const summary = h("section", { class: "panel", "aria-labelledby": "h-sweep" });
  const historyBox = h("div", { class: "chart", "data-testid": "history-chart" });
  const parallelBox = h("div", { class: "chart", "data-testid": "parallel-chart" });
  const intermediateBox = h("div", { class: "chart", "data-testid": "intermediate-chart" });
  const trialsBox = h("div", { class: "table-wrap" });

  /** A chart's width: its panel's (the history sits in a half-width panel, the others span the page). */
  function width(box: HTMLElement): number {
    return Math.max(260, Math.min(1100, (box.parentElement?.clientWidth ?? 600) - 40));
  }

  function verb(label: string, path: string, danger: boolean, explain: string): HTMLButtonElement {
    return h("button", {
      "data-action": path, class: danger ? "danger-outline" : "",
      onclick: () => {
        const reason = h("input", { name: "reason", maxlength: "1024" });
        void dialog({
          title: `${label} ${sweep!.name}?`,
          body: [h("p", null, explain), field("Reason (recorded)", reason)],
          confirm: label,
          danger,
          onConfirm: async () => {
            await api().post(`/sweeps/${encodeURIComponent(sweepId)}/${path}`, reason.value ? { reason: reason.value } : {});
          },
        }).then(async (done) => { if (done) { toast(`${label}: ${sweep!.name}`); await refresh(true); } }).catch((e) => reportError(e));
      },
    }, label);
  }

  function render(s: Sweep): void {
    const c = config(s);
    const terminal = SWEEP_TERMINAL.has(s.status);
    clear(head, h("h1", null, s.name, " ", statusBadge(s.status)), h("a", { class: "button", href: "#/sweeps" }, "All sweeps"));
    clear(actions,
      s.status === "RUNNING" ? verb("Pause", "pause", false, "No new trial starts; the running ones finish.") : null,
      s.status === "PAUSED" ? verb("Resume", "resume", false, "New trials start again.") : null,
      !terminal ? verb("Cancel", "cancel", true, "The sweep ends as CANCELLED and its running trials are stopped.") : null);
    const counts = s.counts ?? {};
    clear(summary,
      h("h2", { id: "h-sweep" }, "Sweep"),
      h("dl", { class: "kv" },
        ...([
          ["Sweep id", s.sweep_id], ["Method", c.method], ["Metric", `${c.metric?.name} (${c.metric?.goal})`],
          ["Trials done", trialsDone(s)], ["Running", counts.running ?? 0], ["Completed", counts.completed ?? 0], ["Pruned", counts.pruned ?? 0], ["Failed", counts.failed ?? 0],
          ["Parallel", c.maxParallelTrials], ["Best value", s.best_trial ? `${num(s.best_trial.value)} (trial ${s.best_trial.number})` : "—"],
          ["Status reason", s.status_reason], ["Created", absoluteTime(s.created_at)],
        ] as [string, unknown][]).flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v === null || v === undefined || v === "" ? "—" : String(v))])),
      h("details", null, h("summary", null, "OME config (hyperParameterTuningConfig)"), h("pre", { class: "mono" }, JSON.stringify(c, null, 2))));
    drawCharts(s);
    renderTrials(s);
  }

  function drawCharts(s: Sweep): void {
    const started = performance.now();
    const c = config(s);
    const trials: Trial[] = s.trials ?? [];
    const { xs, ys, best } = history(trials, c.metric?.goal);
    historyBox.dataset.points = String(xs.length);
    if (xs.length) {
      manyLines(historyBox, [
        { xs, ys, colour: "rgba(47,129,247,0.8)", dots: true },
        { xs, ys: best, colour: "#e36209", width: 2 },
      ], width(historyBox), 240, "trial", `${c.metric?.name} (dots) and the best so far (line)`);
    } else clear(historyBox, h("p", { class: "empty" }, "No trial has finished yet."));
    const names = paramNames(s);
    const withValue = trials.filter((t) => typeof t.value === "number");
    parallelBox.dataset.lines = String(withValue.length);
    if (withValue.length && names.length) {
      const axes = [...names.map((n) => ({ name: n, values: withValue.map((t) => t.params?.[n]) })), { name: c.metric?.name ?? "value", values: withValue.map((t) => t.value) }];
      const logAxes = new Set(Object.entries(c.parameters ?? {}).filter(([, spec]: [string, any]) => spec?.scale === "log").map(([n]) => n));
      const bestAt = withValue.findIndex((t) => t.number === s.best_trial?.number);
      parallelCoordinates(parallelBox, axes, width(parallelBox), 280, bestAt >= 0 ? bestAt : null, logAxes);
    } else clear(parallelBox, h("p", { class: "empty" }, "Parameters against the value appear with the first finished trial."));
    const lines: Line[] = [];
    const values = trials.map((t) => t.value).filter((v): v is number => typeof v === "number");
    const [lo, hi] = [Math.min(...values), Math.max(...values)];
    for (const t of trials) {
      const steps = Object.keys(t.intermediate_values ?? {}).map(Number).sort((a, b) => a - b);
      if (!steps.length) continue;
      const shade = typeof t.value === "number" && hi > lo ? (t.value - lo) / (hi - lo) : 0.5;
      lines.push({ xs: steps, ys: steps.map((k) => t.intermediate_values[String(k)]), colour: t.state === "PRUNED" ? "rgba(140,140,140,0.6)" : ramp(shade, 0.6), width: t.number === s.best_trial?.number ? 3 : 1 });
    }
    intermediateBox.dataset.lines = String(lines.length);
    if (lines.length) manyLines(intermediateBox, lines, width(intermediateBox), 240, "step", `${c.metric?.name} per step (pruned: grey)`);
    else clear(intermediateBox, h("p", { class: "empty" }, "No intermediate values reported yet."));
    // Read by scripts/bench_dashboard.py.
    performance.measure("sweep-charts", { start: started, end: performance.now() });
  }

  /** The trials table, TRIALS_PAGE rows a page (a 1,000-trial sweep would otherwise lay out 10,000 cells). */
  function renderTrials(s: Sweep): void {
    const names = paramNames(s);
    const trials: Trial[] = (s.trials ?? []).slice().sort((a: Trial, b: Trial) => a.number - b.number);
    const bestNumber = s.best_trial?.number;
    if (!trials.length) {
      clear(trialsBox, h("p", { class: "empty" }, "No trial yet: the first starts within seconds."));
      return;
    }
    const pages = Math.ceil(trials.length / TRIALS_PAGE);
    trialsPage = Math.min(trialsPage, pages - 1);
    const shown = trials.slice(trialsPage * TRIALS_PAGE, (trialsPage + 1) * TRIALS_PAGE);
    const go = (to: number) => { trialsPage = to; renderTrials(s); };
    const bestPage = trials.findIndex((t) => t.number === bestNumber);
    clear(trialsBox,
      h("table", { class: "compact trials", "aria-label": "Trials", "data-rows": trials.length },
        h("thead", null, h("tr", null, ["#", "State", ...names, "Value", "Pruned at step", "Job"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", null, shown.map((t) =>
          h("tr", { "data-trial": t.number, class: t.number === bestNumber ? "best" : "", "aria-current": t.number === bestNumber ? "true" : null },
            h("td", null, t.number, t.number === bestNumber ? h("span", { class: "badge badge-ok", "data-testid": "best-trial" }, " best") : null),
            h("td", { title: t.reason ?? "" }, trialBadge(t.state)),
            names.map((n) => h("td", { class: "mono" }, t.params?.[n] === undefined ? "—" : typeof t.params[n] === "number" ? num(t.params[n]) : String(t.params[n]))),
            h("td", { "data-testid": "trial-value" }, num(t.value)),
            h("td", null, prunedAt(t) ?? "—"),
            h("td", null, t.job_id ? h("a", { href: `#/jobs/${encodeURIComponent(t.job_id)}` }, t.job_id) : "—"))))),
      pages > 1
        ? h("nav", { class: "pager", "aria-label": "Trial pages" },
            h("button", { disabled: trialsPage === 0, onclick: () => go(trialsPage - 1) }, "← Previous"),
            h("span", { class: "page-info" }, `Trials ${trialsPage * TRIALS_PAGE + 1}-${trialsPage * TRIALS_PAGE + shown.length} of ${trials.length}`),
            h("button", { disabled: trialsPage >= pages - 1, onclick: () => go(trialsPage + 1) }, "Next →"),
            bestPage >= 0 ? h("button", { onclick: () => go(Math.floor(bestPage / TRIALS_PAGE)) }, "Show the best") : null)
        : null);
  }

  async function refresh(force = false): Promise<void> {
    if (!force && sweep && SWEEP_TERMINAL.has(sweep.status)) return;
    const s = await api().get(`/sweeps/${encodeURIComponent(sweepId)}`);
    if (!force && sweep && s.version === sweep.version && JSON.stringify(s.counts) === JSON.stringify(sweep.counts) && (s.trials ?? []).length === (sweep.trials ?? []).length && JSON.stringify(s.trials) === JSON.stringify(sweep.trials)) return;
    sweep = s;
    render(s);
  }

  return {
    title: "Sweep",
    async render(main) {
      clear(main, head, actions,
        h("div", { class: "grid" },
          summary,
          h("section", { class: "panel", "aria-labelledby": "h-history" }, h("h2", { id: "h-history" }, "Optimization history"), historyBox),
          h("section", { class: "panel wide", "aria-labelledby": "h-parallel" }, h("h2", { id: "h-parallel" }, "Parallel coordinates"), h("p", { class: "small" }, "Each line a finished trial, coloured by its value (the best in gold)."), parallelBox),
          h("section", { class: "panel wide", "aria-labelledby": "h-intermediate" }, h("h2", { id: "h-intermediate" }, "Intermediate values"), h("p", { class: "small" }, "The metric each trial reported per step: what the pruner compared."), intermediateBox),
          h("section", { class: "panel wide", "aria-labelledby": "h-trials" }, h("h2", { id: "h-trials" }, "Trials"), trialsBox)));
      await refresh(true);
    },
    refresh: () => refresh(false),
  };
}
