// Create job: Kaisar's sections (Basic, Configuration, Resources) plus Model & data, and an editor for the
// whole five-config request. The server's 422 errors are shown at the fields they name. "Forecast" asks for the
// dry run (POST /jobs?dry_run=true: the submit's checks and 422s, then the forecast; nothing is created).
import { readResources, resourceInputs } from "../actions";
import { ApiError } from "../api";
import { clear, h } from "../dom";
import { OPTIMIZERS, TRAINING_TYPES } from "../format";
import { formAndJson } from "../tabs";
import { api, clearFieldErrors, field, reportError, showFieldErrors, toast } from "../ui";
import { type Forecast, forecastPanel } from "./forecast";
import type { View } from "./view";

const TEMPLATE = {
  name: "",
  description: "",
  labels: {} as Record<string, string>,
  training_config: {
    training_type: "LORA",
    base_model: {
      model_id: "tiny-llama",
      source: "config",
      tokenizer_id: "byte",
      model_kwargs: { architecture: "llama", hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 256 },
    },
    hyperparameters: { max_steps: "40", learning_rate: "0.003", logging_steps: "1", optimizer: "adamw" } as Record<string, string>,
  },
  data_config: { sources: [{ path: "" }], max_seq_length: 96, batch_size: 8, validation_split: 0.1 },
  resource_config: { gpu_count: 0 } as Record<string, number>,
  output_config: { checkpoint: { save_strategy: "steps", save_steps: 10 } },
  scheduling_config: { queue: "default", priority: 8 },
};

const BAND_DEFAULT: Record<string, number> = { High: 8, Medium: 5, Low: 2 };

