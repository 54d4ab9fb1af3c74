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
//! Each record is submitted as a `Tick`, so the lifecycle (not the sweeper) decides what is owed.

use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::domain::error::Classified;
use crate::domain::lifecycle::{AppliedInput, IgnoreReason, Input, Kind, Outcome, payload_fingerprint};
use crate::limits::{RESEND_RESUME_AFTER, RESTART_PENDING_AFTER};
use crate::use_cases::engine::{Definition, Engine, EngineError, LEDGER_RETENTION};

use crate::domain::lifecycle::Record;
use crate::ports::store::{Claim, Hold, InboxClaim, InboxEntry, InboxStatus, LedgerEntry};

/// How many items one run handles per kind; the next run takes the rest.
pub const BATCH: usize = 100;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Records whose owed work (start or resume) was carried out again.
    pub repaired: usize,
    /// Due records where nothing turned out to be owed.
    pub nothing_owed: usize,
    /// Buffered inputs expired and ledgered.
    pub expired: usize,
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
    pub async fn run_once(&self, now: OffsetDateTime) -> Result<SweepReport, EngineError> {
        let mut report = SweepReport::default();
        let mut first_error = None;
        let mut failed = |e: EngineError, what: &str| {
            warn!(error_type = e.error_type(), error = %crate::domain::error::error_chain(&e), "{what} failed; the next sweep retries it");
            first_error.get_or_insert(e);
        };
        // A waiting (or compensating) record is listed when its deadline passed a grace ago (Step Functions' own
        // timeout report is then overdue: nothing is owed, and it is counted so), or, at a
        // parallel group, when a branch's resume has been owed for the grace.
        let due = [
            (Kind::Pending, RESTART_PENDING_AFTER),
            (Kind::Advancing, RESEND_RESUME_AFTER),
            (Kind::Waiting, RESEND_RESUME_AFTER),
            // A compensation's owed resume, or its next attempt's task.
            (Kind::Compensating, RESEND_RESUME_AFTER),
        ];
        for (kind, after) in due {
            let records = match self.engine.store.due(kind, now - after, BATCH).await {
                Ok(records) => records,
                Err(e) => {
                    failed(e.into(), "listing due records");
                    continue;
                }
            };
            for record in records {
                // Decided on the record's own config version, which defines its workflow even
                // after a deploy removed it.
                let config = match self.engine.config_of(record.config_version.as_deref()).await {
                    Ok(config) => config,
                    Err(e) => {
                        failed(e.into(), "reading a due record's config version");
                        continue;
                    }
                };
                let Some(workflow) = config.workflow(record.workflow.as_str()) else {
                    warn!(workflow = %record.workflow, key = %record.key, config_version = %config.version,
                        "due record of a workflow its config version does not define");
                    continue;
                };
                match self.engine.submit(workflow, &record.key, &Input::Tick, now).await {
                    Ok(submitted) if submitted.outcome() == Outcome::Applied => report.repaired += 1,
                    Ok(_) => report.nothing_owed += 1,
                    Err(e) => failed(e, "repairing a due record"),
                }
            }
        }
        let expired = match self.engine.store.expired_buffers(now, BATCH).await {
            Ok(entries) => entries,
            Err(e) => {
                failed(e.into(), "listing expired buffers");
                Vec::new()
            }
        };
        // This sweep's hold on the expiries it takes (InboxClaim::Expire).
        let hold = Hold { by: (self.engine.write_ids)(), at: now };
        for entry in expired {
            match self.expire(&entry, &hold, now).await {
                Ok(true) => report.expired += 1,
                Ok(false) => {}
                Err(e) => failed(e, "expiring a buffered input"),
            }
        }
        if report != SweepReport::default() {
            info!(?report, "sweep done");
        }
        first_error.map_or(Ok(report), Err)
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
        // Taken over from a sweep that died holding it: if that sweep had ledgered it, only
        // the settle is left (read again now, the record might show its step waiting, and the
        // input would end both ledgered and applied). `entry` is the table's copy, read before
        // the claim: the index may still list it `buffered` long after the sweep that died took
        // it (found with the simulation's lagging index: `sim/tests/regressions.rs`). An entry
        // that was buffered when read is not taken by another sweep before this claim, as that
        // sweep's lease would outlast this one's run.
        let taken_over = if crate::mutants::active(crate::mutants::Mutation::TrustIndexStatus) {
            listed.status == InboxStatus::Expiring
        } else {
            entry.status == InboxStatus::Expiring
        };
        if taken_over {
            for reason in [IgnoreReason::BufferExpired, IgnoreReason::IdempotencyKeyReused] {
                if self.engine.store.ledgered(&entry.workflow, &entry.key, entry.id.as_str(), reason).await? {
                    self.engine.store.settle(entry, InboxStatus::Expiring, InboxStatus::Expired).await?;
                    return Ok(true);
                }
            }
        }
        let (record, pinned, step) = self.locate(entry).await?;
        // Its step waits in its generation: a drain is owed, or under way. Given back and
        // drained, never expired from under it (an input both applied and ledgered expired;
        // found by review).
        if let (Some(r), Some(workflow), Some(step)) = (&record, &pinned, step)
            && r.waits_at(step)
            && entry.generation.is_none_or(|g| g == r.generation)
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
        let reason = match twin(entry, record.as_ref(), step) {
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
            generation: entry.generation,
            state: None,
            detail: entry.input.clone(),
            config_version: entry.config_version.clone(),
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
    /// for good: what the expiry decides on, rather than the index's copy, `listed`. An entry
    /// kept by index (buffered before the inbox was kept by name) is not in its step's inbox
    /// by name: it is never drained, and the index's copy stands.
    async fn fresh(&self, listed: &InboxEntry) -> Result<Option<InboxEntry>, EngineError> {
        if listed.step_name.is_empty() {
            return Ok(Some(listed.clone()));
        }
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
    ) -> Result<(Option<Record>, Option<Definition>, Option<u32>), EngineError> {
        let record = self.engine.store.load(&entry.workflow, &entry.key).await?;
        let pinned = match &record {
            Some(r) => self.engine.definition(entry.workflow.as_str(), r.config_version.as_deref()).await?,
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
                    && a.generation.unwrap_or(r.generation) == target.generation
                    && a.step == Some(target.step)
                    && hash == Some(payload_fingerprint(&a.hash))
            })
        {
            self.engine.store.settle(entry, InboxStatus::Draining, InboxStatus::Applied).await?;
            info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "unfinished drain: it had applied the input; settled");
            return Ok(false);
        }
        match (&record, pinned, step) {
            (Some(r), Some(workflow), Some(step)) if entry.generation.is_none_or(|g| g == r.generation) => {
                self.engine.drain(&workflow, &entry.key, r.generation, step, now).await?;
                info!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, "unfinished drain finished");
            }
            // Its generation has ended: applied before it did, or given back to expire.
            _ if twin(entry, record.as_ref(), step) == Some(Twin::Same) => {
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
    let at = match entry.generation {
        Some(g) if g != r.generation => Some(entry.step),
        _ => step,
    };
    let applied = r.applied.iter().find(|a| {
        a.id == entry.id
            && same_source(a, entry)
            && at.is_some()
            && a.step == at
            && (entry.generation.is_none() || a.generation == entry.generation)
    })?;
    let same = entry.input.get("hash").and_then(Value::as_str).map(payload_fingerprint)
        == Some(payload_fingerprint(&applied.hash));
    Some(if same { Twin::Same } else { Twin::Other })
}

/// Whether the applied input `a` came from where `entry`'s input did (one applied before the
/// source was kept matches either).
fn same_source(a: &AppliedInput, entry: &InboxEntry) -> bool {
    a.source.is_none_or(|s| entry.source() == Some(s))
}
