//! `/admin/v1/keys`: create, list, show, update, rotate and revoke keys. Runtime keys live in
//! the key store and change; keys of `gateway.keys` are listed and shown, read-only. A change
//! is stored over the revision read (see `router_core::keys::update`) and this instance reads
//! the keys again at once; the others within `KEYS_POLL`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use router_core::keys::{self, KeyRecord, KeyState, new_key_id};
use serde::Deserialize;

use super::view::{
    Create, KeyView, Rotate, Update, body, check_models, check_tenant, config_id, expiry,
};
use super::{admin, audit, conflict, no_key, store_failed};
use crate::app::Shared;
use crate::auth::{hash_key, new_key};
use crate::errors::ApiError;

/// The answer of a handler.
type Answer = Result<Response, ApiError>;

fn answer(result: Answer) -> Response {
    result.unwrap_or_else(|e| e.into_response_with(""))
}

/// `GET /admin/v1/keys?tenant=NAME`.
#[derive(Debug, Deserialize)]
pub(super) struct Filter {
    tenant: Option<String>,
}

pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
) -> Response {
    answer(listed(&shared, &headers, filter).await)
}

async fn listed(shared: &Shared, headers: &HeaderMap, filter: Filter) -> Answer {
    admin(shared, headers)?;
    let now = shared.access.now();
    let listing = shared.access.runtime().store().all().await;
    let listing = listing.map_err(|e| store_failed(&e))?;
    let config = shared.router.registry().gateway.keys.iter();
    let mut data: Vec<KeyView> = config.map(KeyView::config).collect();
    data.extend(listing.records.iter().map(|r| KeyView::runtime(r, now)));
    if let Some(tenant) = &filter.tenant {
        data.retain(|k| k.tenant() == tenant);
    }
    Ok(Json(serde_json::json!({ "object": "list", "data": data })).into_response())
}

pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    answer(created(&shared, &headers, &bytes).await)
}

async fn created(shared: &Shared, headers: &HeaderMap, bytes: &[u8]) -> Answer {
    let who = admin(shared, headers)?;
    let asked: Create = body(bytes)?;
    let registry = shared.router.registry();
    check_tenant(registry, &asked.tenant)?;
    check_models(registry, &asked.models)?;
    let now = shared.access.now();
    let expires_at = expiry(asked.expires_at, asked.expires_in_days, now)?;
    let secret = secret()?;
    let mut record = KeyRecord::new(
        new_key_id(),
        asked.name,
        asked.tenant,
        hash_key(&secret),
        now,
    );
    record.models = asked.models;
    record.priority = asked.priority;
    record.expires_at = expires_at;
    let store = shared.access.runtime().store();
    store
        .put(&record, None)
        .await
        .map_err(|e| store_failed(&e))?;
    seen(shared).await;
    audit(&who, "keys.create", &record.id, &record.tenant);
    let view = KeyView::runtime(&record, now).with_secret(secret);
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub(super) async fn show(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(shown(&shared, &headers, &id).await)
}

async fn shown(shared: &Shared, headers: &HeaderMap, id: &str) -> Answer {
    admin(shared, headers)?;
    if let Some(key) = config_key(shared, id) {
        return Ok(Json(key).into_response());
    }
    let store = shared.access.runtime().store();
    let found = keys::find(store, id).await.map_err(|e| store_failed(&e))?;
    let record = found.ok_or_else(|| no_key(id))?;
    Ok(Json(KeyView::runtime(&record, shared.access.now())).into_response())
}

pub(super) async fn update(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    answer(updated(&shared, &headers, &id, &bytes).await)
}

async fn updated(shared: &Shared, headers: &HeaderMap, id: &str, bytes: &[u8]) -> Answer {
    let who = admin(shared, headers)?;
    let asked: Update = body(bytes)?;
    let registry = shared.router.registry();
    if let Some(models) = &asked.models {
        check_models(registry, models)?;
    }
    let now = shared.access.now();
    if let Some(Some(at)) = asked.expires_at {
        expiry(Some(at), None, now)?;
    }
    let record = change(shared, id, "keys.update", &who, |k| {
        if k.state(now) == KeyState::Revoked {
            return Err(conflict(format!("key `{id}` is revoked: it cannot change")));
        }
        if let Some(name) = &asked.name {
            k.name.clone_from(name);
        }
        if let Some(models) = &asked.models {
            k.models.clone_from(models);
        }
        if let Some(priority) = asked.priority {
            k.priority = priority;
        }
        if let Some(at) = asked.expires_at {
            k.expires_at = at;
        }
        Ok(())
    })
    .await?;
    Ok(Json(KeyView::runtime(&record, now)).into_response())
}

pub(super) async fn rotate(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    answer(rotated(&shared, &headers, &id, &bytes).await)
}

async fn rotated(shared: &Shared, headers: &HeaderMap, id: &str, bytes: &[u8]) -> Answer {
    let who = admin(shared, headers)?;
    let asked: Rotate = body(bytes)?;
    let secret = secret()?;
    let hash = hash_key(&secret);
    let now = shared.access.now();
    let record = change(shared, id, "keys.rotate", &who, |k| match k.state(now) {
        KeyState::Revoked => Err(conflict(format!(
            "key `{id}` is revoked: a revoked key is not rotated; create a new one"
        ))),
        _ => {
            k.rotate(hash.clone(), asked.grace_secs, now);
            Ok(())
        }
    })
    .await?;
    Ok(Json(KeyView::runtime(&record, now).with_secret(secret)).into_response())
}

pub(super) async fn revoke(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(revoked(&shared, &headers, &id).await)
}

async fn revoked(shared: &Shared, headers: &HeaderMap, id: &str) -> Answer {
    let who = admin(shared, headers)?;
    let now = shared.access.now();
    let record = change(shared, id, "keys.revoke", &who, |k| {
        k.revoke(now);
        Ok(())
    })
    .await?;
    Ok(Json(KeyView::runtime(&record, now)).into_response())
}

/// Applies `edit` to the runtime key `id` over the revision read, reads the keys again and
/// writes the audit line. A key of `gateway.keys` is refused with 409: it changes in the file.
async fn change(
    shared: &Shared,
    id: &str,
    action: &str,
    who: &crate::auth::Admin,
    edit: impl FnMut(&mut KeyRecord) -> Result<(), ApiError>,
) -> Result<KeyRecord, ApiError> {
    if config_key(shared, id).is_some() {
        return Err(conflict(format!(
            "key `{id}` is one of `gateway.keys` in the configuration file: change or remove \
             its line there, then reload"
        )));
    }
    let store = shared.access.runtime().store();
    let changed = keys::update(store, id, edit).await;
    let record = changed
        .map_err(|e| store_failed(&e))?
        .ok_or_else(|| no_key(id))??;
    seen(shared).await;
    audit(who, action, &record.id, &record.tenant);
    Ok(record)
}

/// The key of `gateway.keys` listed as `id`.
fn config_key(shared: &Shared, id: &str) -> Option<KeyView> {
    let keys = &shared.router.registry().gateway.keys;
    keys.iter()
        .find(|k| config_id(k) == id)
        .map(KeyView::config)
}

/// A new secret, or 500 when the system's generator cannot be read.
fn secret() -> Result<String, ApiError> {
    new_key().map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "no_randomness",
            format!("cannot draw a random key: {e}"),
        )
    })
}

/// Reads the keys again, so that this instance serves the change at once.
async fn seen(shared: &Shared) {
    if let Err(e) = shared.access.runtime().refresh().await {
        tracing::debug!(error = %e, "admin: keys not read again after a change");
    }
}
