import { Api, ApiError, Unreachable } from "./api";
import { exchangeLocalCode, expired, finishCognitoSignIn, loadCredentials, saveCredentials, startCognitoSignIn, type SiteConfig } from "./auth";
import { clear, h, qs } from "./dom";
import "./style.css";
import { app, hideBanner, reportError, showBanner, signInHint } from "./ui";
import { createView } from "./views/create";
import { detailView } from "./views/detail";
import { jobsView } from "./views/jobs";
import { policiesView } from "./views/policies";
import { budgetsView } from "./views/budgets";
import { compareView } from "./views/compare";
import { queuesView } from "./views/queues";
import { sweepCreateView } from "./views/sweepCreate";
import { sweepsView, sweepView } from "./views/sweeps";
import { teamsView, teamView } from "./views/teams";
import { webhooksView } from "./views/webhooks";
import type { View } from "./views/view";

const REFRESH_MS = 3000;
let current: View | null = null;
let timer = 0;
let refreshing = false;

// --- theme ---------------------------------------------------------------------------------------

function applyTheme(theme: string | null): void {
  const dark = theme ? theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = dark ? "dark" : "light";
}
applyTheme(localStorage.getItem("trainplane.theme"));

function toggleTheme(): void {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem("trainplane.theme", next);
  applyTheme(next);
  void route(); // charts pick their colours at draw time
}

// --- shell ---------------------------------------------------------------------------------------

function renderHeader(): void {
  const link = (href: string, text: string, key: string) => h("a", { href, "data-nav": key, "aria-keyshortcuts": `g ${key[0]}` }, text);
  clear(
    qs("#top"),
    h("nav", { class: "topnav", "aria-label": "Main" },
      h("a", { class: "brand", href: "#/jobs" }, "trainplane"),
      link("#/jobs", "Jobs", "jobs"), link("#/create", "Create", "create"), link("#/sweeps", "Sweeps", "sweeps"), link("#/queues", "Queues", "queues"), link("#/teams", "Teams", "teams"),
      link("#/budgets", "Budgets", "budgets"), link("#/webhooks", "Webhooks", "webhooks"), link("#/policies", "Policies", "policies"),
      h("span", { class: "spacer" }),
      app.creds ? h("span", { class: "who", "data-testid": "principal", title: "Signed in as" }, app.creds.principal) : null,
      h("button", { class: "icon", onclick: toggleTheme, "aria-label": "Toggle dark mode", title: "Dark mode (t)" }, "◐"),
      app.creds ? h("button", { class: "icon", onclick: signOut }, "Sign out") : null),
  );
}

function signOut(): void {
  saveCredentials(null);
  app.creds = null;
  app.api = null;
  const cognito = app.config?.mode === "cloud" ? app.config.cognito : undefined;
  if (cognito) {
    // End the Hosted UI session too, or "Sign in" would sign the same person straight back in.
    const params = new URLSearchParams({ client_id: cognito.client_id, logout_uri: location.origin + "/" });
    location.assign(`${cognito.domain}/logout?${params}`);
    return;
  }
  location.hash = "#/signin";
}

function signInView(): View {
  return {
    title: "Sign in",
    async render(main) {
      const local = app.config?.mode !== "cloud";
      const key = h("input", { name: "access_key_id", autocomplete: "off", required: true, "aria-label": "Access key id" });
      const secret = h("input", { name: "secret_access_key", type: "password", autocomplete: "off", required: true, "aria-label": "Secret access key" });
      const who = h("input", { name: "principal", placeholder: "alice", "aria-label": "Name to show" });
      const form = h("form", { class: "signin-keys" },
        h("label", { class: "field" }, h("span", { class: "field-label" }, "Access key id"), key),
        h("label", { class: "field" }, h("span", { class: "field-label" }, "Secret access key"), secret),
        h("label", { class: "field" }, h("span", { class: "field-label" }, "Name to show"), who),
        h("button", { type: "submit", class: "primary" }, "Sign in with these keys"));
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        signIn({ accessKeyId: key.value.trim(), secretAccessKey: secret.value.trim(), principal: who.value.trim() || key.value.trim() });
        location.hash = "#/jobs";
      });
      clear(
        main,
        h("div", { class: "signin panel" },
          h("h1", null, "Sign in"),
          h("p", null, "Every request this page makes is signed with AWS SigV4, like the CLI's."),
          local
            ? h("p", null, "Local mode: run ", h("code", null, "trainplane dashboard"), " (add ", h("code", null, "--principal NAME"), " for another principal of endpoint.json): it opens this page signed in.")
            : h("button", { class: "primary", onclick: () => void startCognitoSignIn(app.config!.cognito!) }, "Sign in with your team account"),
          h("details", { open: false }, h("summary", null, "Or use access keys"), form)),
      );
    },
  };
}

function signIn(creds: NonNullable<typeof app.creds>): void {
  saveCredentials(creds);
  app.creds = creds;
  app.api = new Api(app.config!, creds);
  hideBanner();
}

// --- routing -------------------------------------------------------------------------------------

