// Summary cards + the job list: search, filters (all in the URL), paging, live refresh in place.
import { actionsMenu, type Job } from "../actions";
import { clear, h } from "../dom";
import { absoluteTime, BAND_RANGES, priorityBand, relativeTime, statusFamily, STATUSES } from "../format";
import { api, reportError, toast } from "../ui";
import { waitBadge } from "./teams";
import type { View } from "./view";

const PAGE_SIZE = 50;
const FILTERS = ["q", "status", "band", "experiment", "label", "queue"] as const;
const MAX_PAGE = 200; // the API's largest page
type Filters = Record<(typeof FILTERS)[number], string>;

export function statusBadge(status: string): HTMLElement {
  return h("span", { class: `badge badge-${statusFamily(status)}`, "data-status": status }, status);
}

export function progressBar(job: Job): HTMLElement {
  const pct = Math.max(0, Math.min(100, Math.round(job.progress?.percent ?? (job.status === "COMPLETED" ? 100 : 0))));
  return h(
    "div",
    { class: "progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(pct), title: `step ${job.progress?.step ?? 0}${job.progress?.total_steps ? ` of ${job.progress.total_steps}` : ""}` },
    h("div", { class: "progress-fill", style: { width: `${pct}%` } }),
    h("span", { class: "progress-text" }, `${pct}%`),
  );
}

export function priorityText(job: Job): HTMLElement {
  const p = job.scheduling_config?.priority ?? 5;
  const band = priorityBand(p);
  return h("span", { class: `prio prio-${band.toLowerCase()}`, title: `priority ${p} of 0-10` }, `${band} · ${p}`);
}

export function jobsView(params: URLSearchParams): View {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, params.get(k) ?? ""])) as Filters;
  let tokens: (string | null)[] = [null]; // the token of each page seen, for Previous
  let page = 0;
  let nextToken: string | null = null;
  let jobs: Job[] = [];
  let selected: string | null = params.get("selected");
  // ?size= sets the page size (a link reproduces it too); 50 by default.
  const size = Math.max(1, Math.min(MAX_PAGE, Number(params.get("size")) || PAGE_SIZE));
  let experiments = new Set<string>();
  // Ticked for comparison (kept across pages and refreshes, in the URL as ?compare=a,b).
  const ticked = new Set((params.get("compare") ?? "").split(",").filter(Boolean));
  const compare = h("a", { class: "button", "data-testid": "compare", "aria-disabled": "true" }, "Compare");
  function renderCompare(): void {
    const ids = [...ticked];
    compare.textContent = ids.length ? `Compare (${ids.length})` : "Compare";
    compare.setAttribute("aria-disabled", String(ids.length < 2));
    if (ids.length >= 2) compare.setAttribute("href", `#/compare?jobs=${ids.map(encodeURIComponent).join(",")}`);
    else compare.removeAttribute("href");
    compare.title = ids.length < 2 ? "Tick two or more jobs to compare them" : `Compare ${ids.length} runs`;
  }

  const cards = h("section", { class: "cards", "aria-label": "Summary" });
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "jobs", "aria-label": "Jobs" },
    h("thead", null, h("tr", null, ["", "Job", "Status", "Priority", "Experiment", "Progress", "Created", ""].map((t) => h("th", { scope: "col" }, t)))),
    tbody,
  );
  const empty = h("div", { class: "empty", hidden: true });
  const pageInfo = h("span", { class: "page-info" }, "Loading…");
  const prev = h("button", { onclick: () => go(page - 1), "data-testid": "prev-page", disabled: true }, "← Previous");
  const next = h("button", { onclick: () => go(page + 1), "data-testid": "next-page", disabled: true }, "Next →");

  const search = h("input", { type: "search", placeholder: "Search by name  ( / )", value: filters.q, "aria-label": "Search by name", name: "q" });
  const statusSelect = h("select", { "aria-label": "Status", name: "status" }, h("option", { value: "" }, "Any status"), STATUSES.map((s) => h("option", { value: s, selected: s === filters.status }, s)));
  const bandSelect = h("select", { "aria-label": "Priority", name: "band" }, h("option", { value: "" }, "Any priority"), ["High", "Medium", "Low"].map((b) => h("option", { value: b, selected: b === filters.band }, `${b} (${BAND_RANGES[b].join("-")})`)));
  const expList = h("datalist", { id: "experiments" });
  const experiment = h("input", { placeholder: "Experiment", list: "experiments", value: filters.experiment, "aria-label": "Experiment", name: "experiment" });
  const label = h("input", { placeholder: "label key=value", value: filters.label, "aria-label": "Label", name: "label" });
  const queue = h("input", { placeholder: "Queue", value: filters.queue, "aria-label": "Queue", name: "queue" });
  const inputs: [keyof Filters, HTMLInputElement | HTMLSelectElement][] = [
    ["q", search], ["status", statusSelect], ["band", bandSelect], ["experiment", experiment], ["label", label], ["queue", queue],
  ];
  let debounce = 0;
  for (const [key, el] of inputs) {
    el.addEventListener(el instanceof HTMLSelectElement ? "change" : "input", () => {
      filters[key] = el.value.trim();
      clearTimeout(debounce);
      debounce = window.setTimeout(() => { tokens = [null]; page = 0; writeUrl(); void load(); }, el instanceof HTMLSelectElement ? 0 : 250);
    });
  }
  const clearButton = h("button", { onclick: () => { for (const [key, el] of inputs) { filters[key] = ""; el.value = ""; } tokens = [null]; page = 0; writeUrl(); void load(); } }, "Clear filters");

  function writeUrl(): void {
    const query = new URLSearchParams();
    for (const k of FILTERS) if (filters[k]) query.set(k, filters[k]);
    if (size !== PAGE_SIZE) query.set("size", String(size));
    if (selected) query.set("selected", selected);
    if (ticked.size) query.set("compare", [...ticked].join(","));
    const qs = query.toString();
    history.replaceState(null, "", `#/jobs${qs ? `?${qs}` : ""}`);
  }

  function query(): Record<string, string | number> {
    const q: Record<string, string | number> = { limit: size };
    if (filters.q) q.name = filters.q;
    if (filters.band && BAND_RANGES[filters.band]) [q.priority_min, q.priority_max] = BAND_RANGES[filters.band];
    if (filters.status) q.status = filters.status;
    if (filters.queue) q.queue = filters.queue;
    if (filters.experiment) q["labels.experiment"] = filters.experiment;
    const at = filters.label.indexOf("=");
    if (at > 0) q[`labels.${filters.label.slice(0, at).trim()}`] = filters.label.slice(at + 1).trim();
    if (tokens[page]) q.next_token = tokens[page]!;
    return q;
  }

  async function loadSummary(): Promise<void> {
    const s = await api().get("/summary");
    const card = (key: string, label: string, value: number) =>
      h("a", { class: `card card-${key}`, href: key === "total" ? "#/jobs" : `#/jobs?status=${({ running: "TRAINING", completed: "COMPLETED", failed: "FAILED", queued: "QUEUED", paused: "PAUSED" } as Record<string, string>)[key]}`, "data-card": key },
        h("span", { class: "card-value" }, String(value)), h("span", { class: "card-label" }, label));
    clear(cards, card("total", "Total jobs", s.total), card("running", "Running", s.running), card("completed", "Completed", s.completed), card("failed", "Failed", s.failed), card("queued", "Queued", s.queued), card("paused", "Paused", s.paused));
  }

  function row(job: Job): HTMLTableRowElement {
    const open = () => { location.hash = `#/jobs/${encodeURIComponent(job.job_id)}`; };
    const tr = h(
      "tr",
      { tabindex: "0", "data-job-id": job.job_id, "aria-selected": String(job.job_id === selected), class: job.job_id === selected ? "selected" : "" },
      h("td", { class: "pick" }, h("input", {
        type: "checkbox", name: "compare", "aria-label": `Compare ${job.name}`, checked: ticked.has(job.job_id),
        onchange: (e: Event) => { if ((e.target as HTMLInputElement).checked) ticked.add(job.job_id); else ticked.delete(job.job_id); renderCompare(); writeUrl(); },
      })),
      h("td", { class: "job-name" }, h("a", { href: `#/jobs/${encodeURIComponent(job.job_id)}` }, job.name), h("small", null, job.training_config?.training_type ?? "")),
      h("td", null, statusBadge(job.status), waitBadge(job)),
      h("td", null, priorityText(job)),
      h("td", null, job.labels?.experiment ? h("span", { class: "label" }, job.labels.experiment) : "—"),
      h("td", null, progressBar(job)),
      h("td", null, h("time", { datetime: job.created_at, title: absoluteTime(job.created_at) }, relativeTime(job.created_at))),
      h("td", { class: "actions" }, actionsMenu(job, (what, child) => { if (what === "retried" && child) location.hash = `#/jobs/${child.job_id}`; else void load(); }, open)),
    );
    tr.addEventListener("click", (e) => { if (!(e.target as HTMLElement).closest("button, a, input")) select(job.job_id, false); });
    tr.addEventListener("dblclick", open);
    return tr;
  }

  function select(jobId: string | null, focus: boolean): void {
    selected = jobId;
    for (const tr of tbody.querySelectorAll<HTMLTableRowElement>("tr")) {
      const on = tr.dataset.jobId === jobId;
      tr.classList.toggle("selected", on);
      tr.setAttribute("aria-selected", String(on));
      if (on && focus) tr.focus();
    }
    writeUrl();
  }

  /** Re-render the rows in place: scroll position, the selection and the focused row survive. */
  function renderRows(): void {
    const scroll = window.scrollY;
    const focused = (document.activeElement as HTMLElement | null)?.closest("tr")?.dataset.jobId;
    const menuOpen = tbody.querySelector(".menu");
    if (menuOpen) return; // never yank a menu from under the pointer; the next tick catches up
    const shown = jobs;
    tbody.replaceChildren(...shown.map(row));
    const anyFilter = FILTERS.some((k) => filters[k]);
    empty.hidden = shown.length > 0;
    table.parentElement!.hidden = shown.length === 0;
    clear(empty, anyFilter ? [h("p", null, "No job matches these filters."), clearButton] : [h("p", null, "No jobs yet."), h("a", { class: "button primary", href: "#/create" }, "Create your first job")]);
    if (focused) tbody.querySelector<HTMLElement>(`tr[data-job-id="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
    window.scrollTo(0, scroll);
    pageInfo.textContent = `Page ${page + 1}`;
    prev.disabled = page === 0;
    next.disabled = !nextToken;
    for (const j of jobs) if (j.labels?.experiment) experiments.add(j.labels.experiment);
    clear(expList, [...experiments].sort().map((e) => h("option", { value: e })));
  }

  async function load(): Promise<void> {
    const result = await api().get("/jobs", query());
    jobs = result.jobs; // a queued job carries its wait_reason and queue position: no call per row
    nextToken = result.next_token ?? null;
    tokens[page + 1] = nextToken;
    renderRows();
  }

  function go(to: number): void {
    if (to < 0 || (to > page && !nextToken)) return;
    page = to;
    void load().catch((e) => reportError(e));
  }

  function onKey(event: KeyboardEvent): void {
    const target = event.target as HTMLElement;
    const typing = target.matches("input, textarea, select") || document.querySelector("dialog[open]");
    if (event.key === "/" && !typing) { event.preventDefault(); search.focus(); return; }
    if (typing) return;
    const rows = [...tbody.querySelectorAll<HTMLTableRowElement>("tr")];
    const at = rows.findIndex((r) => r.dataset.jobId === selected);
    if (event.key === "ArrowDown" || event.key === "j") { event.preventDefault(); select(rows[Math.min(rows.length - 1, at + 1)]?.dataset.jobId ?? null, true); }
    else if (event.key === "ArrowUp" || event.key === "k") { event.preventDefault(); select(rows[Math.max(0, at - 1)]?.dataset.jobId ?? null, true); }
    else if (event.key === "Enter" && selected && target.tagName === "TR") location.hash = `#/jobs/${encodeURIComponent(selected)}`;
  }

  return {
    title: "Jobs",
    async render(main) {
      clear(
        main,
        h("div", { class: "view-head" }, h("h1", null, "Jobs"), compare, h("a", { class: "button primary", href: "#/create", "aria-keyshortcuts": "n" }, "Create job")),
        cards,
        h("div", { class: "filters", role: "search" }, search, statusSelect, bandSelect, experiment, expList, label, queue, clearButton),
        h("div", { class: "table-wrap" }, table),
        empty,
        h("nav", { class: "pager", "aria-label": "Pages" }, prev, pageInfo, next),
      );
      renderCompare();
      document.addEventListener("keydown", onKey);
      await Promise.all([loadSummary(), load()]);
    },
    async refresh() {
      await Promise.all([loadSummary(), load()]);
    },
    dispose() {
      document.removeEventListener("keydown", onKey);
    },
  };
}

export { toast };
