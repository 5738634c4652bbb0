//! The runtime keys as this instance sees them: every key of the shared key store, by the
//! SHA-256 of each secret it holds, reloaded whenever the store's version moves. A watcher
//! polls the version every [`KEYS_POLL`], so a key created, changed or revoked on any instance
//! works (or stops working) here within that.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use router_core::keys::{KeyRecord, KeyStore, KeyStoreError};

/// How often an instance asks the key store whether any key changed.
pub const KEYS_POLL: Duration = Duration::from_millis(500);

/// The key store and this instance's copy of its keys.
#[derive(Debug)]
pub(crate) struct RuntimeKeys {
    store: Arc<dyn KeyStore>,
    view: RwLock<Arc<View>>,
    /// The version of the keys this instance serves, for whoever waits for a change.
    seen: tokio::sync::watch::Sender<u64>,
    /// One refresh at a time, so the listing read last is the newest.
    refreshing: tokio::sync::Mutex<()>,
}

/// Says which version of the runtime keys an instance serves, and when it moves.
#[derive(Debug, Clone)]
pub struct KeysSeen(tokio::sync::watch::Receiver<u64>);

impl KeysSeen {
    /// The version served now.
    pub fn version(&self) -> u64 {
        *self.0.borrow()
    }

    /// Waits until the instance serves a version past `version` (at once if it does).
    pub async fn past(&mut self, version: u64) {
        let _ = self.0.wait_for(|&v| v > version).await;
    }
}

/// The keys at one version, by secret hash.
#[derive(Debug, Default)]
struct View {
    /// `None`: never loaded.
    version: Option<u64>,
    by_hash: HashMap<String, Arc<KeyRecord>>,
}

impl RuntimeKeys {
    pub(crate) fn new(store: Arc<dyn KeyStore>) -> Self {
        RuntimeKeys {
            store,
            view: RwLock::default(),
            seen: tokio::sync::watch::Sender::new(0),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// A watch of the version served.
    pub(crate) fn seen(&self) -> KeysSeen {
        KeysSeen(self.seen.subscribe())
    }

    /// The store, for the admin API.
    pub(crate) fn store(&self) -> &dyn KeyStore {
        &*self.store
    }

    /// The key holding the secret whose SHA-256 is `sha256`, whatever its state.
    pub(crate) fn by_hash(&self, sha256: &str) -> Option<Arc<KeyRecord>> {
        self.view().by_hash.get(sha256).cloned()
    }

    fn view(&self) -> Arc<View> {
        self.view
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reloads the keys if the store's version moved, up or down; says whether it did. A
    /// version that went down is a store that came back empty (Redis restarted) and counts
    /// again from 1: its listing replaces the old one all the same, so keys made since are
    /// served and keys it lost are not.
    pub(crate) async fn refresh(&self) -> Result<bool, KeyStoreError> {
        let _one = self.refreshing.lock().await;
        let version = self.store.version().await?;
        if self.view().version == Some(version) {
            return Ok(false);
        }
        let listing = self.store.all().await?;
        let mut by_hash = HashMap::new();
        for record in listing.records {
            let record = Arc::new(record);
            for secret in &record.secrets {
                by_hash.insert(secret.sha256.clone(), record.clone());
            }
        }
        let view = Arc::new(View {
            version: Some(listing.version),
            by_hash,
        });
        *self
            .view
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = view;
        self.seen.send_replace(listing.version);
        Ok(true)
    }
}

/// Polls the store every [`KEYS_POLL`] while `keys` lives; a failed poll is logged once per
/// run of failures and tried again at the next tick.
pub(crate) async fn watch(keys: Weak<RuntimeKeys>) {
    let mut tick = tokio::time::interval(KEYS_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(keys) = keys.upgrade() else { return };
        match keys.refresh().await {
            Ok(_) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "gateway: cannot read the runtime keys; keeping the last read");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use router_core::keys::{KeyRecord, MemoryKeys};

    use super::*;

    /// Two instances over one store: what one writes, the other's watcher serves after one
    /// poll, on virtual time.
    #[tokio::test(start_paused = true)]
    async fn another_instance_serves_a_new_key_after_one_poll() {
        let store: Arc<dyn KeyStore> = Arc::new(MemoryKeys::default());
        let b = Arc::new(RuntimeKeys::new(store.clone()));
        tokio::spawn(watch(Arc::downgrade(&b)));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let record = KeyRecord::new("key_1".into(), "ci".into(), "acme".into(), "h1".into(), 0);
        store.put(&record, None).await.expect("memory takes it");
        let mut seen = b.seen();
        let before = seen.version();
        assert!(b.by_hash("h1").is_none());
        tokio::time::sleep(KEYS_POLL - Duration::from_millis(2)).await;
        assert!(b.by_hash("h1").is_none(), "not before the poll");
        tokio::time::sleep(Duration::from_millis(2)).await;
        seen.past(before).await;
        assert_eq!(b.by_hash("h1").expect("served").id, "key_1");
        assert!(KEYS_POLL <= Duration::from_secs(1));
    }

    /// A store whose keys can be lost at once, as a Redis restarted empty loses them.
    #[derive(Debug, Default)]
    struct Resettable(std::sync::Mutex<Arc<MemoryKeys>>);

    impl Resettable {
        fn now(&self) -> Arc<MemoryKeys> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        }

        fn reset(&self) {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::default();
        }
    }

    impl KeyStore for Resettable {
        fn version(&self) -> router_core::keys::KeyFuture<'_, u64> {
            let store = self.now();
            Box::pin(async move { store.version().await })
        }

        fn all(&self) -> router_core::keys::KeyFuture<'_, router_core::keys::Listing> {
            let store = self.now();
            Box::pin(async move { store.all().await })
        }

        fn put<'a>(
            &'a self,
            record: &'a KeyRecord,
            read: Option<u64>,
        ) -> router_core::keys::KeyFuture<'a, ()> {
            let store = self.now();
            Box::pin(async move { store.put(record, read).await })
        }
    }

    fn record(id: &str, hash: &str) -> KeyRecord {
        KeyRecord::new(id.into(), "ci".into(), "acme".into(), hash.into(), 0)
    }

    /// The store came back empty, its version from 1 again: the keys made since are served
    /// and the keys it lost are not, whatever the version served before.
    #[tokio::test]
    async fn a_store_back_empty_replaces_the_keys_served() {
        let store = Arc::new(Resettable::default());
        let keys = RuntimeKeys::new(store.clone());
        for n in 0..5 {
            store
                .put(&record(&format!("old_{n}"), &format!("o{n}")), None)
                .await
                .unwrap();
        }
        assert!(keys.refresh().await.unwrap());
        assert!(keys.by_hash("o4").is_some());
        store.reset();
        store.put(&record("new_1", "n1"), None).await.unwrap();
        assert!(keys.refresh().await.unwrap());
        assert_eq!(keys.by_hash("n1").expect("served").id, "new_1");
        assert!(
            keys.by_hash("o4").is_none(),
            "a key the store lost is refused"
        );
        assert!(!keys.refresh().await.unwrap(), "nothing moved since");
    }

    /// The watcher ends with the keys it watches.
    #[tokio::test(start_paused = true)]
    async fn the_watcher_ends_when_its_keys_are_dropped() {
        let keys = Arc::new(RuntimeKeys::new(Arc::new(MemoryKeys::default())));
        let watcher = tokio::spawn(watch(Arc::downgrade(&keys)));
        drop(keys);
        tokio::time::sleep(KEYS_POLL * 2).await;
        assert!(watcher.is_finished());
    }
}
