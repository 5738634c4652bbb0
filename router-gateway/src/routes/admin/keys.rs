//! `/admin/v1/keys`: create, list, show, update, rotate and revoke keys, as `keyring.rs`
//! decides. Runtime keys live in the key store and change; keys of `gateway.keys` are listed
//! and shown, read-only. After a change this instance reads the keys again at once; the others
//! within `KEYS_POLL`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use router_core::keys::KeyRecord;
use serde::{Deserialize, Serialize};

use super::view::{Create, Rotate, Update, body};
use super::{admin, answered, audit, changer, conflict, no_key, read_failed, store_failed, today};
use crate::app::Shared;
use crate::auth::Admin;
use crate::errors::ApiError;
use crate::keyring::{self, Issued, KeyView, Refused};
use crate::reload::Live;

/// The answer of a handler.
type Answer = Result<Response, ApiError>;

/// A refusal of the key lifecycle, as the API answers it.
fn refused(e: Refused) -> ApiError {
    match e {
        Refused::Invalid(message) => ApiError::bad_request(message),
        Refused::NoKey(id) => no_key(&id),
        Refused::Conflict(message) => conflict(message),
        Refused::Store(e) => store_failed(&e),
        e @ Refused::NoRandom(_) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "no_randomness",
            e.to_string(),
        ),
    }
}

/// `GET /admin/v1/keys?tenant=NAME`.
#[derive(Debug, Deserialize)]
pub(super) struct Filter {
    tenant: Option<String>,
}

pub(super) async fn list(
    Live(shared): Live,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
) -> Response {
    answered(listed(&shared, &headers, filter).await)
}

async fn listed(shared: &Shared, headers: &HeaderMap, filter: Filter) -> Answer {
    admin(shared, headers)?;
    let now = shared.access.now();
    let listing = shared.access.runtime().store().all().await;
    let listing = listing.map_err(|e| store_failed(&e))?;
    let config = shared.router.registry().gateway.keys.iter();
    let mut data: Vec<KeyRow> = config.map(|k| KeyRow::plain(KeyView::config(k))).collect();
    for record in &listing.records {
        data.push(KeyRow::of(shared, record, now).await?);
    }
    if let Some(counts) = today::counts(shared).await? {
        for row in &mut data {
            let id = Some(row.view.id.as_str());
            row.today = Some(today::sum(&counts, |c| c.key_id.as_deref() == id));
        }
    }
    if let Some(tenant) = &filter.tenant {
        data.retain(|k| &k.view.tenant == tenant);
    }
    Ok(Json(serde_json::json!({ "object": "list", "data": data })).into_response())
}

/// A key as listed and shown: its view; for a key with limits of its own, its use against them
/// and its spend against its budgets; in the list, its requests today (with usage records).
#[derive(Debug, Serialize)]
struct KeyRow {
    #[serde(flatten)]
    view: KeyView,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<router_state::quota::AccountUse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    today: Option<today::Today>,
}

impl KeyRow {
    fn plain(view: KeyView) -> Self {
        KeyRow {
            view,
            usage: None,
            today: None,
        }
    }

    /// Runtime key `record` at `now`, with what the ledger holds for its own account.
    async fn of(shared: &Shared, record: &KeyRecord, now: u64) -> Result<Self, ApiError> {
        let usage = match record.limits.account(&record.id) {
            Some(spec) => {
                let used = router_state::quota::account_use(shared.router.ledger(), &spec).await;
                Some(used.map_err(read_failed)?)
            }
            None => None,
        };
        let view = KeyView::runtime(record, now);
        Ok(KeyRow {
            view,
            usage,
            today: None,
        })
    }
}

pub(super) async fn create(Live(shared): Live, headers: HeaderMap, bytes: Bytes) -> Response {
    answered(created(&shared, &headers, &bytes).await)
}

async fn created(shared: &Shared, headers: &HeaderMap, bytes: &[u8]) -> Answer {
    let who = changer(shared, headers)?;
    let asked: Create = body(bytes)?;
    let (store, registry, now) = context(shared);
    let issued = keyring::create(store, registry, asked.into(), now).await;
    let Issued { record, secret } = issued.map_err(refused)?;
    let view = done(shared, &who, "keys.create", &record).await;
    Ok((StatusCode::CREATED, Json(view.with_secret(secret))).into_response())
}

pub(super) async fn show(
    Live(shared): Live,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answered(shown(&shared, &headers, &id).await)
}

async fn shown(shared: &Shared, headers: &HeaderMap, id: &str) -> Answer {
    admin(shared, headers)?;
    let (store, registry, now) = context(shared);
    let row = match keyring::find(store, registry, id).await.map_err(refused)? {
        Ok(record) => KeyRow::of(shared, &record, now).await?,
        Err(config) => KeyRow::plain(KeyView::config(&config)),
    };
    Ok(Json(row).into_response())
}

pub(super) async fn update(
    Live(shared): Live,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    answered(updated(&shared, &headers, &id, &bytes).await)
}

async fn updated(shared: &Shared, headers: &HeaderMap, id: &str, bytes: &[u8]) -> Answer {
    let who = changer(shared, headers)?;
    let asked: Update = body(bytes)?;
    let (store, registry, now) = context(shared);
    let changed = keyring::update(store, registry, id, asked.into(), now).await;
    let record = changed.map_err(refused)?;
    Ok(Json(done(shared, &who, "keys.update", &record).await).into_response())
}

pub(super) async fn rotate(
    Live(shared): Live,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    answered(rotated(&shared, &headers, &id, &bytes).await)
}

async fn rotated(shared: &Shared, headers: &HeaderMap, id: &str, bytes: &[u8]) -> Answer {
    let who = changer(shared, headers)?;
    let asked: Rotate = body(bytes)?;
    let (store, registry, now) = context(shared);
    let issued = keyring::rotate(store, registry, id, asked.grace_secs, now).await;
    let Issued { record, secret } = issued.map_err(refused)?;
    let view = done(shared, &who, "keys.rotate", &record).await;
    Ok(Json(view.with_secret(secret)).into_response())
}

pub(super) async fn revoke(
    Live(shared): Live,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answered(revoked(&shared, &headers, &id).await)
}

async fn revoked(shared: &Shared, headers: &HeaderMap, id: &str) -> Answer {
    let who = changer(shared, headers)?;
    let (store, registry, now) = context(shared);
    let record = keyring::revoke(store, registry, id, now)
        .await
        .map_err(refused)?;
    Ok(Json(done(shared, &who, "keys.revoke", &record).await).into_response())
}

/// The key store, the configuration and now.
fn context(
    shared: &Shared,
) -> (
    &dyn router_core::keys::KeyStore,
    &router_core::config::Registry,
    u64,
) {
    let store = shared.access.runtime().store();
    (store, shared.router.registry(), shared.access.now())
}

/// After `action` changed `record`: reads the keys again, so that this instance serves the
/// change at once, writes the audit line, and gives the key's view.
async fn done(shared: &Shared, who: &Admin, action: &str, record: &KeyRecord) -> KeyView {
    if let Err(e) = shared.access.runtime().refresh().await {
        tracing::debug!(error = %e, "admin: keys not read again after a change");
    }
    audit(who, action, &record.id, &record.tenant);
    KeyView::runtime(record, shared.access.now())
}
