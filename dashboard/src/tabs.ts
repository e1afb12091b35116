// A form with a JSON tab over the same value (the create form's whole request, a sweep's OME config):
// switching tabs converts one into the other; a submit takes the value of the tab shown.
import { clear, h } from "./dom";

export function formAndJson<T>(opts: {
  formPane: HTMLElement;
  jsonPane: HTMLElement;
  editor: HTMLTextAreaElement;
  errors: HTMLElement;
  jsonLabel: string;
  /** The form's value (what the JSON tab shows when opened). */
  read: () => T;
  /** Put a value edited as JSON back into the form. */
  show: (value: T) => void;
}) {
  let current: "form" | "json" = "form";
  const formTab = h("button", { type: "button", role: "tab", "aria-selected": "true", onclick: () => mode("form") }, "Form");
  const jsonTab = h("button", { type: "button", role: "tab", "aria-selected": "false", onclick: () => mode("json") }, opts.jsonLabel);

  function parsed(): T | null {
    try {
      return JSON.parse(opts.editor.value) as T;
    } catch (exc) {
      clear(opts.errors, h("p", { class: "error" }, `The JSON does not parse: ${(exc as Error).message}`));
      return null;
    }
  }

  function mode(to: "form" | "json"): void {
    if (to === current) return;
    if (to === "json") opts.editor.value = JSON.stringify(opts.read(), null, 2);
    else {
      const value = parsed();
      if (value === null) return;
      opts.show(value);
    }
    current = to;
    opts.formPane.hidden = to !== "form";
    opts.jsonPane.hidden = to !== "json";
    formTab.setAttribute("aria-selected", String(to === "form"));
    jsonTab.setAttribute("aria-selected", String(to === "json"));
  }

  return {
    tabs: h("div", { class: "tabs", role: "tablist" }, formTab, jsonTab),
    /** The value to submit: the JSON tab's (null, with the error shown, when it does not parse) or the form's. */
    value: (): T | null => (current === "json" ? parsed() : opts.read()),
  };
}
