//! The in-memory store: the same semantics as DynamoDB, for unit and simulation tests.
//!
//! One mutex guards everything, so each operation is atomic, as a single-item DynamoDB request
//! is. Record writes are checked with the very [`Condition`](super::Condition) the DynamoDB store renders into a
//! condition expression, so the two cannot drift apart silently; the shared contract suite
//! (`tests/tests/store_contract.rs`) proves the rest.
//!
//! It keeps DynamoDB's limits too ([`super::limits`]): a key over DynamoDB's key sizes and an
//! item over 400 KB are refused with the error the DynamoDB store gives for AWS's
//! `ValidationException`. Items are measured by the [`ItemSizes`] it is given: DynamoDB's own
//! (`baton_aws::dynamodb::ITEM_SIZES`) where it stands in for DynamoDB, an estimate by default.
//!
//! **The `by_due` index lags.** On AWS a global secondary index is eventually consistent: a
//! Query of `by_due` may return an item as it stood a while ago (a stale status, an item already
//! settled or deleted, or none yet). [`MemoryStore::set_index_lag`] makes every index read here
//! ([`WorkflowStore::due`], [`WorkflowStore::due_heads`], [`WorkflowStore::expired_buffers`],
//! [`WorkflowStore::count_by_state`]) return each item as it stood at some earlier moment, up to a
//! number of writes back that a simulation draws, until the simulation lets a quiet spell pass
//! ([`MemoryStore::catch_up_index`]). By default there is no lag.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;
use time::OffsetDateTime;

use super::limits::{self, MAX_ITEM_BYTES, RECORD_SK};
use super::{
    Applied, Claim, Count, DueList, Hold, InboxClaim, InboxEntry, InboxStatus, ItemSizes, LedgerEntry,
    Receipt, ReceiptStatus, RegisteredConfig, StoreError, Task, Trace, WorkflowStore, condition_for,
    sort_trace,
};
use crate::domain::ids::{CorrelationKey, WorkflowName};
use crate::domain::lifecycle::{IgnoreReason, Kind, Record};

type RecordKey = (WorkflowName, CorrelationKey);
type InboxKey = (RecordKey, String, String);

/// An item's past versions, oldest first, each with the store write that made it (`None`: it
/// was deleted).
type Versions<T> = Vec<(u64, Option<T>)>;

/// How far the `by_due` index lags behind the table ([`MemoryStore::set_index_lag`]).
struct IndexLag {
    /// The most writes an index read may lag behind.
    max: u64,
    /// Draws one item's lag for one read, from `0..=max`.
    pick: Box<dyn FnMut(u64) -> u64 + Send>,
    /// The writes the index has caught up with, whatever the lag drawn
    /// ([`MemoryStore::catch_up_index`]).
    caught_up: u64,
}

#[derive(Default)]
struct Inner {
    // Ordered maps throughout: the same operations give the same results in the same order, so
    // a seeded simulation replays exactly.
    /// Shared (an `Arc`): the lagging index keeps the versions it may still see, and a
    /// simulation logs each record written, without copying them ([`MemoryStore::shared`]).
    records: BTreeMap<RecordKey, Arc<Record>>,
    /// By (record, generation, step, (attempt, a step's task rather than a compensation's)).
    tasks: BTreeMap<(RecordKey, u32, u32, (u32, bool)), Task>,
    receipts: BTreeMap<(RecordKey, String), Receipt>,
    inbox: BTreeMap<(RecordKey, String, String), InboxEntry>,
    ledger: BTreeMap<(RecordKey, String, &'static str), LedgerEntry>,
    configs: BTreeMap<String, RegisteredConfig>,
    /// Record and inbox writes so far: the clock the index's lag is counted in.
    writes: u64,
    lag: Option<IndexLag>,
    /// What an index read lagging behind may still see, kept only while there is a lag.
    record_versions: BTreeMap<RecordKey, Versions<Arc<Record>>>,
    inbox_versions: BTreeMap<InboxKey, Versions<InboxEntry>>,
}

impl Inner {
    /// Notes a write of the record `k` (the index may lag behind it).
    fn record_written(&mut self, k: &RecordKey, before: Option<Arc<Record>>) {
        self.writes += 1;
        let Some(lag) = &self.lag else { return };
        let now = self.records.get(k).cloned();
        remember(&mut self.record_versions, k, before, now, self.writes, lag.max);
    }

