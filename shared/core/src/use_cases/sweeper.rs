//! The sweeper: on a schedule, it finishes what a crash left owed.
//!
//! - A record still `pending` after [`RESTART_PENDING_AFTER`]: its execution may never have
//!   started (a crash between the record write and StartExecution). Starting again is safe: the
//!   execution name is deterministic.
//! - A record still `advancing` after [`RESEND_RESUME_AFTER`]: the resume may never have reached
//!   Step Functions (a crash between the `advancing` write and SendTaskSuccess). Sending again is
//!   safe: either it is the first delivery, or the token is gone and that is classified.
//! - A parallel group still `waiting` with a branch's resume owed after [`RESEND_RESUME_AFTER`]:
//!   the same, for that branch's token.
//! - A buffered input past its expiry: its step never waited in time. It is settled `expired`
//!   and ledgered as `buffer_expired`, so it is not lost silently.
//!
//! - A record long past its deadline (or, advancing, long idle) whose execution Step Functions
//!   reports ended more than [`STRANDED_AFTER`] ago, or gone: its report is not coming (the
//!   execution was stopped outside baton, or its report was lost). It is stranded
//!   (`lifecycle/stranded.rs`): it leaves the sweeper's lists, `RecordsStranded` counts it, and a
//!   person ends it with `baton end`.
//!
//! Each record is submitted as a `Tick`, so the lifecycle (not the sweeper) decides what is owed.
//! Records that owe work are on lists of their own in the index ([`DueList`]), read before the
//! waits that are only watched: a crowd of those never holds owed work back.

use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::domain::error::Classified;
use crate::domain::lifecycle::{
    AppliedInput, IgnoreReason, Input, Kind, NOT_FOUND, Outcome, payload_fingerprint,
};
use crate::limits::{RESEND_RESUME_AFTER, RESTART_PENDING_AFTER, STRANDED_AFTER};
use crate::ports::orchestrator::OrchestratorError;
use crate::use_cases::engine::{Definition, Engine, EngineError, LEDGER_RETENTION};

use crate::domain::lifecycle::Record;
use crate::ports::store::{Claim, DueList, Hold, InboxClaim, InboxEntry, InboxStatus, LedgerEntry};

/// How many items one run handles per kind; the next run takes the rest.
pub const BATCH: usize = 100;

/// The records of `lists` taken in turn: the first of each list, then the second of each, and
/// so on.
fn in_turn<T>(lists: Vec<Vec<T>>) -> impl Iterator<Item = T> {
    let mut lists: Vec<std::vec::IntoIter<T>> = lists.into_iter().map(Vec::into_iter).collect();
    std::iter::from_fn(move || {
        let mut next = None;
        while next.is_none() && !lists.is_empty() {
            let mut list = lists.remove(0);
            next = list.next();
            if next.is_some() {
                lists.push(list);
            }
        }
        next
    })
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Records whose owed work (start or resume) was carried out again.
    pub repaired: usize,
    /// Due records where nothing turned out to be owed.
    pub nothing_owed: usize,
    /// Buffered inputs expired and ledgered.
    pub expired: usize,
    /// Records whose executions ended without their reports, stranded.
    pub stranded: usize,
}

pub struct Sweeper {
    engine: Arc<Engine>,
}

impl Sweeper {
    pub fn new(engine: Arc<Engine>) -> Self {
        Sweeper { engine }
    }

    /// The engine's clock.
    pub fn now(&self) -> OffsetDateTime {
        self.engine.now()
    }

