// The dashboard in headless Chromium (puppeteer-core, the system's browser: no download).
//
//   node dashboard.mjs BASE EXPECT_JSON SCREENSHOT
//
// The admin key comes in $LLMROUTE_UI_ADMIN_KEY, the tenant's in $LLMROUTE_UI_TENANT_KEY (never
// on the command line). EXPECT_JSON: {"deployments": [names], "tenant": name, "requests": n}.
// Checks, each a failure when it does not hold: /ui without credentials, or with the tenant's
// key, is refused (401 asking for Basic credentials; 403); with the admin key the page shows both
// deployments with their limits as text, the tenant's spend, the requests sent, the charts; a
// key made in the page shows its secret once in a dialog, can be rotated and revoked; no error
// banner shows and no key is in the page's URL. Then saves a screenshot.
import puppeteer from "puppeteer-core";

const [base, expectJson, screenshot] = process.argv.slice(2);
const expect = JSON.parse(expectJson);
const admin = process.env.LLMROUTE_UI_ADMIN_KEY;
const tenantKey = process.env.LLMROUTE_UI_TENANT_KEY;
const WAIT = { timeout: 20000 };

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

/** The text of the rows of table `id`, one string per row. */
async function rows(page, id) {
  return page.$$eval(`#${id} tbody tr`, (trs) => trs.map((tr) => tr.innerText.replace(/\s+/g, " ").trim()));
}

/** Whether the secret dialog's text is emptied; its `close` event, which empties it, comes
 * just after the dialog closes. */
