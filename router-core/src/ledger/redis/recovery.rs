//! The calls [`ResilientStore`](crate::ledger::ResilientStore) makes to stay within the limits
//! across a Redis outage: the heartbeat (lua/heartbeat.lua), the restore (lua/restore.lua) and
//! voiding an admission whose reply never came.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use redis::{Script, ScriptInvocation};

use super::{DAYS, HEARTBEAT, RESTORE, RedisStore};
use crate::config::DeploymentId;
use crate::ledger::LedgerError;
use crate::ledger::counts::Counts;
use crate::ledger::engine::reservation;
use crate::ledger::leases::Owed;
use crate::ledger::period::periods;
use crate::ledger::types::{ActualUsage, Need, Reservation};
use crate::ledger::window::BUCKET_MS;

/// The bucket a reservation key holds (-1: none). Keys: [1] the reservation key, which holds
/// 'r' and the bucket (see lua/common.lua), or the bare bucket (written by earlier versions).
static PEEK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local v = redis.call('GET', KEYS[1])\n\
         return {v and (tonumber(v) or tonumber(string.sub(v, 2))) or -1}",
    )
});

/// What one heartbeat saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Beat {
    /// Live instances, this one included.
    pub(crate) instances: u64,
    /// The store's epoch (0: none stored).
    pub(crate) epoch: u64,
    /// Other instances that may hold admissions made while the store did not answer them, not
    /// yet written back, which this one waits for (the rejoin hash, see lua/common.lua).
    pub(crate) waiting: u64,
    /// This reading's number (0: not recorded, see [`BeatAs::reading`]), and the oldest number
    /// of the live instances' last recorded readings (see lua/heartbeat.lua).
    pub(crate) read: u64,
    pub(crate) oldest: u64,
    /// The current UTC day and month (budget periods).
    pub(crate) day: u64,
    pub(crate) month: u64,
    /// Window totals of every scope, by scope index.
    pub(crate) scopes: Vec<Counts>,
    /// The ms left of every scope's cooldown (0: none), by scope index.
    pub(crate) cooling: Vec<u64>,
    /// Every scope's live slots (requests in flight, every instance's), by scope index.
    pub(crate) in_flight: Vec<u64>,
    /// Per tenant asked about: window totals, spent today and this month (micro-USD).
    pub(crate) tenants: Vec<(String, Counts, u64, u64)>,
    /// Per tenant asked about, in the order of `tenants`: its live slots.
    pub(crate) tenant_in_flight: Vec<u64>,
    /// What the day hashes of the scopes with a per-day limit and of the tenants asked about
    /// held of their current day: key, day, requests, tokens (read after the beat, by
    /// lua/days.lua; only days that counted something).
    pub(crate) days: Vec<(String, u64, u64, u64)>,
    /// Of `in_flight` and `tenant_in_flight`, this instance's own when it sent the beat (filled
    /// in by the instance, not the store).
    pub(crate) own_in_flight: Vec<u64>,
    pub(crate) own_tenant_in_flight: Vec<u64>,
}

/// What an instance says of itself with a heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BeatAs {
    /// It holds admissions made while the store did not answer it, not yet written back (the
    /// rejoin hash records when it said so, or when it said it holds none).
    pub(crate) away: bool,
    /// It takes this beat's totals as what its local mode would start from: the reading is
    /// numbered and recorded as its last.
    pub(crate) reading: bool,
}

/// An admission made while the store was away, as restore.lua writes it.
#[derive(Debug, Clone)]
pub(crate) struct Replayed {
    pub(crate) reservation: Reservation,
    /// Requests, tokens, input and output tokens to count.
    pub(crate) counts: Counts,
    /// Slot expiry, ms (0: settled, no slot).
    pub(crate) expiry: u64,
    /// Cost to add to the tenant's spend, micro-USD.
    pub(crate) cost: u64,
}

