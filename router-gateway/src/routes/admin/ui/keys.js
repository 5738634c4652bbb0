// The keys section: the list, and create, rotate and revoke through /admin/v1/keys. A new
// secret is shown once, in a dialog the user closes; it is never stored by the page.
import { api, problem, refresh } from "./app.js";
import { el, fillTable, today, usage, usd } from "./render.js";

function date(secs) {
  return secs ? new Date(secs * 1000).toLocaleString("en-CA", { hour12: false }) : "—";
}

/** Shows `secret` of key `id` in the dialog, until the user closes it. */
function showSecret(what, secret) {
  document.getElementById("secret-what").textContent = what;
  document.getElementById("secret-value").textContent = secret;
  const dialog = document.getElementById("secret");
  dialog.addEventListener("close", () => {
    document.getElementById("secret-value").textContent = "";
  }, { once: true });
  dialog.showModal();
}

/** Runs `action`, saying in the banner what failed; the page is refreshed after it. */
async function change(what, action) {
  try {
    await action();
    problem("keys-change", null);
  } catch (e) {
    problem("keys-change", `Could not ${what}: ${e.message}`);
  }
  await refresh();
}

function rotate(key) {
  if (!window.confirm(`Rotate key ${key.id}? Its current secret stays accepted for one hour.`)) return;
  change(`rotate key ${key.id}`, async () => {
    const made = await api(`/admin/v1/keys/${encodeURIComponent(key.id)}/rotate`, { method: "POST", body: "{}" });
    showSecret(`Key ${made.id} (tenant ${made.tenant}) has a new secret.`, made.key);
  });
}

function revoke(key) {
  if (!window.confirm(`Revoke key ${key.id} of ${key.tenant}? It stops working at once.`)) return;
  change(`revoke key ${key.id}`, () => api(`/admin/v1/keys/${encodeURIComponent(key.id)}/revoke`, { method: "POST", body: "{}" }));
}

/** A key's own limits: `rpm 60, $5/day`, or `tenant's only`. */
function limitsText(l) {
  const parts = [];
  for (const name of ["rpm", "tpm", "concurrency"]) {
    if (l && l[name]) parts.push(`${name} ${l[name]}`);
  }
  if (l && l.daily_usd) parts.push(`$${l.daily_usd}/day`);
  if (l && l.monthly_usd) parts.push(`$${l.monthly_usd}/month`);
  return parts.length ? parts.join(", ") : "tenant's only";
}

/** `/admin/v1/keys`. */
export function renderKeys(body) {
  const rows = body.data.map((k) => {
    const actions = [];
    if (k.source === "runtime" && k.state === "active") {
      actions.push(el("button", { type: "button", class: "quiet", "aria-label": `Rotate key ${k.id}`, onclick: () => rotate(k) }, "Rotate"));
      actions.push(el("button", { type: "button", class: "danger", "aria-label": `Revoke key ${k.id}`, onclick: () => revoke(k) }, "Revoke"));
    }
    return el("tr", {},
      el("th", { scope: "row" }, el("code", {}, k.id)),
      el("td", {}, k.name || "—"),
      el("td", {}, k.tenant),
      el("td", {}, k.models.length ? k.models.join(", ") : "all"),
      el("td", {}, limitsText(k.limits)),
      k.usage ? usage(k.usage.spend.today_usd, k.usage.spend.daily_budget_usd, "", usd) : el("td", { class: "muted" }, "—"),
      today(k.today),
      el("td", {}, k.state),
      el("td", {}, k.source === "config" ? "configuration (read-only)" : "runtime"),
      el("td", {}, date(k.created_at)),
      el("td", {}, date(k.expires_at)),
      el("td", {}, actions.length ? actions : el("span", { class: "muted" }, "—")));
  });
  fillTable("keys", rows, "No keys yet: create one above.");
}

/** Wires the create form. */
export function setupKeys() {
  const form = document.getElementById("create-key");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const tenant = String(data.get("tenant") || "").trim();
    const models = String(data.get("models") || "").split(",").map((m) => m.trim()).filter(Boolean);
    const body = { tenant, name: String(data.get("name") || "").trim(), models, limits: {} };
    const rpm = String(data.get("rpm") || "").trim();
    const daily = String(data.get("daily_usd") || "").trim();
    if (rpm) body.limits.rpm = Number(rpm);
    if (daily) body.limits.daily_usd = Number(daily);
    const button = form.querySelector("button");
    button.disabled = true;
    change(`create a key for ${tenant}`, async () => {
      const made = await api("/admin/v1/keys", { method: "POST", body: JSON.stringify(body) });
      form.reset();
      showSecret(`Key ${made.id} for tenant ${made.tenant} was created.`, made.key);
    }).finally(() => { button.disabled = false; });
  });
}
