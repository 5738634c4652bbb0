//! How many prompt tokens a request is: its provider's own count where the provider has a
//! counting endpoint (Anthropic's `/v1/messages/count_tokens`), else the router's estimate.

use std::time::Duration;

use router_core::config::DeploymentId;
use serde::Deserialize;

use crate::error::Error;
use crate::router::{Planned, Router};
use crate::secret::ApiKey;
use crate::types::ChatRequest;
use crate::wire;

/// How long a provider may take to count before the estimate is given instead.
const COUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// A request's prompt tokens, and who counted them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount {
    /// The prompt's tokens.
    pub input_tokens: u64,
    /// Who counted them.
    pub counted_by: CountedBy,
}

/// Who counted a prompt's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountedBy {
    /// The provider of the cheapest candidate that can count, for its model.
    Provider {
        /// The provider's name.
        provider: String,
        /// The model it counted for.
        model: String,
    },
    /// The router's estimate, what admission reserves (no candidate can count, or its provider
    /// did not answer).
    Estimate,
}

#[derive(Deserialize)]
struct Counted {
    input_tokens: u64,
}

impl Router {
    /// Counts `req`'s prompt tokens: the cheapest candidate whose provider counts them does
    /// (Anthropic), else the router estimates them. Nothing is reserved against any limit and
    /// no answer is asked for; a provider that fails to count leaves the estimate, and the
    /// failure goes to the log.
    pub async fn count_tokens(&self, req: &ChatRequest) -> Result<TokenCount, Error> {
        let planned = self.plan(&crate::request::asked(req)?)?;
        let plan = &planned.plan;
        let estimate = plan.estimates.iter().map(|e| e.prompt_tokens).max();
        let counter = plan.ranked.iter().copied().find_map(|d| {
            let request = self.count_request(&planned, req, d)?;
            Some((d, request))
        });
        if let Some((d, request)) = counter {
            let registry = &self.inner.registry;
            match self.ask_count(request).await {
                Ok(input_tokens) => {
                    let counted_by = CountedBy::Provider {
                        provider: registry.provider_of(d).name.clone(),
                        model: registry.deployment(d).model.clone(),
                    };
                    return Ok(TokenCount {
                        input_tokens,
                        counted_by,
                    });
                }
                Err(why) => tracing::info!(
                    deployment = %registry.deployment_name(d),
                    "the provider did not count the prompt ({why}); the estimate stands"
                ),
            }
        }
        Ok(TokenCount {
            input_tokens: estimate.unwrap_or(0),
            counted_by: CountedBy::Estimate,
        })
    }

    /// The counting request for `req` on `d`, if its provider counts and its key is set.
    fn count_request(
        &self,
        planned: &Planned,
        req: &ChatRequest,
        d: DeploymentId,
    ) -> Option<wire::WireRequest> {
        let registry = &self.inner.registry;
        let deployment = registry.deployment(d);
        let key: &ApiKey = planned.keys.get(&deployment.provider)?;
        let target = wire::Target {
            api: registry.provider(deployment.provider).api,
            endpoints: self.inner.endpoints.of(d),
            model: &deployment.model,
            output_cap: registry.output_cap(d),
        };
        wire::count_request(&target, key, req, &planned.headers)
    }

    /// Sends a counting request; the count, or why there is none (never the provider's text,
    /// which may echo the prompt).
    async fn ask_count(&self, request: wire::WireRequest) -> Result<u64, String> {
        let sent = self
            .inner
            .http
            .post(request.url)
            .headers(request.headers)
            .json(&request.body)
            .timeout(COUNT_TIMEOUT)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "timeout"
                } else {
                    "no answer"
                }
                .to_owned()
            })?;
        let status = sent.status();
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        let body = sent
            .bytes()
            .await
            .map_err(|_| "a broken answer".to_owned())?;
        let counted: Counted =
            serde_json::from_slice(&body).map_err(|_| "an unreadable answer".to_owned())?;
        if counted.input_tokens > wire::MAX_PLAUSIBLE_TOKENS {
            return Err("an implausible count".to_owned());
        }
        Ok(counted.input_tokens)
    }
}