/// One restore call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restore<'a> {
    pub(crate) instance: &'a str,
    pub(crate) seq: u64,
    /// The epoch this instance last saw (0: none).
    pub(crate) known_epoch: u64,
    /// The epoch to store if the store has none.
    pub(crate) proposed_epoch: u64,
    /// The tenants' spends and the days' counts as last seen (only `tenants`, `days` and the
    /// periods are used), written only by the restore that finds the keys lost.
    pub(crate) carry: Option<&'a Beat>,
    /// What this instance admitted through the store in the last minute, by scope (index) or
    /// tenant (name), and bucket; written if the keys were lost since it last looked.
    pub(crate) own_windows: Vec<(WindowOf, u64, Counts)>,
    /// What it spent since its last heartbeat read the spends (only `tenants` and the periods
    /// are used); same condition.
    pub(crate) own_spend: Option<&'a Beat>,
    /// This instance's reservations in flight in the store, with their slot expiry (ms).
    pub(crate) slots: Vec<(Reservation, u64)>,
    /// What it admitted while the store was away.
    pub(crate) entries: Vec<Replayed>,
    /// With the restores applied before it, `entries` is all the instance admitted while the
    /// store was away, and it admits nothing more on its own: the rejoin hash records that it
    /// holds none now.
    pub(crate) complete: bool,
}

/// Whose window a row of [`Restore::own_windows`] belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WindowOf {
    Scope(usize),
    Tenant(String),
}

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    /// The epoch now stored.
    pub(crate) epoch: u64,
    /// This restore stored it: the keys had been lost.
    pub(crate) lost: bool,
    /// Instances that wrote their own back into this epoch.
    pub(crate) restored: u64,
    /// This one wrote its own back into this epoch (now, or by an earlier sending of the same
    /// restore): the keys were lost since it last looked.
    pub(crate) stale: bool,
    /// As [`Beat::waiting`].
    pub(crate) waiting: u64,
}

/// Keys a call refers to by KEYS index, each once.
struct Keys<'a, 'b> {
    inv: &'a mut ScriptInvocation<'b>,
    index: HashMap<String, usize>,
}

impl Keys<'_, '_> {
    /// The KEYS index (1-based, after the five fixed keys) of `key`, adding it on first use.
    fn of(&mut self, key: String) -> usize {
        let next = self.index.len() + 6;
        *self.index.entry(key).or_insert_with_key(|k| {
            self.inv.key(k.as_str());
            next
        })
    }
}

impl RedisStore {
    fn instances_key(&self) -> String {
        format!("{}:instances", self.prefix)
    }

    fn rejoin_key(&self) -> String {
        format!("{}:rejoins", self.prefix)
    }

    fn reads_key(&self) -> String {
        format!("{}:reads", self.prefix)
    }

