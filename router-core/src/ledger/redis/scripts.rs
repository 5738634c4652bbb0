//! The ledger's scripts (`lua/`): each as Redis loads it (the constants Rust writes, the
//! prelude, the helpers it takes, its body), loaded lazily, one static each.

use std::sync::LazyLock;

use redis::Script;

use super::super::MAX_SLOT_TTL;
use super::super::engine::CONCURRENCY_POLL_MS;
use super::super::period::DAY_MS;
use super::super::window::{BUCKET_MS, SETTLE_GRACE_MS, TIME_CAP_MS, WINDOW_BUCKETS};

/// The shared prelude every script starts with (after the constants).
pub(super) const COMMON: &str = include_str!("../../../../lua/common.lua");
/// The helpers of the scripts that correct windows, follow reports or move cooldowns and spend.
pub(super) const UPDATE: &str = include_str!("../../../../lua/update.lua");

/// Every ledger script: its name (its file in `lua/`), its body, and whether it takes
/// `lua/update.lua`'s helpers. Every function a script defines is created anew on each call, so
/// the admission, on every request's path, carries only the ones it uses.
pub(crate) const SCRIPT_FILES: [(&str, &str, bool); 14] = [
    ("admit", include_str!("../../../../lua/admit.lua"), false),
    ("settle", include_str!("../../../../lua/settle.lua"), true),
    ("renew", include_str!("../../../../lua/renew.lua"), false),
    ("leave", include_str!("../../../../lua/leave.lua"), false),
    ("days", include_str!("../../../../lua/days.lua"), false),
    (
        "cooldown",
        include_str!("../../../../lua/cooldown.lua"),
        true,
    ),
    ("observe", include_str!("../../../../lua/observe.lua"), true),
    (
        "snapshot",
        include_str!("../../../../lua/snapshot.lua"),
        false,
    ),
    (
        "tenant_snapshot",
        include_str!("../../../../lua/tenant_snapshot.lua"),
        false,
    ),
    (
        "heartbeat",
        include_str!("../../../../lua/heartbeat.lua"),
        true,
    ),
    ("restore", include_str!("../../../../lua/restore.lua"), true),
    ("lease", include_str!("../../../../lua/lease.lua"), true),
    ("unlease", include_str!("../../../../lua/unlease.lua"), true),
    (
        "tenant_lease",
        include_str!("../../../../lua/tenant_lease.lua"),
        true,
    ),
];

/// The text of ledger script `name` (`admit`, `settle`, ...: a file of `lua/` without `.lua`)
/// as it is loaded into Redis: the constants Rust writes, the prelude, the helpers it takes,
/// then its body. For tools that measure a script inside Redis (`bench/admit_cost.sh`).
pub fn script_text(name: &str) -> Option<String> {
    let (_, body, update) = SCRIPT_FILES.iter().find(|(n, _, _)| *n == name)?;
    Some(format!(
        "{}{COMMON}{}{body}",
        lua_constants(),
        if *update { UPDATE } else { "" }
    ))
}

/// A script of [`SCRIPT_FILES`], loaded lazily.
fn script(name: &str) -> Script {
    Script::new(&script_text(name).unwrap_or_default())
}

/// How long a reservation key and a slots zset live in Redis (Lua: `SLOTS_TTL_MS`): the longest
/// slot admitted or renewed now, and the grace in which its settlement still counts.
pub(crate) const SLOTS_TTL_MS: u64 =
    MAX_SLOT_TTL.as_millis() as u64 + SETTLE_GRACE_MS + 2 * BUCKET_MS;

/// The constants the Lua scripts share with the Rust stores, written from the Rust ones so the
/// twins cannot drift (`lua/common.lua` says which it expects; a test checks no script defines
/// them itself).
pub(crate) fn lua_constants() -> String {
    let slots_ttl = SLOTS_TTL_MS;
    [
        ("BUCKET_MS", BUCKET_MS),
        ("SPAN", WINDOW_BUCKETS),
        // A window hash outlives its live buckets (61) by one bucket.
        ("WINDOW_TTL_MS", (WINDOW_BUCKETS + 2) * BUCKET_MS),
        ("CONCURRENCY_POLL_MS", CONCURRENCY_POLL_MS),
        // A slots zset outlives the longest slot admitted or renewed now, and its grace.
        ("SLOTS_TTL_MS", slots_ttl),
        ("SETTLE_GRACE_MS", SETTLE_GRACE_MS),
        ("TIME_CAP_MS", TIME_CAP_MS),
        ("DAY_MS", DAY_MS),
        ("EPOCH_TTL_MS", DAY_MS),
        ("LINE_POLL_MS", super::super::line::LINE_POLL_MS),
    ]
    .iter()
    .map(|(name, value)| format!("local {name} = {value}\n"))
    // A numeric `redis.call` argument costs a float formatting inside Redis; a literal string
    // costs nothing.
    .chain([format!("local SLOTS_TTL_MS_ARG = '{slots_ttl}'\n")])
    .collect()
}

pub(super) static ADMIT: LazyLock<Script> = LazyLock::new(|| script("admit"));
pub(super) static SETTLE: LazyLock<Script> = LazyLock::new(|| script("settle"));
pub(super) static LEAVE: LazyLock<Script> = LazyLock::new(|| script("leave"));
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| script("renew"));
pub(super) static DAYS: LazyLock<Script> = LazyLock::new(|| script("days"));
pub(super) static COOLDOWN: LazyLock<Script> = LazyLock::new(|| script("cooldown"));
pub(super) static OBSERVE: LazyLock<Script> = LazyLock::new(|| script("observe"));
pub(super) static SNAPSHOT: LazyLock<Script> = LazyLock::new(|| script("snapshot"));
pub(super) static TENANT_SNAPSHOT: LazyLock<Script> = LazyLock::new(|| script("tenant_snapshot"));
pub(super) static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| script("heartbeat"));
pub(super) static RESTORE: LazyLock<Script> = LazyLock::new(|| script("restore"));
pub(super) static LEASE: LazyLock<Script> = LazyLock::new(|| script("lease"));
pub(super) static UNLEASE: LazyLock<Script> = LazyLock::new(|| script("unlease"));
pub(super) static TENANT_LEASE: LazyLock<Script> = LazyLock::new(|| script("tenant_lease"));

/// Every ledger script, for [`RedisStore::load_scripts`].
pub(super) static ALL: [&LazyLock<Script>; SCRIPT_FILES.len()] = [
    &ADMIT,
    &SETTLE,
    &LEAVE,
    &RENEW,
    &DAYS,
    &COOLDOWN,
    &OBSERVE,
    &SNAPSHOT,
    &TENANT_SNAPSHOT,
    &HEARTBEAT,
    &RESTORE,
    &LEASE,
    &UNLEASE,
    &TENANT_LEASE,
];
