//! Health without spending: each deployment's key and model checked by a call that costs
//! nothing (the provider's model endpoint), never by a prompt. `llmroute providers --check`
//! runs it.

use std::time::Duration;

use router_core::config::DeploymentId;
use serde::Serialize;
use serde_json::Value;

use crate::router::Router;
use crate::wire::{self, Lookup};

/// How long one check may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One deployment's check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeploymentCheck {
    /// The provider's name.
    pub provider: String,
    /// The model.
    pub model: String,
    /// What its provider said.
    #[serde(flatten)]
    pub outcome: CheckOutcome,
}

/// What a deployment's check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CheckOutcome {
    /// The key is accepted and the model exists.
    Ok,
    /// The provider's key variable is not set.
    NoKey {
        /// The variable.
        variable: String,
    },
    /// The provider refused the key (401 or 403).
    KeyRefused {
        /// Its HTTP status.
        http_status: u16,
    },
    /// The key is accepted, but the provider has no such model (404, or not in its list).
    ModelMissing {
        /// Its HTTP status.
        http_status: u16,
    },
    /// No answer, or one that says neither (a 5xx, a 429, a body that is not the model list).
    Failed {
        /// Its HTTP status, when it answered.
        http_status: Option<u16>,
        /// What happened, never the key.
        error: String,
    },
}

impl CheckOutcome {
    /// Whether the deployment can serve.
    pub fn is_ok(&self) -> bool {
        *self == CheckOutcome::Ok
    }
}

impl Router {
    /// Checks every deployment's key and model at once with its provider's model endpoint (a
    /// call that costs nothing and sends no prompt), in the configuration's order.
    pub async fn check_deployments(&self) -> Vec<DeploymentCheck> {
        let registry = self.registry();
        let checks = registry.deployment_ids().map(|d| self.check(d));
        futures_util::future::join_all(checks).await
    }

    async fn check(&self, d: DeploymentId) -> DeploymentCheck {
        let registry = self.registry();
        let (deployment, provider) = (registry.deployment(d), registry.provider_of(d));
        let done = |outcome| DeploymentCheck {
            provider: provider.name.clone(),
            model: deployment.model.clone(),
            outcome,
        };
        let Some(key) = self.inner.keys.key(&provider.api_key_env) else {
            let variable = provider.api_key_env.clone();
            return done(CheckOutcome::NoKey { variable });
        };
        let format = wire::for_api(provider.api);
        let base = provider.base_url.trim_end_matches('/');
        let (url, lookup) = format.model_url(base, &deployment.model);
        let headers = wire::headers(provider.api, &key, &reqwest::header::HeaderMap::new());
        let sent = self
            .inner
            .http
            .get(&url)
            .headers(headers)
            .timeout(TIMEOUT)
            .send();
        let response = match sent.await {
            Ok(response) => response,
            Err(e) => {
                let error = format!("no answer: {}", e.without_url());
                return done(CheckOutcome::Failed {
                    http_status: None,
                    error,
                });
            }
        };
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        done(judge(status, &body, lookup, &deployment.model))
    }
}

/// What an answer of `status` and `body` says of `model`.
fn judge(status: u16, body: &[u8], lookup: Lookup, model: &str) -> CheckOutcome {
    match status {
        200 if lookup == Lookup::Itself => CheckOutcome::Ok,
        200 => match listed(body, model) {
            Some(true) => CheckOutcome::Ok,
            Some(false) => CheckOutcome::ModelMissing { http_status: 200 },
            None => CheckOutcome::Failed {
                http_status: Some(200),
                error: "the model list is not `{\"data\": [{\"id\": ...}]}`".to_owned(),
            },
        },
        401 | 403 => CheckOutcome::KeyRefused {
            http_status: status,
        },
        404 => CheckOutcome::ModelMissing { http_status: 404 },
        _ => CheckOutcome::Failed {
            http_status: Some(status),
            error: format!("HTTP {status}"),
        },
    }
}

/// Whether the list `body` names `model`; `None` when it is no model list.
fn listed(body: &[u8], model: &str) -> Option<bool> {
    let list: Value = serde_json::from_slice(body).ok()?;
    let data = list.get("data")?.as_array()?;
    Some(
        data.iter()
            .any(|m| m.get("id").and_then(Value::as_str) == Some(model)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_status_and_for_a_list_by_its_ids() {
        let list = br#"{"object":"list","data":[{"id":"gpt-4.1"},{"id":"gpt-4o-mini"}]}"#;
        assert_eq!(
            judge(200, list, Lookup::Listed, "gpt-4o-mini"),
            CheckOutcome::Ok
        );
        let missing = judge(200, list, Lookup::Listed, "gpt-5");
        assert_eq!(missing, CheckOutcome::ModelMissing { http_status: 200 });
        assert!(matches!(
            judge(200, b"<html>", Lookup::Listed, "m"),
            CheckOutcome::Failed { .. }
        ));
        assert_eq!(judge(200, b"", Lookup::Itself, "m"), CheckOutcome::Ok);
        assert_eq!(
            judge(401, b"", Lookup::Itself, "m"),
            CheckOutcome::KeyRefused { http_status: 401 }
        );
        assert_eq!(
            judge(404, b"", Lookup::Itself, "m"),
            CheckOutcome::ModelMissing { http_status: 404 }
        );
        let busy = judge(529, b"", Lookup::Itself, "m");
        assert_eq!(
            busy,
            CheckOutcome::Failed {
                http_status: Some(529),
                error: "HTTP 529".into()
            }
        );
    }
}
