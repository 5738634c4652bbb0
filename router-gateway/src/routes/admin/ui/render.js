// The tables: deployments, tenants, last requests; and the DOM helpers they share. Every value
// is text (bars repeat it, for the eye only); names are set as text, never as HTML.

/** An element `tag` with attributes `attrs` and `children` (strings become text). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replaces the rows of table `id`'s body; `empty` is said in one row when there are none. */
export function fillTable(id, rows, empty) {
  const body = document.querySelector(`#${id} tbody`);
  const columns = document.querySelectorAll(`#${id} thead th`).length;
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: columns, class: "muted" }, empty))]));
}

const count = new Intl.NumberFormat("en-US");

/** A whole number with thousands separators. */
export function num(n) {
  return n === undefined || n === null ? "—" : count.format(n);
}

/** US dollars: cents for large sums, more digits for small ones. */
export function usd(x) {
  if (x === undefined || x === null) return "—";
  const digits = x !== 0 && Math.abs(x) < 1 ? 4 : 2;
  return `$${x.toFixed(digits)}`;
}

/** Seconds as `12 s`, `3 min 4 s`, `2 h 5 min`. */
export function duration(secs) {
  const s = Math.max(0, Math.round(secs));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** A use against a limit, in text (`42 / 100 rpm`), over a bar showing the same. */
export function usage(used, limit, unit, format = num) {
  const text = limit === undefined || limit === null
    ? `${format(used)} ${unit} (no limit)`
    : `${format(used)} / ${format(limit)} ${unit}`;
  const share = limit ? used / limit : 0;
  const cls = share >= 1 ? "full" : share >= 0.8 ? "hot" : "";
  const parts = [el("span", { class: cls }, text)];
  if (limit) {
    parts.push(el("meter", { min: 0, max: limit, value: Math.min(used, limit), low: limit * 0.8, high: limit * 0.95, optimum: 0, "aria-hidden": "true" }));
  }
  return el("td", {}, el("div", { class: "use" }, parts));
}

/** Requests this UTC day and how many got a 429, from the usage records (`—` without). */
export function today(t) {
  if (!t) return el("td", { class: "muted" }, "—");
  return el("td", {}, `${num(t.requests)} requests, ${num(t.limited)} × 429`);
}

/** `/admin/v1/deployments`. */
export function renderDeployments(body) {
  const ledger = body.ledger
    ? `Ledger: shared through Redis, mode ${body.ledger.mode} for ${duration(body.ledger.since_secs)}, ${body.ledger.instances} instance(s), ${body.ledger.mode_changes} mode change(s).`
    : `Ledger: ${body.state} (this instance counts alone).`;
  document.getElementById("ledger").textContent = ledger;
  const rows = body.data.map((d) => {
    const optional = (u, unit) => (u ? usage(u.used, u.limit, unit) : el("td", { class: "muted" }, "no limit"));
    let cooldown = el("td", {}, "none");
    if (d.cooldown_secs !== null && d.cooldown_secs !== undefined) {
      const c = d.cooldown_cause;
      const why = c
        ? `: ${c.kind}${c.status ? ` (HTTP ${c.status})` : ""}, ${duration(c.age_secs)} ago`
        : " (put by another instance)";
      cooldown = el("td", { class: "full" }, `${duration(d.cooldown_secs)} left${why}`);
    }
    const r = d.provider_reported;
    const reported = r
      ? [["requests", r.requests_remaining], ["tokens", r.tokens_remaining], ["input tokens", r.input_tokens_remaining], ["output tokens", r.output_tokens_remaining]]
        .filter(([, v]) => v !== undefined && v !== null).map(([k, v]) => `${num(v)} ${k}`).join(", ") + ` (${duration(r.age_secs)} ago)`
      : "nothing reported";
    return el("tr", {},
      el("th", { scope: "row" }, d.name),
      el("td", {}, `${usd(d.price.input_per_mtok)} / ${usd(d.price.output_per_mtok)}`),
      usage(d.rpm.used, d.rpm.limit, "rpm"),
      usage(d.tpm.used, d.tpm.limit, "tpm"),
      optional(d.itpm, "itpm"),
      optional(d.otpm, "otpm"),
      usage(d.concurrency.in_flight, d.concurrency.limit, "in flight"),
      cooldown,
      el("td", {}, reported));
  });
  fillTable("deployments", rows, "No deployments are configured.");
}

/** `/admin/v1/tenants`. */
export function renderTenants(body) {
  const names = document.getElementById("tenant-names");
  names.replaceChildren(...body.data.map((t) => el("option", { value: t.name })));
  const rows = body.data.map((t) => {
    const s = t.spend;
    const none = (what) => el("td", { class: "muted" }, what);
    const month = s ? usage(s.month_usd, s.monthly_budget_usd, "", usd) : none("untracked");
    if (s) month.firstChild.append(el("span", { class: "muted" }, `projected ${usd(s.projected_month_usd)}`));
    return el("tr", {},
      el("th", { scope: "row" }, t.name),
      el("td", {}, t.tier ?? "none (unlimited)"),
      s ? usage(s.today_usd, s.daily_budget_usd, "", usd) : none("untracked"),
      month,
      t.rpm ? usage(t.rpm.used, t.rpm.limit, "rpm") : none("—"),
      t.tpm ? usage(t.tpm.used, t.tpm.limit, "tpm") : none("—"),
      t.concurrency ? usage(t.concurrency.in_flight, t.concurrency.limit, "in flight") : none("—"),
      el("td", { class: "num" }, num(t.active_keys)),
      today(t.today));
  });
  fillTable("tenants", rows, "No tenants: add tenants.members to the configuration, or create a key.");
}

/** A time of day, `HH:MM:SS`, with the date when not today. */
export function clock(ms) {
  const d = new Date(ms);
  const time = d.toLocaleTimeString("en-GB", { hour12: false });
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString("en-CA")} ${time}`;
}

/** `/admin/v1/requests`. */
export function renderRequests(body) {
  const note = document.getElementById("requests-note");
  note.textContent = body.usage ? "" : "This gateway keeps no usage records (usage: none), so no requests are listed. Set usage in the configuration to see them.";
  const rows = body.data.map((r) => el("tr", {},
    el("th", { scope: "row" }, clock(r.at_ms)),
    el("td", {}, r.key_id ?? "—"),
    el("td", {}, r.tenant ?? "—"),
    el("td", {}, r.model_asked),
    el("td", {}, r.served_by ?? "none"),
    el("td", { class: "num" }, num(r.prompt_tokens)),
    el("td", { class: "num" }, num(r.completion_tokens)),
    el("td", { class: "num" }, usd(r.cost_usd)),
    el("td", { class: `outcome-${r.outcome}` }, r.failure ? `${r.outcome}: ${r.failure}` : r.outcome),
    el("td", { class: "num" }, `${num(r.latency_ms)} ms`)));
  fillTable("requests", rows, body.usage ? "No requests yet." : "No usage records are kept.");
}
