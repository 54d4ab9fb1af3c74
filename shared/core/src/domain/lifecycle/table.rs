//! The two tables every write of a record is held to.
//!
//! - [`TRANSITIONS`]: the record's phases. A write that moves the record from one state to
//!   another (a step reached, a position decided, a report, a cancel, compensation, stranding)
//!   is one of its rows.
//! - [`WAIT_WRITES`]: the writes that change only waits, with the record states they may happen
//!   in and the changes of [`super::wait::WAIT_TRANSITIONS`] they stand for. None is a row of the
//!   record's table: a write that leaves the record's state alone says, wait by wait, what it did.
//!
//! `decide` asserts both on every write it chooses (`Write::follows`), and the store derives each
//! write's condition from them ([`allowed_prior`]).

use serde::{Deserialize, Serialize};

use super::record::{Kind, State};
use super::wait::WaitCause;

/// Why a write happens. Each row of [`TRANSITIONS`] and [`WAIT_WRITES`] names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A start event creates the record.
    Start,
    /// A start event after a terminal state opens the next generation.
    Restart,
    /// Step Functions reached a step (or a group's first branch) and handed over its token; or
    /// reported the wait it is at again with a newer one.
    StepReady,
    /// An input supplied part of a wait's required data, or was a heartbeat.
    Merge,
    /// The position is decided: every wait succeeded (or an optional one did not).
    Complete,
    /// The position failed: a required wait failed.
    FailStep,
    /// The execution reported that it finished successfully.
    ReportSucceeded,
    /// The execution reported a failure.
    ReportFailed,
    /// The execution reported that a step missed its deadline.
    ReportTimedOut,
    /// An operator cancelled the workflow.
    Cancel,
    /// Step Functions reached another branch of the parallel group the record waits at.
    BranchReady,
    /// A branch got its outcome while other branches of its group still wait, or its own report
    /// settled it.
    BranchDone,
    /// A branch's resume went out while its group still waits.
    BranchResumed,
    /// A failed attempt with attempts left: the next one is due after its backoff.
    AttemptFailed,
    /// The next attempt's task was published.
    AttemptOpened,
    /// Compensation began: the forward run failed, timed out, or was cancelled with
    /// `--compensate`. The plan is fixed by this write.
    Compensate,
    /// A compensation's wait was reached, acknowledged, failed an attempt, or had its resume
    /// delivered.
    Undo,
    /// Step Functions passed the last compensation: the outcome is decided.
    CompensationEnded,
    /// The sweeper (or an operator) found the record's execution ended without its report.
    ExecutionGone,
    /// An operator ended a stranded record as its execution ended (`baton end`).
    End,
    /// A decided position's resume went out and found its token gone: nothing is owed to it
    /// any more.
    StepResumed,
    /// The sweeper claimed the notices of a waiting step whose time has come (reminders of its
    /// task, escalation levels), before publishing them.
    Notified,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Start => "start",
            Cause::Restart => "restart",
            Cause::StepReady => "step_ready",
            Cause::Merge => "merge",
            Cause::Complete => "complete",
            Cause::FailStep => "fail_step",
            Cause::ReportSucceeded => "report_succeeded",
            Cause::ReportFailed => "report_failed",
            Cause::ReportTimedOut => "report_timed_out",
            Cause::Cancel => "cancel",
            Cause::BranchReady => "branch_ready",
            Cause::BranchDone => "branch_done",
            Cause::BranchResumed => "branch_resumed",
            Cause::AttemptFailed => "attempt_failed",
            Cause::AttemptOpened => "attempt_opened",
            Cause::Compensate => "compensate",
            Cause::Undo => "undo",
            Cause::CompensationEnded => "compensation_ended",
            Cause::ExecutionGone => "execution_gone",
            Cause::End => "end",
            Cause::StepResumed => "step_resumed",
            Cause::Notified => "notified",
        }
    }
}

/// How the step index may change across a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepMove {
    /// Neither side has a step.
    None,
    /// Into the first step (index 0).
    First,
    /// The same step on both sides.
    Same,
    /// From step n to the first step of a later position.
    Next,
    /// Out of a step into a state without one.
    Leave,
    /// Into a state without a step, from one with or without.
    Drop,
}

/// One allowed transition. `from: None` means the record does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: Option<Kind>,
    pub to: Kind,
    pub cause: Cause,
    pub step: StepMove,
}

const fn t(from: Option<Kind>, to: Kind, cause: Cause, step: StepMove) -> Transition {
    Transition { from, to, cause, step }
}

use Kind::{
    Advancing as A, Cancelled as C, Compensated as CD, Compensating as K, CompensationFailed as CF,
    Degraded as D, Failed as F, Pending as P, Stranded as X, Succeeded as S, TimedOut as T, Waiting as W,
};

