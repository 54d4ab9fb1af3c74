//! Liveness: after the last fault and every deadline, everything has ended.

use baton_core::ports::orchestrator::ExecutionStatus;

use super::{Checker, Seen};
use crate::sqs::QueueId;

/// Every record ends (DESIGN §4.7): after the last fault and every deadline, each record is in
/// a terminal state.
pub(super) fn every_record_ends(c: &mut Checker<'_>, s: &Seen<'_>) {
    for r in &s.records {
        if s.cursed == Some(r.key.as_str()) {
            continue;
        }
        c.check("every_record_ends", r.state.is_terminal(), || {
            format!(
                "record {}/{} is still {} (generation {}) after every deadline",
                r.workflow, r.key, r.state, r.generation
            )
        });
    }
}

/// Every execution ends: after the last fault and every deadline, none is still running.
pub(super) fn every_execution_ends(c: &mut Checker<'_>, s: &Seen<'_>) {
    for e in s.model.executions.values() {
        if s.cursed.is_some_and(|k| e.arn.contains(&format!("-{k}-g"))) {
            continue;
        }
        c.check("every_execution_ends", e.status != ExecutionStatus::Running, || {
            format!("execution {} is still running after every deadline", e.arn)
        });
    }
}

/// Every queue drains: after the last fault and every deadline, the intake and progress
/// queues are empty.
pub(super) fn every_queue_drains(c: &mut Checker<'_>, s: &Seen<'_>) {
    for queue in [QueueId::Intake, QueueId::Progress] {
        let left = s.sqs.messages(queue).len();
        c.check("every_queue_drains", left == 0, || {
            format!("{left} message(s) still in the {queue:?} queue")
        });
    }
}
