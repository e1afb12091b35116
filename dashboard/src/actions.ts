// The job verbs, each behind a confirmation (the destructive ones say what they do), shared by the list's
// actions menu and the details page. A verb the job's status does not allow is shown disabled with why.
import { h } from "./dom";
import { EDITABLE, RUNNING, TERMINAL } from "./format";
import { api, dialog, field, toast } from "./ui";

export type Job = Record<string, any>;

export interface Action {
  id: string;
  label: string;
  disabledReason: string | null;
  run: () => Promise<boolean>;
}

const PAUSABLE = new Set(["TRAINING", "CHECKPOINTING"]);

export function actionsFor(job: Job, done: (what: string, child?: Job) => void): Action[] {
  const s = job.status as string;
  const terminalNames = "COMPLETED, FAILED, CANCELLED or PREEMPTED";
  return [
    {
      id: "pause",
      label: "Pause",
      disabledReason: PAUSABLE.has(s) ? null : `Only a training job can be paused (this one is ${s}).`,
      run: () => pauseJob(job).then((ok) => (ok && done("paused"), ok)),
    },
    {
      id: "resume",
      label: "Resume",
      disabledReason: s === "PAUSED" ? null : `Only a paused job can be resumed (this one is ${s}).`,
      run: () => resumeJob(job).then((ok) => (ok && done("resumed"), ok)),
    },
    {
      id: "cancel",
      label: "Stop",
      disabledReason: TERMINAL.has(s) ? `The job has already ended (${s}).` : null,
      run: () => cancelJob(job).then((ok) => (ok && done("stopped"), ok)),
    },
    {
      id: "retry",
      label: "Retry",
      disabledReason: TERMINAL.has(s) ? null : `Only an ended job (${terminalNames}) can be retried; this one is ${s}.`,
      run: () => retryJob(job, done),
    },
    {
      id: "edit",
      label: "Edit",
      disabledReason: EDITABLE.has(s)
        ? null
        : `Only PENDING, QUEUED or FAILED jobs can be edited: this one is ${s}${RUNNING.has(s) ? " (it is using its resources now)" : ""}.`,
      run: () => editJob(job).then((ok) => (ok && done("edited"), ok)),
    },
    {
      id: "delete",
      label: "Delete",
      disabledReason: TERMINAL.has(s) ? null : `Only an ended job (${terminalNames}) can be deleted: stop it first.`,
      run: () => deleteJob(job).then((ok) => (ok && done("deleted"), ok)),
    },
  ];
}

function cancelJob(job: Job): Promise<boolean> {
  const reason = h("input", { name: "reason", value: "stopped from the dashboard", "data-field": "reason" });
  return dialog({
    title: `Stop ${job.name}?`,
    body: [
      h("p", null, "The run stops and the job ends as CANCELLED. Its checkpoints stay: you can retry from one later."),
      field("Reason (recorded in its history)", reason),
    ],
    confirm: "Stop job",
    danger: true,
    onConfirm: async () => {
      await api().post(`/jobs/${job.job_id}/cancel`, { reason: reason.value });
    },
  });
}

function pauseJob(job: Job): Promise<boolean> {
  const save = h("input", { type: "checkbox", name: "save_checkpoint", checked: true, "data-field": "save_checkpoint" });
  return dialog({
    title: `Pause ${job.name}?`,
    body: [h("p", null, "The trainer stops and frees its resources; resume continues from a checkpoint."), h("label", { class: "check" }, save, " Save a checkpoint first")],
    confirm: "Pause",
    onConfirm: async () => {
      await api().post(`/jobs/${job.job_id}/pause`, { save_checkpoint: save.checked });
    },
  });
}

function checkpointOptions(job: Job, latestLabel: string): HTMLSelectElement {
  const checkpoints: Job[] = (job.checkpoints ?? []).slice().sort((a: Job, b: Job) => b.step - a.step);
  return h(
    "select",
    { name: "checkpoint_id", "data-field": "checkpoint_id" },
    h("option", { value: "" }, latestLabel),
    checkpoints.map((c) =>
      h(
        "option",
        { value: c.checkpoint_id },
        `step ${c.step}${c.checkpoint_id === job.best_checkpoint_id ? " (best)" : ""} — ${c.checkpoint_id}`,
      ),
    ),
  );
}

