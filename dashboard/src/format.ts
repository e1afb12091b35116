export const STATUSES = [
  "PENDING", "QUEUED", "SCHEDULING", "PREPARING", "TRAINING", "CHECKPOINTING", "EVALUATING", "EXPORTING",
  "COMPLETED", "PAUSED", "CANCELLED", "FAILED", "PREEMPTED",
] as const;
export const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "PREEMPTED"]);
export const RUNNING = new Set(["SCHEDULING", "PREPARING", "TRAINING", "CHECKPOINTING", "EVALUATING", "EXPORTING"]);
export const EDITABLE = new Set(["PENDING", "QUEUED", "FAILED"]);
declare const __API_OPTIMIZERS__: string[];
/** Every optimizer name the API accepts (openapi.json's pattern, read at build time: vite.config.ts). */
export const OPTIMIZERS: readonly string[] = __API_OPTIMIZERS__;
/** Log lines written for machines (schemas/trainer.py EVENT_PREFIX, METRIC_LINE_PREFIX): hidden by default. */
export const MACHINE_LINE_PREFIXES = ["TRAINPLANE_EVENT ", "trainplane_metrics "] as const;
export const SWEEP_TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
export const TRIAL_STATES = ["SUBMITTING", "RUNNING", "COMPLETE", "PRUNED", "FAIL"] as const;
export const WAIT_REASONS = ["QUOTA", "BORROW_LIMIT", "COHORT_FULL", "PRIORITY", "BUDGET"] as const;
export const TRAINING_TYPES = ["SFT", "LORA", "QLORA", "DPO", "RLHF", "CONTINUED_PRETRAIN", "FULL_FINETUNE"] as const;

/** Badge colour family per status (CSS classes badge-<family>). */
export function statusFamily(status: string): string {
  if (status === "COMPLETED") return "ok";
  if (status === "FAILED") return "bad";
  if (status === "CANCELLED" || status === "PREEMPTED") return "muted";
  if (status === "PAUSED") return "warn";
  if (status === "PENDING" || status === "QUEUED") return "wait";
  return "run";
}

/** Kaisar's bands over our 0-10 priority: High 7-10, Medium 4-6, Low 0-3. */
export function priorityBand(priority: number): "High" | "Medium" | "Low" {
  if (priority >= 7) return "High";
  if (priority >= 4) return "Medium";
  return "Low";
}
export const BAND_RANGES: Record<string, [number, number]> = { High: [7, 10], Medium: [4, 6], Low: [0, 3] };

export function relativeTime(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return "—";
  const seconds = Math.round((now - Date.parse(iso)) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] =
    abs < 45 ? [abs, "s"] : abs < 3600 ? [Math.round(abs / 60), "min"] : abs < 86400 ? [Math.round(abs / 3600), "h"] : [Math.round(abs / 86400), "d"];
  if (abs < 5) return "just now";
  return seconds >= 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
}

export function absoluteTime(iso: string | null | undefined): string {
  if (!iso) return "";
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export function money(usd: number | null | undefined): string {
  return usd === null || usd === undefined ? "—" : `$${usd.toFixed(usd < 1 ? 4 : 2)}`;
}

export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${size} B` : `${size.toFixed(size < 10 ? 1 : 0)} ${units[unit]}`;
}

export function num(value: unknown): string {
  if (typeof value !== "number") return value === null || value === undefined ? "—" : String(value);
  return Math.abs(value) >= 1000 || Number.isInteger(value) ? String(value) : value.toPrecision(4);
}
