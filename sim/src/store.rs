//! The store and the outbound queue as the engine sees them: the in-memory store (which keeps
//! DynamoDB's conditional semantics, proven by the shared contract suite) behind a point and
//! faults at every call, and the task publisher.
//!
//! A fault after the effect is a lost answer. With [`Fault::Retried`], the model goes one step
//! further, as the AWS SDK does: it retries the request, and a conditional write then finds its
//! own item (`ConditionalCheckFailed` with ALL_OLD), a put-if-absent finds what it just put.
//!
//! Every record write that lands is logged with the state before and after: the checks read this
//! log. A record item over DynamoDB's 400 KB is refused as DynamoDB would (a validation error)
//! and noted as a violation.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_aws::dynamodb::{ITEM_SIZES, record_size};
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{IgnoreReason, Kind, Record, State, Write};
use baton_core::ports::outbound::{PublishError, TaskPublisher};
use baton_core::ports::store::limits::{MAX_ITEM_BYTES, record_size_bound};
use baton_core::ports::store::memory::MemoryStore;
use baton_core::ports::store::{
    Applied, Claim, Count, DueList, Hold, InboxClaim, InboxEntry, InboxStatus, LedgerEntry, Receipt,
    RegisteredConfig, StoreError, Task, Trace, WorkflowStore,
};
use serde_json::Value;
use time::OffsetDateTime;

use crate::world::{Fault, Mutex, World, lock};

/// A record write that landed.
#[derive(Debug, Clone)]
pub struct Landed {
    pub at: OffsetDateTime,
    pub from: Option<State>,
    pub from_generation: Option<u32>,
    /// The record as written: the very one the store keeps (shared, not copied).
    pub to: Arc<Record>,
}

/// How the simulated DynamoDB measures items: as DynamoDB does, every one of them (every record
/// write measured exactly, where the in-memory store would trust the engine's cheap bound
/// first: a bound that leaves something out would let the simulated table keep a record
/// DynamoDB refuses).
pub const EXACT_SIZES: baton_core::ports::store::ItemSizes = baton_core::ports::store::ItemSizes {
    record_bound: measured_record_size,
    record: measured_record_size,
    ..ITEM_SIZES
};

/// How the engines measure what they write: as on AWS, the engine's cheap bound first
/// (`ITEM_SIZES`), noted for [`SimStore::apply`], which checks the exact size against the very
/// bound the engine used rather than working it out again.
pub const ENGINE_SIZES: baton_core::ports::store::ItemSizes =
    baton_core::ports::store::ItemSizes { record_bound: noted_record_bound, ..ITEM_SIZES };

