//! The `llmroute keys` commands on the shared key store: each opens the store beside the
//! configured ledger, runs the step `router_gateway::keyring` decides, writes an audit line,
//! and prints the key (as text, or as the admin API's JSON with `--json`).

use std::io::Write;
use std::sync::Arc;

use anyhow::anyhow;
use router_core::keys::KeyStore;
use router_core::ledger::calendar;
use router_gateway::keyring::{self, Change, Issued, KeyView, NewKey, Refused};

use super::{CreateArgs, UpdateArgs};
use crate::config::Loaded;
use crate::context::Context;
use crate::failure::Failure;

/// The configuration, the key store beside its ledger, and where that store is.
async fn opened(ctx: &Context<'_>) -> Result<(Loaded, Arc<dyn KeyStore>, String), Failure> {
    let loaded = ctx.load()?;
    let store = router_state::keys::open(&loaded.ledger, &loaded.registry)
        .await
        .map_err(|e| Failure::state(anyhow!("{e}")))?;
    let at = router_state::keys::describe(&loaded.ledger);
    Ok((loaded, store, at))
}

/// A refused step as the CLI reports it: the store's failures are exit status 5, the rest 2.
fn refused(e: Refused) -> Failure {
    match e {
        Refused::Store(_) => Failure::state(anyhow!("{e}")),
        other => Failure::usage(anyhow!("{other}")),
    }
}

/// Now, Unix seconds.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One audit line, as the admin API writes it, naming the user who ran the command.
fn audit(action: &str, view: &KeyView) {
    let user = std::env::var("USER").unwrap_or_default();
    tracing::info!(
        target: "llmroute::audit",
        admin = %format!("cli:{user}"),
        action,
        key = %view.id,
        tenant = %view.tenant,
        "admin change"
    );
}

pub(super) async fn create(
    ctx: &Context<'_>,
    args: &CreateArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, at) = opened(ctx).await?;
    let new = NewKey {
        tenant: args.tenant.clone(),
        name: args.name.clone(),
        models: args.models.clone(),
        priority: args.priority,
        expires_at: None,
        expires_in_days: args.expires_in_days,
        limits: args.limits.view(),
    };
    let now = now();
    let issued = keyring::create(&*store, &loaded.registry, new, now).await;
    let Issued { record, secret } = issued.map_err(refused)?;
    let view = KeyView::runtime(&record, now).with_secret(secret);
    audit("keys.create", &view);
    print(out, &view, args.json, Some(&at))
}

pub(super) async fn list(
    ctx: &Context<'_>,
    tenant: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, at) = opened(ctx).await?;
    let listing = store.all().await.map_err(|e| refused(e.into()))?;
    let now = now();
    let mut views: Vec<KeyView> = loaded
        .registry
        .gateway
        .keys
        .iter()
        .map(KeyView::config)
        .collect();
    views.extend(listing.records.iter().map(|r| KeyView::runtime(r, now)));
    views.retain(|v| tenant.is_none_or(|t| v.tenant == t));
    if json {
        let body = serde_json::json!({ "object": "list", "data": views });
        return writeln!(out, "{body:#}").map_err(Failure::output);
    }
    let mut rows = vec![
        [
            "ID", "NAME", "TENANT", "STATE", "SOURCE", "MODELS", "EXPIRES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(views.iter().map(|v| {
        vec![
            v.id.clone(),
            v.name.clone(),
            v.tenant.clone(),
            v.state.to_owned(),
            v.source.to_owned(),
            models(v),
            v.expires_at.map_or_else(|| "never".to_owned(), date),
        ]
    }));
    writeln!(out, "keys in {at} and `gateway.keys`:").map_err(Failure::output)?;
    crate::table::write(out, &rows, "  ", 7).map_err(Failure::output)
}

pub(super) async fn show(
    ctx: &Context<'_>,
    id: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, _) = opened(ctx).await?;
    let found = keyring::find(&*store, &loaded.registry, id)
        .await
        .map_err(refused)?;
    let view = match found {
        Ok(record) => KeyView::runtime(&record, now()),
        Err(config) => KeyView::config(&config),
    };
    print(out, &view, json, None)
}

pub(super) async fn update(
    ctx: &Context<'_>,
    args: &UpdateArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, _) = opened(ctx).await?;
    let now = now();
    let models = match (args.all_models, args.models.is_empty()) {
        (true, _) => Some(Vec::new()),
        (false, false) => Some(args.models.clone()),
        (false, true) => None,
    };
    let change = Change {
        name: args.name.clone(),
        models,
        priority: args.priority.map(Some),
        expires_at: args
            .expires_in_days
            .map(|days| Some(now.saturating_add(days.saturating_mul(86_400)))),
        limits: args.limits.patch(args.no_limits),
    };
    let record = keyring::update(&*store, &loaded.registry, &args.id, change, now).await;
    let view = KeyView::runtime(&record.map_err(refused)?, now);
    audit("keys.update", &view);
    print(out, &view, args.json, None)
}

pub(super) async fn rotate(
    ctx: &Context<'_>,
    id: &str,
    grace_secs: u64,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, at) = opened(ctx).await?;
    let now = now();
    let issued = keyring::rotate(&*store, &loaded.registry, id, grace_secs, now).await;
    let Issued { record, secret } = issued.map_err(refused)?;
    let view = KeyView::runtime(&record, now).with_secret(secret);
    audit("keys.rotate", &view);
    print(out, &view, json, Some(&at))
}

pub(super) async fn revoke(
    ctx: &Context<'_>,
    id: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (loaded, store, _) = opened(ctx).await?;
    let now = now();
    let record = keyring::revoke(&*store, &loaded.registry, id, now).await;
    let view = KeyView::runtime(&record.map_err(refused)?, now);
    audit("keys.revoke", &view);
    print(out, &view, json, None)
}

/// Prints `view`: its JSON, or its fields; a secret with where the key is kept (`at`).
fn print(out: &mut dyn Write, view: &KeyView, json: bool, at: Option<&str>) -> Result<(), Failure> {
    if json {
        let body = serde_json::to_string(view).map_err(|e| Failure::usage(anyhow!("{e}")))?;
        return writeln!(out, "{body}").map_err(Failure::output);
    }
    let mut lines = vec![("id", view.id.clone())];
    if let Some(key) = &view.key {
        lines.push(("key", key.expose().to_owned()));
    }
    lines.extend([
        ("name", view.name.clone()),
        ("tenant", view.tenant.clone()),
        ("state", view.state.to_owned()),
        ("source", view.source.to_owned()),
        ("models", models(view)),
        (
            "priority",
            view.priority.map_or("-", |p| p.as_str()).to_owned(),
        ),
        (
            "expires",
            view.expires_at.map_or_else(|| "never".to_owned(), date),
        ),
        ("limits", view.limits.to_string()),
    ]);
    if let Some(until) = view.grace_until {
        lines.push(("old secret until", date(until)));
    }
    for (name, value) in lines {
        writeln!(out, "{:<17}{value}", format!("{name}:")).map_err(Failure::output)?;
    }
    if let (Some(_), Some(at)) = (&view.key, at) {
        writeln!(
            out,
            "\nThe key is shown only now; its hash is kept in {at}. Every gateway on that store \
             accepts it within a second."
        )
        .map_err(Failure::output)?;
    }
    Ok(())
}

fn models(view: &KeyView) -> String {
    if view.models.is_empty() {
        "all".to_owned()
    } else {
        view.models.join(",")
    }
}

/// A Unix time as a UTC date and time.
fn date(secs: u64) -> String {
    let ms = secs.saturating_mul(1000);
    let (y, m, d) = calendar::date_of(ms);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}