/// Every phase change baton may make. Anything else is refused by `decide`, by the store's
/// conditions (derived from this table) and by the property tests.
pub const TRANSITIONS: &[Transition] = &[
    t(None, P, Cause::Start, StepMove::None),
    t(Some(S), P, Cause::Restart, StepMove::None),
    t(Some(D), P, Cause::Restart, StepMove::None),
    t(Some(F), P, Cause::Restart, StepMove::None),
    t(Some(T), P, Cause::Restart, StepMove::None),
    t(Some(C), P, Cause::Restart, StepMove::None),
    t(Some(CD), P, Cause::Restart, StepMove::None),
    t(Some(CF), P, Cause::Restart, StepMove::None),
    // A position's first report opens it.
    t(Some(P), W, Cause::StepReady, StepMove::First),
    t(Some(A), W, Cause::StepReady, StepMove::Next),
    // Step Functions left a parallel group whose optional branch ended without baton, before
    // that branch's own report arrived: the next position opens.
    t(Some(W), W, Cause::StepReady, StepMove::Next),
    // The position is decided: every wait has an outcome, or a required one failed.
    t(Some(W), A, Cause::Complete, StepMove::Same),
    t(Some(W), A, Cause::FailStep, StepMove::Same),
    // Only a decided last position may report success: Step Functions reaches its final report
    // only after baton's resumes.
    t(Some(A), S, Cause::ReportSucceeded, StepMove::Leave),
    t(Some(A), D, Cause::ReportSucceeded, StepMove::Leave),
    // A last parallel group that Step Functions left before an optional branch's report came.
    t(Some(W), S, Cause::ReportSucceeded, StepMove::Leave),
    t(Some(W), D, Cause::ReportSucceeded, StepMove::Leave),
    // A failure or timeout can outrun baton's view: the step_ready message may still be queued
    // (pending), the step may be waiting, or the resume may be owed when the deadline fires.
    t(Some(P), F, Cause::ReportFailed, StepMove::None),
    t(Some(W), F, Cause::ReportFailed, StepMove::Leave),
    t(Some(A), F, Cause::ReportFailed, StepMove::Leave),
    t(Some(P), T, Cause::ReportTimedOut, StepMove::None),
    t(Some(W), T, Cause::ReportTimedOut, StepMove::Leave),
    t(Some(A), T, Cause::ReportTimedOut, StepMove::Leave),
    t(Some(P), C, Cause::Cancel, StepMove::None),
    t(Some(W), C, Cause::Cancel, StepMove::Leave),
    t(Some(A), C, Cause::Cancel, StepMove::Leave),
    // Compensation begins where the forward run stood: its first compensation's wait reached
    // (or the execution's end, should every wait's report be lost), or `cancel --compensate`.
    t(Some(P), K, Cause::Compensate, StepMove::None),
    t(Some(W), K, Cause::Compensate, StepMove::Leave),
    t(Some(A), K, Cause::Compensate, StepMove::Leave),
    // The outcome: every compensation acknowledged, or one not; with nothing to undo, how the
    // forward run ended.
    t(Some(K), CD, Cause::CompensationEnded, StepMove::None),
    t(Some(K), CF, Cause::CompensationEnded, StepMove::None),
    t(Some(K), F, Cause::CompensationEnded, StepMove::None),
    t(Some(K), T, Cause::CompensationEnded, StepMove::None),
    t(Some(K), C, Cause::CompensationEnded, StepMove::None),
    // Every wait's report was lost: the end report begins and ends compensation in one write.
    t(Some(P), CF, Cause::CompensationEnded, StepMove::None),
    t(Some(P), F, Cause::CompensationEnded, StepMove::None),
    t(Some(P), T, Cause::CompensationEnded, StepMove::None),
    t(Some(W), CF, Cause::CompensationEnded, StepMove::Leave),
    t(Some(W), F, Cause::CompensationEnded, StepMove::Leave),
    t(Some(W), T, Cause::CompensationEnded, StepMove::Leave),
    t(Some(A), CF, Cause::CompensationEnded, StepMove::Leave),
    t(Some(A), F, Cause::CompensationEnded, StepMove::Leave),
    t(Some(A), T, Cause::CompensationEnded, StepMove::Leave),
    // The same, for a run a step's failure named `baton.Cancelled` ended.
    t(Some(P), C, Cause::CompensationEnded, StepMove::None),
    t(Some(W), C, Cause::CompensationEnded, StepMove::Leave),
    t(Some(A), C, Cause::CompensationEnded, StepMove::Leave),
    // The execution ended without its report: the record is stranded, from any live state
    // (lifecycle/stranded.rs); and an operator ends it as its execution ended.
    t(Some(P), X, Cause::ExecutionGone, StepMove::None),
    t(Some(W), X, Cause::ExecutionGone, StepMove::Same),
    t(Some(A), X, Cause::ExecutionGone, StepMove::Same),
    t(Some(K), X, Cause::ExecutionGone, StepMove::None),
    t(Some(X), S, Cause::End, StepMove::Drop),
    t(Some(X), D, Cause::End, StepMove::Drop),
    t(Some(X), F, Cause::End, StepMove::Drop),
    t(Some(X), T, Cause::End, StepMove::Drop),
    t(Some(X), C, Cause::End, StepMove::Drop),
    t(Some(X), CD, Cause::End, StepMove::Drop),
    t(Some(X), CF, Cause::End, StepMove::Drop),
];

