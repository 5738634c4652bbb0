//! Configuration: `providers.yaml` parsed, validated, and turned into a [`Registry`].
//!
//! # Two stages
//!
//! 1. **Parse.** The text is read into serde structs that deny unknown fields, so a misspelt key
//!    is an error with its line and column. Numbers are read as plain integers and floats.
//! 2. **Validate.** Every value is checked once and turned into its runtime type: limits become
//!    `NonZeroU64`, prices positive finite floats, names unique, aliases resolvable, the `state`
//!    URL one the Redis client accepts, each `base_url` one the HTTP client can send to with no
//!    user, password, query or fragment in it, the retry backoff no longer than the longest
//!    cooldown. Code holding a [`Registry`] never re-validates.
//!
//! Errors ([`ConfigError`]) are one line each and name the file, the line, the field path (e.g.
//! `providers[deepseek].models[deepseek-chat].limits.rpm`), the bad value and what to do. They
//! never contain an API key or a password from a URL.
//!
//! # Layout
//!
//! The flow runs one way: `raw/` (stage 1) → `validate/` (stage 2) → [`Registry`]. The values a
//! registry holds live in files of their own (`values.rs`, `kind.rs`, `capabilities.rs`,
//! `deployments.rs`, `tenants.rs`, `routes.rs`, `gateway.rs`, `ledger.rs`, `usage.rs`), which know
//! neither the raw file nor the checks. Each section's checker in `validate/` takes its raw section and the values
//! it is checked against (the deployments' models, the routes, the tiers), never the registry;
//! `validate/mod.rs` assembles the registry last. `load.rs` holds the entry points.
//!
//! # Tenants and priorities
//!
//! `tenants:` defines tiers (limits and USD budgets each tenant of the tier gets) and maps tenant
//! names to tiers; [`Registry::tier_of`] answers with a tenant's `members` entry, else
//! `default_tier`, else `None` (unlimited and untracked). Tenant names are used inside the
//! namespace's Redis hash tag, so, like the namespace, they contain no `{` or `}`.
//! `priorities.batch_share` is the share of each deployment's (and provider's) capacity batch
//! requests may use, in (0, 1]. Without these sections: [`Tenants::default`] and
//! [`Priorities::default`] (`batch_share` 0.8).
//!
//! # Loading
//!
//! [`Registry::from_yaml_str`] is pure (tests use it; nothing touches the filesystem or the
//! environment). [`Registry::from_path`] reads a file. [`Registry::load`] also applies a
//! `REDIS_URL` value passed in by the caller, which overrides `state`;
//! [`Registry::with_state_override`] does the same for any other origin (e.g. `--state`).
//!
//! ```
//! use router_core::config::Registry;
//!
//! let yaml = r#"
//! providers:
//!   - name: deepseek
//!     api: openai
//!     base_url: https://api.deepseek.com/v1
//!     api_key_env: DEEPSEEK_API_KEY
//!     models:
//!       - name: deepseek-chat
//!         aliases: [chat]
//!         price: { input: 0.27, output: 1.10 }
//!         limits: { rpm: 500 }
//! "#;
//! let registry = Registry::from_yaml_str(yaml, "example.yaml")?;
//! assert_eq!(registry.resolve("chat").len(), 1);
//! assert_eq!(registry.namespace, "default");
//!
//! let err = Registry::from_yaml_str(&yaml.replace("500", "0"), "example.yaml").unwrap_err();
//! assert!(err.to_string().contains("providers[deepseek].models[deepseek-chat].limits.rpm"));
//! # Ok::<(), router_core::config::ConfigError>(())
//! ```

mod base_url;
mod capabilities;
mod deployments;
mod error;
mod gateway;
mod kind;
mod ledger;
mod load;
mod price;
mod raw;
mod registry;
mod routes;
mod state;
mod telemetry;
mod tenants;
mod usage;
mod validate;
mod values;

pub use capabilities::{Capabilities, Capability, Features, needed};
pub use deployments::{Deployment, Provider};
pub use error::ConfigError;
pub use gateway::{Gateway, GatewayKey, RESERVED_HEADERS};
pub use kind::ModelKind;
pub use ledger::{LedgerSettings, OnError};
pub use price::{Billed, Price, PriceTier, Rates};
pub use registry::Registry;
pub use routes::{NoRoute, Route, RouteMatch, Routes, Rule, Subject, When};
pub use state::{IN_MEMORY, redact_url};
pub(crate) use state::{RedisTarget, parse_redis_url};
pub use telemetry::Telemetry;
pub use tenants::{Budget, NO_TENANT, Priorities, Tenants, Tier, tenant_name_problem};
pub use usage::{UsageSettings, UsageSink};
pub use values::{Api, Defaults, DeploymentId, Lease, Limits, ProviderId, RetrySettings};