    /// Notes a write (or, `None` now, a deletion) of the inbox entry `k`.
    fn inbox_written(&mut self, k: &InboxKey, before: Option<InboxEntry>) {
        self.writes += 1;
        let Some(lag) = &self.lag else { return };
        let now = self.inbox.get(k).cloned();
        remember(&mut self.inbox_versions, k, before, now, self.writes, lag.max);
    }

    /// The records an index read sees, those `keep` selects.
    fn indexed_records(&mut self, keep: impl Fn(&Record) -> bool) -> Vec<&Arc<Record>> {
        let keep = |r: &Arc<Record>| keep(r);
        // Records are never deleted: every record with past versions is in the table.
        let past_within_table = true;
        index_view(
            &self.records,
            &self.record_versions,
            self.lag.as_mut(),
            self.writes,
            keep,
            past_within_table,
        )
    }

    /// The inbox entries an index read sees, those `keep` selects.
    fn indexed_inbox(&mut self, keep: impl Fn(&InboxEntry) -> bool) -> Vec<&InboxEntry> {
        // A deleted entry's past versions outlive it.
        let past_within_table = false;
        index_view(&self.inbox, &self.inbox_versions, self.lag.as_mut(), self.writes, keep, past_within_table)
    }
}

/// Adds the version a write made (`now`) to `k`'s, with the one before (`before`) when none is
/// kept yet. Versions no lagging read can reach any more are dropped.
fn remember<K: Ord + Clone, T>(
    versions: &mut BTreeMap<K, Versions<T>>,
    k: &K,
    before: Option<T>,
    now: Option<T>,
    write: u64,
    max: u64,
) {
    let kept = versions.entry(k.clone()).or_default();
    if kept.is_empty() && before.is_some() {
        // Written before there was a lag: as far back as a read can look, it stood so.
        kept.push((0, before));
    }
    kept.push((write, now));
    let horizon = write.saturating_sub(max);
    let oldest_needed = kept.iter().rposition(|(w, _)| *w <= horizon).unwrap_or(0);
    kept.drain(..oldest_needed);
}

/// The items an index read sees: each as it stood after the write its drawn lag reaches back
/// to (absent if it did not exist then), those `keep` selects, in key order. Borrowed: the
/// caller clones only what it returns (a crowd's sweep reads hundreds of records and keeps a
/// batch). `past_within_table`: every key with past versions is in `current` too.
fn index_view<'a, K: Ord + std::fmt::Debug, T>(
    current: &'a BTreeMap<K, T>,
    versions: &'a BTreeMap<K, Versions<T>>,
    lag: Option<&mut IndexLag>,
    writes: u64,
    keep: impl Fn(&T) -> bool,
    past_within_table: bool,
) -> Vec<&'a T> {
    let Some(lag) = lag else {
        return current.values().filter(|t| keep(t)).collect();
    };
    // As many keys with past versions as in the table, and all of them in it: the two maps hold
    // the same keys, walked side by side without comparing them (a crowd's sweep walks hundreds
    // of records for each of its seven lists).
    let same_keys = past_within_table && versions.len() == current.len();
    // Every key either map holds, once each, in key order (the two maps merged).
    let (mut now, mut past) = (current.iter().peekable(), versions.iter().peekable());
    let keys = std::iter::from_fn(move || {
        if same_keys {
            let ((k, t), (past_k, v)) = (now.next()?, past.next()?);
            debug_assert_eq!(k, past_k, "the table and its past versions hold the same keys");
            return Some((Some(t), Some(v)));
        }
        let at = match (now.peek(), past.peek()) {
            (Some((a, _)), Some((b, _))) => (*a).cmp(*b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => return None,
        };
        match at {
            std::cmp::Ordering::Less => now.next().map(|(_, t)| (Some(t), None)),
            std::cmp::Ordering::Greater => past.next().map(|(_, v)| (None, Some(v))),
            std::cmp::Ordering::Equal => {
                let (_, t) = now.next()?;
                past.next().map(|(_, v)| (Some(t), Some(v)))
            }
        }
    });
    keys.filter_map(|(now, kept)| {
        let Some(kept) = kept else { return now };
        let at = writes.saturating_sub((lag.pick)(lag.max).min(lag.max)).max(lag.caught_up);
        kept.iter().rev().find(|(w, _)| *w <= at).and_then(|(_, t)| t.as_ref())
    })
    .filter(|t| keep(t))
    .collect()
}