export function createView(params: URLSearchParams): View {
  let request: any = structuredClone(TEMPLATE);
  const from = params.get("from");

  const name = h("input", { name: "name", required: true, maxlength: "128", placeholder: "BERT Fine-tuning - Sentiment Analysis", "data-field": "name" });
  const description = h("textarea", { name: "description", rows: "2", placeholder: "Fine-tuning BERT-base model for sentiment analysis on IMDB movie reviews", "data-field": "description" });
  const type = h("select", { name: "training_type", "data-field": "training_config.training_type" }, TRAINING_TYPES.map((t) => h("option", { value: t }, t)));
  const band = h("select", { name: "priority_band", "aria-label": "Priority band" }, ["High", "Medium", "Low"].map((b) => h("option", { value: b }, b)));
  const priority = h("input", { type: "number", name: "priority", min: "0", max: "10", step: "1", value: "8", "data-field": "scheduling_config.priority", "aria-label": "Priority number" });
  band.addEventListener("change", () => (priority.value = String(BAND_DEFAULT[band.value])));
  const experiment = h("input", { name: "experiment", placeholder: "sentiment-v2", "data-field": "labels" });
  const queue = h("input", { name: "queue", value: "default", "data-field": "scheduling_config.queue" });

  const epochs = h("input", { type: "number", name: "epochs", min: "0", step: "any", placeholder: "3", "data-field": "training_config.hyperparameters.num_train_epochs" });
  const maxSteps = h("input", { type: "number", name: "max_steps", min: "1", step: "1", "data-field": "training_config.hyperparameters.max_steps" });
  const batch = h("input", { type: "number", name: "batch_size", min: "1", step: "1", "data-field": "data_config.batch_size" });
  const lr = h("input", { type: "text", inputmode: "decimal", name: "learning_rate", placeholder: "0.00002", "data-field": "training_config.hyperparameters.learning_rate" });
  // Every optimizer name the API accepts: read from openapi.json at build time (vite.config.ts).
  const optimizer = h(
    "select",
    { name: "optimizer", "data-field": "training_config.hyperparameters.optimizer" },
    OPTIMIZERS.map((o) => h("option", { value: o }, o)),
  );

  const modelId = h("input", { name: "model_id", "data-field": "training_config.base_model.model_id" });
  const source = h("select", { name: "source", "data-field": "training_config.base_model.source" }, ["config", "huggingface", "s3"].map((s) => h("option", { value: s }, s)));
  const dataPath = h("input", { name: "data_path", required: true, placeholder: "s3://bucket/data/train.jsonl or a local path", "data-field": "data_config.sources" });
  const res = resourceInputs(TEMPLATE.resource_config);

  const editor = h("textarea", { class: "mono editor", rows: "28", spellcheck: "false", "aria-label": "The whole request (JSON)", "data-field": "request" });
  const formErrors = h("div", { class: "form-errors", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, "Create job");
  const forecastButton = h("button", { type: "button", name: "forecast" }, "Forecast");
  const forecastArea = h("div", { class: "forecast-area" });

  const formPane = h(
    "div",
    { class: "form-pane" },
    h("fieldset", null, h("legend", null, "Basic information"),
      field("Job name *", name, "Enter a descriptive name for the job"), field("Description", description),
      field("Job type *", type, "training type"),
      h("div", { class: "row" }, field("Priority *", band), field("Priority (0-10)", priority)),
      h("div", { class: "row" }, field("Experiment", experiment, "label experiment=<name>"), field("Queue", queue))),
    h("fieldset", null, h("legend", null, "Configuration"),
      h("div", { class: "row" }, field("Epochs", epochs, "Number of training epochs"), field("Max steps", maxSteps, "Stops here if set")),
      h("div", { class: "row" }, field("Batch size", batch, "Training batch size"), field("Learning rate", lr, "Initial learning rate")),
      field("Optimizer", optimizer, "adamw")),
    h("fieldset", null, h("legend", null, "Model & data"),
      h("div", { class: "row" }, field("Base model", modelId), field("Source", source, "config: a fresh model from model_kwargs")),
      field("Training data *", dataPath)),
    h("fieldset", null, h("legend", null, "Resources"),
      h("div", { class: "row" }, field("CPU cores", res.cpu), field("Memory (GB)", res.memory), field("GPU count", res.gpu, "0 for CPU-only"))),
  );
  const jsonPane = h("div", { class: "json-pane", hidden: true }, h("p", null, "Every config of the request; what you change here is what is submitted."), editor);
  const tabs = formAndJson<any>({
    formPane, jsonPane, editor, errors: formErrors, jsonLabel: "JSON (whole request)",
    read: () => { fromForm(); return request; },
    show: (value) => { request = value; toForm(); },
  });
  const form = h(
    "form",
    { class: "create", novalidate: true },
    tabs.tabs,
    formPane,
    jsonPane,
    formErrors,
    forecastArea,
    h("div", { class: "form-buttons" }, h("a", { class: "button", href: "#/jobs" }, "Cancel"), forecastButton, submit),
  );

  function toForm(): void {
    name.value = request.name ?? "";
    description.value = request.description ?? "";
    type.value = request.training_config?.training_type ?? "LORA";
    const p = request.scheduling_config?.priority ?? 5;
    priority.value = String(p);
    band.value = p >= 7 ? "High" : p >= 4 ? "Medium" : "Low";
    experiment.value = request.labels?.experiment ?? "";
    queue.value = request.scheduling_config?.queue ?? "default";
    const hp = request.training_config?.hyperparameters ?? {};
    epochs.value = hp.num_train_epochs ?? "";
    maxSteps.value = hp.max_steps ?? "";
    lr.value = hp.learning_rate ?? "";
    const chosen = String(hp.optimizer ?? hp.optim ?? "adamw").toLowerCase();
    optimizer.value = OPTIMIZERS.includes(chosen) ? chosen : "adamw";
    batch.value = request.data_config?.batch_size ?? "";
    modelId.value = request.training_config?.base_model?.model_id ?? "";
    source.value = request.training_config?.base_model?.source ?? "config";
    dataPath.value = request.data_config?.sources?.[0]?.path ?? "";
    const r = resourceInputs(request.resource_config ?? {});
    res.cpu.value = r.cpu.value;
    res.memory.value = r.memory.value;
    res.gpu.value = r.gpu.value;
  }

  function fromForm(): void {
    const set = (obj: any, key: string, value: string, asNumber = false) => {
      if (value.trim() === "") delete obj[key];
      else obj[key] = asNumber ? Number(value) : value.trim();
    };
    request.name = name.value;
    set(request, "description", description.value);
    request.labels = { ...(request.labels ?? {}) };
    set(request.labels, "experiment", experiment.value);
    request.training_config = { ...request.training_config, training_type: type.value };
    const hp = (request.training_config.hyperparameters = { ...(request.training_config.hyperparameters ?? {}) });
    set(hp, "num_train_epochs", epochs.value);
    set(hp, "max_steps", maxSteps.value);
    set(hp, "learning_rate", lr.value);
    hp.optimizer = optimizer.value;
    request.training_config.base_model = { ...request.training_config.base_model, model_id: modelId.value, source: source.value };
    request.data_config = { ...request.data_config };
    set(request.data_config, "batch_size", batch.value, true);
    request.data_config.sources = [{ ...(request.data_config.sources?.[0] ?? {}), path: dataPath.value }];
    request.resource_config = readResources(res, request.resource_config);
    request.scheduling_config = { ...request.scheduling_config, priority: Number(priority.value), queue: queue.value || "default" };
  }

  /** The submit and the dry run alike: the body from the active tab, the server's 422s at their fields. */
  async function send<T>(dryRun: boolean, done: (answer: T) => void): Promise<void> {
    clear(formErrors);
    clear(forecastArea);
    const body = tabs.value();
    if (body === null) return;
    submit.disabled = forecastButton.disabled = true;
    try {
      const query = dryRun ? { dry_run: "true" } : undefined;
      done(await api().call<T>("POST", "/jobs", { query, body }));
    } catch (exc) {
      if (exc instanceof ApiError && !exc.authProblem) showFieldErrors(form, exc, formErrors);
      else reportError(exc);
    } finally {
      submit.disabled = forecastButton.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void send<any>(false, (job) => {
      toast(`Created ${job.name}`);
      location.hash = `#/jobs/${encodeURIComponent(job.job_id)}`;
    });
  });
  forecastButton.addEventListener("click", () => {
    void send<Forecast>(true, (forecast) => {
      clearFieldErrors(form); // the request passes every check now: the last 422's notes go
      forecastArea.append(forecastPanel(forecast));
    });
  });
  // A forecast is of the request as it was: any edit marks it out of date.
  form.addEventListener("input", () => forecastArea.querySelector(".forecast")?.classList.add("stale"));

  return {
    title: "Create job",
    async render(main) {
      if (from) {
        // "Duplicate": start from an existing job's request.
        const job = await api().get(`/jobs/${encodeURIComponent(from)}`);
        request = {
          name: `${job.name} (copy)`, description: job.description, labels: job.labels, training_config: job.training_config,
          data_config: job.data_config, resource_config: job.resource_config, output_config: job.output_config, scheduling_config: job.scheduling_config,
        };
      }
      toForm();
      clear(main, h("div", { class: "view-head" }, h("h1", null, "Create job")), form);
      name.focus();
    },
  };
}