thread_local! {
    /// The record [`SimStore::apply`] is writing (its address) and its exact size, measured once
    /// for the write: the in-memory store's check of the item limit and the log of sizes both
    /// read it, rather than serialising the record into its item twice.
    static MEASURED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    /// The record an engine last bounded (its address) and the bound ([`ENGINE_SIZES`]).
    static BOUNDED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// `ITEM_SIZES.record_bound`, noted for [`SimStore::apply`].
fn noted_record_bound(record: &Record) -> usize {
    let bound = record_size_bound(record);
    BOUNDED.set((std::ptr::from_ref(record) as usize, bound));
    bound
}

/// The engine's bound of the record `apply` writes: the one it noted, if it bounded this very
/// record last and the bound let it through at once (`fit_item_limit` then leaves the record as
/// it was measured, and the engine writes it next); otherwise worked out again.
fn engine_bound(record: &Record) -> usize {
    match BOUNDED.replace((0, 0)) {
        (at, bound) if at == std::ptr::from_ref(record) as usize && bound <= MAX_ITEM_BYTES => bound,
        _ => record_size_bound(record),
    }
}

/// `ITEM_SIZES.record`, of the record being written if [`SimStore::apply`] has measured it.
fn measured_record_size(record: &Record) -> usize {
    let (at, size) = MEASURED.get();
    if at == std::ptr::from_ref(record) as usize { size } else { record_size(record) }
}

pub struct SimStore {
    pub world: Arc<World>,
    pub inner: Arc<MemoryStore>,
    pub writes: Mutex<Vec<Landed>>,
    pub violations: Arc<Mutex<Vec<String>>>,
    /// A key every call about fails from a moment on: the bad item (by then often due for the
    /// sweeper, or in an inbox) that must not block the others.
    pub cursed: Option<(String, OffsetDateTime)>,
    /// Inbox entries put while their step already waited, with neither a read of the record by
    /// their actor nor a read of their inbox by anyone since.
    pub late_puts: Mutex<std::collections::BTreeSet<LatePut>>,
    /// Every config deployed, in order: what a record's config version names.
    pub deployed: Mutex<Vec<Arc<baton_core::domain::config::Config>>>,
    /// Every inbox settle and ledger line that landed, in order.
    pub settles: Mutex<Vec<Settled>>,
    /// When next attempts landed due (a step's, a branch's, a compensation's), not yet taken by
    /// the schedule (which has the sweeper's schedule fire at some of them).
    pub attempts_due: Mutex<Vec<OffsetDateTime>>,
    /// When a record first began compensating.
    pub compensating_since: Mutex<Option<OffsetDateTime>>,
    /// The largest record of a group written (its exact size in bytes, and the engine's bound
    /// of it).
    pub largest: Mutex<(usize, usize)>,
    /// The written record whose exact size passed the engine's cheap bound of it by the most:
    /// (record, version, size, bound).
    pub underbound: Mutex<Option<(String, u64, usize, usize)>>,
}

/// An inbox entry settled for good, or an input ledgered, and where that fell among the landed
/// record writes: when the fate of a buffered input was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub key: String,
    /// The inbox entry's step name (`None`: a ledger line, which names no step).
    pub step_name: Option<String>,
    pub id: String,
    /// How many record writes had landed before it.
    pub after_writes: usize,
}

/// An inbox entry that landed while its step already waited.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LatePut {
    pub actor: String,
    pub workflow: String,
    pub key: String,
    pub generation: u32,
    /// The waiting step, in the record's version.
    pub step: u32,
    pub step_name: String,
    pub id: String,
}

impl SimStore {
    /// The deployed config of `version` (a record's, a task's generation's).
    pub fn deployed(&self, version: Option<&String>) -> Option<Arc<baton_core::domain::config::Config>> {
        lock(&self.deployed).iter().find(|c| version == Some(&c.version)).cloned()
    }
}

fn unavailable(op: &'static str) -> StoreError {
    StoreError::Unavailable { op, source: "injected: DynamoDB unavailable".into() }
}

fn throttled(op: &'static str) -> StoreError {
    StoreError::Throttled { op, source: "injected: ProvisionedThroughputExceededException".into() }
}

