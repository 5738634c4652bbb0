//! Runtime keys in this process's memory: for a gateway with an in-memory ledger, and tests.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use futures_util::FutureExt;

use super::{KeyFuture, KeyRecord, KeyStore, KeyStoreError, Listing};

/// Keys held by one process, lost when it ends.
#[derive(Debug, Default)]
pub struct MemoryKeys {
    state: Mutex<(u64, BTreeMap<String, KeyRecord>)>,
}

impl KeyStore for MemoryKeys {
    fn version(&self) -> KeyFuture<'_, u64> {
        let version = self.state.lock().unwrap_or_else(PoisonError::into_inner).0;
        async move { Ok(version) }.boxed()
    }

    fn all(&self) -> KeyFuture<'_, Listing> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let listing = Listing {
            version: state.0,
            records: state.1.values().cloned().collect(),
        };
        async move { Ok(listing) }.boxed()
    }

    fn put<'a>(&'a self, record: &'a KeyRecord, read: Option<u64>) -> KeyFuture<'a, ()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let stored = state.1.get(&record.id).map(|r| r.rev);
        let result = if stored == read {
            state.0 += 1;
            state.1.insert(record.id.clone(), record.clone());
            Ok(())
        } else {
            Err(KeyStoreError::Conflict {
                id: record.id.clone(),
            })
        };
        async move { result }.boxed()
    }
}
