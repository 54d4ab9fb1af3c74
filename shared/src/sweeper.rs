//! The sweeper: on a schedule, it finishes what a crash left owed.
//!
//! - A record still `pending` after [`RESTART_PENDING_AFTER`]: its execution may never have
//!   started (a crash between the record write and StartExecution). Starting again is safe: the
//!   execution name is deterministic.
//! - A record still `advancing` after [`RESEND_RESUME_AFTER`]: the resume may never have reached
//!   Step Functions (a crash between the `advancing` write and SendTaskSuccess). Sending again is
//!   safe: either it is the first delivery, or the token is gone and that is classified.
//! - A buffered input past its expiry: its step never waited in time. It is settled `expired`
//!   and ledgered as `buffer_expired`, so it is not lost silently.
//!
//! Each record is submitted as a `Tick`, so the lifecycle (not the sweeper) decides what is owed.

use std::sync::Arc;

use time::OffsetDateTime;
use tracing::{info, warn};

use crate::engine::{Engine, EngineError, LEDGER_RETENTION};
use crate::lifecycle::{IgnoreReason, Input, Kind, Outcome, RESEND_RESUME_AFTER, RESTART_PENDING_AFTER};
use crate::store::{Claim, InboxStatus, LedgerEntry};

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

    /// One sweep at time `now`.
    pub async fn run_once(&self, now: OffsetDateTime) -> Result<SweepReport, EngineError> {
        let mut report = SweepReport::default();
        let due = [(Kind::Pending, RESTART_PENDING_AFTER), (Kind::Advancing, RESEND_RESUME_AFTER)];
        for (kind, after) in due {
            for record in self.engine.store.due(kind, now - after, BATCH).await? {
                let Some(workflow) = self.engine.config.workflow(record.workflow.as_str()) else {
                    warn!(workflow = %record.workflow, key = %record.key, "due record of a workflow the config no longer defines");
                    continue;
                };
                let submitted = self.engine.submit(workflow, &record.key, &Input::Tick, now).await?;
                match submitted.outcome() {
                    Outcome::Applied => report.repaired += 1,
                    _ => report.nothing_owed += 1,
                }
            }
        }
        for entry in self.engine.store.expired_buffers(now, BATCH).await? {
            if let Claim::Acquired = self.engine.store.settle(&entry, InboxStatus::Expired).await? {
                let ledger = LedgerEntry {
                    workflow: entry.workflow.clone(),
                    key: entry.key.clone(),
                    input_id: entry.id.to_string(),
                    reason: IgnoreReason::BufferExpired,
                    generation: None,
                    state: None,
                    detail: entry.input.clone(),
                    at: now,
                    expires_at: now + LEDGER_RETENTION,
                };
                self.engine.store.put_ledger(&ledger).await?;
                warn!(workflow = %entry.workflow, key = %entry.key, input = %entry.id, step = entry.step,
                    "buffered input expired before its step waited; ledgered as buffer_expired");
                report.expired += 1;
            }
        }
        if report != SweepReport::default() {
            info!(?report, "sweep done");
        }
        Ok(report)
    }
}
