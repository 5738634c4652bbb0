//! llmroute's state outside a router: where the limits ledger and the usage records live, and
//! what the ledger holds now.
//!
//! A router (router-sdk's `Router`) admits through a ledger and hands usage records to a
//! recorder. This crate decides which ledger and which sink a driver uses, and opens them. The
//! SDK's `Router::from_path`, the `llmroute` CLI and the gateway all decide here. So `--state`,
//! `REDIS_URL`, `state`, `LLMROUTE_STATE_DIR` and `LLMROUTE_USAGE` mean the same to each.
//!
//! # The ledger
//!
//! [`store::LedgerChoice::resolve`] picks Redis (an override such as `--state`, else
//! `REDIS_URL`, else `state` in the file), else the local store the driver asks for: the
//! embedded SQLite file for the CLI and the gateway, memory for a library. [`store::open`]
//! opens the choice.
//!
//! # Usage records
//!
//! [`usage::settings`] reads `LLMROUTE_USAGE` over the file's `usage:`, else the driver's
//! default ([`usage::UsageDefault`]). [`usage::open`] starts a recorder on that sink;
//! [`usage::reader`] opens it for reports only.
//!
//! # The quota view
//!
//! [`quota::quota`] turns a ledger snapshot into rows: use against limits, cooldowns, prices,
//! what the provider last reported, and a tenant's use and spend. `llmroute quota` prints it;
//! the gateway's `GET /v1/quota` serves it.
//!
//! # Example
//!
//! With nothing naming Redis or a sink, the CLI's choices are the embedded ledger file and
//! the usage file, both in the state directory (this example runs as a test):
//!
//! ```
//! use router_core::config::{Registry, UsageSink};
//! use router_state::store::{Environment, LedgerChoice, LocalStore};
//! use router_state::usage::{self, UsageDefault};
//!
//! let yaml = "providers:\n  - name: oa\n    api: openai\n    base_url: https://api.openai.com/v1\n    api_key_env: OPENAI_API_KEY\n    models:\n      - { name: gpt-4o-mini, price: { input: 0.15, output: 0.6 } }\n";
//! let registry = Registry::from_yaml_str(yaml, "example.yaml")?;
//! let env = Environment::fixed(&[("LLMROUTE_STATE_DIR", "/var/lib/llmroute")], None);
//! let ledger = LedgerChoice::resolve(&registry, None, LocalStore::Embedded, &env)?;
//! assert_eq!(ledger.describe(), "embedded /var/lib/llmroute/ledger.sqlite");
//! let sink = usage::settings(&registry, UsageDefault::Sqlite, &env)?.sink;
//! assert_eq!(sink, UsageSink::Sqlite(None));
//!
//! // A library's defaults: memory, and no records; LLMROUTE_USAGE still names a sink.
//! let env = Environment::fixed(&[("LLMROUTE_USAGE", "sqlite:/tmp/usage.sqlite")], None);
//! let ledger = LedgerChoice::resolve(&registry, None, LocalStore::Memory, &env)?;
//! assert_eq!(ledger, LedgerChoice::Memory);
//! let sink = usage::settings(&registry, UsageDefault::None, &env)?.sink;
//! assert_eq!(sink, UsageSink::Sqlite(Some("/tmp/usage.sqlite".into())));
//! # Ok::<(), router_state::Error>(())
//! ```
#![forbid(unsafe_code)]

mod error;
pub mod keys;
pub mod quota;
pub mod store;
pub mod usage;

pub use error::Error;