impl SimStore {
    /// Counts a refusal for DynamoDB's limits (a key or an item too large), which the in-memory
    /// store gives as the DynamoDB store would. Baton asked for what AWS never takes: noted as a
    /// violation, as a record over 400 KB is.
    fn limited<T>(&self, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e @ StoreError::Rejected { .. }) = &answer {
            lock(&self.world.counts).add("ddb_limit_refused");
            let cause = std::error::Error::source(e).map(|s| s.to_string()).unwrap_or_default();
            lock(&self.violations).push(format!(
                "[dynamodb_refuses_no_request] DynamoDB would refuse a request baton made: {e}: {cause}"
            ));
        }
        answer
    }

    /// The current actor reads what the other side of the inbox handshake writes (the record,
    /// or the inbox): its late puts for this key are answered.
    fn handshake_read(&self, key: &CorrelationKey) {
        let actor = self.world.actor();
        lock(&self.late_puts).retain(|p| !(*p.actor == *actor && p.key == key.as_str()));
    }

    /// The in-memory store's `apply`, with the record measured once, for its check of the item
    /// limit and for the sizes [`SimStore::apply`] logs (that `apply` does not yield: nothing
    /// else is written meanwhile).
    async fn apply_measured(&self, write: &Write) -> (usize, Result<Applied, StoreError>) {
        let size = record_size(&write.to);
        MEASURED.set((std::ptr::from_ref(&write.to) as usize, size));
        let applied = self.inner.apply(write).await;
        MEASURED.set((0, 0));
        (size, applied)
    }

    async fn enter(&self, op: &'static str, key: &CorrelationKey) -> Result<Fault, StoreError> {
        self.world.point(op).await;
        if self.cursed.as_ref().is_some_and(|(k, from)| k == key.as_str() && self.world.now() >= *from) {
            return Err(unavailable(op));
        }
        match self.world.fault(op) {
            Fault::Before => Err(unavailable(op)),
            Fault::Throttled => Err(throttled(op)),
            other => Ok(other),
        }
    }
}

#[async_trait::async_trait]
impl WorkflowStore for SimStore {
    async fn load(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
    ) -> Result<Option<Arc<Record>>, StoreError> {
        match self.enter("ddb.GetItem(record)", key).await? {
            Fault::After => Err(unavailable("GetItem")),
            _ => {
                self.handshake_read(key);
                self.inner.load(workflow, key).await
            }
        }
    }

    async fn apply(&self, write: &Write) -> Result<Applied, StoreError> {
        let fault = self.enter("ddb.PutItem(record)", &write.to.key).await?;
        // The state before, read in place rather than the whole record copied.
        let before = self.inner.peek(&write.to.workflow, &write.to.key, |r| (r.state, r.generation))?;
        let bound = engine_bound(&write.to);
        let (size, applied) = self.apply_measured(write).await;
        // The store refuses a record over 400 KB as DynamoDB does (a ValidationException,
        // every time): baton decided a write it can never make.
        let applied = match applied {
            Err(e @ StoreError::Rejected { .. }) => {
                lock(&self.violations).push(format!(
                    "[record_fits_its_item] record {}/{} would be {size} bytes at version {} (the engine's bound said {bound}): over DynamoDB's 400 KB item limit, so it can never be written",
                    write.to.workflow, write.to.key, write.to.version
                ));
                lock(&self.world.counts).add("ddb_limit_refused");
                return Err(e);
            }
            other => other?,
        };
        if applied == Applied::Written {
            if write.to.branches().count() > 2 {
                let mut largest = lock(&self.largest);
                if size > largest.0 {
                    *largest = (size, bound);
                }
            }
            let mut under = lock(&self.underbound);
            if size > bound && under.as_ref().is_none_or(|(_, _, s, b)| size - bound > s - b) {
                let name = format!("{}/{}", write.to.workflow, write.to.key);
                *under = Some((name, write.to.version, size, bound));
            }
        }
        self.world.note(|| {
            let cause = write
                .to
                .history
                .last()
                .map(|a| format!("{:?} {:?}", a.cause, a.cause_id))
                .unwrap_or_default();
            format!(
                "  {}/{} {:?} -> {} v{} ({cause}) token {:?}: {applied:?}",
                write.to.workflow,
                write.to.key,
                before.map(|(state, _)| state.to_string()),
                write.to.state,
                write.to.version,
                write.to.step_wait().and_then(|w| w.token.as_ref()).map(|t| t.expose().to_owned())
            )
        });
        if applied == Applied::Written {
            let r = &write.to;
            // (A timer's wake is due as an attempt's task is: the sweep comes on time.)
            let due = r.waits.iter().filter_map(|w| w.task_due().or_else(|| w.wakes_at()));
            let undos = r.compensation.iter().flat_map(|c| c.undos.iter().filter_map(|u| u.wait.task_due()));
            lock(&self.attempts_due).extend(due.chain(undos));
            if r.state == State::Compensating {
                lock(&self.compensating_since).get_or_insert(self.world.now());
            }
            // The record the store now keeps (that `apply` did not yield: nothing else wrote it).
            let to = self.inner.shared(&r.workflow, &r.key).unwrap_or_else(|| Arc::new(r.clone()));
            lock(&self.writes).push(Landed {
                at: self.world.now(),
                from: before.map(|(state, _)| state),
                from_generation: before.map(|(_, generation)| generation),
                to,
            });
        }
        match (fault, applied) {
            (Fault::After, _) => Err(unavailable("PutItem")),
            // The SDK's retry meets its own write: ConditionalCheckFailed, with the item.
            (Fault::Retried, Applied::Written) => {
                Ok(Applied::Lost { current: Some(Box::new(write.to.clone())) })
            }
            (_, applied) => Ok(applied),
        }
    }

