// Experiment tracking on the job detail (docs/TRACKING.md): the MLflow run the trainer reported (a link when the
// tracking server is http(s)), its parent run for a retry, the W&B run (a link online; offline, where its files
// are for `wandb sync`), and where the TensorBoard event files are.
import type { Job } from "../actions";
import { clear, h } from "../dom";

// Only a web URL becomes a link: a recorded value is data, never a javascript: or data: URL.
function safeLink(url: unknown): string | null {
  if (typeof url !== "string") return null;
  try {
    const parsed = new URL(url);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function row(label: string, value: Node | string): Node[] {
  return [h("dt", null, label), h("dd", null, value)];
}

// Fills `section` and shows it when the job names a tracker; hides it otherwise.
export function renderTracking(section: HTMLElement, j: Job): void {
  const config = j.output_config?.tracking ?? null;
  const record = j.tracking ?? null;
  section.hidden = !config && !record;
  if (section.hidden) return;
  const rows: Node[][] = [];
  if (config?.mlflow) {
    const server = `${config.mlflow.tracking_uri} (experiment ${config.mlflow.experiment_name ?? "trainplane"})`;
    if (record?.mlflow_run_id) {
      const href = safeLink(record.mlflow_run_url);
      const run = href
        ? h("a", { href, target: "_blank", rel: "noopener noreferrer", "data-testid": "mlflow-run-link" }, record.mlflow_run_id)
        : h("code", null, record.mlflow_run_id);
      rows.push(row("MLflow run", run), row("Tracking server", server));
      if (record.mlflow_parent_run_id) rows.push(row("Parent run", h("code", null, record.mlflow_parent_run_id)));
    } else {
      rows.push(row("MLflow run", `not started yet (${server})`));
    }
  }
  if (config?.wandb) {
    const where = `${config.wandb.entity ? `${config.wandb.entity}/` : ""}${config.wandb.project} (${config.wandb.mode ?? "online"})`;
    if (record?.wandb_run_id) {
      const href = safeLink(record.wandb_run_url);
      const run = href
        ? h("a", { href, target: "_blank", rel: "noopener noreferrer", "data-testid": "wandb-run-link" }, record.wandb_run_id)
        : h("code", { "data-testid": "wandb-run" }, record.wandb_run_id);
      rows.push(row("W&B run", run), row("W&B project", where));
      if (record.wandb_offline_uri) rows.push(row("W&B files (offline)", h("code", null, `${record.wandb_offline_uri}/`)));
      if (record.wandb_parent_run_id) rows.push(row("W&B parent run", h("code", null, `${record.wandb_parent_run_id} (group ${record.wandb_group ?? "-"})`)));
    } else {
      rows.push(row("W&B run", `not started yet (${where})`));
    }
  }
  if (record?.tensorboard_uri) rows.push(row("TensorBoard", h("code", null, record.tensorboard_uri)));
  else if (config?.tensorboard?.enabled !== false && config?.tensorboard) rows.push(row("TensorBoard", "event files under the job's tensorboard/ prefix, once it runs"));
  clear(section, h("h2", { id: "h-tracking" }, "Experiment tracking"), h("dl", { class: "kv", "data-testid": "tracking" }, rows));
}
