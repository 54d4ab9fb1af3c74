//! The in-memory store: the same semantics as DynamoDB, for unit and simulation tests.
//!
//! One mutex guards everything, so each operation is atomic, as a single-item DynamoDB request
//! is. Record writes are checked with the very [`Condition`] the DynamoDB store renders into a
//! condition expression, so the two cannot drift apart silently; the shared contract suite
//! (`tests/tests/store_contract.rs`) proves the rest.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    Applied, Claim, Count, Hold, InboxClaim, InboxEntry, InboxStatus, LedgerEntry, Receipt, ReceiptStatus,
    RegisteredConfig, StoreError, Task, Trace, WorkflowStore, condition_for,
};
use crate::ids::{CorrelationKey, WorkflowName};
use crate::lifecycle::{IgnoreReason, Kind, Record, State};

type RecordKey = (WorkflowName, CorrelationKey);

#[derive(Default)]
struct Inner {
    // Ordered maps throughout: the same operations give the same results in the same order, so
    // a seeded simulation replays exactly.
    records: BTreeMap<RecordKey, Record>,
    tasks: BTreeMap<(RecordKey, u32, u32), Task>,
    receipts: BTreeMap<(RecordKey, String), Receipt>,
    inbox: BTreeMap<(RecordKey, String, String), InboxEntry>,
    ledger: BTreeMap<(RecordKey, String, &'static str), LedgerEntry>,
    configs: BTreeMap<String, RegisteredConfig>,
}

/// A [`WorkflowStore`] in process memory.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// Moves an inbox entry to `to(entry)` if `allowed(entry)`; `Exists` with it otherwise.
    fn move_entry(
        &self,
        entry: &InboxEntry,
        allowed: impl Fn(&InboxEntry) -> bool,
        to: impl Fn(&InboxEntry) -> InboxEntry,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        let mut inner = self.lock();
        let k = (rk(&entry.workflow, &entry.key), entry.step_name.clone(), entry.id.to_string());
        match inner.inbox.get_mut(&k) {
            Some(e) if allowed(e) => {
                *e = to(e);
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

    /// Every record, in key order: for a simulation's checks, which look at the store from the
    /// outside.
    pub fn records(&self) -> Vec<Record> {
        self.lock().records.values().cloned().collect()
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
        inner.inbox.retain(|_, e| e.expires_at + super::INBOX_RETENTION >= now || !pick());
        inner.ledger.retain(|_, l| l.expires_at >= now || !pick());
        before - (inner.receipts.len() + inner.inbox.len() + inner.ledger.len())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every write is a single
        // insert), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn rk(workflow: &WorkflowName, key: &CorrelationKey) -> RecordKey {
    (workflow.clone(), key.clone())
}

/// When a record is due for the sweeper: its deadline while waiting, else its last update. Its
/// `due_at` in the `by_due` index.
pub fn due_at(record: &Record) -> OffsetDateTime {
    match (record.state, record.deadline) {
        (State::Waiting { .. }, Some(deadline)) => deadline,
        _ => record.updated_at,
    }
}

#[async_trait]
impl WorkflowStore for MemoryStore {
    async fn load(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
    ) -> Result<Option<Record>, StoreError> {
        Ok(self.lock().records.get(&rk(workflow, key)).cloned())
    }

    async fn apply(&self, write: &crate::lifecycle::Write) -> Result<Applied, StoreError> {
        let condition = condition_for(write)?;
        let mut inner = self.lock();
        let k = rk(&write.to.workflow, &write.to.key);
        let current = inner.records.get(&k);
        if !condition.holds(current) {
            return Ok(Applied::Lost { current: current.cloned().map(Box::new) });
        }
        inner.records.insert(k, write.to.clone());
        Ok(Applied::Written)
    }

    async fn put_task(&self, task: &Task) -> Result<Claim<Task>, StoreError> {
        let mut inner = self.lock();
        let k = (rk(&task.workflow, &task.key), task.generation, task.step);
        if let Some(existing) = inner.tasks.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.tasks.insert(k, task.clone());
        Ok(Claim::Acquired)
    }

    async fn mark_task_published(&self, task: &Task) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(t) = inner.tasks.get_mut(&(rk(&task.workflow, &task.key), task.generation, task.step)) {
            t.published = true;
        }
        Ok(())
    }

    async fn put_receipt(&self, receipt: &Receipt) -> Result<Claim<Receipt>, StoreError> {
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), receipt.id.to_string());
        if let Some(existing) = inner.receipts.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.receipts.insert(k, receipt.clone());
        Ok(Claim::Acquired)
    }

    async fn complete_receipt(&self, receipt: &Receipt, answer: Value) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), receipt.id.to_string());
        if let Some(r) = inner.receipts.get_mut(&k)
            && r.status == ReceiptStatus::Pending
        {
            r.status = ReceiptStatus::Done;
            r.answer = Some(answer);
        }
        Ok(())
    }

    async fn take_over_receipt(&self, stored: &Receipt, hold: &Hold) -> Result<Claim<Receipt>, StoreError> {
        let mut inner = self.lock();
        let k = (rk(&stored.workflow, &stored.key), stored.id.to_string());
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

    async fn note_repeat(&self, receipt: &Receipt, at: OffsetDateTime) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let k = (rk(&receipt.workflow, &receipt.key), receipt.id.to_string());
        if let Some(r) = inner.receipts.get_mut(&k) {
            r.repeats += 1;
            r.last_repeat_at = Some(at);
        }
        Ok(())
    }

    async fn buffer(&self, entry: &InboxEntry) -> Result<Claim<InboxEntry>, StoreError> {
        let mut inner = self.lock();
        let k = (rk(&entry.workflow, &entry.key), entry.step_name.clone(), entry.id.to_string());
        if let Some(existing) = inner.inbox.get(&k) {
            return Ok(Claim::Exists(existing.clone()));
        }
        inner.inbox.insert(k, entry.clone());
        Ok(Claim::Acquired)
    }

    async fn inbox(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        step_name: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let k = rk(workflow, key);
        let mut entries: Vec<InboxEntry> = self
            .lock()
            .inbox
            .values()
            .filter(|e| rk(&e.workflow, &e.key) == k && e.step_name == step_name)
            .cloned()
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
        Ok(self.lock().ledger.contains_key(&(rk(workflow, key), input_id.to_owned(), reason.as_str())))
    }

    async fn trace(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Result<Trace, StoreError> {
        let inner = self.lock();
        let k = rk(workflow, key);
        let mut trace = Trace {
            record: inner.records.get(&k).cloned(),
            tasks: inner.tasks.iter().filter(|((r, _, _), _)| r == &k).map(|(_, t)| t.clone()).collect(),
            receipts: inner.receipts.iter().filter(|((r, _), _)| r == &k).map(|(_, t)| t.clone()).collect(),
            inbox: inner.inbox.iter().filter(|((r, _, _), _)| r == &k).map(|(_, t)| t.clone()).collect(),
            ledger: inner.ledger.iter().filter(|((r, _, _), _)| r == &k).map(|(_, t)| t.clone()).collect(),
        };
        sort_trace(&mut trace);
        Ok(trace)
    }

    async fn due(&self, kind: Kind, before: OffsetDateTime, limit: usize) -> Result<Vec<Record>, StoreError> {
        let mut due: Vec<Record> = self
            .lock()
            .records
            .values()
            .filter(|r| r.state.kind() == kind && due_at(r) <= before)
            .cloned()
            .collect();
        due.sort_by_key(due_at);
        due.truncate(limit);
        Ok(due)
    }

    async fn expired_buffers(
        &self,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let mut expired: Vec<InboxEntry> = self
            .lock()
            .inbox
            .values()
            .filter(|e| !e.status.is_final() && e.expires_at <= before)
            .cloned()
            .collect();
        expired.sort_by_key(|e| e.expires_at);
        expired.truncate(limit);
        Ok(expired)
    }

    async fn count_by_state(&self, up_to: u64) -> Result<BTreeMap<Kind, Count>, StoreError> {
        let mut counts = BTreeMap::new();
        for r in self.lock().records.values() {
            *counts.entry(r.state.kind()).or_insert(0) += 1;
        }
        Ok(counts.into_iter().map(|(kind, n)| (kind, Count::of(n, up_to))).collect())
    }
}

/// The order both stores return a trace in: tasks by (generation, step), receipts and ledger
/// entries by time, the inbox by (step, arrival).
pub(crate) fn sort_trace(trace: &mut Trace) {
    trace.tasks.sort_by_key(|t| (t.generation, t.step));
    trace.receipts.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    trace.inbox.sort_by(|a, b| (a.step, a.arrived_at, &a.id).cmp(&(b.step, b.arrived_at, &b.id)));
    trace.ledger.sort_by(|a, b| (a.at, &a.input_id).cmp(&(b.at, &b.input_id)));
}
