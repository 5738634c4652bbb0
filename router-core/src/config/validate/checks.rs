//! Checks of single values, each turning a raw value into a runtime one or an error that names
//! the field, the line, the bad value (when safe to show) and what to do.

use std::num::NonZeroU64;

use crate::config::base_url::check_base_url;
use crate::config::capabilities::{Capabilities, Capability};
use crate::config::deployments::Models;
use crate::config::error::ConfigError;
use crate::config::raw::{At, Number, RawLimits};
use crate::config::routes::Routes;
use crate::config::state::{IN_MEMORY, StateValue, check_redis_url, nodes_to_url};
use crate::config::tenants::{NOT_IN_HASH_TAG, tenant_name_problem};
use crate::config::values::{Api, Limits};
use crate::flow::Priority;
use crate::ledger::DayResets;

/// Prefixes of real API keys (OpenAI, Anthropic, DeepSeek, Gemini, Groq, xAI, Hugging Face...).
const KEY_PREFIXES: [&str; 8] = ["sk-", "sk_", "AIza", "gsk_", "xai-", "hf_", "pk-", "r8_"];

/// The 1-based line of a spanned value, `None` when unknown.
pub(crate) fn line<T>(value: &At<T>) -> Option<u64> {
    Some(value.referenced.line()).filter(|&l| l > 0)
}

/// Makes errors about one configuration text.
pub(crate) struct Ctx<'a> {
    /// File name (or label) used in messages.
    pub(crate) source: &'a str,
}

/// The name in `capabilities:` that makes a model an embedding model.
pub(crate) const EMBEDDING: &str = "embedding";

/// 2^53: every whole number up to it is exact as a float (a decimal in YAML).
const EXACT: f64 = 9_007_199_254_740_992.0;

