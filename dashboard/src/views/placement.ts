// Placement on the job detail (docs/PLACEMENT.md): each placement tried (pool, purchase, outcome, why, work
// lost), the pools blocked, time to first step, each recovery's time, dollars saved against the first
// on-demand candidate, and the batch adaptation that keeps the global batch on every candidate.
import type { Job } from "../actions";
import { clear, h } from "../dom";
import { absoluteTime, duration, money } from "../format";

function row(label: string, value: Node | string): Node[] {
  return [h("dt", null, label), h("dd", null, value)];
}

// Fills `section` and shows it when the job has a placement record; hides it otherwise.
export function renderPlacement(section: HTMLElement, j: Job): void {
  const record = j.placement ?? null;
  section.hidden = !record;
  if (!record) return;
  const recoveries = (record.recoveries ?? []).map((r: Job) => (r.seconds == null ? "in progress" : duration(r.seconds))).join(", ");
  const rows: Node[][] = [
    row("Time to first step", record.time_to_first_step_seconds == null ? "-" : duration(record.time_to_first_step_seconds)),
    row("Recoveries", `${(record.recoveries ?? []).length}${recoveries ? ` (${recoveries})` : ""}`),
    row("Pools blocked", (record.pools_blocked ?? []).join(", ") || "-"),
    row("Saved", `${money(record.dollars_saved_usd)} against the first on-demand candidate`),
  ];
  if (record.moved_to_on_demand) rows.push(row("Deadline", "moved to on-demand"));
  if (record.at_risk) rows.push(row("At risk", record.at_risk));
  const tries = h("table", { "data-testid": "placement-tries" },
    h("thead", null, h("tr", null, ["Attempt", "Candidate", "Pool", "Started", "Outcome", "Work lost", "Why"].map((t) => h("th", null, t)))),
    h("tbody", null, (record.tries ?? []).map((t: Job) => h("tr", null,
      h("td", null, t.attempt), h("td", null, t.candidate), h("td", null, h("code", null, t.pool)), h("td", null, absoluteTime(t.started_at)),
      h("td", null, t.outcome ?? "-"), h("td", null, t.work_lost_steps == null ? "-" : `${t.work_lost_steps} steps`), h("td", null, t.reason ?? "")))));
  clear(section, h("h2", { id: "h-placement" }, "Placement"), h("dl", { class: "kv", "data-testid": "placement" }, rows), tries);
}
