// The create form's "Forecast" step (issue 27.6): POST /jobs?dry_run=true makes every check a submit makes
// (the same 422s) and answers schemas/forecast.py's Forecast; nothing is created. Drawn here, asked for in create.ts.
import { h } from "../dom";
import { duration, money } from "../format";

export interface BudgetLeft {
  budget_id: string;
  name: string;
  left_usd: number;
  left_after_usd: number;
  would_hold: boolean;
}

export interface Forecast {
  dry_run: true;
  gpu_type: string;
  units: number;
  hourly_usd: number;
  duration_seconds: number;
  duration_low_seconds: number;
  duration_high_seconds: number;
  total_usd: number;
  total_low_usd: number;
  total_high_usd: number;
  basis: string;
  shape: string;
  queue_position: number;
  estimated_wait_seconds: number;
  budgets: BudgetLeft[];
}

const BASIS: Record<string, string> = {
  max_runtime_seconds: "the job's own cap (max runtime): the most it can run",
  prior: "the documented prior (no max runtime set): expected 1 h, 30 min to 4 h",
};

/** The forecast as a panel: what the job would get, how long and what it would cost, its place in the queue, the budgets. */
export function forecastPanel(f: Forecast): HTMLElement {
  const row = (label: string, value: string, key: string) => [h("dt", null, label), h("dd", { "data-key": key }, value)];
  const held = f.budgets.filter((b) => b.would_hold);
  const budgets = f.budgets.length
    ? h(
        "table",
        { "data-testid": "forecast-budgets" },
        h("thead", null, h("tr", null, h("th", null, "Budget"), h("th", null, "Left now"), h("th", null, "Left after this job"), h("th", null, ""))),
        h("tbody", null, f.budgets.map((b) =>
          h("tr", { "data-budget": b.budget_id },
            h("td", null, b.name),
            h("td", null, money(b.left_usd)),
            h("td", null, money(b.left_after_usd)),
            h("td", null, b.would_hold ? h("span", { class: "badge badge-warn" }, "would hold: BUDGET") : h("span", { class: "badge badge-ok" }, "fits"))))),
      )
    : h("p", { class: "muted" }, "No budget covers this job.");
  return h(
    "section",
    { class: "panel forecast", "data-testid": "forecast", "aria-live": "polite" },
    h("h2", null, "Forecast ", h("small", { class: "muted" }, "(dry run: nothing was created)")),
    held.length ? h("p", { class: "error", role: "alert" }, `Submitted now, this job would wait (BUDGET): ${held.map((b) => b.name).join(", ")} would not cover it.`) : null,
    h("dl", { class: "kv" },
      row("Resources", `${f.units} x ${f.gpu_type}`, "resources"),
      row("Price", `${money(f.hourly_usd)} / hour`, "hourly"),
      row("Duration", `${duration(f.duration_seconds)} (${duration(f.duration_low_seconds)} – ${duration(f.duration_high_seconds)})`, "duration"),
      row("Total", `${money(f.total_usd)} (${money(f.total_low_usd)} – ${money(f.total_high_usd)})`, "total"),
      row("Basis", BASIS[f.basis] ?? f.basis, "basis"),
      row("Queue position", String(f.queue_position), "queue_position"),
      row("Estimated wait", duration(f.estimated_wait_seconds), "wait"),
    ),
    budgets,
  );
}
