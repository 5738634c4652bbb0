//! Tests of the store as a whole, on a Redis address nothing answers at.

use super::*;
use crate::clock::SystemClock;
use crate::ledger::RedisStoreOptions;

/// One instance over a deployment of 10 RPM, on a Redis address nothing answers at: every
/// call to it is refused at once, so it admits only on its own share.
async fn cut_off() -> ResilientStore {
    let yaml = "providers:\n  - { name: p, api: openai, base_url: 'http://127.0.0.1:1/v1', \
        api_key_env: P_KEY, models: [{ name: m, price: { input: 1, output: 2 }, \
        limits: { rpm: 10 } }] }\n";
    let registry = Registry::from_yaml_str(yaml, "resilient.yaml").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let options = RedisStoreOptions {
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let url = format!("redis://127.0.0.1:{port}/0");
    let shared = RedisStore::connect(&url, &registry, options).await.unwrap();
    ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await
}

/// An admission denied after a slow first sending is kept once, and only while Redis could
/// still hold something of it: an instance that stays shared through many slow answers
/// does not pile them up for its next restore to void one by one.
#[tokio::test]
async fn uncertain_admissions_are_kept_once_and_only_while_redis_can_hold_them() {
    let a = cut_off().await;
    let (d, e) = (DeploymentId(0), DeploymentId(1));
    let need = Need::new(10, Duration::from_secs(60));
    let lives = SLOTS_TTL_MS + WINDOW_BUCKETS * BUCKET_MS;
    let mut st = a.inner.lock();
    st.uncertain.clear();
    st.unsure(&need, &[d], 1_000);
    st.unsure(&need, &[d], 2_000);
    let kept = |st: &Machine| -> Vec<(u64, Vec<DeploymentId>, u64)> {
        st.uncertain
            .iter()
            .map(|u| (u.need.id, u.candidates.clone(), u.until))
            .collect()
    };
    assert_eq!(kept(&st), [(need.id, vec![d], 2_000 + lives)], "once");
    // Asked again over other candidates, it may hold a slot on either.
    st.unsure(&need, &[e, d], 2_000);
    assert_eq!(st.uncertain.len(), 2);
    // Once Redis can hold nothing of it, it goes with the next one kept.
    let other = Need::new(10, Duration::from_secs(60));
    st.unsure(&other, &[d], 2_000 + lives);
    assert_eq!(kept(&st), [(other.id, vec![d], 2_000 + 2 * lives)]);
    st.forget_settled_uncertain(2_000 + 2 * lives);
    assert!(st.uncertain.is_empty());
}

/// Admits one-token requests until refused; settles each.
async fn fill(ledger: &ResilientStore) -> usize {
    let mut n = 0;
    loop {
        let need = Need::new(1, Duration::from_secs(60));
        match ledger.admit(&need, &[DeploymentId(0)]).await.unwrap() {
            Admission::Granted(r) => {
                let used = ActualUsage::tokens(1);
                assert!(ledger.settle(&r, used).await.unwrap());
                n += 1;
                assert!(n <= 10, "admitted over the limit");
            }
            Admission::Denied(_) => return n,
        }
    }
}

/// As if `ledger`'s last heartbeat had read 2 requests in the window, two instances alive:
/// in local mode, its share is 5, less half of the 2.
fn read_two_of_two(ledger: &ResilientStore) {
    let mut st = ledger.inner.lock();
    let base = st.own.clone();
    st.reads.record(1, 1, base);
    st.seen = Some(Beat {
        instances: 2,
        read: 1,
        oldest: 1,
        scopes: vec![Counts::from([2, 2, 0, 2])],
        ..Beat::default()
    });
}

/// What an instance wrote back after an outage is in the shared windows, but in no reading
/// it took: should the store stop answering it again before its next heartbeat reads the
/// windows, its local mode counts all of it (it counted none, and admitted it a second time).
#[tokio::test]
async fn what_it_wrote_back_counts_whole_when_it_goes_local_before_its_next_reading() {
    let ledger = cut_off().await;
    let inner = &ledger.inner;
    read_two_of_two(&ledger);
    assert_eq!(fill(&ledger).await, 4);
    assert_eq!(ledger.status().mode, Mode::Local);

    // The store answers: the 4 are written into the shared windows (no other instance
    // waits), and it admits through them again.
    let written: Vec<Entry> = match &inner.lock().admitting {
        Admitting::Local(l) => l.log.values().cloned().collect(),
        _ => unreachable!("local above"),
    };
    let restored = Restored {
        epoch: 7,
        lost: false,
        restored: 1,
        stale: false,
        waiting: 0,
    };
    let now = inner.now();
    assert_eq!(
        inner.lock().restored(&restored, &written, now).1,
        Next::Done
    );
    assert_eq!(ledger.status().mode, Mode::Shared);

    // Cut off again before any heartbeat: the same reading, and the 4 on top of its share
    // of it. Full.
    assert_eq!(fill(&ledger).await, 0);
    assert_eq!(ledger.status().mode, Mode::Local);
}

/// An admission sent to the shared store and not answered when the instance goes local may
/// be counted there after the reading local mode starts from: the local ledger counts it as
/// admitted, and keeps counting it if the answer says so.
#[tokio::test]
async fn an_admission_unanswered_when_it_goes_local_counts_there() {
    let ledger = cut_off().await;
    let inner = &ledger.inner;
    read_two_of_two(&ledger);
    let need = Need::new(1, Duration::from_secs(60));
    let call = {
        let mut st = inner.lock();
        let calling = Calling::request(&need, &[DeploymentId(0)], inner.now());
        inner.register(&mut st, calling)
    };
    assert_eq!(fill(&ledger).await, 3, "4, less the one unanswered");
    call.done(&mut inner.lock(), Some(DeploymentId(0)));
    assert_eq!(fill(&ledger).await, 0);

    // One whose answer was handled before the instance went local is not counted again.
    let ledger = cut_off().await;
    let inner = &ledger.inner;
    read_two_of_two(&ledger);
    let call = {
        let mut st = inner.lock();
        let calling = Calling::request(&need, &[DeploymentId(0)], inner.now());
        inner.register(&mut st, calling)
    };
    drop(call);
    assert_eq!(fill(&ledger).await, 4);
}