function resumeJob(job: Job): Promise<boolean> {
  const select = checkpointOptions(job, "Latest checkpoint");
  return dialog({
    title: `Resume ${job.name}`,
    body: [field("Resume from", select, "The job trains on from this checkpoint's step.")],
    confirm: "Resume",
    onConfirm: async () => {
      await api().post(`/jobs/${job.job_id}/resume`, { checkpoint_id: select.value });
    },
  });
}

export function resourceInputs(resources: Job = {}) {
  return {
    cpu: h("input", { type: "number", min: "1", step: "1", name: "cpu_cores", value: resources.cpu_cores ?? "", "data-field": "resource_config.cpu_cores" }),
    memory: h("input", {
      type: "number", min: "0", step: "any", name: "memory_gb",
      value: resources.ram_min_mb ? resources.ram_min_mb / 1024 : "", "data-field": "resource_config.ram_min_mb",
    }),
    gpu: h("input", { type: "number", min: "0", step: "1", name: "gpu_count", value: resources.gpu_count ?? 0, "data-field": "resource_config.gpu_count" }),
  };
}

export function readResources(inputs: ReturnType<typeof resourceInputs>, base: Job = {}): Job {
  const out: Job = { ...base };
  const cpu = inputs.cpu.value.trim();
  const mem = inputs.memory.value.trim();
  const gpu = inputs.gpu.value.trim();
  if (cpu) out.cpu_cores = Number(cpu);
  else delete out.cpu_cores;
  if (mem) out.ram_min_mb = Math.round(Number(mem) * 1024);
  else delete out.ram_min_mb;
  out.gpu_count = gpu === "" ? 0 : Number(gpu);
  return out;
}

function retryJob(job: Job, done: (what: string, child?: Job) => void): Promise<boolean> {
  const select = checkpointOptions(job, "Latest checkpoint (or from scratch if none)");
  const modify = h("input", { type: "checkbox", name: "modify_resources" });
  const inputs = resourceInputs(job.resource_config);
  const resources = h("fieldset", { disabled: true }, h("legend", null, "New resources"), field("CPU cores", inputs.cpu), field("Memory (GB)", inputs.memory), field("GPU count", inputs.gpu));
  modify.addEventListener("change", () => (resources.disabled = !modify.checked));
  let child: Job | undefined;
  return dialog({
    title: `Retry ${job.name}`,
    body: [
      h("p", null, "A new job (a child of this one) runs with the same configuration."),
      field("Start from", select),
      h("label", { class: "check" }, modify, " With new resources"),
      resources,
    ],
    confirm: "Retry",
    onConfirm: async () => {
      child = await api().post(`/jobs/${job.job_id}/retry`, {
        checkpoint_id: select.value,
        modify_resources: modify.checked,
        new_resource_config: modify.checked ? readResources(inputs, job.resource_config) : null,
      });
    },
  }).then((ok) => {
    if (ok) done("retried", child);
    return ok;
  });
}

