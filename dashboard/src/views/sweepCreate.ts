// "Sweep from this job" (#/sweeps/new?from=<job>): the job as the trials' template, the searched
// parameters chosen in a form, the whole OME config (hyperParameterTuningConfig) in a JSON editor.
import { ApiError } from "../api";
import { clear, h } from "../dom";
import { formAndJson } from "../tabs";
import { api, field, reportError, showFieldErrors, toast } from "../ui";
import type { View } from "./view";

const METHODS = ["random", "grid", "bayes"];
const TYPES = ["double", "int", "categorical"];
/** The template's own request: the job's fields a submit takes, without the labels a sweep reserves. */
export function templateOf(job: Record<string, any>): Record<string, any> {
  const labels = Object.fromEntries(Object.entries(job.labels ?? {}).filter(([k]) => k !== "sweep_id" && k !== "trial"));
  return {
    name: job.name, description: job.description ?? undefined, labels, training_config: job.training_config, data_config: job.data_config,
    resource_config: job.resource_config, output_config: job.output_config, scheduling_config: job.scheduling_config,
  };
}

interface ParamRow {
  el: HTMLElement;
  read(): [string, Record<string, unknown>] | null;
}

function paramRow(name = "", spec: Record<string, any> = { type: "double" }, remove: (row: ParamRow) => void): ParamRow {
  const nameIn = h("input", { name: "param_name", value: name, placeholder: "learning_rate", "aria-label": "Parameter" });
  const type = h("select", { name: "param_type", "aria-label": "Type" }, TYPES.map((t) => h("option", { value: t, selected: t === spec.type }, t)));
  const min = h("input", { name: "param_min", value: spec.min ?? "", inputmode: "decimal", placeholder: "min", "aria-label": "Min" });
  const max = h("input", { name: "param_max", value: spec.max ?? "", inputmode: "decimal", placeholder: "max", "aria-label": "Max" });
  const scale = h("select", { name: "param_scale", "aria-label": "Scale" }, ["linear", "log"].map((s) => h("option", { value: s, selected: s === spec.scale }, s)));
  const values = h("input", { name: "param_values", value: (spec.values ?? []).join(", "), placeholder: "or values: 8, 16, 32", "aria-label": "Values" });
  const row: ParamRow = {
    el: h("div", { class: "row param-row" }, nameIn, type, min, max, scale, values, h("button", { type: "button", onclick: () => remove(row), "aria-label": "Remove parameter" }, "×")),
    read() {
      const key = nameIn.value.trim();
      if (!key) return null;
      const out: Record<string, unknown> = { type: type.value };
      const listed = values.value.split(",").map((v) => v.trim()).filter(Boolean);
      const asValue = (v: string) => (type.value !== "categorical" && v !== "" && Number.isFinite(Number(v)) ? Number(v) : v);
      if (listed.length) out.values = listed.map(asValue);
      else {
        if (min.value.trim() !== "") out.min = asValue(min.value.trim());
        if (max.value.trim() !== "") out.max = asValue(max.value.trim());
        if (type.value === "double" && scale.value === "log") out.scale = "log";
      }
      if (spec.target) out.target = spec.target;
      return [key, out];
    },
  };
  return row;
}

