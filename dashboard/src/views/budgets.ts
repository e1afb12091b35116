// Budgets (issue 27.4 on issue 25's GET /budgets): each budget's scope and period, spent / reserved / left
// against its amount, its thresholds (crossed ones marked) and the jobs it paused.
import { clear, h } from "../dom";
import { absoluteTime, money, num } from "../format";
import { api } from "../ui";
import type { View } from "./view";

type Budget = Record<string, any>;

function scopeText(scope: Budget): string {
  return scope?.kind === "deployment" ? "the whole deployment" : `${scope?.kind} ${scope?.value ?? ""}`;
}

function meter(b: Budget): HTMLElement {
  const amount = b.amount_usd || 1;
  const spent = Math.min(100, (100 * (b.spent_usd ?? 0)) / amount);
  const reserved = Math.min(100 - spent, (100 * (b.reserved_usd ?? 0)) / amount);
  return h("div", { class: "progress budget-meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(b.amount_usd), "aria-valuenow": String(b.spent_usd), title: `${num(b.percent_used)}% used` },
    h("div", { class: "progress-fill", style: { width: `${spent}%` } }),
    h("div", { class: "progress-reserved", style: { left: `${spent}%`, width: `${reserved}%` } }),
    h("span", { class: "progress-text" }, `${num(b.percent_used)}%`));
}

export function budgetsView(): View {
  const body = h("div", { class: "table-wrap" });
  async function load(): Promise<void> {
    const budgets: Budget[] = (await api().get("/budgets")).budgets;
    if (!budgets.length) {
      clear(body, h("p", { class: "empty" }, "No budgets. Create one with ", h("code", null, "trainplane budgets create"), " or POST /budgets."));
      return;
    }
    clear(body, h("table", { class: "jobs", "aria-label": "Budgets" },
      h("thead", null, h("tr", null, ["Budget", "Scope", "Period", "Amount", "Spent", "Reserved", "Left", "Used", "Thresholds", "Paused jobs"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", null, budgets.map((b) => h("tr", { "data-budget-id": b.budget_id },
        h("td", { class: "job-name" }, b.name, h("small", null, b.budget_id)),
        h("td", null, scopeText(b.scope)),
        h("td", { title: `from ${absoluteTime(b.period_start)}` }, b.period),
        h("td", { "data-col": "amount" }, money(b.amount_usd)),
        h("td", { "data-col": "spent" }, money(b.spent_usd)),
        h("td", { "data-col": "reserved" }, money(b.reserved_usd)),
        h("td", { "data-col": "left" }, money(b.left_usd)),
        h("td", null, meter(b)),
        h("td", null, (b.thresholds ?? []).map((t: Budget) => {
          const crossed = (b.crossed ?? []).includes(t.percent);
          return h("span", { class: `badge badge-${crossed ? "warn" : "muted"}`, "data-threshold": t.percent, "data-crossed": String(crossed) }, `${t.percent}% ${t.action}`);
        })),
        h("td", null, (b.paused_jobs ?? []).length ? (b.paused_jobs as string[]).map((id) => h("a", { href: `#/jobs/${encodeURIComponent(id)}` }, id, " ")) : "—"))))));
  }
  return {
    title: "Budgets",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Budgets")), body);
      await load();
    },
    refresh: load,
  };
}
