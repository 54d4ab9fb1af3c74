//! The lifecycle: the record's phases, the wait as its unit, and the pure `decide` function.
//!
//! This module is the heart of baton. Every change to a workflow record is decided here, with no
//! I/O and no clock of its own (`now` is an argument), and carried out elsewhere as one
//! conditional write. Where a rule lives, by what it is about:
//!
//! | file | what it holds |
//! |---|---|
//! | `record.rs` | the record, its states, what it remembers |
//! | `wait.rs` | the wait: its status, its table, retry and attempts, owed resumes, deadlines |
//! | `table.rs` | the record's table of phases, and the writes that change only waits |
//! | `plan.rs` | what the config says, as far as deciding needs |
//! | `input.rs`, `effect.rs` | what can happen, how it is classified, and what it does |
//! | `position.rs` | a position's waits decided together: a step's one, a group's several |
//! | `start.rs`, `step_ready.rs`, `step_input.rs`, `reports.rs`, `marks.rs`, `tick.rs`, `cancel.rs` | one input kind each |
//! | `compensation.rs`, `stranded.rs` | the sagas' reverse chain; records whose execution is gone |
//!
//! The rules it keeps:
//!
//! 1. A transition happens only from an allowed prior state. [`TRANSITIONS`] (the record's
//!    phases) and [`WAIT_TRANSITIONS`] (every wait's) are that rule as data: [`decide`] asserts
//!    both, the store derives each write's condition from them, and the tests check every
//!    decision against them.
//! 2. Starting is idempotent: a start event already seen is a duplicate, whatever the state.
//! 3. One operator task per (workflow, key, generation, step, attempt): only the write that
//!    reaches a wait, or the sweeper's opening of its next attempt, owes its task.
//! 4. Each wait is decided at most once, and each position advances at most once; the resume
//!    a wait owes is re-sent only for the input that decided it, or by the sweeper.
//! 5. A terminal record never changes state, and its waits have all ended. A late input is
//!    ignored with a ledger reason; only a new start event may open a new generation, and only
//!    when the workflow's `on_restart` says so.
//! 6. Every input is classified ([`Outcome`]): applied, buffered, a duplicate, ignored with a
//!    reason, or rejected with a reason. Nothing is dropped without a name.
//!
//! ```text
//!            start            step_ready(0)         position decided       step_ready(next)
//!  (absent) ───────► pending ──────────────► waiting{0} ──────────► advancing{0} ──────────► waiting{n} …
//!                      │                      (its waits change:                │
//!                      │                       wait.rs's table)                 │ report succeeded (last)
//!                      ▼                                                        ▼
//!            failed | timed_out | cancelled | compensating ◄──────────  succeeded | degraded
//!                      │ start event, on_restart = after_terminal
//!                      └─────────────────────► pending (generation + 1)
//! ```

/// The error name of the state machine's final `Fail` state after a step missed its deadline
/// (`asl.rs` writes it; a report carries it back).
pub const TIMED_OUT_ERROR: &str = "baton.StepTimedOut";
/// The error name of the state machine's final `Fail` state after a step failed.
pub const FAILED_ERROR: &str = "baton.StepFailed";
/// The error a timer step fails with when it cannot wait: its `until` could not be read from the
/// start event, or lies past its timeout. Its cause says which, and why.
pub const TIMER_ERROR: &str = "baton.TimerInvalid";

mod cancel;
pub mod compensation;
mod effect;
mod input;
mod marks;
mod plan;
mod position;
mod record;
mod reports;
mod start;
mod step_input;
mod step_ready;
mod stranded;
mod table;
mod tick;
mod wait;

pub use compensation::{
    CANCELLED_ERROR, COMPENSATING_ERROR, Compensation, SkipReason, Trigger, Undo, plan as compensation_plan,
};
pub use effect::{Decision, Effect, Mark, Write};
pub use input::{Finish, IgnoreReason, Input, Outcome, RejectReason, Source, StepOutcome};
pub use plan::{Notice, OnRestart, Plan, Remind, Requires, Retry, Span, StepPlan, Timer};
pub use position::group_failed;
pub use record::{
    AppliedInput, AuditEntry, Kind, MAX_FAILURE_CAUSE_CHARS, MAX_FAILURE_ERROR_CHARS, MAX_STEP_INPUT_BYTES,
    REMEMBERED_INPUTS, REMEMBERED_START_EVENTS, REMEMBERED_TRANSITIONS, Record, State, Until,
    failure_text_fits, payload_fingerprint,
};
pub use reports::unsettled;
pub use stranded::{NOT_FOUND, RUNNING, ended_as, execution_gone};
pub use table::{
    Cause, StepMove, TRANSITIONS, Transition, WAIT_WRITES, WaitWrite, allowed_prior, is_allowed,
};
pub use tick::task_not_out;
pub use wait::{
    FailedAttempt, MAX_ATTEMPT_CAUSE_CHARS, Resume, Role, WAIT_TRANSITIONS, Wait, WaitCause, WaitId,
    WaitKind, WaitOutcome, WaitStatus, running_attempt,
};

use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};

use crate::domain::ids::{CorrelationKey, WorkflowName};