export function sweepCreateView(params: URLSearchParams): View {
  const from = params.get("from") ?? "";
  let template: Record<string, any> = {};
  let tuning: Record<string, any> = {
    method: "random", maxTrials: 8, maxParallelTrials: 1, metric: { name: "eval_loss", goal: "minimize" },
    parameters: { learning_rate: { type: "double", min: 0.0001, max: 0.01, scale: "log" } },
  };
  const name = h("input", { name: "name", required: true, maxlength: "128", "data-field": "name" });
  const method = h("select", { name: "method", "data-field": "hyperParameterTuningConfig.method" }, METHODS.map((m) => h("option", { value: m }, m)));
  const metric = h("input", { name: "metric", "data-field": "hyperParameterTuningConfig.metric.name" });
  const goal = h("select", { name: "goal", "data-field": "hyperParameterTuningConfig.metric.goal" }, ["minimize", "maximize"].map((g) => h("option", { value: g }, g)));
  const maxTrials = h("input", { type: "number", name: "max_trials", min: "1", "data-field": "hyperParameterTuningConfig.maxTrials" });
  const parallel = h("input", { type: "number", name: "max_parallel", min: "1", "data-field": "hyperParameterTuningConfig.maxParallelTrials" });
  const rowsBox = h("div", { class: "param-rows", "data-field": "hyperParameterTuningConfig.parameters" });
  let rows: ParamRow[] = [];
  const removeRow = (row: ParamRow) => { rows = rows.filter((r) => r !== row); row.el.remove(); };
  const addRow = (n = "", spec?: Record<string, any>) => { const r = paramRow(n, spec, removeRow); rows.push(r); rowsBox.append(r.el); };
  const editor = h("textarea", { class: "mono editor", rows: "22", spellcheck: "false", "aria-label": "OME config (JSON)", "data-field": "hyperParameterTuningConfig" });
  const errors = h("div", { class: "form-errors", role: "alert" });
  const formPane = h("div", { class: "form-pane" },
    h("fieldset", null, h("legend", null, "Sweep"), field("Name *", name),
      h("div", { class: "row" }, field("Method", method), field("Metric", metric, "a metric the trials report, e.g. eval_loss"), field("Goal", goal)),
      h("div", { class: "row" }, field("Max trials", maxTrials), field("Parallel trials", parallel))),
    h("fieldset", null, h("legend", null, "Parameters"), h("p", { class: "small" }, "Each a hyperparameter of the job: a range (min, max, log scale) or a list of values."), rowsBox,
      h("button", { type: "button", onclick: () => addRow() }, "Add parameter")));
  const jsonPane = h("div", { class: "json-pane", hidden: true }, h("p", null, "The OME hyperParameterTuningConfig; what you change here is what is submitted."), editor);
  const submit = h("button", { type: "submit", class: "primary" }, "Create sweep");
  const tabs = formAndJson<Record<string, any>>({
    formPane, jsonPane, editor, errors, jsonLabel: "JSON (OME config)",
    read: () => { fromForm(); return tuning; },
    show: (value) => { tuning = value; toForm(); },
  });
  const form = h("form", { class: "create", novalidate: true }, tabs.tabs, formPane, jsonPane, errors,
    h("div", { class: "form-buttons" }, h("a", { class: "button", href: from ? `#/jobs/${encodeURIComponent(from)}` : "#/sweeps" }, "Cancel"), submit));

  function toForm(): void {
    method.value = tuning.method ?? "random";
    metric.value = tuning.metric?.name ?? "";
    goal.value = tuning.metric?.goal ?? "minimize";
    maxTrials.value = String(tuning.maxTrials ?? "");
    parallel.value = String(tuning.maxParallelTrials ?? 1);
    rows = [];
    rowsBox.replaceChildren();
    for (const [n, spec] of Object.entries(tuning.parameters ?? {})) addRow(n, spec as Record<string, any>);
  }

  function fromForm(): void {
    const parameters = Object.fromEntries(rows.map((r) => r.read()).filter((p): p is [string, Record<string, unknown>] => p !== null));
    tuning = { ...tuning, method: method.value, metric: { name: metric.value.trim(), goal: goal.value }, maxTrials: Number(maxTrials.value), maxParallelTrials: Number(parallel.value), parameters };
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(errors);
    const value = tabs.value();
    if (value === null) return;
    tuning = value;
    submit.disabled = true;
    try {
      const sweep = await api().post("/sweeps", { name: name.value, job_template: template, hyperParameterTuningConfig: tuning });
      toast(`Created sweep ${sweep.name}`);
      location.hash = `#/sweeps/${encodeURIComponent(sweep.sweep_id)}`;
    } catch (exc) {
      if (exc instanceof ApiError && !exc.authProblem) showFieldErrors(form, exc, errors);
      else reportError(exc);
    } finally {
      submit.disabled = false;
    }
  });

  return {
    title: "New sweep",
    async render(main) {
      if (!from) {
        clear(main, h("div", { class: "panel empty" }, h("p", null, "A sweep starts from a job: open one and choose “Sweep from this job”."), h("a", { class: "button", href: "#/jobs" }, "Jobs")));
        return;
      }
      const job = await api().get(`/jobs/${encodeURIComponent(from)}`);
      template = templateOf(job);
      name.value = `${job.name} sweep`;
      toForm();
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Sweep from ", h("a", { href: `#/jobs/${encodeURIComponent(from)}` }, job.name))),
        h("p", null, "Each trial is a copy of this job with the searched parameters set."), form);
      name.focus();
    },
  };
}
