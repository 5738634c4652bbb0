//! Tenant state in the file: what one store writes, another store on the same file reads.

use crate::ledger::counts::Counts;
use std::num::NonZeroU64;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::SqliteStore;
use super::rows::{SCHEMA, TxCells};
use crate::clock::ManualClock;
use crate::config::{DeploymentId, Limits, Registry};
use crate::ledger::engine::{Cells, Spend};
use crate::ledger::scopes::ScopeTable;
use crate::ledger::types::*;
use crate::ledger::window::{Slot, bucket_of};
use crate::ledger::{Ledger, LedgerError};

/// 2026-11-29T08:41:54Z.
const T0: u64 = 1_795_941_714_000;

fn registry() -> Registry {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://localhost/v1
    api_key_env: P_KEY
    models:
      - { name: m, aliases: [chat], price: { input: 1.0, output: 1.0 } }
"#;
    Registry::from_yaml_str(yaml, "sqlite.yaml").expect("valid test config")
}

fn tenant(concurrency: u64, daily_micros: u64) -> TenantSpec {
    TenantSpec {
        name: "acme".into(),
        limits: Limits {
            rpm: NonZeroU64::new(10),
            concurrency: NonZeroU64::new(concurrency),
            ..Limits::default()
        },
        budget: BudgetMicros {
            daily: Some(daily_micros),
            monthly: None,
        },
    }
}

fn need(spec: &TenantSpec, tokens: u64, cost: u64) -> Need {
    let tenant = Some(TenantNeed::of(spec.clone(), vec![cost]));
    Need {
        tenant,
        ..Need::new(tokens, Duration::from_secs(600))
    }
}

fn open(path: &Path, registry: &Registry, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open(path, registry, Arc::new(clock.clone())).expect("the ledger file opens")
}

async fn granted(store: &SqliteStore, need: &Need) -> Result<Reservation, LedgerError> {
    match store.admit(need, &[DeploymentId(0)]).await? {
        Admission::Granted(r) => Ok(r),
        Admission::Denied(d) => panic!("denied: {d:?}"),
    }
}

#[tokio::test]
async fn a_tenants_window_slots_and_spend_are_shared_through_the_file() -> Result<(), LedgerError> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("ledger.db");
    let (registry, clock) = (registry(), ManualClock::new(T0));
    let (a, b) = (
        open(&path, &registry, &clock),
        open(&path, &registry, &clock),
    );
    let spec = tenant(1, 1_000);

    let r = granted(&a, &need(&spec, 100, 600)).await?;
    let seen = b.tenant_snapshot(&spec).await?;
    assert_eq!(
        (seen.usage.requests, seen.usage.tokens, seen.usage.in_flight),
        (1, 100, 1)
    );
    assert_eq!(
        (seen.spent_today_micros, seen.spent_month_micros),
        (600, 600)
    );

    // The second store enforces the first's slot, then its spend.
    let Admission::Denied(d) = b.admit(&need(&spec, 10, 1), &[DeploymentId(0)]).await? else {
        panic!("the tenant's only slot is taken");
    };
    assert_eq!(
        (d.refusals[0].scope, d.refusals[0].limit),
        (Scope::Tenant, LimitKind::Concurrency)
    );
    assert!(
        b.settle(
            &r,
            ActualUsage {
                tokens: 80,
                input_tokens: 0,
                cost_micros: 700
            }
        )
        .await?
    );
    let Admission::Denied(d) = b.admit(&need(&spec, 10, 400), &[DeploymentId(0)]).await? else {
        panic!("700 of 1000 spent: 400 more does not fit");
    };
    assert_eq!(d.refusals[0].limit, LimitKind::DailyBudget);
    assert!(matches!(d.refusals[0].verdict, Verdict::Exhausted(_)));

    // A third store, opened later, sees the settled state.
    let c = open(&path, &registry, &clock);
    let seen = c.tenant_snapshot(&spec).await?;
    assert_eq!(
        (seen.usage.requests, seen.usage.tokens, seen.usage.in_flight),
        (1, 80, 0)
    );
    assert_eq!(seen.spent_today_micros, 700);
    assert!(
        !c.settle(&r, ActualUsage::tokens(80)).await?,
        "settled once already"
    );

    // The window slides and the day ends for every store alike.
    clock.advance_ms(24 * 3_600_000);
    let seen = a.tenant_snapshot(&spec).await?;
    assert_eq!(
        (
            seen.usage.requests,
            seen.usage.tokens,
            seen.spent_today_micros
        ),
        (0, 0, 0)
    );
    assert_eq!(seen.spent_month_micros, 700);
    Ok(())
}

