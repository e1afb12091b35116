// Teams (issue 27.4): each team's quota per GPU type (in use / nominal / borrowed / lent), its queued
// demand and fair-share usage, and its waiting jobs with why they wait (QUOTA, BORROW_LIMIT, ...).
import type { Job } from "../actions";
import { clear, h } from "../dom";
import { duration, num, type WAIT_REASONS } from "../format";
import { api } from "../ui";
import { statusBadge } from "./jobs";
import { positionText } from "./queues";
import type { View } from "./view";

export const WAIT_REASON_TEXT: Record<(typeof WAIT_REASONS)[number], string> = {
  QUOTA: "its team's quota of the GPU type is in use",
  BORROW_LIMIT: "its team has borrowed all it may",
  COHORT_FULL: "no team has idle quota to lend",
  PRIORITY: "higher-priority jobs go first",
  BUDGET: "a budget covering it has too little left (docs/BUDGETS.md)",
};

/** A queued job's wait reason as a badge with its meaning, queue position and estimated wait on hover; nothing for a job that does not wait. */
export function waitBadge(job: Job): HTMLElement | null {
  const reason: string | null | undefined = job.wait_reason;
  if (!reason) return null;
  const meaning = WAIT_REASON_TEXT[reason as (typeof WAIT_REASONS)[number]] ?? reason;
  const place = job.queue_position === null || job.queue_position === undefined ? "" : ` (position ${positionText(job.queue_position)} in its queue, estimated wait ${duration(job.estimated_wait_seconds)})`;
  return h("span", { class: "wait-reason", "data-wait-reason": reason, title: meaning + place }, reason);
}

/** A team's members as admins see them: its ARNs (or patterns), then its Cognito groups as "group:NAME". */
function members(team: any): string[] {
  return [...(team.members?.arns ?? []), ...(team.members?.cognito_groups ?? []).map((g: string) => `group:${g}`)];
}

export function teamsView(): View {
  const body = h("div", { class: "table-wrap" });
  async function load(): Promise<void> {
    const { teams } = await api().get("/teams");
    if (!teams.length) {
      clear(body, h("p", { class: "empty" }, "No team is defined: every job runs in the default team."));
      return;
    }
    clear(body, h("table", { class: "jobs", "aria-label": "Teams" },
      h("thead", null, h("tr", null, ["Team", "Weight", "Quotas (nominal)", "Max priority", "Queues"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", null, teams.map((t: any) => h("tr", { "data-team": t.name },
        h("td", null, h("a", { href: `#/teams/${encodeURIComponent(t.name)}` }, t.name), t.configured === false ? h("small", null, "deployment default") : null),
        h("td", null, num(t.weight)),
        h("td", null, Object.entries(t.quotas ?? {}).map(([k, q]: [string, any]) => `${k} ${q.nominal}`).join(", ") || "—"),
        h("td", null, t.max_priority),
        h("td", null, t.queues ? t.queues.join(", ") : "any"))))));
  }
  return {
    title: "Teams",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Teams")), body);
      await load();
    },
    refresh: load,
  };
}

export function teamView(name: string): View {
  const usage = h("section", { class: "panel wide", "aria-labelledby": "h-quota" });
  const waiting = h("section", { class: "panel wide", "aria-labelledby": "h-waiting" });
  const head = h("div", { class: "view-head" });
  async function load(): Promise<void> {
    const [view, queued] = await Promise.all([api().get(`/teams/${encodeURIComponent(name)}`), api().get("/jobs", { status: "QUEUED", limit: 200 })]);
    const team = view.team;
    clear(head, h("h1", null, `Team ${team.name}`), h("a", { class: "button", href: "#/teams" }, "All teams"));
    clear(usage,
      h("h2", { id: "h-quota" }, "Quota per GPU type"),
      h("dl", { class: "kv" },
        h("dt", null, "Fair share"), h("dd", { "data-testid": "fair-share", title: "2^(-usage/share): 1 unused, 0.5 at its share, towards 0 above it" }, num(view.fair_share)),
        h("dt", null, "Usage (decayed, USD)"), h("dd", { "data-testid": "usage" }, num(view.usage)),
        h("dt", null, "Weight"), h("dd", null, num(team.weight)),
        h("dt", null, "Max priority"), h("dd", null, String(team.max_priority)),
        // Admins see who is in it (IAM ARNs or patterns, Cognito user-pool groups); a member's own view has no list.
        ...(members(team).length ? [h("dt", null, "Members"), h("dd", { "data-testid": "members" }, members(team).join(", "))] : [])),
      view.types.length
        ? h("table", { class: "compact", "aria-label": "Quota per GPU type" },
            h("thead", null, h("tr", null, ["GPU type", "In use", "Nominal", "Borrowed", "Lent", "Queued demand"].map((t) => h("th", { scope: "col" }, t)))),
            h("tbody", null, view.types.map((t: any) => h("tr", { "data-gpu-type": t.gpu_type },
              h("td", null, t.gpu_type), h("td", { "data-col": "in_use" }, t.in_use), h("td", { "data-col": "nominal" }, t.nominal),
              h("td", { "data-col": "borrowed" }, t.borrowed), h("td", { "data-col": "lent" }, t.lent), h("td", { "data-col": "queued" }, t.queued)))))
        : h("p", { class: "empty" }, "No quota and nothing in use."));
    const mine: Job[] = queued.jobs.filter((j: Job) => (j.team ?? "default") === team.name);
    clear(waiting,
      h("h2", { id: "h-waiting" }, `Waiting jobs (${mine.length})`),
      mine.length
        ? h("ul", null, mine.map((j) => h("li", { "data-job-id": j.job_id }, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.name), " ", statusBadge(j.status), " ", waitBadge(j), j.wait_reason ? ` ${WAIT_REASON_TEXT[j.wait_reason as (typeof WAIT_REASONS)[number]] ?? ""}` : "")))
        : h("p", { class: "empty" }, "No job of this team waits."));
  }
  return {
    title: "Team",
    async render(main) {
      clear(main, head, h("div", { class: "grid" }, usage, waiting));
      await load();
    },
    refresh: load,
  };
}
