//! `llmroute keys`: the gateway's keys. `create`, `list`, `show`, `update`, `rotate` and `revoke`
//! work on the runtime keys of the shared key store (beside the ledger: Redis, or the embedded
//! store), with no gateway running: every gateway on that store serves the change within a
//! second. `new` prints a key and its line for `gateway.keys` (the file's way), `admin` an admin
//! key and its line for `gateway.admin_keys`; neither stores anything.

mod file;
mod store;

use std::io::Write;

use clap::{Args, Subcommand};
use router_core::flow::Priority;
use router_gateway::keyring::{LimitsPatch, LimitsView};

use crate::context::Context;
use crate::failure::Failure;

/// Options of `llmroute keys`.
#[derive(Debug, Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key in the shared key store; its secret is printed this once
    Create(CreateArgs),
    /// List the keys: the store's and those of `gateway.keys`
    List {
        /// Only the keys of this tenant
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Show one key by its id
    Show {
        /// The key's id (`key_...`)
        id: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Change a key's name, models, priority or expiry
    Update(UpdateArgs),
    /// Give a key a new secret (printed this once); the old one works for the grace period
    Rotate {
        /// The key's id
        id: String,
        /// How long the old secret keeps working, seconds
        #[arg(long, value_name = "SECS", default_value_t = router_gateway::keyring::DEFAULT_GRACE_SECS)]
        grace_secs: u64,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by its id: every gateway refuses it within a second
    Revoke {
        /// The key's id
        id: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Print a new key and the line that adds its hash to `gateway.keys` (stores nothing)
    New {
        /// The tenant the key's requests are accounted to
        #[arg(long, value_name = "NAME")]
        tenant: String,
    },
    /// Print a new admin key and the line that adds its hash to `gateway.admin_keys`
    Admin,
}

/// Options of `llmroute keys create`.
#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The tenant the key's requests are accounted to (it needs a tier)
    #[arg(long, value_name = "NAME")]
    tenant: String,
    /// A name for people
    #[arg(long, default_value = "")]
    name: String,
    /// A model or alias the key may use (repeat for several; none: all)
    #[arg(long = "model", value_name = "MODEL")]
    models: Vec<String>,
    /// The priority of every request made with it
    #[arg(long, value_parser = priority)]
    priority: Option<Priority>,
    /// Days until it stops working
    #[arg(long, value_name = "DAYS")]
    expires_in_days: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Print JSON: one object with `id` and `key`
    #[arg(long)]
    json: bool,
}

/// Options of `llmroute keys update`.
#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// The key's id
    id: String,
    /// A new name
    #[arg(long)]
    name: Option<String>,
    /// The models it may use (repeat for several); replaces the list
    #[arg(long = "model", value_name = "MODEL")]
    models: Vec<String>,
    /// Let it use every model
    #[arg(long, conflicts_with = "models")]
    all_models: bool,
    /// A new priority
    #[arg(long, value_parser = priority)]
    priority: Option<Priority>,
    /// Days from now until it stops working
    #[arg(long, value_name = "DAYS")]
    expires_in_days: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Remove every limit and budget of the key's own (before the ones given)
    #[arg(long)]
    no_limits: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// A key's own limits and budgets, within its tenant's; checked with them in the same atomic
/// admission.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Requests per minute of the key's own
    #[arg(long, value_name = "N")]
    rpm: Option<u64>,
    /// Tokens per minute of the key's own
    #[arg(long, value_name = "N")]
    tpm: Option<u64>,
    /// Requests in flight of the key's own
    #[arg(long, value_name = "N")]
    concurrency: Option<u64>,
    /// USD the key may spend per UTC day
    #[arg(long, value_name = "USD")]
    daily_usd: Option<f64>,
    /// USD the key may spend per UTC calendar month
    #[arg(long, value_name = "USD")]
    monthly_usd: Option<f64>,
}

impl LimitArgs {
    /// The limits given, as the key lifecycle takes them.
    fn view(&self) -> LimitsView {
        LimitsView {
            rpm: self.rpm,
            tpm: self.tpm,
            concurrency: self.concurrency,
            daily_usd: self.daily_usd,
            monthly_usd: self.monthly_usd,
        }
    }

    /// The change to a key's limits: every one removed first when `clear`, then the ones
    /// given set; `None` when nothing changes.
    fn patch(&self, clear: bool) -> Option<LimitsPatch> {
        let given = LimitsPatch::setting(&self.view());
        let base = if clear {
            LimitsPatch::CLEAR
        } else {
            LimitsPatch::default()
        };
        let or = |g: Option<Option<u64>>, b| g.or(b);
        let patch = LimitsPatch {
            rpm: or(given.rpm, base.rpm),
            tpm: or(given.tpm, base.tpm),
            concurrency: or(given.concurrency, base.concurrency),
            daily_usd: given.daily_usd.or(base.daily_usd),
            monthly_usd: given.monthly_usd.or(base.monthly_usd),
        };
        (patch != LimitsPatch::default()).then_some(patch)
    }
}

fn priority(text: &str) -> Result<Priority, String> {
    match text {
        "interactive" => Ok(Priority::Interactive),
        "batch" => Ok(Priority::Batch),
        other => Err(format!(
            "`{other}` is no priority: write interactive or batch"
        )),
    }
}

pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &KeysArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match &args.command {
        KeysCommand::New { tenant } => file::new(tenant, out),
        KeysCommand::Admin => file::admin(out),
        KeysCommand::Create(create) => store::create(ctx, create, out).await,
        KeysCommand::List { tenant, json } => store::list(ctx, tenant.as_deref(), *json, out).await,
        KeysCommand::Show { id, json } => store::show(ctx, id, *json, out).await,
        KeysCommand::Update(update) => store::update(ctx, update, out).await,
        KeysCommand::Rotate {
            id,
            grace_secs,
            json,
        } => store::rotate(ctx, id, *grace_secs, *json, out).await,
        KeysCommand::Revoke { id, json } => store::revoke(ctx, id, *json, out).await,
    }
}