function editJob(job: Job): Promise<boolean> {
  const name = h("input", { name: "name", value: job.name, required: true, "data-field": "name" });
  const description = h("textarea", { name: "description", rows: "2", "data-field": "description" }, job.description ?? "");
  const priority = h("input", { type: "number", min: "0", max: "10", name: "priority", value: job.scheduling_config?.priority ?? 5, "data-field": "priority" });
  const hp = h(
    "textarea",
    { name: "hyperparameters", rows: "5", class: "mono", "data-field": "hyperparameters" },
    Object.entries(job.training_config?.hyperparameters ?? {}).map(([k, v]) => `${k}=${v}`).join("\n"),
  );
  const inputs = resourceInputs(job.resource_config);
  return dialog({
    title: `Edit ${job.name}`,
    body: [
      field("Name", name),
      field("Description", description),
      field("Priority (0-10)", priority),
      field("Hyperparameters (key=value per line)", hp),
      h("fieldset", null, h("legend", null, "Resources"), field("CPU cores", inputs.cpu), field("Memory (GB)", inputs.memory), field("GPU count", inputs.gpu)),
    ],
    confirm: "Save",
    onConfirm: async () => {
      const hyperparameters: Record<string, string> = {};
      for (const line of hp.value.split("\n")) {
        const at = line.indexOf("=");
        if (line.trim() && at > 0) hyperparameters[line.slice(0, at).trim()] = line.slice(at + 1).trim();
      }
      await api().patch(`/jobs/${job.job_id}`, {
        name: name.value,
        description: description.value || null,
        priority: Number(priority.value),
        hyperparameters,
        resource_config: readResources(inputs, job.resource_config),
      });
    },
  });
}

function deleteJob(job: Job): Promise<boolean> {
  const checkpoints: Job[] = job.checkpoints ?? [];
  return dialog({
    title: `Delete ${job.name}?`,
    body: [
      h("p", null, "This cannot be undone. It removes:"),
      h(
        "ul",
        { class: "removes" },
        h("li", null, `the job ${job.job_id} and its configuration`),
        h("li", null, "its status history, logs and metrics"),
        h("li", null, `its ${checkpoints.length} checkpoint${checkpoints.length === 1 ? "" : "s"}`, checkpoints.length ? ` (${checkpoints.map((c) => `step ${c.step}`).join(", ")})` : ""),
        h("li", null, "its exported model and every other object under ", h("code", null, `jobs/${job.job_id}/`), " in the artifacts bucket"),
      ),
      job.parent_job_id ? h("p", null, `Its parent job ${job.parent_job_id} is kept.`) : null,
    ],
    confirm: "Delete job",
    danger: true,
    onConfirm: async () => {
      await api().del(`/jobs/${job.job_id}`);
    },
  });
}

/** An actions menu button: a small popup menu of the job's verbs. */
export function actionsMenu(job: Job, done: (what: string, child?: Job) => void, open: () => void): HTMLElement {
  const button = h("button", { class: "menu-button", "aria-haspopup": "menu", "aria-expanded": "false", "aria-label": `Actions for ${job.name}`, title: "Actions" }, "⋯");
  const wrap = h("div", { class: "menu-wrap" }, button);
  button.addEventListener("click", (event) => {
    event.stopPropagation();
    const existing = wrap.querySelector(".menu");
    document.querySelectorAll(".menu").forEach((m) => m.remove());
    if (existing) return button.setAttribute("aria-expanded", "false");
    const items = [
      h("button", { role: "menuitem", onclick: () => { menu.remove(); open(); } }, "Open"),
      ...actionsFor(job, done).map((a) =>
        h(
          "button",
          {
            role: "menuitem",
            "data-action": a.id,
            disabled: a.disabledReason !== null,
            title: a.disabledReason ?? "",
            onclick: () => { menu.remove(); void a.run().then((ok) => ok && toast(`${job.name}: ${a.label.toLowerCase()} done`)); },
          },
          a.label,
        ),
      ),
    ];
    const menu = h("div", { class: "menu", role: "menu" }, items);
    menu.addEventListener("keydown", (e) => {
      const buttons = [...menu.querySelectorAll<HTMLButtonElement>("button:not([disabled])")];
      const at = buttons.indexOf(document.activeElement as HTMLButtonElement);
      if (e.key === "ArrowDown") buttons[(at + 1) % buttons.length]?.focus();
      else if (e.key === "ArrowUp") buttons[(at - 1 + buttons.length) % buttons.length]?.focus();
      else if (e.key === "Escape") { menu.remove(); button.focus(); }
      else return;
      e.preventDefault();
      e.stopPropagation();
    });
    wrap.appendChild(menu);
    button.setAttribute("aria-expanded", "true");
    items[0].focus();
  });
  return wrap;
}
