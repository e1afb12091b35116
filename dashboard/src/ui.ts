import { Api, ApiError, Unreachable } from "./api";
import type { Credentials, SiteConfig } from "./auth";
import { clear, h, qs } from "./dom";

export const app = {
  config: null as SiteConfig | null,
  creds: null as Credentials | null,
  api: null as Api | null,
};

export function api(): Api {
  if (!app.api) throw new ApiError(403, "Not signed in.");
  return app.api;
}

// --- the banner: what is wrong and what to do ----------------------------------------------------

type Content = Node | string | null | undefined | false | Content[];

export function showBanner(kind: "error" | "info", ...content: Content[]): void {
  const banner = qs("#banner");
  banner.className = `banner banner-${kind}`;
  clear(banner, ...content);
  banner.hidden = false;
}

export function hideBanner(): void {
  qs("#banner").hidden = true;
}

export function signInHint(): (Node | string)[] {
  if (app.config?.mode === "cloud") return ["Sign in again: ", h("a", { href: "#/signin" }, "Sign in")];
  return ["Run ", h("code", null, "trainplane dashboard"), " to open a signed-in page, or ", h("a", { href: "#/signin" }, "enter keys"), "."];
}

/** A failed call: the banner for the API being down or the credentials refused; else a message to show. */
export function reportError(exc: unknown, where?: HTMLElement): void {
  if (exc instanceof Unreachable) {
    const url = app.config?.api_url || location.origin;
    showBanner(
      "error",
      h("strong", null, "API unreachable. "),
      `Nothing answered at ${url}. `,
      app.config?.mode === "local" ? ["Is ", h("code", null, "trainplane up"), " still running? "] : "Check your network. ",
      "This page retries every few seconds.",
    );
    return;
  }
  if (exc instanceof ApiError && exc.authProblem) {
    showBanner("error", h("strong", null, "Credentials refused. "), `${exc.message} — they may have expired. `, ...signInHint());
    return;
  }
  const message = exc instanceof Error ? exc.message : String(exc);
  if (where) clear(where, h("p", { class: "error", role: "alert" }, message));
  else toast(message, "error");
}

export function toast(message: string, kind: "ok" | "error" = "ok"): void {
  const el = h("div", { class: `toast toast-${kind}`, role: "status" }, message);
  document.body.appendChild(el);
  setTimeout(() => el.remove(), 4000);
}

// --- dialogs --------------------------------------------------------------------------------------

/**
 * A modal dialog: `body` plus Cancel / confirm buttons. `onConfirm` runs on confirm; if it throws an
 * ApiError the dialog stays open and shows it (422s at their fields via showFieldErrors).
 */
export function dialog(opts: {
  title: string;
  body: (Node | string | null)[];
  confirm: string;
  danger?: boolean;
  onConfirm: (form: HTMLFormElement) => Promise<void>;
}): Promise<boolean> {
  const dlg = qs<HTMLDialogElement>("#dialog");
  return new Promise((resolve) => {
    const errors = h("div", { class: "form-errors", role: "alert" });
    const confirmButton = h("button", { type: "submit", class: opts.danger ? "danger" : "primary" }, opts.confirm);
    const form = h(
      "form",
      { method: "dialog", class: "dialog-form", novalidate: true },
      h("h2", null, opts.title),
      ...opts.body,
      errors,
      h(
        "div",
        { class: "dialog-buttons" },
        h("button", { type: "button", onclick: () => { dlg.close(); resolve(false); } }, "Cancel"),
        confirmButton,
      ),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      confirmButton.disabled = true;
      clear(errors);
      try {
        await opts.onConfirm(form);
        dlg.close();
        resolve(true);
      } catch (exc) {
        if (exc instanceof ApiError && !exc.authProblem) {
          showFieldErrors(form, exc, errors);
        } else {
          dlg.close();
          reportError(exc);
          resolve(false);
        }
      } finally {
        confirmButton.disabled = false;
      }
    });
    dlg.onclose = () => resolve(false);
    clear(dlg, form);
    dlg.showModal();
    (form.querySelector("input, select, textarea") as HTMLElement | null)?.focus();
  });
}

/**
 * The server's 422 errors at the fields they name: an element with data-field="<field>" (or the closest
 * prefix of it) gets the message under it; errors no field shows go to `fallback`.
 */
export function showFieldErrors(form: HTMLElement, exc: ApiError, fallback: HTMLElement): void {
  clearFieldErrors(form);
  const unplaced: string[] = [];
  const errors = exc.errors.length ? exc.errors : [{ field: "", message: exc.message }];
  let first: HTMLElement | null = null;
  for (const error of errors) {
    const target = fieldElement(form, error.field);
    if (!target) {
      unplaced.push(error.field ? `${error.field}: ${error.message}` : error.message);
      continue;
    }
    target.setAttribute("aria-invalid", "true");
    const note = h("p", { class: "field-error", "data-error-for": error.field, role: "alert" }, error.message);
    (target.closest("label") ?? target).insertAdjacentElement("afterend", note);
    first ??= target;
  }
  clear(fallback, ...unplaced.map((m) => h("p", { class: "error" }, m)));
  if (unplaced.length && !exc.errors.length) fallback.prepend(h("strong", null, `${exc.status}: `));
  first?.focus();
}

/** Removes the notes and marks the last 422 left at the form's fields. */
export function clearFieldErrors(form: HTMLElement): void {
  form.querySelectorAll(".field-error").forEach((el) => el.remove());
  form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
}

function fieldElement(form: HTMLElement, field: string): HTMLElement | null {
  let name = field;
  while (name) {
    const el = form.querySelector<HTMLElement>(`[data-field="${CSS.escape(name)}"]`);
    if (el && !(el as HTMLInputElement).disabled && el.offsetParent !== null) return el;
    const cut = name.lastIndexOf(".");
    if (cut < 0) break;
    name = name.slice(0, cut);
  }
  return null;
}

export function field(label: string, input: HTMLElement, help?: string): HTMLLabelElement {
  return h("label", { class: "field" }, h("span", { class: "field-label" }, label), input, help ? h("small", null, help) : null);
}
