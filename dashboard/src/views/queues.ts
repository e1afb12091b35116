// Queue view: per queue, the waiting jobs with position, priority and the estimated wait.
import { clear, h } from "../dom";
import { absoluteTime, duration, relativeTime } from "../format";
import { api } from "../ui";
import { priorityText } from "./jobs";
import type { View } from "./view";

/** The API counts from 0 (next in line); people count from 1. */
export function positionText(position: number | null | undefined): string {
  return position === null || position === undefined ? "—" : String(position + 1);
}

export function queuesView(): View {
  const body = h("div", { class: "queues" });
  async function load(): Promise<void> {
    const [queues, queued] = await Promise.all([api().get("/queues"), api().get("/jobs", { status: "QUEUED", limit: 200 })]);
    // Each queued job of the list carries its queue_position and estimated wait: no call per job.
    const byQueue = new Map<string, any[]>();
    for (const job of queued.jobs) {
      const q = job.scheduling_config?.queue ?? "default";
      byQueue.set(q, [...(byQueue.get(q) ?? []), job]);
    }
    const list: any[] = queues.queues ?? [];
    if (!list.length) {
      clear(body, h("p", { class: "empty" }, "No queues yet: a queue appears when a job is submitted to it."));
      return;
    }
    clear(
      body,
      list.map((q) => {
        const mine = (byQueue.get(q.queue) ?? []).sort((a, b) => (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9));
        return h(
          "section",
          { class: "panel", "data-queue": q.queue },
          h("h2", null, `Queue ${q.queue}`),
          h("dl", { class: "kv" },
            h("dt", null, "Waiting"), h("dd", null, String(q.queued)),
            h("dt", null, "Estimated wait"), h("dd", null, duration(q.estimated_wait_seconds)),
            h("dt", null, "Oldest waiting since"), h("dd", null, q.oldest_queued_at ? h("time", { title: absoluteTime(q.oldest_queued_at) }, relativeTime(q.oldest_queued_at)) : "—"),
            h("dt", null, "Capacity"), h("dd", null, (q.pools ?? []).map((p: any) => `${p.pool}: ${p.in_use}/${p.capacity ?? "∞"} in use`).join(", ") || "—")),
          mine.length
            ? h("table", { class: "compact" },
                h("thead", null, h("tr", null, ["Position (1 = next)", "Job", "Priority", "Estimated wait", "Waiting since"].map((t) => h("th", null, t)))),
                h("tbody", null, mine.map((j) => h("tr", { "data-job-id": j.job_id },
                  h("td", null, positionText(j.queue_position)),
                  h("td", null, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.name)),
                  h("td", null, priorityText(j)),
                  h("td", null, duration(j.estimated_wait_seconds)),
                  h("td", null, h("time", { title: absoluteTime(j.updated_at) }, relativeTime(j.updated_at)))))))
            : h("p", { class: "empty" }, "None of your jobs is waiting here."),
        );
      }),
    );
  }
  return {
    title: "Queues",
    async render(main) {
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Queues")), body);
      await load();
    },
    refresh: load,
  };
}