function viewFor(hash: string): View {
  const [path, qs] = hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(qs ?? "");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "signin" || !app.creds) return signInView();
  if (parts[0] === "jobs" && parts[1]) return detailView(decodeURIComponent(parts[1]));
  if (parts[0] === "create") return createView(params);
  if (parts[0] === "sweeps" && parts[1] === "new") return sweepCreateView(params);
  if (parts[0] === "sweeps" && parts[1]) return sweepView(decodeURIComponent(parts[1]));
  if (parts[0] === "sweeps") return sweepsView();
  if (parts[0] === "compare") return compareView(params);
  if (parts[0] === "teams" && parts[1]) return teamView(decodeURIComponent(parts[1]));
  if (parts[0] === "teams") return teamsView();
  if (parts[0] === "webhooks") return webhooksView();
  if (parts[0] === "budgets") return budgetsView();
  if (parts[0] === "queues") return queuesView();
  if (parts[0] === "policies") return policiesView();
  return jobsView(params);
}

async function route(): Promise<void> {
  current?.dispose?.();
  clearTimeout(timer);
  if (app.creds && expired(app.creds)) {
    showBanner("error", h("strong", null, "Your session has expired. "), ...signInHint());
  }
  renderHeader();
  const view = viewFor(location.hash);
  current = view;
  document.title = `${view.title} · trainplane`;
  const section = location.hash.replace(/^#\/?/, "").split(/[/?]/)[0] || "jobs";
  document.querySelectorAll("[data-nav]").forEach((a) => a.toggleAttribute("aria-current", (a as HTMLElement).dataset.nav === section));
  const main = qs("#main");
  main.setAttribute("aria-busy", "true");
  try {
    await view.render(main);
    // A successful view clears an old error; the sign-in page keeps it (it says why you are there).
    if (app.creds && !expired(app.creds) && view.title !== "Sign in") hideBanner();
  } catch (exc) {
    if (!(exc instanceof Unreachable) && !(exc instanceof ApiError && exc.authProblem)) {
      clear(main, h("div", { class: "panel error-state" }, h("h1", null, "Something went wrong"), h("p", null, exc instanceof Error ? exc.message : String(exc)), h("a", { class: "button", href: "#/jobs" }, "Back to jobs")));
    } else {
      clear(main, h("div", { class: "panel error-state" }, h("h1", null, exc instanceof Unreachable ? "The API is unreachable" : "Not signed in"), h("p", null, "See the message above.")));
    }
    reportError(exc);
  } finally {
    main.removeAttribute("aria-busy");
  }
  schedule(view);
}

function schedule(view: View): void {
  if (!view.refresh) return;
  timer = window.setTimeout(async () => {
    if (current !== view) return;
    if (!refreshing && !document.querySelector("dialog[open]")) {
      refreshing = true;
      try {
        await view.refresh!();
        if (qs("#banner").classList.contains("banner-error") && !(app.creds && expired(app.creds))) hideBanner();
      } catch (exc) {
        reportError(exc);
      } finally {
        refreshing = false;
      }
    }
    if (current === view) schedule(view);
  }, REFRESH_MS);
}

// Global keys: g j / g c / g q / g p to move, t for the theme, n to create. Never while typing.
let pendingG = false;
document.addEventListener("keydown", (event) => {
  const target = event.target as HTMLElement;
  if (event.ctrlKey || event.metaKey || event.altKey || target.matches("input, textarea, select") || document.querySelector("dialog[open]")) return;
  if (pendingG) {
    pendingG = false;
    const to = ({ j: "#/jobs", c: "#/create", q: "#/queues", p: "#/policies", s: "#/sweeps", t: "#/teams", w: "#/webhooks", b: "#/budgets" } as Record<string, string>)[event.key];
    if (to) { location.hash = to; event.preventDefault(); }
    return;
  }
  if (event.key === "g") { pendingG = true; setTimeout(() => (pendingG = false), 1000); }
  else if (event.key === "t") toggleTheme();
  else if (event.key === "n") location.hash = "#/create";
  else if (event.key === "Escape") document.querySelectorAll(".menu").forEach((m) => m.remove());
});
document.addEventListener("click", (e) => {
  if (!(e.target as HTMLElement).closest(".menu-wrap")) document.querySelectorAll(".menu").forEach((m) => m.remove());
});

// --- start ---------------------------------------------------------------------------------------

async function start(): Promise<void> {
  try {
    const response = await fetch("/dashboard-config.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    app.config = (await response.json()) as SiteConfig;
  } catch (exc) {
    showBanner("error", h("strong", null, "API unreachable. "), `The page could not load its configuration (${exc}). Is the server running? Reload when it is.`);
    return;
  }
  // Local hand-off: #code=<one-time code>. Take it off the address bar and out of history first.
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  const code = fragment.get("code");
  if (code) {
    history.replaceState(null, "", location.pathname + "#/jobs");
    try {
      signIn(await exchangeLocalCode(code));
    } catch (exc) {
      showBanner("error", h("strong", null, "Sign-in failed. "), `${(exc as Error).message}. The code is single-use and valid for 2 minutes: run `, h("code", null, "trainplane dashboard"), " again.");
    }
  }
  // Cognito hand-off: ?code=&state= from the Hosted UI.
  const query = new URLSearchParams(location.search);
  if (app.config.mode === "cloud" && query.get("code") && query.get("state")) {
    history.replaceState(null, "", location.pathname + "#/jobs");
    try {
      signIn(await finishCognitoSignIn(app.config, query.get("code")!, query.get("state")!));
    } catch (exc) {
      showBanner("error", h("strong", null, "Sign-in failed. "), (exc as Error).message);
    }
  }
  if (!app.creds) {
    const saved = loadCredentials();
    if (saved) signIn(saved);
  }
  window.addEventListener("hashchange", () => void route());
  await route();
}

void start();
