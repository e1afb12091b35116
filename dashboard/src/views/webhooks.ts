// Webhooks (issue 27.4): each webhook, its recent deliveries (outcome, status, latency, the answer) and a
// Redeliver button per event.
import { clear, h } from "../dom";
import { absoluteTime, relativeTime } from "../format";
import { api, reportError, toast } from "../ui";
import type { View } from "./view";

const OUTCOME_FAMILY: Record<string, string> = { delivered: "ok", failed: "bad", retrying: "wait", gone: "muted", dropped: "muted" };

export function webhooksView(): View {
  const body = h("div");
  const open = new Set<string>();

  async function deliveries(hook: any, box: HTMLElement): Promise<void> {
    const { deliveries: list } = await api().get(`/webhooks/${encodeURIComponent(hook.webhook_id)}/deliveries`, { limit: 100 });
    box.dataset.deliveries = String(list.length);
    clear(box, list.length
      ? h("table", { class: "compact", "aria-label": `Deliveries of ${hook.url}` },
          h("thead", null, h("tr", null, ["When", "Event", "Attempt", "Outcome", "Status", "Latency", "Answer", ""].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", null, list.map((d: any) => h("tr", { "data-event-id": d.event_id, "data-outcome": d.outcome },
            h("td", null, h("time", { datetime: d.at, title: absoluteTime(d.at) }, relativeTime(d.at))),
            h("td", null, d.event_type),
            h("td", null, d.attempt),
            h("td", null, h("span", { class: `badge badge-${OUTCOME_FAMILY[d.outcome] ?? "muted"}` }, d.outcome)),
            h("td", null, d.status_code ?? "—"),
            h("td", null, d.latency_ms === null || d.latency_ms === undefined ? "—" : `${d.latency_ms} ms`),
            h("td", { class: "mono small" }, (d.response ?? "").slice(0, 120)),
            h("td", null, h("button", { "data-action": "redeliver", onclick: (e: Event) => void redeliver(hook, d.event_id, e.currentTarget as HTMLButtonElement, box) }, "Redeliver"))))))
      : h("p", { class: "empty" }, "No delivery yet."));
  }

  async function redeliver(hook: any, eventId: string, button: HTMLButtonElement, box: HTMLElement): Promise<void> {
    button.disabled = true;
    try {
      const answer = await api().post(`/webhooks/${encodeURIComponent(hook.webhook_id)}/redeliver`, { event_id: eventId });
      toast(`Redelivering ${answer.event_ids.length} event(s)`);
      await deliveries(hook, box);
    } catch (exc) {
      reportError(exc);
      button.disabled = false;
    }
  }

  async function load(): Promise<void> {
    const { webhooks } = await api().get("/webhooks");
    if (!webhooks.length) {
      clear(body, h("p", { class: "empty" }, "No webhooks. Create one with ", h("code", null, "trainplane webhooks create --url URL"), " or POST /webhooks."));
      return;
    }
    clear(body, webhooks.map((hook: any) => {
      const box = h("div", { class: "deliveries" });
      const details = h("details", { open: open.has(hook.webhook_id), "data-webhook-id": hook.webhook_id },
        h("summary", null, h("span", { class: "mono" }, hook.url), " ",
          h("span", { class: `badge badge-${hook.enabled ? "ok" : "muted"}` }, hook.enabled ? "enabled" : "disabled"), " ",
          hook.event_types.join(", "), hook.failing_since ? h("span", { class: "error" }, ` failing since ${absoluteTime(hook.failing_since)}`) : null,
          hook.disabled_reason ? h("span", { class: "error" }, ` ${hook.disabled_reason}`) : null),
        box);
      details.addEventListener("toggle", () => {
        if (details.open) { open.add(hook.webhook_id); void deliveries(hook, box).catch((e) => reportError(e, box)); }
        else open.delete(hook.webhook_id);
      });
      if (open.has(hook.webhook_id)) void deliveries(hook, box).catch((e) => reportError(e, box));
      return h("section", { class: "panel" }, details);
    }));
  }

  return {
    title: "Webhooks",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Webhooks")), body);
      await load();
    },
  };
}
