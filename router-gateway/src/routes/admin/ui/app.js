// llmroute dashboard: reads /admin/v1 every 5 s and draws it. The browser sends the admin
// credentials it signed in with (HTTP Basic) on each of these same-origin requests.
import { renderDeployments, renderTenants, renderRequests } from "./render.js";
import { renderCharts } from "./charts.js";
import { renderKeys, setupKeys } from "./keys.js";

const REFRESH_MS = 5000;
const problems = new Map();

/** Shows every current problem in the banner, or hides it. */
function showProblems() {
  const banner = document.getElementById("banner");
  banner.textContent = [...problems.values()].join("\n");
  banner.hidden = problems.size === 0;
}

/** Records (or clears, with null) the problem of one part of the page. */
export function problem(part, message) {
  if (message) problems.set(part, message);
  else problems.delete(part);
  showProblems();
}

window.addEventListener("error", (e) => problem("script", `The page's script failed: ${e.message}. Reload the page; if it persists, report it.`));
window.addEventListener("unhandledrejection", (e) => problem("script", `The page's script failed: ${e.reason}. Reload the page; if it persists, report it.`));

/** GET or send JSON to `path`; the error says what failed and what to do. */
export async function api(path, options = {}) {
  let response;
  try {
    response = await fetch(path, {
      credentials: "same-origin",
      cache: "no-store",
      ...options,
      // `x-llmroute-ui`: the gateway takes a change signed in with HTTP Basic only with it.
      headers: { accept: "application/json", "x-llmroute-ui": "1", ...(options.body ? { "content-type": "application/json" } : {}) },
    });
  } catch (e) {
    throw new Error(`${path}: the gateway did not answer (${e.message}); is it running?`);
  }
  let body = null;
  try { body = await response.json(); } catch { body = null; }
  if (!response.ok) {
    const said = body && body.error && body.error.message ? body.error.message : response.statusText;
    const hint = response.status === 401 ? " Reload the page and sign in with an admin key." : "";
    throw new Error(`${path}: HTTP ${response.status}: ${said}.${hint}`);
  }
  return body;
}

const parts = [
  { name: "deployments", path: "/admin/v1/deployments", draw: renderDeployments },
  { name: "tenants", path: "/admin/v1/tenants", draw: renderTenants },
  { name: "requests", path: "/admin/v1/requests?limit=50", draw: renderRequests },
  { name: "series", path: "/admin/v1/series?hours=24", draw: renderCharts },
  { name: "keys", path: "/admin/v1/keys", draw: renderKeys },
];

/** Reads every part; each that fails says so in the banner and keeps its last data. */
export async function refresh() {
  await Promise.all(parts.map(async (part) => {
    try {
      part.draw(await api(part.path));
      problem(part.name, null);
    } catch (e) {
      problem(part.name, `Could not update ${part.name}: ${e.message}`);
    }
  }));
  const loading = document.getElementById("loading");
  if (loading) loading.remove();
  const now = new Date();
  const hms = [now.getHours(), now.getMinutes(), now.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
  document.getElementById("updated").textContent = `updated ${hms}, every ${REFRESH_MS / 1000} s`;
}

async function loop() {
  await refresh();
  setTimeout(loop, REFRESH_MS);
}

setupKeys();
loop();