async function secretCleared(page) {
  return page
    .waitForFunction(() => document.getElementById("secret-value").textContent === "", WAIT)
    .then(() => true, () => false);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  // Without credentials: 401 asking for Basic ones, a one-line text body. (Headless Chromium
  // has no sign-in dialog to show: it fails such a navigation, so this one is asked directly.)
  const refused = await fetch(`${base}/ui`);
  check(refused.status === 401, "/ui without credentials is 401");
  check(/^Basic realm="llmroute admin"/.test(refused.headers.get("www-authenticate") || ""), "the 401 asks for Basic credentials");
  const text = (await refused.text()).trim();
  check(text.includes("admin key") && !text.includes("\n"), `the 401 says what to do in one line: ${text}`);
  const anonymous = await browser.createBrowserContext();
  const bare = await anonymous.newPage();
  await bare.authenticate({ username: "someone", password: tenantKey });
  const tenant = await bare.goto(`${base}/ui`);
  check(tenant.status() === 403, "/ui with a tenant's key is 403");
  await anonymous.close();

  // With the admin key, as a browser's sign-in dialog would send it.
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const failures = [];
  page.on("pageerror", (e) => failures.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") failures.push(`console: ${m.text()}`); });
  page.on("dialog", (d) => d.accept());
  await page.authenticate({ username: "admin", password: admin });
  const opened = await page.goto(`${base}/ui`);
  check(opened.status() === 200, "/ui with the admin key is 200");
  check(opened.headers()["content-security-policy"] === "default-src 'self'", "the page has its CSP");

  await page.waitForFunction((n) => document.querySelectorAll("#deployments tbody tr th").length === n, WAIT, expect.deployments.length);
  const deployments = await rows(page, "deployments");
  for (const name of expect.deployments) {
    check(deployments.some((r) => r.startsWith(name)), `deployment ${name} is listed`);
  }
  check(deployments.some((r) => /\d+ \/ 60 rpm/.test(r)), `use against a limit is text ("N / 60 rpm"): ${deployments[0]}`);
  check(deployments.some((r) => /\/ 400,000 itpm/.test(r)), "an itpm limit is shown");
  check(/Ledger: in-process/.test(await page.$eval("#ledger", (e) => e.textContent)), "the ledger's mode is shown");

  await page.waitForFunction((t) => [...document.querySelectorAll("#tenants tbody tr")].some((r) => r.innerText.includes(t) && /\$0\.0*[1-9]/.test(r.innerText)), WAIT, expect.tenant);
  const tenants = await rows(page, "tenants");
  const acme = tenants.find((r) => r.startsWith(expect.tenant));
  check(/\$\d+\.\d+ \/ \$5\.00/.test(acme), `the tenant's spend today is against its daily budget: ${acme}`);
  check(/\/ \$60\.00/.test(acme), "and this month's against its monthly budget");

  // The usage records reach the sink in batches: wait for every request sent.
  await page.waitForFunction((n) => document.querySelectorAll("#requests tbody tr td:nth-child(3)").length >= n, WAIT, expect.requests);
  const today = `${expect.requests} requests, 0 × 429`;
  const counted = await page
    .waitForFunction((t, x) => [...document.querySelectorAll("#tenants tbody tr")].some((r) => r.innerText.startsWith(t) && r.innerText.includes(x)), WAIT, expect.tenant, today)
    .then(() => true, () => false);
  check(counted, `the tenant's requests today are counted: ${today}`);
  const requests = await rows(page, "requests");
  check(requests.length === expect.requests, `the last requests list the ${expect.requests} sent`);
  check(requests.every((r) => r.includes(expect.tenant) && r.includes(" ok ")), "each names the tenant and its outcome");
  for (const name of expect.deployments) {
    check(requests.some((r) => r.includes(name)), `a request served by ${name} is listed`);
  }
  await page.waitForSelector("#chart-requests svg rect", WAIT);
  const chartText = await page.$eval("#chart-requests", (e) => e.innerText);
  check(chartText.includes(`requests ${expect.requests}`), `the requests chart sums the requests: ${chartText}`);
  check(await page.$("#chart-cost svg rect") !== null, "the cost chart has a bar");
  check(/^updated \d\d:\d\d:\d\d/.test(await page.$eval("#updated", (e) => e.textContent)), "the page says when it was updated");

  // A key made in the page: its secret shown once, in a dialog the user closes.
  await page.type("#key-tenant", expect.tenant);
  await page.type("#key-name", "dashboard-test");
  await page.type("#key-daily", "2.5");
  await page.click("#create-key button[type=submit]");
  await page.waitForSelector("#secret[open]", WAIT);
  const secret = await page.$eval("#secret-value", (e) => e.textContent);
  check(/^llmr-[0-9a-f]{48}$/.test(secret), "the new key's secret is shown");
  await page.click("#secret-close");
  await page.waitForSelector("#secret:not([open])", WAIT);
  // The dialog's `close` event, which clears the secret, comes just after it closes.
  check(await secretCleared(page), "the secret is gone once the dialog is closed");
  await page.waitForFunction(() => [...document.querySelectorAll("#keys tbody tr")].some((r) => r.innerText.includes("dashboard-test")), WAIT);
  const made = (await rows(page, "keys")).find((r) => r.includes("dashboard-test"));
  check(!made.includes(secret), "the keys list never shows a secret");
  check(made.includes("$2.5/day") && made.includes("/ $2.50"), `the new key shows its own daily budget and its spend against it: ${made}`);
  const id = made.split(" ")[0];
  await page.click(`button[aria-label="Rotate key ${id}"]`);
  await page.waitForSelector("#secret[open]", WAIT);
  const rotated = await page.$eval("#secret-value", (e) => e.textContent);
  check(/^llmr-/.test(rotated) && rotated !== secret, "a rotated key shows its new secret");
  await page.keyboard.press("Escape");
  await page.waitForSelector("#secret:not([open])", WAIT);
  check(await secretCleared(page), "the rotated secret is gone once Escape closes the dialog");
  const html = await page.content();
  check(![admin, tenantKey, secret, rotated].some((k) => html.includes(k)), "no key is left in the page");
  check(!page.url().includes(admin), "the admin key is not in the URL");

  await page.$eval("#main", (e) => e.scrollIntoView());
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`screenshot: ${screenshot}`);

  await page.click(`button[aria-label="Revoke key ${id}"]`);
  await page.waitForFunction((k) => [...document.querySelectorAll("#keys tbody tr")].some((r) => r.innerText.startsWith(k) && r.innerText.includes("revoked")), WAIT, id);
  check(true, `key ${id} was revoked from the page`);

  check(await page.$eval("#banner", (e) => e.hidden), `no error banner: ${await page.$eval("#banner", (e) => e.textContent)}`);
  check(failures.length === 0, `no script errors: ${failures.join("; ")}`);

  // A failing read shows in the banner, not as a blank page.
  await page.setRequestInterception(true);
  page.on("request", (r) => (r.url().includes("/admin/v1/tenants") ? r.respond({ status: 500, contentType: "application/json", body: "{\"error\":{\"message\":\"test failure\"}}" }) : r.continue()));
  await page.waitForFunction(() => !document.getElementById("banner").hidden, WAIT);
  const banner = await page.$eval("#banner", (e) => e.textContent);
  check(banner.includes("Could not update tenants") && banner.includes("HTTP 500"), `a failed read is named in the banner: ${banner}`);
  check((await rows(page, "deployments")).length === expect.deployments.length, "the rest of the page stays");
} finally {
  await browser.close();
}