    async fn put_task(&self, task: &Task) -> Result<Claim<Task>, StoreError> {
        let fault = self.enter("ddb.PutItem(task)", &task.key).await?;
        let claim = self.inner.put_task(task).await?;
        match (fault, claim) {
            (Fault::After, _) => Err(unavailable("PutItem")),
            (Fault::Retried, Claim::Acquired) => Ok(Claim::Exists(task.clone())),
            (_, claim) => Ok(claim),
        }
    }

    async fn mark_task_published(&self, task: &Task) -> Result<(), StoreError> {
        let fault = self.enter("ddb.UpdateItem(task)", &task.key).await?;
        self.inner.mark_task_published(task).await?;
        if fault == Fault::After { Err(unavailable("UpdateItem")) } else { Ok(()) }
    }

    async fn put_receipt(&self, receipt: &Receipt) -> Result<Claim<Receipt>, StoreError> {
        let fault = self.enter("ddb.PutItem(receipt)", &receipt.key).await?;
        let claim = self.limited(self.inner.put_receipt(receipt).await)?;
        match (fault, claim) {
            (Fault::After, _) => Err(unavailable("PutItem")),
            (Fault::Retried, Claim::Acquired) => Ok(Claim::Exists(receipt.clone())),
            (_, claim) => Ok(claim),
        }
    }

    async fn complete_receipt(&self, receipt: &Receipt, answer: Value) -> Result<(), StoreError> {
        let fault = self.enter("ddb.UpdateItem(receipt)", &receipt.key).await?;
        self.inner.complete_receipt(receipt, answer).await?;
        if fault == Fault::After { Err(unavailable("UpdateItem")) } else { Ok(()) }
    }

    async fn take_over_receipt(&self, stored: &Receipt, hold: &Hold) -> Result<Claim<Receipt>, StoreError> {
        let fault = self.enter("ddb.UpdateItem(receipt lease)", &stored.key).await?;
        let answer = self.inner.take_over_receipt(stored, hold).await?;
        match (fault, answer) {
            (Fault::After, _) => Err(unavailable("UpdateItem")),
            // The SDK's retry of a takeover that landed finds the receipt held by this attempt.
            (Fault::Retried, Claim::Acquired) => {
                Ok(Claim::Exists(Receipt { lease: Some(hold.clone()), ..stored.clone() }))
            }
            (_, answer) => Ok(answer),
        }
    }

    async fn release_receipt(&self, receipt: &Receipt) -> Result<(), StoreError> {
        let fault = self.enter("ddb.DeleteItem(receipt)", &receipt.key).await?;
        self.inner.release_receipt(receipt).await?;
        if fault == Fault::After { Err(unavailable("DeleteItem")) } else { Ok(()) }
    }

    async fn note_repeat(&self, receipt: &Receipt, at: OffsetDateTime) -> Result<(), StoreError> {
        let fault = self.enter("ddb.UpdateItem(repeat)", &receipt.key).await?;
        self.inner.note_repeat(receipt, at).await?;
        if fault == Fault::After { Err(unavailable("UpdateItem")) } else { Ok(()) }
    }