    /// One sweep at time `now`. Every due item is tried, whatever happens to the others: one
    /// that keeps failing must not keep the rest from being repaired (found by the simulation).
    /// The first error is returned after the sweep, so the run is still reported as failed.
    ///
    /// The records that owe work are read first, each state's list of its own batch; then the
    /// waits whose deadlines passed with nothing owed, which the sweeper only checks on: a report
    /// from Step Functions is overdue for them, and one whose execution ended without it is
    /// stranded. However many of those there are, owed work goes out on time.
    pub async fn run_once(&self, now: OffsetDateTime) -> Result<SweepReport, EngineError> {
        let mut report = SweepReport::default();
        let mut first_error = None;
        // The owed work of every state, taken in turn, one record of each list after another:
        // a sweep cut short by its timeout has served each list alike, and a crowd on one (pending
        // records whose restarts each take seconds) never holds back another's (found by the
        // simulation: a retried step's next attempt was never published before its heartbeat ran
        // out, every sweep spent on such restarts).
        let work = [
            (DueList { kind: Kind::Pending, work: true }, RESTART_PENDING_AFTER),
            (DueList { kind: Kind::Advancing, work: true }, RESEND_RESUME_AFTER),
            // A group's owed branch resume or a next attempt's task (listed on time: `due_at`).
            (DueList { kind: Kind::Waiting, work: true }, RESEND_RESUME_AFTER),
            // A compensation's owed resume, or its next attempt's task.
            (DueList { kind: Kind::Compensating, work: true }, RESEND_RESUME_AFTER),
        ];
        let mut owed = Vec::new();
        for (list, after) in work {
            match self.engine.store.due(list, now - after, BATCH).await {
                Ok(records) => owed.push(records),
                Err(e) => {
                    warn!(error_type = e.error_type(), error = %crate::domain::error::error_chain(&e), "reading due records failed; the next sweep retries it");
                    first_error.get_or_insert(EngineError::from(e));
                }
            }
        }
        for record in in_turn(owed) {
            if let Err(e) = self.sweep_record(&record, now, &mut report).await {
                warn!(workflow = %record.workflow, key = %record.key, error_type = e.error_type(),
                    error = %crate::domain::error::error_chain(&e), "repairing a due record failed; the next sweep retries it");
                first_error.get_or_insert(e);
            }
        }
        let watched = [
            // A deadline passed a grace ago: Step Functions' own report is overdue.
            (DueList { kind: Kind::Waiting, work: false }, RESEND_RESUME_AFTER),
            // A resume that went out (or found its token gone) while the next report is awaited.
            (DueList { kind: Kind::Advancing, work: false }, RESEND_RESUME_AFTER),
            (DueList { kind: Kind::Compensating, work: false }, RESEND_RESUME_AFTER),
        ];
        for (list, after) in watched {
            if let Err(e) = self.sweep_list(list, now - after, now, &mut report).await {
                warn!(error_type = e.error_type(), error = %crate::domain::error::error_chain(&e), "sweeping due records failed; the next sweep retries it");
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.expire_buffers(now, &mut report).await {
            first_error.get_or_insert(e);
        }
        if report != SweepReport::default() {
            info!(?report, "sweep done");
        }
        first_error.map_or(Ok(report), Err)
    }

    /// Every record of `list` due by `before`, one batch: repaired, counted, or stranded. The
    /// first error is returned after all were tried.
    async fn sweep_list(
        &self,
        list: DueList,
        before: OffsetDateTime,
        now: OffsetDateTime,
        report: &mut SweepReport,
    ) -> Result<(), EngineError> {
        let mut first_error = None;
        for record in self.engine.store.due(list, before, BATCH).await? {
            if let Err(e) = self.sweep_record(&record, now, report).await {
                warn!(workflow = %record.workflow, key = %record.key, error_type = e.error_type(),
                    error = %crate::domain::error::error_chain(&e), "repairing a due record failed; the next sweep retries it");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// One due record: what it owes carried out ([`Input::Tick`]: the lifecycle decides what
    /// that is), then, if it has long been due, its execution checked on ([`Self::strand`]).
    async fn sweep_record(
        &self,
        record: &Record,
        now: OffsetDateTime,
        report: &mut SweepReport,
    ) -> Result<(), EngineError> {
        // Decided on the record's own config version, which defines its workflow even after a
        // deploy removed it.
        let config = self.engine.config_of(Some(record.config_version.as_str())).await?;
        let Some(workflow) = config.workflow(record.workflow.as_str()) else {
            warn!(workflow = %record.workflow, key = %record.key, config_version = %config.version,
                "due record of a workflow its config version does not define");
            return Ok(());
        };
        match self.engine.submit(workflow, &record.key, &Input::Tick, now).await?.outcome() {
            Outcome::Applied => report.repaired += 1,
            _ => report.nothing_owed += 1,
        }
        if record.due_at() <= now - STRANDED_AFTER && self.strand(workflow, record, now).await? {
            report.stranded += 1;
        }
        Ok(())
    }

    /// Checks on the execution of a record long due: if it ended (or is gone) more than
    /// [`STRANDED_AFTER`] ago, its report is not coming, and the record is stranded. `true`
    /// when this sweep stranded it.
    async fn strand(
        &self,
        workflow: &crate::domain::config::Workflow,
        record: &Record,
        now: OffsetDateTime,
    ) -> Result<bool, EngineError> {
        let arn = self.engine.execution_arn(workflow, &record.key, record.generation);
        let (status, error) = match self.engine.orchestrator.describe(&arn).await {
            Ok(info) if !info.status.is_closed() => return Ok(false),
            Ok(info) if info.stop_date.is_some_and(|at| at > now - STRANDED_AFTER) => return Ok(false),
            Ok(info) => (info.status.as_str().to_owned(), info.error),
            // A pending record's execution may never have started: the restart is owed, not a
            // person.
            Err(OrchestratorError::ExecutionNotFound { .. }) if record.state.kind() == Kind::Pending => {
                return Ok(false);
            }
            Err(OrchestratorError::ExecutionNotFound { .. }) => (NOT_FOUND.to_owned(), None),
            Err(e) => return Err(e.into()),
        };
        let gone = Input::ExecutionGone { generation: record.generation, status: status.clone(), error };
        let stranded =
            self.engine.submit(workflow, &record.key, &gone, now).await?.outcome() == Outcome::Applied;
        if stranded {
            warn!(workflow = %record.workflow, key = %record.key, generation = record.generation,
                from = %record.state, execution_status = %status, event = "record_stranded",
                "the record's execution ended without its report: stranded; end it with `baton end` (RUNBOOK: StrandedRecordsAlarm)");
        }
        Ok(stranded)
    }

    /// The buffered inputs past their expiry, one batch: each expired into the ledger, or
    /// drained if its step waits after all.
    async fn expire_buffers(&self, now: OffsetDateTime, report: &mut SweepReport) -> Result<(), EngineError> {
        let mut first_error = None;
        let expired = self.engine.store.expired_buffers(now, BATCH).await?;
        // This sweep's hold on the expiries it takes (InboxClaim::Expire).
        let hold = Hold { by: (self.engine.write_ids)(), at: now };
        for entry in expired {
            match self.expire(&entry, &hold, now).await {
                Ok(true) => report.expired += 1,
                Ok(false) => {}
                Err(e) => {
                    warn!(error_type = e.error_type(), error = %crate::domain::error::error_chain(&e), "expiring a buffered input failed; the next sweep retries it");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Ledgers one expired buffered input and settles it, or drains it if its step waits after
    /// all; `false` when it was not expired here.
    ///
    /// The entry is claimed before the record is read ([`InboxClaim`]): a drain that listed it
    /// before the claim did so after its step waited, so the read sees the step waiting (or the
    /// input applied) and the entry is given back and drained; a drain that lists it after the
    /// claim leaves it. Read first, a step that began waiting in between had its drain apply
    /// the input while this sweep ledgered it expired (found by review; `sim/tests/failure_handling.rs`).
    ///
    /// `listed` is the entry as the `by_due` index listed it, which is eventually consistent:
    /// whether this sweep takes the expiry over from one that died is decided on the entry as
    /// the table holds it ([`Self::fresh`]), never on the index's copy.
    async fn expire(
        &self,
        listed: &InboxEntry,
        hold: &Hold,
        now: OffsetDateTime,
    ) -> Result<bool, EngineError> {
        let Some(entry) = self.fresh(listed).await? else { return Ok(false) };
        let entry = &entry;
        let expire = InboxClaim::Expire(hold.clone());
        let claimed = if crate::mutants::active(crate::mutants::Mutation::ExpireWithoutClaim) {
            Claim::Acquired
        } else {
            self.engine.store.claim(entry, &expire).await?
        };
        if !expire.held(&claimed) {
            return match claimed {
                // A drain took it and never finished (it died, or its step stopped waiting):
                // finished here, as the drain's retry would.
                Claim::Exists(drained) if drained.status == InboxStatus::Draining => {
                    self.finish_drain(&drained, now).await
                }
                // Settled, another sweep holds its expiry, or given back before its expiry.
                _ => Ok(false),
            };
        }
        // Taken over from a sweep that died holding it: if that sweep had ledgered it
        // `buffer_expired`, only the settle is left (read again now, the record might show its
        // step waiting, and the input would end both ledgered and applied). Only the expiry
        // ledgers `buffer_expired`; an `idempotency_key_reused` entry under the id may be a
        // later event's, refused on its own (seed 66191: read as the dead sweep's, it settled
        // the copy of an applied input `expired`), so that case is decided again below, where
        // ledgering it once more changes nothing. `entry` is the table's copy, read before the
        // claim: the index may still list it `buffered` long after the sweep that died took it
        // (found with the simulation's lagging index: `sim/tests/regressions.rs`). An entry
        // that was buffered when read is not taken by another sweep before this claim, as that
        // sweep's lease would outlast this one's run.
        let taken_over = if crate::mutants::active(crate::mutants::Mutation::TrustIndexStatus) {
            listed.status == InboxStatus::Expiring
        } else {
            entry.status == InboxStatus::Expiring
        };
        let expired = IgnoreReason::BufferExpired;
        if taken_over
            && self.engine.store.ledgered(&entry.workflow, &entry.key, entry.id.as_str(), expired).await?
        {
            self.engine.store.settle(entry, InboxStatus::Expiring, InboxStatus::Expired).await?;
            return Ok(true);
        }
        let (record, pinned, step) = self.locate(entry).await?;
        // Its step waits in its generation: a drain is owed, or under way. Given back and
        // drained, never expired from under it (an input both applied and ledgered expired;
        // found by review).
        if let (Some(r), Some(workflow), Some(step)) = (&record, &pinned, step)
            && r.waits_at(step)
            && entry.generation == r.generation
        {
            self.engine.store.claim(entry, &InboxClaim::Release(hold.clone())).await?;
            self.engine.drain(workflow, &entry.key, r.generation, step, now).await?;
            info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "expired buffer's step waits: drained");
            return Ok(false);
        }
        // A redelivery of the same input may have been applied straight to its step, leaving
        // this copy behind: it is applied, not expired. A copy with another payload is a
        // conflict the direct application never saw: refused, and ledgered as one (both found
        // by the simulation).
        let reason = match twin(entry, record.as_deref(), step) {
            Some(Twin::Same) => {
                self.engine.store.settle(entry, InboxStatus::Expiring, InboxStatus::Applied).await?;
                info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "buffered copy of an applied input settled");
                return Ok(false);
            }
            Some(Twin::Other) => IgnoreReason::IdempotencyKeyReused,
            None => IgnoreReason::BufferExpired,
        };
        self.ledger_expired(entry, reason, now).await
    }

    /// An input that expired unapplied (`buffer_expired`), or whose id another payload had
    /// already taken (`idempotency_key_reused`): ledgered first (idempotent per input and
    /// reason), then settled. A sweep that fails in between leaves the entry expiring, and the
    /// sweep that takes it over settles it. Settled first, a failed ledger write would leave an
    /// expired input with no trace (found by review). `true` when this sweep expired it.
    async fn ledger_expired(
        &self,
        entry: &InboxEntry,
        reason: IgnoreReason,
        now: OffsetDateTime,
    ) -> Result<bool, EngineError> {
        let ledger = LedgerEntry {
            workflow: entry.workflow.clone(),
            key: entry.key.clone(),
            input_id: entry.id.to_string(),
            reason,
            generation: Some(entry.generation),
            state: None,
            detail: entry.input.clone(),
            config_version: Some(entry.config_version.clone()),
            at: now,
            expires_at: now + LEDGER_RETENTION,
        };
        self.engine.store.put_ledger(&ledger).await?;
        if let Claim::Exists(other) =
            self.engine.store.settle(entry, InboxStatus::Expiring, InboxStatus::Expired).await?
        {
            // This sweep's own settle, whose answer was lost (or a sweep that took the expiry
            // over past the lease settled it first).
            if other.status != InboxStatus::Expired {
                warn!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, status = other.status.as_str(),
                    "buffered input settled otherwise while this sweep expired it");
            }
            return Ok(false);
        }
        warn!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, step = entry.step, reason = reason.as_str(),
            "buffered input expired unapplied; ledgered");
        Ok(true)
    }

    /// The entry as the table holds it now (strongly consistent), `None` when it is settled
    /// for good: what the expiry decides on, rather than the index's copy, `listed`.
    async fn fresh(&self, listed: &InboxEntry) -> Result<Option<InboxEntry>, EngineError> {
        let inbox = self.engine.store.inbox(&listed.workflow, &listed.key, &listed.step_name).await?;
        Ok(match inbox.into_iter().find(|e| e.same_input(listed)) {
            Some(e) if e.status.is_final() => None,
            Some(e) => Some(e),
            // Gone (TTL deleted it, long after it was settled): nothing to expire. Claiming it
            // would find no item.
            None => None,
        })
    }

    /// The entry's record (strongly consistent), its workflow in the record's own config version,
    /// and the entry's step, by name, in that version.
    async fn locate(
        &self,
        entry: &InboxEntry,
    ) -> Result<(Option<Arc<Record>>, Option<Definition>, Option<u32>), EngineError> {
        let record = self.engine.store.load(&entry.workflow, &entry.key).await?;
        let pinned = match &record {
            Some(r) => {
                self.engine.definition(entry.workflow.as_str(), Some(r.config_version.as_str())).await?
            }
            None => None,
        };
        let step = pinned.as_ref().and_then(|w| w.step_index(&entry.step_name));
        Ok((record, pinned, step))
    }

    /// Finishes a drain that took `entry` and never settled it: drained again (the lifecycle
    /// decides, as for the first try: applied, a duplicate, ignored and ledgered, or given back
    /// to wait), or given back when its step cannot be found, so that a later sweep expires it.
    async fn finish_drain(&self, entry: &InboxEntry, now: OffsetDateTime) -> Result<bool, EngineError> {
        let (record, pinned, step) = self.locate(entry).await?;
        // Applied where the drain was applying it: the drain died (or failed) only after the
        // record had it. Settled applied, never decided again: since then the generation may
        // have ended (its drain would now say stale_generation) or a deploy renumbered the step
        // (found by review: `sim/tests/inbox_claims_and_pending_receipts.rs`).
        let hash = entry.input.get("hash").and_then(Value::as_str).map(payload_fingerprint);
        if let (Some(r), Some(target)) = (&record, entry.drain_target)
            && r.applied.iter().any(|a| {
                a.id == entry.id
                    && same_source(a, entry)
                    && a.generation == target.generation
                    && a.step == target.step
                    && hash == Some(payload_fingerprint(&a.hash))
            })
        {
            self.engine.store.settle(entry, InboxStatus::Draining, InboxStatus::Applied).await?;
            info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "unfinished drain: it had applied the input; settled");
            return Ok(false);
        }
        match (&record, pinned, step) {
            (Some(r), Some(workflow), Some(step)) if entry.generation == r.generation => {
                self.engine.drain(&workflow, &entry.key, r.generation, step, now).await?;
                info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "unfinished drain finished");
            }
            // Its generation has ended: applied before it did, or given back to expire.
            _ if twin(entry, record.as_deref(), step) == Some(Twin::Same) => {
                self.engine.store.settle(entry, InboxStatus::Draining, InboxStatus::Applied).await?;
            }
            _ => {
                self.engine.store.claim(entry, &InboxClaim::Undrain).await?;
            }
        }
        Ok(false)
    }
}

/// An input of the record's `applied` list with the entry's id, for the entry's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Twin {
    /// The same payload: this entry's input was applied.
    Same,
    /// Another payload under the same id: a conflict.
    Other,
}

/// Whether `record` has applied an input with `entry`'s id to the entry's step (`step`: its index
/// in the record's version). An entry of an earlier generation is matched by the index it was
/// buffered with, which its generation's version numbered, as it numbered the applied input's:
/// the record's version now may number the step otherwise (a drain whose settle failed, then a
/// restart on a new version; found by the simulation).
fn twin(entry: &InboxEntry, record: Option<&Record>, step: Option<u32>) -> Option<Twin> {
    let r = record?;
    let at = if entry.generation == r.generation { step } else { Some(entry.step) };
    let applied = r.applied.iter().find(|a| {
        a.id == entry.id && same_source(a, entry) && at == Some(a.step) && a.generation == entry.generation
    })?;
    let same = entry.input.get("hash").and_then(Value::as_str).map(payload_fingerprint)
        == Some(payload_fingerprint(&applied.hash));
    Some(if same { Twin::Same } else { Twin::Other })
}

/// Whether the applied input `a` came from where `entry`'s input did.
fn same_source(a: &AppliedInput, entry: &InboxEntry) -> bool {
    entry.source() == Some(a.source)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_owed_work_of_each_list_is_taken_in_turn() {
        // Given a crowd on the first list and one record on each of the others
        let lists = vec![vec![1, 2, 3, 4], vec![], vec![10], vec![20, 21]];
        // Then a sweep cut short after three records has served every list that owes work
        let order: Vec<i32> = super::in_turn(lists).collect();
        assert_eq!(order, [1, 10, 20, 2, 21, 3, 4]);
    }
}