    pub(super) fn epoch_key(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    pub(super) fn tenant_key(&self, kind: &str, name: &str) -> String {
        format!("{}:{kind}:t:{name}", self.prefix)
    }

    /// Admissions check the store's epoch from now on (0: they do not).
    pub(crate) fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Registers `instance` until `ttl_ms` from now and reads what local mode starts from;
    /// applies `corrections` (what leased blocks owe, see lua/unlease.lua, under a sequence
    /// number: applied once however often sent) in the same call when the store is in the epoch
    /// this instance knows. Returns the beat and whether the store was in that epoch.
    pub(crate) async fn heartbeat(
        &self,
        instance: &str,
        ttl_ms: u64,
        tenants: &[String],
        corrections: Option<(u64, &[Owed])>,
        me: BeatAs,
    ) -> Result<(Beat, bool), LedgerError> {
        let (seq, corrections) = corrections.unwrap_or((0, &[]));
        let mut inv = HEARTBEAT.prepare_invoke();
        inv.key(self.instances_key())
            .key(self.epoch_key())
            .key(self.rejoin_key())
            .key(self.reads_key());
        for keys in self.scope_keys.iter() {
            inv.key(&keys.window);
        }
        for name in tenants {
            inv.key(self.tenant_key("w", name))
                .key(self.tenant_key("b", name));
        }
        for keys in self.scope_keys.iter() {
            inv.key(&keys.slots);
        }
        for name in tenants {
            inv.key(self.tenant_key("s", name));
        }
        inv.arg(self.now_arg())
            .arg(instance)
            .arg(ttl_ms)
            .arg(self.scope_keys.len())
            .arg(tenants.len());
        match self.epoch.load(Ordering::Relaxed) {
            0 => inv.arg(""),
            epoch => inv.arg(epoch),
        };
        inv.arg(seq)
            .arg(u8::from(me.away))
            .arg(u8::from(me.reading))
            .arg(corrections.len());
        let mut next_key = 4 + 2 * self.scope_keys.len() + 3 * tenants.len() + 1;
        for o in corrections {
            let scopes = self.scopes(o.deployment)?;
            for &s in scopes {
                inv.key(&self.scope_keys[s].window);
            }
            inv.arg(next_key).arg(scopes.len()).arg(o.bucket);
            next_key += scopes.len();
            for delta in self.table.kept(o.deployment, o.deltas) {
                inv.arg(delta);
            }
            self.push_report(&mut inv, scopes[0], o.observed.as_ref());
        }
        if !corrections.is_empty() {
            inv.key(format!("{}:cs:{instance}", self.prefix));
        }
        let reply = self.run(&inv).await?;
        let n = self.scope_keys.len();
        let bad = || self.protocol("heartbeat.lua", &reply);
        let [
            instances,
            epoch,
            day,
            month,
            applied,
            waiting,
            read,
            oldest,
            rest @ ..,
        ] = reply.as_slice()
        else {
            return Err(bad());
        };
        if rest.len() != 6 * n + 7 * tenants.len() {
            return Err(bad());
        }
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let counts = |c: &[i64]| Counts::new(count(c[0]), count(c[1]), count(c[2]), count(c[3]));
        let (scopes, tenant_rows) = rest.split_at(6 * n);
        let beat = Beat {
            instances: count(*instances).max(1),
            epoch: count(*epoch),
            waiting: count(*waiting),
            read: count(*read),
            oldest: count(*oldest),
            day: count(*day),
            month: count(*month),
            scopes: scopes.chunks_exact(6).map(counts).collect(),
            cooling: scopes.chunks_exact(6).map(|c| count(c[4])).collect(),
            in_flight: scopes.chunks_exact(6).map(|c| count(c[5])).collect(),
            tenants: tenants
                .iter()
                .zip(tenant_rows.chunks_exact(7))
                .map(|(name, c)| (name.clone(), counts(c), count(c[4]), count(c[5])))
                .collect(),
            tenant_in_flight: tenant_rows.chunks_exact(7).map(|c| count(c[6])).collect(),
            ..Beat::default()
        };
        // Best effort: without them, a store that loses its keys forgets the days' counts.
        let days = self
            .read_days(tenants, count(*day))
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(error = %e, "ledger: the days' counts were not read");
                Vec::new()
            });
        Ok((Beat { days, ..beat }, *applied == 1))
    }

    /// What the day hashes of the scopes with a per-day limit and of `tenants` hold of their
    /// current day (`utc_day` for tenants): the days that counted something. No call when
    /// there is no such hash.
    async fn read_days(
        &self,
        tenants: &[String],
        utc_day: u64,
    ) -> Result<Vec<(String, u64, u64, u64)>, LedgerError> {
        let now = self.local_now();
        let scopes = (0..self.scope_keys.len()).filter_map(|s| {
            let day = self.day_of(s, now)?;
            Some((self.scope_keys[s].day.clone(), day.id))
        });
        let accounts = tenants.iter().map(|t| (self.tenant_key("y", t), utc_day));
        let asked: Vec<(String, u64)> = scopes.chain(accounts).collect();
        if asked.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = DAYS.prepare_invoke();
        inv.arg(self.now_arg());
        for (key, day) in &asked {
            inv.key(key).arg(*day);
        }
        let reply = self.run(&inv).await?;
        if reply.len() != 2 * asked.len() {
            return Err(self.protocol("days.lua", &reply));
        }
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let read = asked.into_iter().zip(reply.chunks_exact(2));
        Ok(read
            .filter(|(_, c)| c[0] > 0 || c[1] > 0)
            .map(|((key, day), c)| (key, day, count(c[0]), count(c[1])))
            .collect())
    }

    /// Writes `r` into the shared windows (see lua/restore.lua); applied once per sequence
    /// number.
    pub(crate) async fn restore(&self, r: &Restore<'_>) -> Result<Restored, LedgerError> {
        let mut inv = RESTORE.prepare_invoke();
        inv.key(self.epoch_key())
            .key(format!("{}:q:{}", self.prefix, r.instance))
            .key(format!("{}:restored", self.prefix))
            .key(self.rejoin_key())
            .key(self.instances_key());
        let mut args: Vec<u64> = Vec::new();
        let mut keys = Keys {
            inv: &mut inv,
            index: HashMap::new(),
        };
        let spends = |args: &mut Vec<u64>, keys: &mut Keys<'_, '_>, beat: Option<&Beat>| {
            let mut block = Vec::new();
            for (name, _, day, month) in beat.map_or(&[][..], |b| &b.tenants) {
                if let (Some(b), true) = (beat, *day > 0 || *month > 0) {
                    block.push(keys.of(self.tenant_key("b", name)) as u64);
                    block.extend([b.day, *day, b.month, *month]);
                }
            }
            args.push(block.len() as u64 / 5);
            args.extend(block);
        };
        spends(&mut args, &mut keys, r.carry);
        let days = r.carry.map_or(&[][..], |b| &b.days);
        args.push(days.len() as u64);
        for (key, day, requests, tokens) in days {
            args.push(keys.of(key.clone()) as u64);
            args.extend([*day, *requests, *tokens]);
        }
        args.push(r.own_windows.len() as u64);
        for (of, bucket, counts) in &r.own_windows {
            let key = match of {
                WindowOf::Scope(s) => self.scope_keys[*s].window.clone(),
                WindowOf::Tenant(name) => self.tenant_key("w", name),
            };
            args.push(keys.of(key) as u64);
            args.push(*bucket);
            args.extend(counts);
        }
        spends(&mut args, &mut keys, r.own_spend);
        // Slots of reservations in flight.
        let mut slots = Vec::new();
        for (res, expiry) in &r.slots {
            for s in self.scopes(res.deployment)? {
                slots.push(keys.of(self.scope_keys[*s].slots.clone()) as u64);
                slots.extend([res.id, *expiry]);
            }
            for name in res.tenant.iter().flat_map(|t| &t.names) {
                slots.push(keys.of(self.tenant_key("s", name)) as u64);
                slots.extend([res.id, *expiry]);
            }
        }
        args.push(slots.len() as u64 / 3);
        args.extend(slots);
        // Admissions made meanwhile.
        args.push(r.entries.len() as u64);
        for e in &r.entries {
            let res = &e.reservation;
            let scopes = self.scopes(res.deployment)?;
            let names = res.tenant.as_ref().map_or(&[][..], |t| &t.names);
            args.push((scopes.len() + names.len()) as u64);
            for s in scopes {
                args.push(keys.of(self.scope_keys[*s].window.clone()) as u64);
                args.push(keys.of(self.scope_keys[*s].slots.clone()) as u64);
            }
            for name in names {
                args.push(keys.of(self.tenant_key("w", name)) as u64);
                args.push(keys.of(self.tenant_key("s", name)) as u64);
            }
            args.push(res.bucket);
            args.extend(self.table.kept(res.deployment, e.counts));
            args.extend([res.id, e.expiry, names.len() as u64]);
            for name in names {
                args.push(keys.of(self.tenant_key("b", name)) as u64);
            }
            match &res.tenant {
                Some(t) => args.extend([e.cost, t.day, t.month]),
                None => args.extend([0, 0, 0]),
            }
        }
        inv.arg(self.now_arg())
            .arg(r.known_epoch)
            .arg(r.proposed_epoch)
            .arg(r.seq)
            .arg(r.instance)
            .arg(u8::from(r.complete));
        for a in args {
            inv.arg(a);
        }
        let reply = self.run(&inv).await?;
        match reply.as_slice() {
            &[epoch, lost, _applied, restored, stale, waiting] => Ok(Restored {
                epoch: u64::try_from(epoch).unwrap_or(0),
                lost: lost == 1,
                restored: u64::try_from(restored).unwrap_or(0),
                // A restore sent again, whose first sending ran though its reply was lost, is
                // answered "applied already" with no word of staleness: the epoch says it.
                stale: stale == 1 || u64::try_from(epoch) != Ok(r.known_epoch),
                waiting: u64::try_from(waiting).unwrap_or(0),
            }),
            _ => Err(self.protocol("restore.lua", &reply)),
        }
    }

    /// Hands back what an admission of `need` counted if it reached the store after all (its
    /// reply timed out): its request, tokens, spend and slot, on whichever candidate took it.
    /// Returns whether one did.
    pub(crate) async fn void(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<bool, LedgerError> {
        let mut inv = PEEK.prepare_invoke();
        inv.key(self.reservation_key(need.id));
        let reply = self.run(&inv).await?;
        let bucket = match reply.as_slice() {
            [-1] => return Ok(false),
            [b] => u64::try_from(*b).map_err(|_| self.protocol("peek", &reply))?,
            _ => return Err(self.protocol("peek", &reply)),
        };
        let p = periods(bucket.saturating_mul(BUCKET_MS));
        for (rank, &deployment) in candidates.iter().enumerate() {
            let r = reservation(need, rank, deployment, bucket, &p);
            if self.finish(&r, ActualUsage::default(), -1, None).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
