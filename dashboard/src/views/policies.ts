// Retraining policies: list, enable/disable, recent fires.
import { clear, h } from "../dom";
import { absoluteTime, relativeTime } from "../format";
import { api, reportError, toast } from "../ui";
import type { View } from "./view";

function trigger(t: any): string {
  if (!t) return "—";
  if (t.type === "schedule") return `schedule ${t.expression} (${t.timezone ?? "UTC"})`;
  if (t.type === "s3") return `new objects under s3://${t.bucket ?? "artifacts"}/${t.prefix ?? ""}`;
  if (t.type === "event") return `event ${JSON.stringify(t.pattern)}`;
  return JSON.stringify(t);
}

export function policiesView(): View {
  const body = h("div");
  async function load(): Promise<void> {
    const { policies } = await api().get("/retraining-policies");
    if (!policies.length) {
      clear(body, h("p", { class: "empty" }, "No retraining policies. Create one with ", h("code", null, "trainplane policies create"), "."));
      return;
    }
    clear(
      body,
      h("table", { class: "jobs" },
        h("thead", null, h("tr", null, ["Policy", "Trigger", "Enabled", "Last fired", "Fired today", "Last job"].map((t) => h("th", null, t)))),
        h("tbody", null, policies.map((p: any) => {
          const toggle = h("input", { type: "checkbox", role: "switch", checked: p.enabled, "aria-label": `${p.name} enabled`, "data-policy-id": p.policy_id });
          toggle.addEventListener("change", async () => {
            toggle.disabled = true;
            try {
              await api().patch(`/retraining-policies/${encodeURIComponent(p.policy_id)}`, { enabled: toggle.checked });
              toast(`${p.name} ${toggle.checked ? "enabled" : "disabled"}`);
            } catch (exc) {
              toggle.checked = !toggle.checked;
              reportError(exc);
            } finally {
              toggle.disabled = false;
            }
          });
          return h("tr", { "data-policy-id": p.policy_id },
            h("td", null, h("strong", null, p.name), p.description ? h("small", null, p.description) : null),
            h("td", null, trigger(p.trigger)),
            h("td", null, h("label", { class: "check" }, toggle, p.enabled ? " on" : " off")),
            h("td", null, p.last_fired_at ? h("time", { title: absoluteTime(p.last_fired_at) }, relativeTime(p.last_fired_at)) : "never"),
            h("td", null, `${p.fired_today ?? 0}${p.daily_cap ? ` of ${p.daily_cap}` : ""}`),
            h("td", null, p.last_job_id ? h("a", { href: `#/jobs/${encodeURIComponent(p.last_job_id)}` }, p.last_job_id) : "—"));
        }))),
    );
  }
  return {
    title: "Retraining policies",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Retraining policies")), body);
      await load();
    },
    async refresh() {
      if (!body.querySelector("input:focus")) await load();
    },
  };
}