/// [`crate::limits::RESEND_RESUME_AFTER`], unless the simulation's deliberate bug takes the
/// grace away.
fn resend_after() -> Duration {
    if crate::mutants::active(crate::mutants::Mutation::NoResendGrace) {
        Duration::ZERO
    } else {
        crate::limits::RESEND_RESUME_AFTER
    }
}

/// Decides what an input does to a record. Pure: same arguments, same decision.
///
/// `record` is `None` when no record exists yet for (workflow, key). `workflow` and `key` name
/// the record to create on a start.
pub fn decide(
    plan: &Plan,
    (workflow, key): (&WorkflowName, &CorrelationKey),
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Decision {
    let mut decision = route(plan, (workflow, key), record, input, now);
    if let (Some(write), Some(id)) = (decision.write.as_mut(), input.id())
        && let Some(entry) = write.to.history.last_mut()
    {
        entry.cause_id = Some(id.shared());
    }
    if let Some(write) = decision.write.as_ref().filter(|_| crate::CHECKED) {
        assert!(
            write.follows(record) && (&write.to.workflow, &write.to.key) == (workflow, key),
            "decide chose a write the tables do not allow from the record read: {:?} -> {} by {:?}, version {:?} -> {}\nwaits before: {:?}\nwaits after: {:?}",
            write.from,
            write.to.state,
            write.cause,
            write.expected_version,
            write.to.version,
            record.map(|r| (&r.waits, r.compensation.as_ref().map(|c| &c.undos))),
            (&write.to.waits, write.to.compensation.as_ref().map(|c| &c.undos)),
        );
        assert!(
            !write.to.state.is_terminal()
                || write.to.waits.iter().all(|w| matches!(w.status, WaitStatus::Ended { .. })),
            "a terminal record with a wait not ended: {:?}",
            write.to.waits
        );
    }
    decision
}

/// The input, to the rules that own it: a stranded record's and the strands; a compensating
/// record's and the compensation's; then each input kind's.
fn route(
    plan: &Plan,
    (workflow, key): (&WorkflowName, &CorrelationKey),
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Decision {
    if let Some(d) = stranded::route(plan, record, input, now) {
        return d;
    }
    if let Some(d) = compensation::route(plan, record, input, now) {
        return d;
    }
    let Some(r) = record else { return without_record(plan, (workflow, key), input, now) };
    match input {
        Input::Start { event, untils } => {
            start::on_start(plan, (workflow, key), Some(r), (event, untils), now)
        }
        // With nothing completed to undo, `cancel --compensate` is a plain cancel.
        Input::CancelCompensate { reason } | Input::Cancel { reason } => cancel::on_cancel(r, reason, now),
        Input::StepReady { generation, step, token, deadline } => {
            step_ready::on_step_ready(plan, r, (*generation, *step), token, *deadline, now)
        }
        Input::StepInput { .. } => step_input::on_step_input(plan, r, input, now),
        Input::Finished { generation, finish } => reports::on_finished(plan, r, *generation, finish, now),
        Input::BranchEnded { generation, step, error } => {
            reports::on_branch_ended(plan, r, (*generation, *step), error.as_deref(), now)
        }
        Input::Resumed { wait, token, delivered } => marks::on_resumed(r, (*wait, token), *delivered, now),
        Input::AttemptOpened { wait, attempt } => marks::on_attempt_opened(r, *wait, *attempt, now),
        Input::Tick => tick::on_tick(plan, r, now),
        // Decided by `compensation::route` and `stranded::route`.
        Input::UndoReady { .. } | Input::UndoInput { .. } => Decision::ignored(IgnoreReason::OutOfOrder),
        Input::ExecutionGone { .. } | Input::End { .. } => Decision::nothing_owed(),
    }
}

/// An input for a (workflow, key) that has no record yet.
fn without_record(
    plan: &Plan,
    names: (&WorkflowName, &CorrelationKey),
    input: &Input,
    now: OffsetDateTime,
) -> Decision {
    match input {
        Input::Start { event, untils } => start::on_start(plan, names, None, (event, untils), now),
        Input::StepReady { token, .. } => Decision::ignored(IgnoreReason::OutOfOrder).effect(Effect::fail(
            token,
            "baton.NoRecord",
            "no workflow record for this execution",
        )),
        // (A timer takes no input, before its record exists as after: found by an attack test.)
        Input::StepInput { step, .. } if !plan.has(*step) || plan.timer_of(*step).is_some() => {
            Decision::new(Outcome::Rejected(RejectReason::UnknownStep))
        }
        // Buffered for the generation it names, or the first.
        Input::StepInput { step, generation, .. } => Decision::new(Outcome::Buffered)
            .effect(Effect::Buffer { generation: generation.unwrap_or(1), step: *step }),
        Input::Resumed { .. } | Input::AttemptOpened { .. } | Input::Tick => Decision::nothing_owed(),
        Input::ExecutionGone { .. } | Input::End { .. } => Decision::nothing_owed(),
        _ => Decision::ignored(IgnoreReason::OutOfOrder),
    }
}

/// Do the step's inputs meet its `requires` rule (all, any or N of its list)?
pub fn requirements_met(plan: &Plan, step: u32, inputs: &Map<String, Value>) -> bool {
    plan.step(step).is_some_and(|s| s.requires.met(inputs))
}

#[cfg(test)]
mod tests;
