//! A request's body, read within the gateway's limits: its size
//! (`gateway.body_limit_bytes`) and the time it may take to arrive
//! (`gateway.body_timeout_secs`); then parsed as one JSON value of the route's shape.

use axum::body::Bytes;
use axum::extract::FromRequest;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};

use crate::errors::ApiError;
use crate::routes::header;

/// A request's body, read within `gateway.body_limit_bytes` (the limit rides in the request's
/// extensions) and `gateway.body_timeout_secs`. A declared `Content-Length` over the limit is
/// refused before anything is read (413); a body that does not arrive in time is 408. Every
/// refusal here closes the connection: the unread rest of the body would otherwise be read as
/// the next request.
pub(crate) async fn read(
    gateway: &router_core::config::Gateway,
    headers: &HeaderMap,
    request: axum::extract::Request,
) -> Result<Bytes, ApiError> {
    let limit = gateway.body_limit_bytes;
    let declared = header(headers, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(body_too_large(limit).closing());
    }
    let read = tokio::time::timeout(gateway.body_timeout, Bytes::from_request(request, &()));
    match read.await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(rejection)) => Err(body_unread(&rejection, limit).closing()),
        Err(_) => Err(ApiError::body_timeout(format!(
            "the request body did not arrive within {} s (`gateway.body_timeout_secs`): send \
             the whole body at once, right after the headers",
            gateway.body_timeout.as_secs()
        ))
        .closing()),
    }
}

/// 413 for a body over `gateway.body_limit_bytes` (`limit`).
fn body_too_large(limit: u64) -> ApiError {
    ApiError::body_too_large(format!(
        "the request body is over this gateway's limit of {limit} bytes \
         (`gateway.body_limit_bytes`): send a smaller request (fewer or smaller images, a \
         shorter conversation), or have the gateway's operator raise \
         `gateway.body_limit_bytes`"
    ))
}

/// The error for a body that could not be read: over `gateway.body_limit_bytes` (`limit`),
/// 413; cut off or otherwise broken, 400.
fn body_unread(rejection: &BytesRejection, limit: u64) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        body_too_large(limit)
    } else {
        ApiError::bad_request(format!(
            "the request body could not be read ({rejection}): send the request again"
        ))
    }
}

/// Parses `bytes` as one JSON `T`, a request body of `what` ("a chat-completions request");
/// `Err` names the field and what is wrong. The body is one JSON value and nothing after it but
/// whitespace: a parser in front of the gateway that reads `{..}{..}` or `{..}xx` otherwise
/// than this one would see another request.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let body: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("the body is not {what}: {}", e.inner())
        } else {
            format!("`{path}`: {}", e.inner())
        }
    })?;
    de.end().map_err(|e| {
        format!("the body holds more than one JSON value ({e}): send one JSON object alone")
    })?;
    Ok(body)
}