#[tokio::test]
async fn a_batch_settles_in_one_transaction_each_with_its_own_answer() -> Result<(), LedgerError> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (registry, clock) = (registry(), ManualClock::new(T0));
    let store = open(&dir.path().join("ledger.db"), &registry, &clock);
    // A need is one request: each admission its own.
    let plain = || Need::new(100, Duration::from_secs(600));
    let r1 = granted(&store, &plain()).await?;
    let r2 = granted(&store, &plain()).await?;
    let r3 = granted(&store, &plain()).await?;
    let mut astray = r3.clone();
    astray.deployment = DeploymentId(7);
    let settle = |r: &Reservation, actual| Settlement {
        reservation: r.clone(),
        actual,
        observed: None,
    };
    let batch = [
        settle(&r1, Some(ActualUsage::tokens(80))),
        settle(&r2, None),
        settle(&astray, Some(ActualUsage::tokens(1))),
        settle(&r1, Some(ActualUsage::tokens(80))),
    ];
    let out = store.settle_batch(&batch).await;
    assert!(matches!(out[0], Ok(true)), "{out:?}");
    assert!(matches!(out[1], Ok(true)), "{out:?}");
    assert!(
        matches!(out[2], Err(LedgerError::UnknownDeployment(7))),
        "{out:?}"
    );
    assert!(matches!(out[3], Ok(false)), "settled once already: {out:?}");
    // r1 counts its 80 tokens; r2 was handed back, its request too; r3 still holds its 100.
    let seen = store.snapshot(&[DeploymentId(0)]).await?[0];
    assert_eq!(
        (seen.usage.requests, seen.usage.tokens, seen.usage.in_flight),
        (2, 180, 1)
    );
    Ok(())
}

#[tokio::test]
async fn tenants_and_deployments_keep_apart_in_the_file() -> Result<(), LedgerError> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("ledger.db");
    let (registry, clock) = (registry(), ManualClock::new(T0));
    let store = open(&path, &registry, &clock);
    let r = granted(&store, &need(&tenant(5, 1_000), 100, 250)).await?;
    drop(store);

    let conn = Connection::open(&path).expect("the file opens");
    let scopes: Vec<String> = conn
        .prepare("SELECT scope FROM llmroute_v4_slots WHERE id = ?1 ORDER BY scope")
        .and_then(|mut s| s.query_map([r.id as i64], |row| row.get(0))?.collect())
        .expect("slot rows");
    assert_eq!(scopes, ["d:p/m", "t:acme"]);
    let spend: (String, String, i64, i64) = conn
        .query_row(
            "SELECT ns, tenant, day_micros, month_micros FROM llmroute_v4_spend",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .expect("one spend row");
    assert_eq!(spend, ("default".into(), "acme".into(), 250, 250));
    Ok(())
}

#[test]
fn writing_back_is_idempotent() -> rusqlite::Result<()> {
    let mut conn = Connection::open_in_memory()?;
    conn.execute_batch(SCHEMA)?;
    let table = ScopeTable::new(&registry());
    let nb = bucket_of(T0);
    let spend = Spend {
        day: 20_786,
        day_micros: 5,
        month: 2026 * 12 + 10,
        month_micros: 9,
    };
    let tx = conn.transaction()?;
    let mut cells = TxCells::new(&tx, "ns", &table);
    let st = cells.tenant("acme");
    let b = st.scope.window.expire(nb);
    st.scope.window.add(b, Counts::from([2, 30, 20, 10]));
    let slot = Slot {
        id: 7,
        expiry: T0 + 1_000,
        bucket: b,
    };
    st.scope.slots.take(slot);
    st.spend = spend;
    cells.write_back()?;
    let written = tx.total_changes();

    // Loaded again and written back unchanged: not one row is written.
    for _ in 0..2 {
        let mut cells = TxCells::new(&tx, "ns", &table);
        let st = cells.tenant("acme");
        assert_eq!(st.scope.window.totals(), [2, 30, 20, 10]);
        assert_eq!(st.scope.slots.held(), [slot]);
        assert_eq!(st.spend, spend);
        cells.scope(0);
        cells.write_back()?;
        assert_eq!(tx.total_changes(), written);
    }

    // Another namespace holds nothing of it.
    let mut cells = TxCells::new(&tx, "other", &table);
    assert_eq!(cells.tenant("acme").scope.window.totals(), [0; 4]);
    assert_eq!(cells.tenant("acme").spend, Spend::default());
    cells.write_back()?;
    assert_eq!(
        tx.total_changes(),
        written,
        "an untouched tenant writes nothing"
    );
    Ok(())
}