    async fn buffer(&self, entry: &InboxEntry) -> Result<Claim<InboxEntry>, StoreError> {
        let fault = self.enter("ddb.PutItem(inbox)", &entry.key).await?;
        let claim = self.limited(self.inner.buffer(entry).await)?;
        // An entry landing while its step already waits: only the buffering side's handshake
        // read can still apply it (what the SkipHandshakeRead mutation breaks).
        // (Read in place: only its version, state and generation are needed.)
        let record = self
            .inner
            .peek(&entry.workflow, &entry.key, |r| (r.config_version.clone(), r.state, r.generation))?;
        // The step of the entry's name in the record's own version (the inbox is kept by name).
        let waiting = record.and_then(|(version, state, generation)| {
            let step = self
                .deployed(Some(&version))?
                .workflow(entry.workflow.as_str())?
                .step_index(&entry.step_name)?;
            (state == State::Waiting { step } && generation == entry.generation).then_some(step)
        });
        if claim == Claim::Acquired
            && let Some(step) = waiting
        {
            lock(&self.world.counts).add("late_inbox_put");
            lock(&self.late_puts).insert(LatePut {
                actor: self.world.actor().to_string(),
                workflow: entry.workflow.to_string(),
                key: entry.key.to_string(),
                generation: entry.generation,
                step,
                step_name: entry.step_name.clone(),
                id: entry.id.to_string(),
            });
        }
        match (fault, claim) {
            (Fault::After, _) => Err(unavailable("PutItem")),
            (Fault::Retried, Claim::Acquired) => Ok(Claim::Exists(entry.clone())),
            (_, claim) => Ok(claim),
        }
    }

    async fn inbox(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        step_name: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        match self.enter("ddb.Query(inbox)", key).await? {
            Fault::After => Err(unavailable("Query")),
            _ => {
                // Whoever reads this inbox (a retry's drain, a redelivered step_ready) sees every
                // late entry in it.
                lock(&self.late_puts).retain(|p| !(p.key == key.as_str() && p.step_name == step_name));
                self.inner.inbox(workflow, key, step_name).await
            }
        }
    }

    async fn settle(
        &self,
        entry: &InboxEntry,
        from: InboxStatus,
        to: InboxStatus,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        let fault = self.enter("ddb.UpdateItem(inbox)", &entry.key).await?;
        let claim = self.limited(self.inner.settle(entry, from, to).await)?;
        if claim == Claim::Acquired {
            // Where the settle falls among the landed record writes, for the checks.
            let at = lock(&self.writes).len();
            let settled = Settled {
                key: entry.key.to_string(),
                step_name: Some(entry.step_name.clone()),
                id: entry.id.to_string(),
                after_writes: at,
            };
            lock(&self.settles).push(settled);
        }
        match (fault, claim) {
            (Fault::After, _) => Err(unavailable("UpdateItem")),
            (Fault::Retried, Claim::Acquired) => {
                Ok(Claim::Exists(InboxEntry { status: to, ..entry.clone() }))
            }
            (_, claim) => Ok(claim),
        }
    }

    async fn claim(&self, entry: &InboxEntry, claim: &InboxClaim) -> Result<Claim<InboxEntry>, StoreError> {
        let fault = self.enter("ddb.UpdateItem(inbox claim)", &entry.key).await?;
        let answer = self.limited(self.inner.claim(entry, claim).await)?;
        match (fault, answer) {
            (Fault::After, _) => Err(unavailable("UpdateItem")),
            // The SDK's retry of a claim that landed finds the entry as the claim left it.
            (Fault::Retried, Claim::Acquired) => Ok(Claim::Exists(claim.apply(entry))),
            (_, answer) => Ok(answer),
        }
    }