impl Ctx<'_> {
    /// An [`ConfigError::Invalid`] about `field`.
    pub(crate) fn invalid(&self, field: &str, line: Option<u64>, message: String) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source.to_owned(),
            line,
            field: field.to_owned(),
            message,
        }
    }

    /// A name (provider, model, alias): not blank, no surrounding spaces.
    pub(crate) fn name(&self, field: &str, value: &At<String>) -> Result<String, ConfigError> {
        let text = value.value.as_str();
        if text.trim().is_empty() {
            return Err(self.invalid(field, line(value), "must not be empty; write a name".into()));
        }
        if text.trim() != text {
            let msg = format!("`{text}` has leading or trailing spaces; remove them");
            return Err(self.invalid(field, line(value), msg));
        }
        Ok(text.to_owned())
    }

    /// `state`: `memory`, a Redis URL the client accepts, or a list of a cluster's nodes (which
    /// becomes its `redis+cluster://` URL). Messages show it redacted.
    pub(crate) fn state(&self, value: &At<StateValue>) -> Result<String, ConfigError> {
        if matches!(&value.value, StateValue::Url(url) if url == IN_MEMORY) {
            return Ok(IN_MEMORY.to_owned());
        }
        let url = match &value.value {
            StateValue::Url(url) => Ok(url.clone()),
            StateValue::Nodes(nodes) => nodes_to_url(nodes),
        };
        url.and_then(|url| check_redis_url(&url).map(|()| url))
            .map_err(|why| {
                let msg = format!(
                    "{why}; or write `state: {IN_MEMORY}` (this process only), or remove \
                     `state` to use the default local store"
                );
                self.invalid("state", line(value), msg)
            })
    }

    /// `namespace`: not empty, no `{` or `}` (it sits inside a Redis hash tag).
    pub(crate) fn namespace(&self, value: &At<String>) -> Result<String, ConfigError> {
        let text = value.value.as_str();
        let problem = if text.trim().is_empty() {
            "must not be empty; remove it to use `default`".to_owned()
        } else if text.contains(NOT_IN_HASH_TAG) {
            format!(
                "`{text}` must not contain `{{` or `}}`: the namespace sits inside a Redis hash \
                 tag; use letters, digits, `-` and `_`"
            )
        } else {
            return Ok(text.to_owned());
        };
        Err(self.invalid("namespace", line(value), problem))
    }

    /// `api`: one of the known APIs.
    pub(crate) fn api(&self, field: &str, value: &At<String>) -> Result<Api, ConfigError> {
        Api::from_name(&value.value).ok_or_else(|| {
            let valid: Vec<&str> = Api::ALL.iter().map(|a| a.as_str()).collect();
            let msg = format!(
                "unknown api `{}`; use one of: {}",
                value.value,
                valid.join(", ")
            );
            self.invalid(field, line(value), msg)
        })
    }

    /// `base_url`: an `http://` or `https://` URL the HTTP client can send to, without a user,
    /// password, query or fragment (see [`check_base_url`]). A trailing `/` is dropped. The
    /// message never shows a value that may hold a secret.
    pub(crate) fn base_url(&self, field: &str, value: &At<String>) -> Result<String, ConfigError> {
        check_base_url(&value.value).map_err(|msg| self.invalid(field, line(value), msg))
    }

    /// `api_key_env`: a valid environment variable name, and not a key pasted in by mistake.
    /// A value that may be a key is never echoed.
    pub(crate) fn api_key_env(
        &self,
        field: &str,
        value: &At<String>,
    ) -> Result<String, ConfigError> {
        let text = value.value.as_str();
        let example = "e.g. DEEPSEEK_API_KEY";
        let problem = if text.is_empty() {
            format!(
                "must not be empty; write the name of the variable that holds the key, {example}"
            )
        } else if looks_like_key(text) {
            format!(
                "looks like an API key (value not shown): api_key_env names an environment \
                 variable, not a key; put the key in the environment and write the variable's \
                 name here, {example}"
            )
        } else if text.contains('=') {
            format!(
                "must be only the variable's name, without `=` or a value (value not shown), {example}"
            )
        } else if !is_env_name(text) {
            let shown = if text.len() <= 40 {
                format!("`{text}` ")
            } else {
                String::new()
            };
            format!(
                "{shown}is not a valid environment variable name; use letters, digits and `_`, \
                 not starting with a digit, {example}"
            )
        } else {
            return Ok(text.to_owned());
        };
        Err(self.invalid(field, line(value), problem))
    }

    /// `limits:` of a provider or model; `base` is its field path.
    pub(crate) fn limits(
        &self,
        base: &str,
        raw: Option<&RawLimits>,
    ) -> Result<Limits, ConfigError> {
        match raw {
            Some(raw) => self.limit_keys(&format!("{base}.limits"), raw),
            None => Ok(Limits::default()),
        }
    }

    /// `rpm`, `tpm`, `itpm`, `otpm`, `concurrency`, `rpd` and `tpd` whose field paths start with `prefix` (e.g.
    /// `providers[p].limits`, or `tenants.tiers.free` where the keys sit in the tier itself).
    pub(crate) fn limit_keys(&self, prefix: &str, raw: &RawLimits) -> Result<Limits, ConfigError> {
        let one = |key: &str, value: &Option<At<Number>>| {
            let field = format!("{prefix}.{key}");
            let hint = format!("remove `{key}` for no limit");
            value
                .as_ref()
                .map(|v| self.positive(&field, v, &hint))
                .transpose()
        };
        Ok(Limits {
            rpm: one("rpm", &raw.rpm)?,
            tpm: one("tpm", &raw.tpm)?,
            itpm: one("itpm", &raw.itpm)?,
            otpm: one("otpm", &raw.otpm)?,
            concurrency: one("concurrency", &raw.concurrency)?,
            rpd: one("rpd", &raw.rpd)?,
            tpd: one("tpd", &raw.tpd)?,
        })
    }

    /// `limits.day_resets` of a provider or model (`base` is its field path): `utc` or an IANA
    /// time zone; `inherited` when absent.
    pub(crate) fn day_resets(
        &self,
        base: &str,
        raw: Option<&RawLimits>,
        inherited: &DayResets,
    ) -> Result<DayResets, ConfigError> {
        let Some(value) = raw.and_then(|r| r.day_resets.as_ref()) else {
            return Ok(inherited.clone());
        };
        DayResets::parse(value.value.trim()).ok_or_else(|| {
            let msg = format!(
                "`{}` is not `utc` or a time zone llmroute knows; write `utc`, or an IANA name \
                 such as `America/Los_Angeles` (Gemini's days end at midnight Pacific time)",
                value.value
            );
            self.invalid(&format!("{base}.limits.day_resets"), line(value), msg)
        })
    }

    /// A whole number above zero, also written as a decimal (`1e6`, `500.0`) up to 2^53;
    /// `hint` says what to do instead.
    pub(crate) fn positive(
        &self,
        field: &str,
        value: &At<Number>,
        hint: &str,
    ) -> Result<NonZeroU64, ConfigError> {
        let whole = match value.value {
            Number::Int(n) => u64::try_from(n).ok().and_then(NonZeroU64::new),
            // `1e6` or `500.0`: a whole number written as a decimal, taken while every whole
            // number up to it is exact as a float.
            Number::Float(x) if x.fract() == 0.0 && (1.0..=EXACT).contains(&x) => {
                NonZeroU64::new(x as u64)
            }
            Number::Float(_) | Number::Text(_) => None,
        };
        whole.ok_or_else(|| {
            // Whole numbers beyond 64 bits arrive as floats.
            let too_large = match value.value {
                Number::Int(n) => n > 0,
                Number::Float(x) => x >= 2f64.powi(64),
                Number::Text(_) => false,
            };
            let inexact = matches!(value.value, Number::Float(x) if x.fract() == 0.0 && x > EXACT);
            let msg = if inexact && !too_large {
                format!(
                    "{} is past what a decimal (`1e6`, `500.0`) holds exactly; write its \
                     digits, with no `.` or `e`; {hint}",
                    value.value
                )
            } else if too_large {
                format!(
                    "{} is too large (at most {}); {hint}",
                    value.value,
                    u64::MAX
                )
            } else {
                format!(
                    "must be a whole number above zero, got {}; {hint}",
                    value.value
                )
            };
            self.invalid(field, line(value), msg)
        })
    }

    /// A priority: `interactive` or `batch`.
    pub(crate) fn priority(
        &self,
        field: &str,
        value: &At<String>,
    ) -> Result<Priority, ConfigError> {
        match value.value.as_str() {
            "interactive" => Ok(Priority::Interactive),
            "batch" => Ok(Priority::Batch),
            other => {
                let msg = format!("`{other}` is not a priority; use `interactive` or `batch`");
                Err(self.invalid(field, line(value), msg))
            }
        }
    }

    /// `capabilities:` of a model: known names, none twice; absent: the defaults of `api`.
    /// `embedding` names the model's kind, not a capability ([`EMBEDDING`]): it is left out here
    /// and read by the kind's check.
    pub(crate) fn capabilities(
        &self,
        base: &str,
        api: Api,
        raw: Option<&At<Vec<At<String>>>>,
    ) -> Result<Capabilities, ConfigError> {
        let Some(raw) = raw else {
            return Ok(Capabilities::default_for(api));
        };
        let mut list = Vec::with_capacity(raw.value.len());
        for (i, entry) in raw.value.iter().enumerate() {
            let field = format!("{base}.capabilities[{i}]");
            let problem = match Capability::from_name(&entry.value) {
                Some(c) if list.contains(&c) => {
                    format!("`{}` is listed twice; remove one", entry.value)
                }
                Some(c) => {
                    list.push(c);
                    continue;
                }
                None if entry.value == EMBEDDING => continue,
                None => {
                    let known: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
                    format!(
                        "`{}` is not a capability; use any of: {}, or `{EMBEDDING}` for an \
                         embedding model",
                        entry.value,
                        known.join(", ")
                    )
                }
            };
            return Err(self.invalid(&field, line(entry), problem));
        }
        Ok(Capabilities::of(&list))
    }

    /// An amount in USD, positive and finite; `hint` says what to do instead.
    pub(crate) fn usd(
        &self,
        field: &str,
        value: &At<Number>,
        hint: &str,
    ) -> Result<f64, ConfigError> {
        positive_finite(&value.value).ok_or_else(|| {
            let msg = format!(
                "must be a positive, finite amount in USD, got {}; {hint}",
                value.value
            );
            self.invalid(field, line(value), msg)
        })
    }

    /// A name used as a mapping key (`kind` says what it names, e.g. `tier`): not blank, no
    /// surrounding spaces. `field` is the mapping with the entry's position, e.g.
    /// `tenants.tiers[0]`.
    pub(crate) fn key_name(
        &self,
        field: &str,
        kind: &str,
        value: &At<String>,
    ) -> Result<String, ConfigError> {
        let text = value.value.as_str();
        let problem = if text.trim().is_empty() {
            format!("a {kind} name must not be empty; write a name")
        } else if text.trim() != text {
            format!("{kind} name `{text}` has leading or trailing spaces; remove them")
        } else {
            return Ok(text.to_owned());
        };
        Err(self.invalid(field, line(value), problem))
    }

    /// A name a request may use (`defaults.model`, a gateway key's `models`): a model, an
    /// alias, or a routed alias.
    pub(crate) fn model_or_route(
        &self,
        field: &str,
        value: &At<String>,
        models: Models<'_>,
        routes: &Routes,
    ) -> Result<String, ConfigError> {
        let name = self.name(field, value)?;
        if models.resolve(&name).is_empty() && routes.get(&name).is_none() {
            let msg = format!(
                "`{name}` names no model, alias or route; use one of: {}",
                models.known().join(", ")
            );
            return Err(self.invalid(field, line(value), msg));
        }
        Ok(name)
    }

    /// A tenant name, as [`tenant_name_problem`] checks it.
    pub(crate) fn tenant(&self, field: &str, value: &At<String>) -> Result<String, ConfigError> {
        match tenant_name_problem(&value.value) {
            None => Ok(value.value.clone()),
            Some(problem) => Err(self.invalid(field, line(value), problem)),
        }
    }
}
/// The value as a float when it is a number above zero and finite.
fn positive_finite(value: &Number) -> Option<f64> {
    value.as_f64().filter(|x| x.is_finite() && *x > 0.0)
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what shells and `env` accept as a variable name.
fn is_env_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A known key prefix, or a long mixed string of lowercase letters and digits, which no one
/// names an environment variable.
fn looks_like_key(text: &str) -> bool {
    KEY_PREFIXES.iter().any(|p| text.starts_with(p))
        || (text.len() >= 30
            && text.chars().any(|c| c.is_ascii_lowercase())
            && text.chars().any(|c| c.is_ascii_digit()))
}