/// Refuses a request DynamoDB would refuse for its keys, or for the size of the item it writes
/// (`size`, computed only when the keys fit).
fn fits(
    op: &'static str,
    (workflow, key): (&WorkflowName, &CorrelationKey),
    sk: &str,
    size: impl FnOnce() -> usize,
) -> Result<(), StoreError> {
    limits::check_key_bytes(limits::pk_bytes(workflow, key), sk)
        .and_then(|()| limits::check_item_size(size()))
        .map_err(|e| e.rejected(op))
}

/// A record item's size, exact only when its cheap bound comes near the limit.
fn record_fits(record: &Record, sizes: ItemSizes) -> Result<(), StoreError> {
    if (sizes.record_bound)(record) <= MAX_ITEM_BYTES {
        return Ok(());
    }
    limits::check_item_size((sizes.record)(record)).map_err(|e| e.rejected("PutItem"))
}

/// A [`WorkflowStore`] in process memory.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// What each kind of item is held to ([`ItemSizes::ESTIMATE`] unless told).
    sizes: ItemSizes,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore { inner: Mutex::default(), sizes: ItemSizes::ESTIMATE }
    }
}

impl MemoryStore {
    /// Moves an inbox entry to `to(entry)` if `allowed(entry)`; `Exists` with it otherwise.
    fn move_entry(
        &self,
        entry: &InboxEntry,
        allowed: impl Fn(&InboxEntry) -> bool,
        to: impl Fn(&InboxEntry) -> InboxEntry,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        fits("UpdateItem", (&entry.workflow, &entry.key), &limits::inbox_sk(entry), || 0)?;
        let mut inner = self.lock();
        let k = (rk(&entry.workflow, &entry.key), entry.step_name.clone(), limits::inbox_id(entry));
        match inner.inbox.get_mut(&k) {
            Some(e) if allowed(e) => {
                let before = std::mem::replace(e, to(e));
                inner.inbox_written(&k, Some(before));
                Ok(Claim::Acquired)
            }
            Some(e) => Ok(Claim::Exists(e.clone())),
            None => Err(StoreError::Corrupt {
                pk: format!("{}/{}", entry.workflow, entry.key),
                sk: format!("inbox/{}/{}", entry.step_name, entry.id),
                problem: "the inbox entry to move does not exist".into(),
            }),
        }
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Holds every item to `sizes`: DynamoDB's (`baton_aws::dynamodb::ITEM_SIZES`) when the
    /// store stands in for DynamoDB, in the store contract and the simulation.
    pub fn with_item_sizes(mut self, sizes: ItemSizes) -> Self {
        self.sizes = sizes;
        self
    }

    /// Lets the `by_due` index lag up to `max_writes` record and inbox writes behind the table:
    /// each item an index read lists is the item as it stood `pick(max_writes)` writes ago (drawn
    /// per item and read; clamped to `max_writes`). For a simulation, which draws the lag from
    /// its seed; set before the first write.
    pub fn set_index_lag(&self, max_writes: u64, pick: impl FnMut(u64) -> u64 + Send + 'static) {
        self.lock().lag =
            (max_writes > 0).then(|| IndexLag { max: max_writes, pick: Box::new(pick), caught_up: 0 });
    }

    /// The index catches up with every write so far: no later index read sees an item older than
    /// it stands now. On AWS a global secondary index lags by about a second, so a lag counted in
    /// writes alone would last as long as the table stays quiet; a simulation calls this when a
    /// quiet spell has passed.
    pub fn catch_up_index(&self) {
        let mut inner = self.lock();
        let writes = inner.writes;
        if let Some(lag) = &mut inner.lag {
            lag.caught_up = writes;
        }
    }

    /// Lets the `by_due` index catch up with the first `writes` writes: a simulation bounds the
    /// lag in time too, as on AWS, where an index is behind by about a second, not by however
    /// long the table stays busy.
    pub fn catch_up_index_to(&self, writes: u64) {
        if let Some(lag) = &mut self.lock().lag {
            lag.caught_up = lag.caught_up.max(writes);
        }
    }

    /// How many record and inbox writes have landed: the clock the index's lag counts in.
    pub fn writes(&self) -> u64 {
        self.lock().writes
    }

    /// What `read` takes from the record of `workflow` and `key`, read in place: as
    /// [`WorkflowStore::load`] (the same refusal of keys DynamoDB would refuse), without copying
    /// the record (a simulation reads the state before each write it logs).
    pub fn peek<T>(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        read: impl FnOnce(&Record) -> T,
    ) -> Result<Option<T>, StoreError> {
        fits("Query", (workflow, key), RECORD_SK, || 0)?;
        Ok(self.lock().records.get(&rk(workflow, key)).map(|r| read(r)))
    }

    /// The record of `workflow` and `key` as it stands, shared rather than copied: for a
    /// simulation's log of the records written (the store keeps the same one).
    pub fn shared(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Option<Arc<Record>> {
        self.lock().records.get(&rk(workflow, key)).cloned()
    }

    /// What `read` takes from everything stored about (`workflow`, `key`), read in place: as
    /// [`WorkflowStore::trace`] without copying it, each kind in key order (a simulation's
    /// oracle asks it about an input after every answer it gets).
    pub fn peek_trace<T>(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        read: impl FnOnce(&TraceRef<'_>) -> T,
    ) -> T {
        let inner = self.lock();
        let k = rk(workflow, key);
        // Each map is keyed by the record's key first: its items are one range, in key order.
        let trace = TraceRef {
            record: inner.records.get(&k).map(|r| &**r),
            tasks: (inner.tasks.range((k.clone(), 0, 0, (0, false))..))
                .take_while(|((r, _, _, _), _)| r == &k)
                .map(|(_, t)| t)
                .collect(),
            receipts: (inner.receipts.range((k.clone(), String::new())..))
                .take_while(|((r, _), _)| r == &k)
                .map(|(_, t)| t)
                .collect(),
            inbox: (inner.inbox.range((k.clone(), String::new(), String::new())..))
                .take_while(|((r, _, _), _)| r == &k)
                .map(|(_, t)| t)
                .collect(),
            ledger: (inner.ledger.range((k.clone(), String::new(), "")..))
                .take_while(|((r, _, _), _)| r == &k)
                .map(|(_, t)| t)
                .collect(),
        };
        read(&trace)
    }

    /// Every record, in key order: for a simulation's checks, which look at the store from the
    /// outside.
    pub fn records(&self) -> Vec<Record> {
        self.lock().records.values().map(|r| Record::clone(r)).collect()
    }

    /// Deletes receipts, inbox entries and ledger entries whose TTL has passed at `now` (an inbox
    /// entry's is its buffer's expiry plus [`super::INBOX_RETENTION`], as the DynamoDB store
    /// writes it), each only when `pick` says so: DynamoDB's TTL deletes expired items at some
    /// unspecified time after they expire, and a simulation chooses when. Returns how many it
    /// deleted.
    pub fn reap_expired(&self, now: OffsetDateTime, pick: &mut dyn FnMut() -> bool) -> usize {
        let mut inner = self.lock();
        let before = inner.receipts.len() + inner.inbox.len() + inner.ledger.len();
        inner.receipts.retain(|_, r| r.expires_at >= now || !pick());
        let mut deleted = Vec::new();
        inner.inbox.retain(|k, e| {
            let keep = e.expires_at + super::INBOX_RETENTION >= now || !pick();
            if !keep {
                deleted.push((k.clone(), e.clone()));
            }
            keep
        });
        for (k, e) in deleted {
            inner.inbox_written(&k, Some(e));
        }
        inner.ledger.retain(|_, l| l.expires_at >= now || !pick());
        before - (inner.receipts.len() + inner.inbox.len() + inner.ledger.len())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every write is a single
        // insert), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Everything stored about one (workflow, key), borrowed ([`MemoryStore::peek_trace`]): each
/// kind in key order, not yet in [`Trace`]'s.
pub struct TraceRef<'a> {
    pub record: Option<&'a Record>,
    pub tasks: Vec<&'a Task>,
    pub receipts: Vec<&'a Receipt>,
    pub inbox: Vec<&'a InboxEntry>,
    pub ledger: Vec<&'a LedgerEntry>,
}

fn rk(workflow: &WorkflowName, key: &CorrelationKey) -> RecordKey {
    (workflow.clone(), key.clone())
}

#[async_trait]
impl WorkflowStore for MemoryStore {
    async fn load(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
    ) -> Result<Option<Arc<Record>>, StoreError> {
        fits("Query", (workflow, key), RECORD_SK, || 0)?;
        Ok(self.lock().records.get(&rk(workflow, key)).cloned())
    }

    async fn apply(&self, write: &crate::domain::lifecycle::Write) -> Result<Applied, StoreError> {
        let condition = condition_for(write)?;
        fits("PutItem", (&write.to.workflow, &write.to.key), RECORD_SK, || 0)?;
        record_fits(&write.to, self.sizes)?;
        let mut inner = self.lock();
        let k = rk(&write.to.workflow, &write.to.key);
        let current = inner.records.get(&k).map(|r| &**r);
        if !condition.holds(current) {
            return Ok(Applied::Lost { current: current.cloned().map(Box::new) });
        }
        let before = inner.records.insert(k.clone(), Arc::new(write.to.clone()));
        inner.record_written(&k, before);
        Ok(Applied::Written)
    }

    async fn put_task(&self, task: &Task) -> Result<Claim<Task>, StoreError> {
        let sk = limits::task_sk(task.generation, task.step, task.attempt, task.kind);
        fits("PutItem", (&task.workflow, &task.key), &sk, || (self.sizes.task)(task))?;
        let mut inner = self.lock();
        let k =
            (rk(&task.workflow, &task.key), task.generation, task.step, (task.attempt, task.kind.is_step()));
        if let Some(existing) = inner.tasks.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.tasks.insert(k, task.clone());
        Ok(Claim::Acquired)
    }

    async fn mark_task_published(&self, task: &Task) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(t) = inner.tasks.get_mut(&(
            rk(&task.workflow, &task.key),
            task.generation,
            task.step,
            (task.attempt, task.kind.is_step()),
        )) {
            t.published = true;
        }
        Ok(())
    }

    async fn put_receipt(&self, receipt: &Receipt) -> Result<Claim<Receipt>, StoreError> {
        let sk = limits::receipt_sk(receipt);
        fits("PutItem", (&receipt.workflow, &receipt.key), &sk, || (self.sizes.receipt)(receipt))?;
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), limits::receipt_sk(receipt));
        if let Some(existing) = inner.receipts.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.receipts.insert(k, receipt.clone());
        Ok(Claim::Acquired)
    }

    async fn complete_receipt(&self, receipt: &Receipt, answer: Value) -> Result<(), StoreError> {
        let sk = limits::receipt_sk(receipt);
        fits("UpdateItem", (&receipt.workflow, &receipt.key), &sk, || 0)?;
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), limits::receipt_sk(receipt));
        if let Some(r) = inner.receipts.get_mut(&k)
            && r.status == ReceiptStatus::Pending
        {
            let done = Receipt { status: ReceiptStatus::Done, answer: Some(answer), ..r.clone() };
            // DynamoDB refuses an update that would take the item over its limit.
            limits::check_item_size((self.sizes.receipt)(&done)).map_err(|e| e.rejected("UpdateItem"))?;
            *r = done;
        }
        Ok(())
    }

    async fn take_over_receipt(&self, stored: &Receipt, hold: &Hold) -> Result<Claim<Receipt>, StoreError> {
        fits("UpdateItem", (&stored.workflow, &stored.key), &limits::receipt_sk(stored), || 0)?;
        let mut inner = self.lock();
        let k = (rk(&stored.workflow, &stored.key), limits::receipt_sk(stored));
        match inner.receipts.get_mut(&k) {
            Some(r) if r.status == ReceiptStatus::Pending && r.lease == stored.lease => {
                r.lease = Some(hold.clone());
                Ok(Claim::Acquired)
            }
            Some(r) => Ok(Claim::Exists(r.clone())),
            None => Err(StoreError::Corrupt {
                pk: format!("{}/{}", stored.workflow, stored.key),
                sk: format!("receipt/{}", stored.id),
                problem: "the receipt to take over does not exist".into(),
            }),
        }
    }

    async fn release_receipt(&self, receipt: &Receipt) -> Result<(), StoreError> {
        fits("DeleteItem", (&receipt.workflow, &receipt.key), &limits::receipt_sk(receipt), || 0)?;
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), limits::receipt_sk(receipt));
        let ours = |r: &Receipt| {
            r.status == ReceiptStatus::Pending && r.lease.is_none() && r.created_at == receipt.created_at
        };
        if inner.receipts.get(&k).is_some_and(ours) {
            inner.receipts.remove(&k);
        }
        Ok(())
    }

    async fn note_repeat(&self, receipt: &Receipt, at: OffsetDateTime) -> Result<(), StoreError> {
        fits("UpdateItem", (&receipt.workflow, &receipt.key), &limits::receipt_sk(receipt), || 0)?;
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), limits::receipt_sk(receipt));
        if let Some(r) = inner.receipts.get_mut(&k) {
            r.repeats += 1;
            r.last_repeat_at = Some(at);
        }
        Ok(())
    }

    async fn buffer(&self, entry: &InboxEntry) -> Result<Claim<InboxEntry>, StoreError> {
        fits("PutItem", (&entry.workflow, &entry.key), &limits::inbox_sk(entry), || {
            (self.sizes.inbox)(entry)
        })?;
        let mut inner = self.lock();
        let k = (rk(&entry.workflow, &entry.key), entry.step_name.clone(), limits::inbox_id(entry));
        if let Some(existing) = inner.inbox.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.inbox.insert(k.clone(), entry.clone());
        inner.inbox_written(&k, None);
        Ok(Claim::Acquired)
    }

    async fn inbox(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        step_name: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let k = rk(workflow, key);
        // The entries of the record's step: one range of the map, in key order.
        let from = (k, step_name.to_owned(), String::new());
        let mut entries: Vec<InboxEntry> = self
            .lock()
            .inbox
            .range(&from..)
            .take_while(|((r, s, _), _)| *r == from.0 && s == step_name)
            .map(|(_, e)| e.clone())
            .collect();
        entries.sort_by(|a, b| (a.arrived_at, &a.id).cmp(&(b.arrived_at, &b.id)));
        Ok(entries)
    }

    async fn settle(
        &self,
        entry: &InboxEntry,
        from: InboxStatus,
        to: InboxStatus,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        self.move_entry(entry, |e| e.status == from, |e| InboxEntry { status: to, ..e.clone() })
    }

    async fn claim(&self, entry: &InboxEntry, claim: &InboxClaim) -> Result<Claim<InboxEntry>, StoreError> {
        self.move_entry(entry, |e| claim.allows(e), |e| claim.apply(e))
    }

    async fn put_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let sk = limits::ledger_sk(entry.reason, &entry.input_id);
        fits("PutItem", (&entry.workflow, &entry.key), &sk, || (self.sizes.ledger)(entry))?;
        let k = (rk(&entry.workflow, &entry.key), entry.input_id.clone(), entry.reason.as_str());
        self.lock().ledger.entry(k).or_insert_with(|| entry.clone());
        Ok(())
    }

    async fn register_config(&self, config: &RegisteredConfig, started: bool) -> Result<(), StoreError> {
        self.lock()
            .configs
            .entry(config.version.clone())
            .and_modify(|c| {
                if started {
                    c.started_at = config.started_at;
                }
            })
            .or_insert_with(|| config.clone());
        Ok(())
    }

    async fn configs(&self) -> Result<Vec<RegisteredConfig>, StoreError> {
        let mut all: Vec<RegisteredConfig> = self.lock().configs.values().cloned().collect();
        all.sort_by(|a, b| (a.registered_at, &a.version).cmp(&(b.registered_at, &b.version)));
        Ok(all)
    }

    async fn ledgered(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        input_id: &str,
        reason: IgnoreReason,
    ) -> Result<bool, StoreError> {
        fits("GetItem", (workflow, key), &limits::ledger_sk(reason, input_id), || 0)?;
        Ok(self.lock().ledger.contains_key(&(rk(workflow, key), input_id.to_owned(), reason.as_str())))
    }

    async fn trace(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Result<Trace, StoreError> {
        let mut trace = self.peek_trace(workflow, key, |t| Trace {
            record: t.record.cloned(),
            tasks: t.tasks.iter().map(|&t| t.clone()).collect(),
            receipts: t.receipts.iter().map(|&r| r.clone()).collect(),
            inbox: t.inbox.iter().map(|&e| e.clone()).collect(),
            ledger: t.ledger.iter().map(|&l| l.clone()).collect(),
        });
        sort_trace(&mut trace);
        Ok(trace)
    }

    async fn due(
        &self,
        list: DueList,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        let mut inner = self.lock();
        // The state's kind tested first: it alone leaves out most records, and costs nothing (the
        // due time and the owed work each walk the record's waits).
        let mut due = inner.indexed_records(|r| {
            r.state.kind() == list.kind && r.due_at() <= before && DueList::of(r) == list
        });
        // Each record's due time computed once (it walks the record's waits), not per comparison.
        due.sort_by_cached_key(|r| r.due_at());
        due.truncate(limit);
        Ok(due.into_iter().cloned().collect())
    }

    async fn expired_buffers(
        &self,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let mut inner = self.lock();
        let mut expired = inner.indexed_inbox(|e| !e.status.is_final() && e.due_at() <= before);
        expired.sort_by_key(|e| e.due_at());
        expired.truncate(limit);
        Ok(expired.into_iter().cloned().collect())
    }

    async fn count_by_state(&self, up_to: u64) -> Result<BTreeMap<Kind, Count>, StoreError> {
        let mut counts = BTreeMap::new();
        for r in self.lock().indexed_records(|_| true) {
            *counts.entry(r.state.kind()).or_insert(0) += 1;
        }
        Ok(counts.into_iter().map(|(kind, n)| (kind, Count::of(n, up_to))).collect())
    }
}