    async fn put_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let fault = self.enter("ddb.PutItem(ledger)", &entry.key).await?;
        self.limited(self.inner.put_ledger(entry).await)?;
        let at = lock(&self.writes).len();
        let ledgered = Settled {
            key: entry.key.to_string(),
            step_name: None,
            id: entry.input_id.clone(),
            after_writes: at,
        };
        lock(&self.settles).push(ledgered);
        if fault == Fault::After { Err(unavailable("PutItem")) } else { Ok(()) }
    }

    async fn register_config(&self, config: &RegisteredConfig, started: bool) -> Result<(), StoreError> {
        self.inner.register_config(config, started).await
    }

    async fn configs(&self) -> Result<Vec<RegisteredConfig>, StoreError> {
        self.inner.configs().await
    }

    async fn ledgered(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        input_id: &str,
        reason: IgnoreReason,
    ) -> Result<bool, StoreError> {
        match self.enter("ddb.GetItem(ledger)", key).await? {
            Fault::After => Err(unavailable("GetItem")),
            _ => self.limited(self.inner.ledgered(workflow, key, input_id, reason).await),
        }
    }

    async fn trace(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Result<Trace, StoreError> {
        self.enter("ddb.Query(trace)", key).await?;
        let trace = self.inner.trace(workflow, key).await?;
        // A reader of the whole partition sees the record: a late entry whose step no longer
        // waits is not stranded beside it (one whose step waits, the reader must drain).
        let waiting = trace.record.as_ref().and_then(|r| match r.state {
            State::Waiting { step } => Some(step),
            _ => None,
        });
        lock(&self.late_puts).retain(|p| !(p.key == key.as_str() && Some(p.step) != waiting));
        Ok(trace)
    }

    async fn due(
        &self,
        list: DueList,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        self.world.point("ddb.Query(due)").await;
        if matches!(self.world.fault("ddb.Query(due)"), Fault::Before | Fault::Throttled) {
            return Err(unavailable("Query"));
        }
        self.inner.due(list, before, limit).await
    }

    async fn expired_buffers(
        &self,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.world.point("ddb.Query(expired)").await;
        if matches!(self.world.fault("ddb.Query(expired)"), Fault::Before | Fault::Throttled) {
            return Err(unavailable("Query"));
        }
        self.inner.expired_buffers(before, limit).await
    }

    async fn count_by_state(&self, up_to: u64) -> Result<BTreeMap<Kind, Count>, StoreError> {
        self.inner.count_by_state(up_to).await
    }
}

/// A task as the outbound queue received it.
#[derive(Debug, Clone)]
pub struct Published {
    pub at: OffsetDateTime,
    pub task: Task,
}

/// What reads the outbound queue: told of each task as it lands.
pub type Reader = Box<dyn FnMut(&Published) + Send>;

/// The outbound queue: every task published, in order, and the task workers reading it.
pub struct SimPublisher {
    pub world: Arc<World>,
    pub log: Mutex<Vec<Published>>,
    pub workers: Mutex<Option<Reader>>,
}

impl SimPublisher {
    pub fn new(world: Arc<World>) -> SimPublisher {
        SimPublisher { world, log: Mutex::new(Vec::new()), workers: Mutex::new(None) }
    }
}

#[async_trait::async_trait]
impl TaskPublisher for SimPublisher {
    async fn publish(&self, task: &Task) -> Result<(), PublishError> {
        self.world.point("sqs.SendMessage(outbound)").await;
        let fault = self.world.fault("sqs.SendMessage(outbound)");
        let unavailable = || PublishError::new(true, "injected: SQS unavailable".into());
        if matches!(fault, Fault::Before | Fault::Throttled) {
            return Err(unavailable());
        }
        let published = Published { at: self.world.now(), task: task.clone() };
        lock(&self.log).push(published.clone());
        if let Some(read) = lock(&self.workers).as_mut() {
            read(&published);
        }
        if fault == Fault::After { Err(unavailable()) } else { Ok(()) }
    }
}