/// A write that changes only waits: its cause, the record states it may happen in (which it
/// leaves as they are), and the changes of the wait's table it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitWrite {
    pub cause: Cause,
    pub states: &'static [Kind],
    pub changes: &'static [WaitCause],
}

const fn w(cause: Cause, states: &'static [Kind], changes: &'static [WaitCause]) -> WaitWrite {
    WaitWrite { cause, states, changes }
}

/// Every write that changes waits and not the record's state.
pub const WAIT_WRITES: &[WaitWrite] = &[
    // The wait the record is at, reported again with a newer token (its send was retried).
    w(Cause::StepReady, &[W, A], &[WaitCause::Repark]),
    w(Cause::BranchReady, &[W], &[WaitCause::Reach, WaitCause::Repark]),
    w(Cause::BranchReady, &[A], &[WaitCause::Repark]),
    w(Cause::Merge, &[W], &[WaitCause::Merge]),
    w(Cause::Notified, &[W], &[WaitCause::Notify]),
    w(Cause::AttemptFailed, &[W], &[WaitCause::AttemptFailed]),
    w(Cause::AttemptOpened, &[W], &[WaitCause::AttemptOpened]),
    // A branch decided while its siblings wait; an optional branch's report settling it (after
    // the group was decided too: a timeout that overtook the success baton owed it).
    // (A timer branch's wake, which `baton validate` refuses, decides it as well: found by an
    // attack test.)
    w(Cause::BranchDone, &[W, A], &[WaitCause::Decide, WaitCause::Report, WaitCause::Wake]),
    w(Cause::BranchResumed, &[W], &[WaitCause::Resumed]),
    w(Cause::StepResumed, &[A], &[WaitCause::Resumed]),
    w(
        Cause::Undo,
        &[K],
        &[
            WaitCause::Reach,
            WaitCause::Repark,
            WaitCause::AttemptFailed,
            WaitCause::AttemptOpened,
            WaitCause::Decide,
            WaitCause::Resumed,
            WaitCause::Close,
        ],
    ),
];

/// The wait write of `cause` in `state`, if there is one.
pub fn wait_write(state: Kind, cause: Cause) -> Option<&'static WaitWrite> {
    WAIT_WRITES.iter().find(|w| w.cause == cause && w.states.contains(&state))
}

/// Is `from → to` by `cause` a row of [`TRANSITIONS`] (steps included), or, the state left as
/// it was, a write of [`WAIT_WRITES`]?
pub fn is_allowed(from: Option<State>, to: State, cause: Cause) -> bool {
    if from == Some(to) && wait_write(to.kind(), cause).is_some() {
        return true;
    }
    TRANSITIONS.iter().any(|row| {
        row.cause == cause
            && row.from == from.map(State::kind)
            && row.to == to.kind()
            && match row.step {
                StepMove::None => from.and_then(State::step).is_none() && to.step().is_none(),
                StepMove::First => to.step() == Some(0),
                StepMove::Same => {
                    from.and_then(State::step).is_some() && from.and_then(State::step) == to.step()
                }
                StepMove::Next => {
                    matches!((from.and_then(State::step), to.step()), (Some(a), Some(b)) if a < b)
                }
                StepMove::Leave => from.and_then(State::step).is_some() && to.step().is_none(),
                StepMove::Drop => to.step().is_none(),
            }
    })
}

/// The prior states from which `cause` may lead to `to`: the state half of a write's condition.
/// `None` in the list means "the record may be absent".
pub fn allowed_prior(to: Kind, cause: Cause) -> Vec<Option<Kind>> {
    let phases = TRANSITIONS.iter().filter(|row| row.to == to && row.cause == cause).map(|row| row.from);
    let waits = wait_write(to, cause).map(|_| Some(to));
    let mut prior: Vec<Option<Kind>> = phases.chain(waits).collect();
    prior.dedup();
    prior
}
