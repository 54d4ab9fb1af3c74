//! The lifecycle: states, the table of allowed transitions, and the pure `decide` function.
//!
//! This module is the heart of baton. Every change to a workflow record is decided here, with no
//! I/O and no clock of its own (`now` is an argument), and carried out elsewhere as one
//! conditional write. The rules it keeps (DESIGN.md §4):
//!
//! 1. A transition happens only from an allowed prior state. [`TRANSITIONS`] is that rule as
//!    data: [`decide`] consults it, the store derives each write's condition from it, and the
//!    tests check every decision against it.
//! 2. Starting is idempotent: a start event already seen is a duplicate, whatever the state.
//! 3. One operator task per (workflow, key, generation, step): only the write that moves the
//!    record into `waiting{step}` owes [`Effect::CreateTask`].
//! 4. Each step advances at most once: `waiting{n} → advancing{n}` is allowed once per
//!    generation, and the resume it owes is re-sent only for the input that caused it.
//! 5. A terminal record never changes state. A late input is ignored with a ledger reason; only a
//!    new start event may open a new generation, and only when the workflow's `on_restart` says so.
//! 6. Every input is classified ([`Outcome`]): applied, buffered, a duplicate, ignored with a
//!    reason, or rejected with a reason. Nothing is dropped without a name.
//!
//! ```text
//!            start            step_ready(0)         input complete         step_ready(n+1)
//!  (absent) ───────► pending ──────────────► waiting{0} ──────────► advancing{0} ──────────► waiting{1} …
//!                      │                      │   ▲ merge (partial inputs)    │
//!                      │                      └───┘                           │ report succeeded (last step)
//!                      ▼                                                      ▼
//!            failed | timed_out | cancelled  ◄──────────────────────────  succeeded
//!                      │ start event, on_restart = after_terminal
//!                      └─────────────────────► pending (generation + 1)
//! ```

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};

use crate::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};

/// How many start-event ids a record remembers, across generations, to recognise redelivery.
pub const REMEMBERED_START_EVENTS: usize = 16;
use crate::limits::{RESEND_RESUME_AFTER, RESTART_PENDING_AFTER};

/// [`RESEND_RESUME_AFTER`], unless the simulation's deliberate bug takes the grace away.
fn resend_after() -> Duration {
    if crate::mutants::active(crate::mutants::Mutation::NoResendGrace) {
        Duration::ZERO
    } else {
        RESEND_RESUME_AFTER
    }
}

/// A state without its data: what the transition table and DynamoDB conditions talk about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Pending,
    Waiting,
    Advancing,
    Succeeded,
    /// Finished, with at least one optional parallel branch that did not succeed.
    Degraded,
    Failed,
    TimedOut,
    Cancelled,
    /// The forward run ended (failed, timed out, or cancelled with `--compensate`) and the
    /// completed steps' compensations run, in reverse.
    Compensating,
    /// Every planned compensation was acknowledged.
    Compensated,
    /// A compensation failed on its last attempt or timed out: some steps stay undone.
    CompensationFailed,
    /// Its execution ended without the report baton waits for (stopped outside baton, or its
    /// report lost): nothing will move the record again, and a person ends it (`baton end`).
    Stranded,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Pending,
        Kind::Waiting,
        Kind::Advancing,
        Kind::Succeeded,
        Kind::Degraded,
        Kind::Failed,
        Kind::TimedOut,
        Kind::Cancelled,
        Kind::Compensating,
        Kind::Compensated,
        Kind::CompensationFailed,
        Kind::Stranded,
    ];
    pub const TERMINAL: [Kind; 7] = [
        Kind::Succeeded,
        Kind::Degraded,
        Kind::Failed,
        Kind::TimedOut,
        Kind::Cancelled,
        Kind::Compensated,
        Kind::CompensationFailed,
    ];

    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Whether a record in this state may owe the sweeper work ([`Record::owes_work`]).
    pub fn may_owe_work(self) -> bool {
        matches!(self, Kind::Pending | Kind::Advancing | Kind::Waiting | Kind::Compensating)
    }

    /// The stable name stored in DynamoDB and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pending => "pending",
            Kind::Waiting => "waiting",
            Kind::Advancing => "advancing",
            Kind::Succeeded => "succeeded",
            Kind::Degraded => "degraded",
            Kind::Failed => "failed",
            Kind::TimedOut => "timed_out",
            Kind::Cancelled => "cancelled",
            Kind::Compensating => "compensating",
            Kind::Compensated => "compensated",
            Kind::CompensationFailed => "compensation_failed",
            Kind::Stranded => "stranded",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record's state. `step` is the zero-based index of the step in the workflow's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Pending,
    /// The execution is parked on the step's task token; inputs are being gathered.
    Waiting {
        step: u32,
    },
    /// The step is complete; the resume (success or failure) to Step Functions is owed.
    Advancing {
        step: u32,
    },
    Succeeded,
    Degraded,
    Failed,
    TimedOut,
    Cancelled,
    /// The compensations of [`Record::compensation`] run.
    Compensating,
    Compensated,
    CompensationFailed,
    /// Its execution is gone without its report: a person ends it. `at` is the step it was at
    /// (waiting or advancing), kept for the plan of what stays undone.
    Stranded {
        at: Option<u32>,
    },
}

impl State {
    pub fn kind(self) -> Kind {
        match self {
            State::Pending => Kind::Pending,
            State::Waiting { .. } => Kind::Waiting,
            State::Advancing { .. } => Kind::Advancing,
            State::Succeeded => Kind::Succeeded,
            State::Degraded => Kind::Degraded,
            State::Failed => Kind::Failed,
            State::TimedOut => Kind::TimedOut,
            State::Cancelled => Kind::Cancelled,
            State::Compensating => Kind::Compensating,
            State::Compensated => Kind::Compensated,
            State::CompensationFailed => Kind::CompensationFailed,
            State::Stranded { .. } => Kind::Stranded,
        }
    }

    pub fn step(self) -> Option<u32> {
        match self {
            State::Waiting { step } | State::Advancing { step } => Some(step),
            State::Stranded { at } => at,
            _ => None,
        }
    }

    pub fn is_terminal(self) -> bool {
        self.kind().is_terminal()
    }

    /// Rebuilds a state from its stored parts. `None` when a step is missing or superfluous.
    pub fn from_parts(kind: Kind, step: Option<u32>) -> Option<State> {
        match (kind, step) {
            (Kind::Waiting, Some(step)) => Some(State::Waiting { step }),
            (Kind::Advancing, Some(step)) => Some(State::Advancing { step }),
            (Kind::Pending, None) => Some(State::Pending),
            (Kind::Succeeded, None) => Some(State::Succeeded),
            (Kind::Degraded, None) => Some(State::Degraded),
            (Kind::Failed, None) => Some(State::Failed),
            (Kind::TimedOut, None) => Some(State::TimedOut),
            (Kind::Cancelled, None) => Some(State::Cancelled),
            (Kind::Compensating, None) => Some(State::Compensating),
            (Kind::Compensated, None) => Some(State::Compensated),
            (Kind::CompensationFailed, None) => Some(State::CompensationFailed),
            (Kind::Stranded, at) => Some(State::Stranded { at }),
            _ => None,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Waiting { step } | State::Advancing { step } => {
                write!(f, "{}{{{step}}}", self.kind())
            }
            other => f.write_str(other.kind().as_str()),
        }
    }
}

/// Why a transition happens. Each row of [`TRANSITIONS`] names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A start event creates the record.
    Start,
    /// A start event after a terminal state opens the next generation.
    Restart,
    /// Step Functions reached a step and handed over its task token.
    StepReady,
    /// An input supplied part of the step's required data, or was a heartbeat.
    Merge,
    /// An input completed the step's required data: a success resume is owed.
    Complete,
    /// An input failed the step: a failure resume is owed.
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
    /// A branch got its outcome while other branches of its group still wait.
    BranchDone,
    /// A branch's resume reached Step Functions while its group still waits: no longer owed.
    BranchResumed,
    /// A failed attempt of a step with attempts left: the next one is due after its backoff.
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
    /// A step's resume found its token gone: nothing is owed to it any more.
    StepResumed,
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
    /// From step n to the first step of the next position: n + 1, or past the branches of the
    /// group that starts at n.
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

/// Every transition baton may make. Anything else is refused by `decide`, by the store's
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
    t(Some(P), W, Cause::StepReady, StepMove::First),
    t(Some(A), W, Cause::StepReady, StepMove::Next),
    // Step Functions left a parallel group whose optional branch ended without baton, before
    // that branch's own report arrived.
    t(Some(W), W, Cause::StepReady, StepMove::Next),
    // The wait the record is at reported again with a new token: its send was retried.
    t(Some(W), W, Cause::StepReady, StepMove::Same),
    t(Some(A), A, Cause::StepReady, StepMove::Same),
    t(Some(W), W, Cause::Merge, StepMove::Same),
    t(Some(W), A, Cause::Complete, StepMove::Same),
    t(Some(W), A, Cause::FailStep, StepMove::Same),
    // A parallel group waits at its first branch's index while any branch is open; it advances
    // (at the same index) once every branch has an outcome, or a required one failed.
    t(Some(W), W, Cause::BranchReady, StepMove::Same),
    t(Some(W), W, Cause::BranchDone, StepMove::Same),
    // An optional branch that timed out after baton owed it a success (the resume lost the race).
    t(Some(A), A, Cause::BranchDone, StepMove::Same),
    t(Some(W), W, Cause::BranchResumed, StepMove::Same),
    t(Some(A), A, Cause::StepResumed, StepMove::Same),
    t(Some(W), W, Cause::AttemptFailed, StepMove::Same),
    t(Some(W), W, Cause::AttemptOpened, StepMove::Same),
    // Only a completed last step may report success: Step Functions reaches its final report
    // only after baton's resume of that step.
    t(Some(A), S, Cause::ReportSucceeded, StepMove::Leave),
    // The same, after an optional branch did not succeed.
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
    t(Some(K), K, Cause::Undo, StepMove::None),
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

/// Is `from → to` by `cause` a row of [`TRANSITIONS`], steps included?
pub fn is_allowed(from: Option<State>, to: State, cause: Cause) -> bool {
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
    TRANSITIONS.iter().filter(|row| row.to == to && row.cause == cause).map(|row| row.from).collect()
}

/// What the workflow's config says, as far as `decide` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Per step (and parallel branch), in order: the inputs that must all be present before the
    /// step advances.
    pub steps: Vec<Vec<String>>,
    /// The parallel groups, by the steps they span (empty: a straight line of steps).
    pub groups: Vec<Span>,
    /// The steps that are optional branches.
    pub optional: Vec<u32>,
    /// The steps with a bounded retry.
    pub retries: Vec<StepRetry>,
    /// The steps that declare `compensate`.
    pub compensations: Vec<StepCompensation>,
    pub on_restart: OnRestart,
    /// The config version a new generation starts on (`None` in tests that need none).
    pub version: Option<String>,
}

/// A step's bounded retry, with the step's timeout (which caps each wait between attempts) and
/// heartbeat: Step Functions hears no worker while baton waits between attempts, so baton itself
/// beats when an attempt fails and when the next one's task goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRetry {
    pub step: u32,
    pub retry: crate::domain::config::Retry,
    pub timeout: std::time::Duration,
    pub heartbeat: Option<std::time::Duration>,
}

/// A step's compensation, as far as `decide` needs it: how many times its task may go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCompensation {
    pub step: u32,
    pub attempts: u32,
}

/// The steps one parallel group spans: its branches, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub first: u32,
    pub last: u32,
}

impl Span {
    pub fn contains(self, step: u32) -> bool {
        (self.first..=self.last).contains(&step)
    }
}

impl Plan {
    /// A straight line of steps with these requirements (tests and tools).
    pub fn line(steps: Vec<Vec<String>>) -> Plan {
        Plan {
            steps,
            groups: Vec::new(),
            optional: Vec::new(),
            retries: Vec::new(),
            compensations: Vec::new(),
            on_restart: OnRestart::default(),
            version: None,
        }
    }

    /// The group `step` is a branch of.
    pub fn group_of(&self, step: u32) -> Option<Span> {
        self.groups.iter().copied().find(|g| g.contains(step))
    }

    /// The position `step` belongs to: its group's span, or the step alone.
    pub fn position(&self, step: u32) -> Span {
        self.group_of(step).unwrap_or(Span { first: step, last: step })
    }

    pub fn is_optional(&self, step: u32) -> bool {
        self.optional.contains(&step)
    }

    /// The step's bounded retry, if it has one.
    pub fn retry_of(&self, step: u32) -> Option<StepRetry> {
        self.retries.iter().copied().find(|r| r.step == step)
    }

    /// Whether baton keeps `step`'s token alive between its attempts: it is retried and
    /// declares a heartbeat.
    pub fn beats_between_attempts(&self, step: u32) -> bool {
        self.retry_of(step).is_some_and(|r| r.heartbeat.is_some())
            && !crate::mutants::active(crate::mutants::Mutation::SilentBackoff)
    }

    /// The step's compensation, if it declares one.
    pub fn compensation_of(&self, step: u32) -> Option<StepCompensation> {
        self.compensations.iter().copied().find(|c| c.step == step)
    }

    /// The first step of the position after the one `step` belongs to.
    pub fn next_position(&self, step: u32) -> Option<u32> {
        self.position(step).last.checked_add(1)
    }

    /// The first step of the last position: where the record is when the execution's success
    /// report may come.
    pub fn last_position(&self) -> u32 {
        let last = u32::try_from(self.steps.len().saturating_sub(1)).unwrap_or(u32::MAX);
        self.position(last).first
    }
}

/// May a start event after a terminal state open a new generation?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRestart {
    #[default]
    AfterTerminal,
    Never,
}

/// An input that was applied to a step, remembered to recognise redelivery: in a later step,
/// and in a later generation, it is still the same input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedInput {
    pub id: EventId,
    /// The start of the hash of the input's payload ([`payload_fingerprint`]): the same id with
    /// another payload is a conflict. Records written before keep the whole hash.
    pub hash: String,
    /// The step it was applied to (`None` in records written before this was kept: the record's
    /// current step, since the list was then reset at each step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// The generation it was applied in (`None`: the record's current one, likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
    /// Where it came from: a domain event's id and a callback's `webhook-id` are chosen by
    /// different parties, so the same text from the other source is another input (found by
    /// review: an event refused as a reuse of a callback's id left its step waiting). `None` in
    /// records written before this was kept: taken to match either source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

/// What an applied input keeps of its payload's hash: 64 bits, in 16 hex characters. That tells
/// a redelivery from another payload under the same id with a chance of error of 2^-64 (and a
/// sender who forged a collision would only have its own second input taken as a repeat of its
/// first), at a quarter of the bytes the record spends per step on the whole hash.
pub fn payload_fingerprint(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// The most a step's gathered inputs may take, as JSON: the record is one DynamoDB item of at
/// most 400 KB, and holds them twice while the resume is owed.
pub const MAX_STEP_INPUT_BYTES: usize = 128 * 1024;

/// The longest `error` Step Functions takes with SendTaskFailure or StopExecution, in
/// characters (counted as UTF-16 code units, as AWS's APIs count them: never fewer than the
/// characters). Longer is refused every time, so a failure that carries one could never be
/// delivered: inputs are checked against it at the edge ([`failure_text_fits`]).
pub const MAX_FAILURE_ERROR_CHARS: usize = 256;
/// The longest `cause`, likewise.
pub const MAX_FAILURE_CAUSE_CHARS: usize = 32_768;

/// Whether `text`, the `field` (`error` or `cause`) of a failure, fits what Step Functions
/// takes; if not, a message that names the field and the limit.
pub fn failure_text_fits(field: &str, text: &str, max: usize) -> Result<(), String> {
    let len = text.encode_utf16().count();
    if len <= max {
        return Ok(());
    }
    Err(format!("{field} is {len} characters long; Step Functions takes at most {max}"))
}

/// How many applied inputs a record remembers, across steps and generations.
pub const REMEMBERED_INPUTS: usize = 32;

/// The resume Step Functions is owed while a record is `advancing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resume {
    Success { output: Value },
    Failure { error: String, cause: String },
}

/// One workflow instance: everything `decide` needs to know about (workflow, key).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// 1 for the first run; each restart after a terminal state adds one.
    pub generation: u32,
    pub state: State,
    /// Incremented by every write; every conditional write checks it.
    pub version: u64,
    /// The current step's task token (waiting and advancing).
    pub token: Option<TaskToken>,
    /// The current step's deadline (waiting).
    pub deadline: Option<OffsetDateTime>,
    /// The inputs gathered for the current step.
    pub inputs: Map<String, Value>,
    /// The inputs applied, oldest first, across steps and generations (bounded): a redelivery
    /// is recognised as the input it repeats wherever the record has got to.
    pub applied: Vec<AppliedInput>,
    /// What is owed to Step Functions while advancing.
    pub owed: Option<Resume>,
    /// The start events seen, newest last, across generations (bounded).
    pub start_events: Vec<EventId>,
    /// Every transition, oldest first (bounded): the audit trail `baton trace` shows. It lives
    /// in the record so that auditing costs no extra write.
    pub history: Vec<AuditEntry>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    /// Which write produced this version: a fresh id the engine gives each write attempt.
    /// When the answer to a write is lost and the SDK's retry finds the condition failed, the
    /// item returned carries this id if the "winner" was that very write, so the engine counts
    /// it as its own and does not mistake it for a duplicate. `None` until the engine sets it.
    pub write_id: Option<String>,
    /// The config version this generation started on (`None`: started before versions).
    pub config_version: Option<String>,
    /// The branches of the parallel group the record is at, each with its own token, deadline,
    /// inputs and outcome (empty anywhere else). They stay after the group is decided until the
    /// next position opens, and in a record that ended there.
    pub branches: Vec<Branch>,
    /// The optional branches of this generation that did not succeed, by step: a workflow that
    /// finishes with any ends `degraded`.
    pub missed: Vec<u32>,
    /// The optional branches of this generation whose success Step Functions itself reported
    /// (each optional branch reports how it ended, on its way out of the group). The execution's
    /// success is decided once every optional branch is here or in [`Record::missed`].
    pub confirmed: Vec<u32>,
    /// The parallel branches of this generation whose success baton applied (their senders were
    /// told `applied`), whatever Step Functions made of the resume: a success that raced its
    /// branch's deadline still did its work, and compensation undoes it (found by review: it was
    /// planned `not_completed`).
    pub succeeded: Vec<u32>,
    /// The failed attempts of the step the record is at, oldest first (empty: its first attempt
    /// runs). The attempt running is the next one.
    pub attempts: Vec<FailedAttempt>,
    /// When the next attempt's task is due, after a failed attempt's backoff (`None`: no attempt
    /// is waiting to be published).
    pub next_attempt_at: Option<OffsetDateTime>,
    /// The compensation of this generation, once it began: its plan, fixed then, and how each
    /// compensation stands. It stays in the record that ended it.
    pub compensation: Option<Compensation>,
}

/// How much of a failed attempt's `cause` the record keeps: up to ten attempts of Step
/// Functions' 32,768 characters each would not fit the record's one item (400 KB).
pub const MAX_ATTEMPT_CAUSE_CHARS: usize = 512;

/// One failed attempt of a step with `retry`: what failed it (its `cause` cut to
/// [`MAX_ATTEMPT_CAUSE_CHARS`]), and who said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedAttempt {
    pub attempt: u32,
    pub error: String,
    pub cause: String,
    /// The input that failed it.
    pub input: EventId,
    pub source: Source,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl FailedAttempt {
    fn new(
        attempt: u32,
        (error, cause): (&str, &str),
        (input, source): (&EventId, Source),
        at: OffsetDateTime,
    ) -> FailedAttempt {
        let cause = cause.chars().take(MAX_ATTEMPT_CAUSE_CHARS).collect();
        FailedAttempt { attempt, error: error.to_owned(), cause, input: input.clone(), source, at }
    }
}

/// One branch of the parallel group a record is at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Branch {
    pub step: u32,
    /// Its task token, once Step Functions reached it (`None`: its `step_ready` is still on its
    /// way; inputs for it are buffered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TaskToken>,
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub deadline: Option<OffsetDateTime>,
    /// The inputs gathered for it.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub inputs: Map<String, Value>,
    /// How it ended (`None`: open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<BranchOutcome>,
    /// The resume its token is owed, until it reaches Step Functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owed: Option<Resume>,
    /// Its success went out but found the token gone: Step Functions may have taken an earlier
    /// copy, or ended the branch itself (an optional branch's catch then reports it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfirmed: bool,
    /// Its failed attempts, oldest first, as [`Record::attempts`] for a step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<FailedAttempt>,
    /// When its next attempt's task is due, as [`Record::next_attempt_at`] for a step.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<OffsetDateTime>,
}

impl Branch {
    fn new(step: u32) -> Branch {
        Branch {
            step,
            token: None,
            deadline: None,
            inputs: Map::new(),
            outcome: None,
            owed: None,
            unconfirmed: false,
            attempts: Vec::new(),
            next_attempt_at: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.outcome.is_none()
    }

    /// The branch's attempt that is running (or, during a backoff, next to run).
    pub fn attempt(&self) -> u32 {
        running_attempt(&self.attempts)
    }

    /// Ends the branch: no attempt of it is due any more.
    fn end(&mut self, outcome: BranchOutcome) {
        self.outcome = Some(outcome);
        self.next_attempt_at = None;
    }
}

/// How a parallel branch ended. Each branch of a group that opened ends with exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchOutcome {
    Succeeded,
    Failed,
    TimedOut,
    /// Still open when its group failed, or the workflow ended or was cancelled: closed, and
    /// nothing more is applied to it.
    Closed,
}

impl BranchOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            BranchOutcome::Succeeded => "succeeded",
            BranchOutcome::Failed => "failed",
            BranchOutcome::TimedOut => "timed_out",
            BranchOutcome::Closed => "closed",
        }
    }
}

impl Record {
    /// Whether `step` waits for its inputs: the record's waiting step, or an open branch of the
    /// parallel group it waits at whose token has arrived.
    pub fn waits_at(&self, step: u32) -> bool {
        self.token_at(step).is_some()
    }

    /// The token of `step` while it waits ([`Record::waits_at`]).
    pub fn token_at(&self, step: u32) -> Option<&TaskToken> {
        if self.state.kind() != Kind::Waiting {
            return None;
        }
        if self.branches.is_empty() {
            return self.token.as_ref().filter(|_| self.state.step() == Some(step));
        }
        self.branches.iter().find(|b| b.step == step && b.is_open()).and_then(|b| b.token.as_ref())
    }

    fn next(&self, state: State, now: OffsetDateTime) -> Record {
        Record { state, version: self.version + 1, updated_at: now, write_id: None, ..self.clone() }
    }

    /// The attempt of the current step that is running (or, during a backoff, next to run).
    pub fn attempt(&self) -> u32 {
        running_attempt(&self.attempts)
    }

    /// When the record is due for the sweeper (its `due_at` in the store's `by_due` index): its
    /// deadline while waiting, else its last update. A parallel group that waits is due at its
    /// last update while a branch's resume is owed (the sweeper re-sends it after the grace),
    /// else at its earliest open branch's deadline or next attempt. A step between attempts is
    /// listed when its next attempt is due.
    pub fn due_at(&self) -> OffsetDateTime {
        // The sweeper lists a waiting record a grace after it is due (for a deadline, or a branch's
        // owed resume): a next attempt is listed on time.
        let attempt_due = |next: OffsetDateTime| next - crate::limits::RESEND_RESUME_AFTER;
        if self.state == State::Compensating {
            return compensation::due_at(self).unwrap_or(self.updated_at);
        }
        if let (Kind::Waiting, Some(next)) = (self.state.kind(), self.next_attempt_at) {
            return attempt_due(next);
        }
        if self.state.kind() == Kind::Waiting && !self.branches.is_empty() {
            let open = || self.branches.iter().filter(|b| b.is_open());
            let attempts = open().filter_map(|b| b.next_attempt_at.map(attempt_due));
            // An owed resume is due at once, and does not hold back a sibling's attempt (found by
            // review: each write while the resume stayed owed put the attempt off again).
            if self.branches.iter().any(|b| b.owed.is_some()) {
                return attempts.fold(self.updated_at, OffsetDateTime::min);
            }
            return attempts.chain(open().filter_map(|b| b.deadline)).min().unwrap_or(self.updated_at);
        }
        match (self.state, self.deadline) {
            (State::Waiting { .. }, Some(deadline)) => deadline,
            _ => self.updated_at,
        }
    }

    /// Whether something is owed at [`Record::due_at`], for the sweeper to carry out: a
    /// pending record's start, an advancing one's resume, a next attempt's task, a branch's or
    /// a compensation's resume or next attempt. A record that owes nothing only has its
    /// deadline watched.
    pub fn owes_work(&self) -> bool {
        let branch = |b: &Branch| b.owed.is_some() || (b.is_open() && b.next_attempt_at.is_some());
        let undo = |u: &Undo| u.owed.is_some() || u.next_attempt_at.is_some();
        let planted = crate::mutants::active(crate::mutants::Mutation::OneDueList);
        match self.state.kind() {
            Kind::Waiting | Kind::Compensating if planted => false,
            Kind::Pending => true,
            Kind::Advancing => self.owed.is_some() || self.branches.iter().any(|b| b.owed.is_some()),
            Kind::Waiting => self.next_attempt_at.is_some() || self.branches.iter().any(branch),
            Kind::Compensating => self.compensation.iter().flat_map(|c| &c.undos).any(undo),
            _ => false,
        }
    }

    /// The failed attempts of `step`: a branch's own, when it is a branch of the group the
    /// record is at; the record's, when it is the step the record is at; else none.
    pub fn failed_attempts(&self, step: u32) -> &[FailedAttempt] {
        if let Some(c) = &self.compensation {
            return c.undos.iter().find(|u| u.step == step).map_or(&[], |u| &u.attempts);
        }
        match self.branches.iter().find(|b| b.step == step) {
            Some(b) => &b.attempts,
            None if self.state.step() == Some(step) => &self.attempts,
            None => &[],
        }
    }
}

/// The attempt after `failed` ones.
pub fn running_attempt(failed: &[FailedAttempt]) -> u32 {
    u32::try_from(failed.len()).map_or(u32::MAX, |n| n.saturating_add(1))
}

/// How many audit entries a record keeps; older ones are dropped first.
pub const REMEMBERED_TRANSITIONS: usize = 200;

/// One transition, as the audit trail records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub generation: u32,
    /// The state before (`None`: the record was created). Text behind an `Arc`, like the
    /// fields below: a record, and its whole trail, is cloned on every write.
    pub from: Option<Arc<str>>,
    pub to: Arc<str>,
    pub cause: Cause,
    /// The id of the input that caused it, when it has one.
    pub cause_id: Option<Arc<str>>,
    /// The record's version after the transition.
    pub version: u64,
}

/// The outcome of a step input (callback or domain event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StepOutcome {
    /// Merge the data; advance once every required input is present.
    Succeeded,
    /// Fail the attempt: the step (and, through the state machine's Catch, the workflow) once
    /// no attempt is left, or at once when the sender says it is not `retryable`.
    Failed {
        error: String,
        cause: String,
        #[serde(default = "retryable", skip_serializing_if = "is_retryable")]
        retryable: bool,
    },
    /// A heartbeat that may carry partial data.
    InProgress,
}

fn retryable() -> bool {
    true
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_retryable(retryable: &bool) -> bool {
    *retryable
}

/// Where a step input came from. Both follow the same rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Callback,
    Event,
}

/// How an execution ended, as its final report says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Finish {
    Succeeded,
    Failed {
        error: String,
        cause: String,
    },
    TimedOut,
    /// Step Functions passed the last compensation of a run that ended with `error` (and
    /// `cause`): `States.Timeout` for a missed deadline, `baton.Cancelled` for a cancel.
    CompensationEnded {
        error: String,
        cause: String,
    },
}

/// Everything that can happen to a record. Serializable, so a buffered input can wait in the
/// inbox and be replayed exactly as it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Input {
    /// A domain event matched the workflow's `start.when`.
    Start { event: EventId },
    /// Step Functions reached `step` and parked on `token` until `deadline`.
    StepReady {
        generation: u32,
        step: u32,
        token: TaskToken,
        #[serde(with = "time::serde::rfc3339")]
        deadline: OffsetDateTime,
    },
    /// A callback or a domain event supplies inputs to `step`.
    StepInput {
        id: EventId,
        hash: String,
        source: Source,
        step: u32,
        outcome: StepOutcome,
        data: Map<String, Value>,
        /// The generation the input answers, when the sender says (a callback's `generation`,
        /// from its task): it then applies to that generation only. Without it, the input is for
        /// the generation running when it arrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        generation: Option<u32>,
        /// The attempt of a step with `retry` the input answers, when the sender says (a
        /// callback's `attempt`, from its task). Without it, the input is for the attempt
        /// running when it arrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
    },
    /// The execution of `generation` finished.
    Finished { generation: u32, finish: Finish },
    /// An optional branch reported how it ended: it succeeded (`error: None`: Step Functions
    /// took baton's success), or its own catch caught `error` (`States.Timeout` when it missed
    /// its deadline, or the error its task failed with).
    BranchEnded { generation: u32, step: u32, error: Option<String> },
    /// A branch's owed resume went out: it reached Step Functions (`delivered`), or found its
    /// token gone (then an earlier copy may have reached it, or the branch ended without it).
    Resumed { generation: u32, step: u32, delivered: bool },
    /// The task of `attempt` of `step` went out after its backoff.
    AttemptOpened { generation: u32, step: u32, attempt: u32 },
    /// An operator cancels the workflow.
    Cancel { reason: String },
    /// An operator cancels the workflow and has what completed compensated.
    CancelCompensate { reason: String },
    /// The execution of `generation` was found ended (`status`, as Step Functions names it:
    /// `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED`; `NOT_FOUND` when it is gone) without the
    /// report the record waits for.
    ExecutionGone {
        generation: u32,
        status: String,
        /// The error it ended with, if it failed (the name of the `Fail` state's error, such as
        /// `baton.StepTimedOut`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// An operator ends a stranded record of `generation` as its execution ended (`status`,
    /// and `error` if it failed).
    End {
        generation: u32,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        reason: String,
    },
    /// Step Functions reached the compensation of `step` (the run having failed with `error`
    /// and `cause`) and parked on `token` until `deadline`.
    UndoReady {
        generation: u32,
        step: u32,
        token: TaskToken,
        #[serde(with = "time::serde::rfc3339")]
        deadline: OffsetDateTime,
        error: String,
        cause: String,
    },
    /// A callback acknowledges (or fails an attempt of) the compensation of `step`.
    UndoInput {
        id: EventId,
        hash: String,
        source: Source,
        step: u32,
        outcome: StepOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        generation: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
    },
    /// The sweeper looks for owed work.
    Tick,
}

impl Input {
    /// The id of an input from outside, if it has one (for logs and the ledger).
    pub fn id(&self) -> Option<&EventId> {
        match self {
            Input::Start { event } => Some(event),
            Input::StepInput { id, .. } | Input::UndoInput { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// Why an input was ignored. Each is a ledger reason with a stable code (see RUNBOOK.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoreReason {
    /// The record is terminal: the input arrived after the end.
    Terminal,
    /// The input is for a step the workflow has already left.
    StepAlreadyPassed,
    /// The input is for the current step, which has already advanced.
    StepAlreadyAdvanced,
    /// The input belongs to another generation than the record's.
    StaleGeneration,
    /// A new start event for a workflow that is already running.
    AlreadyRunning,
    /// A start event after a terminal state, and `on_restart: never`.
    RestartNotAllowed,
    /// The input is for a branch of a parallel group that failed (or whose workflow ended)
    /// while the branch was open: the branch was closed, and nothing more is applied to it.
    GroupFailed,
    /// A start event delivered again after the run it was refused by (`already_running`)
    /// ended: the same event never starts a later run.
    RefusedWhileRunning,
    /// A report or step_ready that does not fit the record's state.
    OutOfOrder,
    /// A buffered input that expired before its step waited.
    BufferExpired,
    /// The sweeper found nothing owed (never ledgered).
    NothingOwed,
    /// Refused: the same id arrived earlier with another payload. Ledgered with the refused
    /// payload, so the conflict leaves a trace an operator can find.
    IdempotencyKeyReused,
    /// Refused: merged with what the step already has, the inputs would pass
    /// [`MAX_STEP_INPUT_BYTES`].
    InputsTooLarge,
    /// The input answers an earlier attempt of a step with `retry`: that attempt failed, and
    /// only the running one can complete the step.
    EarlierAttempt,
    /// The workflow is compensating: no forward step moves any more, and a cancel would leave
    /// its compensations half done.
    Compensating,
    /// The record is stranded: its execution ended without its report, so nothing it could
    /// apply to is waiting. An operator ends it (`baton end`).
    Stranded,
}

impl IgnoreReason {
    pub const ALL: [IgnoreReason; 16] = [
        IgnoreReason::Terminal,
        IgnoreReason::StepAlreadyPassed,
        IgnoreReason::StepAlreadyAdvanced,
        IgnoreReason::StaleGeneration,
        IgnoreReason::AlreadyRunning,
        IgnoreReason::RestartNotAllowed,
        IgnoreReason::RefusedWhileRunning,
        IgnoreReason::OutOfOrder,
        IgnoreReason::BufferExpired,
        IgnoreReason::NothingOwed,
        IgnoreReason::IdempotencyKeyReused,
        IgnoreReason::InputsTooLarge,
        IgnoreReason::GroupFailed,
        IgnoreReason::EarlierAttempt,
        IgnoreReason::Compensating,
        IgnoreReason::Stranded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::Terminal => "terminal",
            IgnoreReason::StepAlreadyPassed => "step_already_passed",
            IgnoreReason::StepAlreadyAdvanced => "step_already_advanced",
            IgnoreReason::StaleGeneration => "stale_generation",
            IgnoreReason::AlreadyRunning => "already_running",
            IgnoreReason::RestartNotAllowed => "restart_not_allowed",
            IgnoreReason::RefusedWhileRunning => "refused_while_running",
            IgnoreReason::OutOfOrder => "out_of_order",
            IgnoreReason::BufferExpired => "buffer_expired",
            IgnoreReason::NothingOwed => "nothing_owed",
            IgnoreReason::IdempotencyKeyReused => "idempotency_key_reused",
            IgnoreReason::InputsTooLarge => "inputs_too_large",
            IgnoreReason::GroupFailed => "group_failed",
            IgnoreReason::EarlierAttempt => "earlier_attempt",
            IgnoreReason::Compensating => "compensating",
            IgnoreReason::Stranded => "stranded",
        }
    }
}

/// Why an input was refused outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The step index is not in the workflow.
    UnknownStep,
    /// The same input id arrived earlier with a different payload.
    IdempotencyKeyReused,
    /// The step's inputs, with this one merged, would be too large to keep.
    InputsTooLarge,
}

impl RejectReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::UnknownStep => "unknown_step",
            RejectReason::IdempotencyKeyReused => "idempotency_key_reused",
            RejectReason::InputsTooLarge => "inputs_too_large",
        }
    }
}

/// How an input was classified. Every input gets exactly one (invariant 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    Applied,
    Buffered,
    Duplicate,
    Ignored(IgnoreReason),
    Rejected(RejectReason),
}

/// The one record write a decision needs, with what its condition must check.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub cause: Cause,
    /// The state the record must be in (`None`: it must not exist).
    pub from: Option<State>,
    /// The version it must have (`None` when it must not exist).
    pub expected_version: Option<u64>,
    /// The record as it will be after the write.
    pub to: Record,
}

impl Write {
    /// Whether this write is a row of [`TRANSITIONS`] (steps included) from `prior`, the record
    /// as it was read, and the new record follows from it: the same workflow and key, its version
    /// one past the read one (1 when created), its last audit entry this transition. `decide`
    /// asserts it in every debug build and simulation; the store's condition
    /// (`condition_for`, in the store port) is derived from the same table.
    pub fn follows(&self, prior: Option<&Record>) -> bool {
        let to = &self.to;
        is_allowed(self.from, to.state, self.cause)
            && self.from == prior.map(|r| r.state)
            && self.expected_version == prior.map(|r| r.version)
            && prior.is_none_or(|r| r.workflow == to.workflow && r.key == to.key)
            && to.version == self.expected_version.map_or(1, |v| v + 1)
            && to.history.last().is_some_and(|a| a.cause == self.cause && a.version == to.version)
    }
}

/// Work owed besides the record write, carried out after the write wins.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// StartExecution with the name derived from (workflow, key, generation); idempotent.
    StartExecution {
        generation: u32,
    },
    /// Create the operator task for this step's `attempt` (1 for the first), idempotently, and
    /// publish it once.
    CreateTask {
        generation: u32,
        step: u32,
        attempt: u32,
    },
    /// Apply the step's buffered inputs for this generation, in arrival order (strongly
    /// consistent read).
    DrainInbox {
        generation: u32,
        step: u32,
    },
    /// Store the input in the step's inbox until the step waits in `generation`: an input
    /// buffered for one run of the workflow never applies to a later one.
    Buffer {
        generation: u32,
        step: u32,
    },
    SendTaskSuccess {
        token: TaskToken,
        output: Value,
    },
    SendTaskFailure {
        token: TaskToken,
        error: String,
        cause: String,
    },
    SendTaskHeartbeat {
        token: TaskToken,
    },
    StopExecution {
        generation: u32,
        cause: String,
    },
    /// Tell the record what became of the resume sent just before (submits [`Input::Resumed`]):
    /// a branch's, always, so that the sweeper does not send it again while the group still
    /// waits; a step's, only when it found its token gone (one delivered is followed by the next
    /// step's report), so that the record leaves the sweeper's work list (found by an attack
    /// test: advancing records whose executions were stopped crowded it).
    MarkResumed {
        generation: u32,
        step: u32,
    },
    /// Create the task of `attempt` of the compensation of `step`, idempotently, and publish it
    /// once (a `baton.compensation.requested` event).
    CreateUndoTask {
        generation: u32,
        step: u32,
        attempt: u32,
    },
    /// Tell the record the attempt's task went out (submits [`Input::AttemptOpened`]), so the
    /// sweeper does not publish it again.
    MarkAttemptOpened {
        generation: u32,
        step: u32,
        attempt: u32,
    },
    /// Record the ignored input with its reason.
    Ledger {
        reason: IgnoreReason,
    },
}

/// What to do about one input: its classification, the record write, and the effects owed.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub outcome: Outcome,
    pub write: Option<Write>,
    pub effects: Vec<Effect>,
}

impl Decision {
    fn new(outcome: Outcome) -> Decision {
        Decision { outcome, write: None, effects: Vec::new() }
    }

    /// Ignored for `reason`, ledgered.
    pub fn ignored(reason: IgnoreReason) -> Decision {
        Decision { outcome: Outcome::Ignored(reason), write: None, effects: vec![Effect::Ledger { reason }] }
    }

    fn with_write(mut self, cause: Cause, prior: Option<&Record>, mut to: Record) -> Decision {
        // Microseconds, the precision every store keeps timestamps with.
        let at = to.updated_at;
        to.history.push(AuditEntry {
            at: at.replace_nanosecond(at.nanosecond() / 1000 * 1000).unwrap_or(at),
            generation: to.generation,
            from: prior.map(|r| r.state.to_string().into()),
            to: to.state.to_string().into(),
            cause,
            cause_id: None,
            version: to.version,
        });
        let excess = to.history.len().saturating_sub(REMEMBERED_TRANSITIONS);
        to.history.drain(..excess);
        self.write = Some(Write {
            cause,
            from: prior.map(|r| r.state),
            expected_version: prior.map(|r| r.version),
            to,
        });
        self
    }

    fn effect(mut self, effect: Effect) -> Decision {
        self.effects.push(effect);
        self
    }

    /// The state before and after, when the decision writes.
    pub fn transition(&self) -> Option<(Option<State>, State)> {
        self.write.as_ref().map(|w| (w.from, w.to.state))
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
    let mut decision = decide_inner(plan, (workflow, key), record, input, now);
    if let (Some(write), Some(id)) = (decision.write.as_mut(), input.id())
        && let Some(entry) = write.to.history.last_mut()
    {
        entry.cause_id = Some(id.shared());
    }
    if let Some(write) = &decision.write {
        debug_assert!(
            write.follows(record) && (&write.to.workflow, &write.to.key) == (workflow, key),
            "decide chose a write the transition table does not allow from the record read: {:?} -> {} by {:?}, version {:?} -> {}",
            write.from,
            write.to.state,
            write.cause,
            write.expected_version,
            write.to.version
        );
    }
    decision
}

fn decide_inner(
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
    match input {
        Input::Start { event } => on_start(plan, workflow, key, record, event, now),
        // With nothing completed to undo, `cancel --compensate` is a plain cancel.
        Input::CancelCompensate { reason } => {
            decide_inner(plan, (workflow, key), record, &Input::Cancel { reason: reason.clone() }, now)
        }
        // Decided by `compensation::route`.
        Input::UndoReady { .. } | Input::UndoInput { .. } => Decision::ignored(IgnoreReason::OutOfOrder),
        Input::StepReady { generation, step, token, deadline } => match record {
            None => Decision::ignored(IgnoreReason::OutOfOrder).effect(fail_token(
                token,
                "baton.NoRecord",
                "no workflow record for this execution",
            )),
            Some(r) => on_step_ready(plan, r, *generation, *step, token, *deadline, now),
        },
        Input::StepInput { id, hash, step, outcome, data, generation, source, attempt } => {
            if *step as usize >= plan.steps.len() {
                return Decision::new(Outcome::Rejected(RejectReason::UnknownStep));
            }
            let buffer = |generation: u32| {
                Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation, step: *step })
            };
            match (record, *generation) {
                (None, target) => buffer(target.unwrap_or(1)),
                // An input that an earlier run applied is the same input again, whatever the
                // run it was sent for (found by the simulation: an early input drained into its
                // generation, then retried after a restart, was answered `ignored`).
                // Only as applied to this step of that run: one event may feed several steps, and
                // one a stale run never applied to this step is stale (found by the simulation:
                // an early input for a later step, drained after a restart, was taken as a repeat
                // of its application to an earlier step).
                (Some(r), Some(g)) if g < r.generation => repeated_input(r, (id, *source), hash, *step, now)
                    .filter(|_| applied_to(r, id, (g, *step)))
                    .unwrap_or_else(|| Decision::ignored(IgnoreReason::StaleGeneration)),
                (Some(r), Some(g)) if g > r.generation => buffer(g),
                (Some(r), _) => {
                    on_step_input(plan, r, (id, *source), hash, (*step, *attempt), outcome, data, now)
                }
            }
        }
        Input::Finished { generation, finish } => match record {
            None => Decision::ignored(IgnoreReason::OutOfOrder),
            Some(r) => on_finished(plan, r, *generation, finish, now),
        },
        Input::Cancel { reason } => match record {
            None => Decision::ignored(IgnoreReason::OutOfOrder),
            Some(r) => on_cancel(r, reason, now),
        },
        Input::BranchEnded { generation, step, error } => match record {
            None => Decision::ignored(IgnoreReason::OutOfOrder),
            Some(r) => group::on_branch_ended(plan, r, (*generation, *step), error.as_deref(), now),
        },
        Input::Resumed { generation, step, delivered } => match record {
            None => Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed)),
            Some(r) => group::on_resumed(r, (*generation, *step), *delivered, now),
        },
        Input::AttemptOpened { generation, step, attempt } => match record {
            None => Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed)),
            Some(r) => on_attempt_opened(r, (*generation, *step, *attempt), now),
        },
        Input::Tick => on_tick(plan, record, now),
        // Decided by `stranded::route`.
        Input::ExecutionGone { .. } | Input::End { .. } => {
            Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed))
        }
    }
}

/// An operator's cancel (without `--compensate`).
fn on_cancel(r: &Record, reason: &str, now: OffsetDateTime) -> Decision {
    let stop = Effect::StopExecution { generation: r.generation, cause: reason.to_owned() };
    if r.state == State::Cancelled {
        // Cancelling again finishes what the first cancel may have left undone: its stop (or
        // the answer to it) may have failed, so the execution could still be running. Both
        // calls are idempotent (found by the simulation).
        return fail_parked(Decision::new(Outcome::Duplicate).effect(stop), r, reason);
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    // The tokens stay in the cancelled record: a repeated cancel fails them again.
    let mut to =
        Record { deadline: None, owed: None, next_attempt_at: None, ..r.next(State::Cancelled, now) };
    group::close_open_branches(&mut to, None);
    let d = Decision::new(Outcome::Applied).with_write(Cause::Cancel, Some(r), to.clone()).effect(stop);
    fail_parked(d, &to, reason)
}

/// `d`, failing every token the cancelled record `r` parks on as well: the step's, or those of
/// the group's branches it closed. That ends the execution even where a stop of a token wait is
/// deferred (the local emulator); on AWS the tokens are already gone.
fn fail_parked(mut d: Decision, r: &Record, reason: &str) -> Decision {
    let closed = r.branches.iter().filter(|b| b.outcome == Some(BranchOutcome::Closed));
    for token in r.token.iter().chain(closed.filter_map(|b| b.token.as_ref())) {
        d = d.effect(fail_token(token, "baton.Cancelled", reason));
    }
    d
}

fn on_start(
    plan: &Plan,
    workflow: &WorkflowName,
    key: &CorrelationKey,
    record: Option<&Record>,
    event: &EventId,
    now: OffsetDateTime,
) -> Decision {
    let Some(r) = record else {
        let to = Record {
            workflow: workflow.clone(),
            key: key.clone(),
            generation: 1,
            state: State::Pending,
            version: 1,
            token: None,
            deadline: None,
            inputs: Map::new(),
            applied: Vec::new(),
            owed: None,
            start_events: vec![event.clone()],
            history: Vec::new(),
            created_at: now,
            updated_at: now,
            write_id: None,
            config_version: plan.version.clone(),
            branches: Vec::new(),
            missed: Vec::new(),
            confirmed: Vec::new(),
            succeeded: Vec::new(),
            attempts: Vec::new(),
            next_attempt_at: None,
            compensation: None,
        };
        return Decision::new(Outcome::Applied)
            .with_write(Cause::Start, None, to)
            .effect(Effect::StartExecution { generation: 1 });
    };
    if r.start_events.contains(event) {
        // Redelivery. While pending, the execution may not have started (a crash after the
        // create): starting again is safe because the execution name is deterministic.
        let d = Decision::new(Outcome::Duplicate);
        return if r.state == State::Pending {
            d.effect(Effect::StartExecution { generation: r.generation })
        } else {
            d
        };
    }
    if !r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::AlreadyRunning);
    }
    if plan.on_restart == OnRestart::Never {
        return Decision::ignored(IgnoreReason::RestartNotAllowed);
    }
    let mut start_events = r.start_events.clone();
    start_events.push(event.clone());
    let excess = start_events.len().saturating_sub(REMEMBERED_START_EVENTS);
    start_events.drain(..excess);
    let generation = r.generation + 1;
    let to = Record {
        generation,
        token: None,
        deadline: None,
        inputs: Map::new(),
        owed: None,
        start_events,
        created_at: now,
        config_version: plan.version.clone(),
        branches: Vec::new(),
        missed: Vec::new(),
        confirmed: Vec::new(),
        succeeded: Vec::new(),
        attempts: Vec::new(),
        next_attempt_at: None,
        compensation: None,
        ..r.next(State::Pending, now)
    };
    Decision::new(Outcome::Applied)
        .with_write(Cause::Restart, Some(r), to)
        .effect(Effect::StartExecution { generation })
}

fn fail_token(token: &TaskToken, error: &str, cause: &str) -> Effect {
    // Checked at the edge (callbacks, cancel): a failure Step Functions refuses is owed forever.
    // (The planted bug that skips that check is left for the simulation's model to catch.)
    if !crate::mutants::active(crate::mutants::Mutation::UncheckedFailureText) {
        debug_assert!(failure_text_fits("error", error, MAX_FAILURE_ERROR_CHARS).is_ok());
        debug_assert!(failure_text_fits("cause", cause, MAX_FAILURE_CAUSE_CHARS).is_ok());
    }
    Effect::SendTaskFailure { token: token.clone(), error: error.to_owned(), cause: cause.to_owned() }
}

fn on_step_ready(
    plan: &Plan,
    r: &Record,
    generation: u32,
    step: u32,
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    if generation != r.generation {
        // An execution of another generation: end it rather than leave it parked.
        return Decision::ignored(IgnoreReason::StaleGeneration).effect(fail_token(
            token,
            "baton.StaleGeneration",
            "the workflow record has moved to another generation",
        ));
    }
    // After a compensation, the execution has ended with its chain: a copy of a step_ready it
    // reported (its token resumed, or failed into the chain) is owed nothing more (found by
    // review: such a token got a second, different resume).
    if r.state.is_terminal() && r.compensation.is_some() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal).effect(fail_token(
            token,
            "baton.Terminal",
            &format!("the workflow record is already {}", r.state),
        ));
    }
    if step as usize >= plan.steps.len() {
        return Decision::new(Outcome::Rejected(RejectReason::UnknownStep)).effect(fail_token(
            token,
            "baton.UnknownStep",
            "the step is not in the workflow's config",
        ));
    }
    // Step Functions may leave a parallel group before the record hears how its optional
    // branches ended (their reports travel apart, on an unordered queue): the group is settled
    // as Step Functions left it ([`group::left`]).
    let left = group::left(plan, r, step, now);
    let r = left.as_ref().unwrap_or(r);
    let expected = match r.state {
        State::Pending => Some(0),
        State::Advancing { step: n } => plan.next_position(n),
        State::Waiting { step: n } if left.is_some() => plan.next_position(n),
        _ => None,
    };
    if let Some(group) = plan.group_of(step) {
        return group::on_branch_ready(plan, r, group, expected, (generation, step), token, deadline, now);
    }
    if let Some(again) = repark(r, step, token, deadline, now) {
        return again;
    }
    if expected == Some(step) {
        // The first step's report confirms the generation's config version: the one its
        // execution runs (`plan`'s, the engine reads the report in it). It differs from the
        // version written at the start only when the start crossed a deploy; no step has
        // happened yet, so the record follows its execution.
        let config_version = version_at_step_ready(plan, r);
        let to = Record {
            token: Some(token.clone()),
            deadline: Some(deadline),
            inputs: Map::new(),
            owed: None,
            config_version,
            branches: Vec::new(),
            attempts: Vec::new(),
            next_attempt_at: None,
            ..r.next(State::Waiting { step }, now)
        };
        return Decision::new(Outcome::Applied)
            .with_write(Cause::StepReady, Some(r), to)
            .effect(Effect::CreateTask { generation, step, attempt: 1 })
            .effect(Effect::DrainInbox { generation, step });
    }
    if r.state == (State::Waiting { step }) && r.token.as_ref() == Some(token) {
        // Redelivery of the step_ready that already won. Task creation and the drain are
        // idempotent, so a crash after the write is repaired by re-running them.
        return Decision::new(Outcome::Duplicate)
            .effect(Effect::CreateTask { generation, step, attempt: 1 })
            .effect(Effect::DrainInbox { generation, step });
    }
    if r.state.step().is_some_and(|current| step <= current) {
        return Decision::ignored(IgnoreReason::StepAlreadyPassed);
    }
    Decision::ignored(IgnoreReason::OutOfOrder)
}

/// Step Functions reported the step the record is at again, with a new token and a later
/// deadline: the report's send failed and the wait was retried (`asl.rs`, the wait's `Retry`),
/// re-entering it. Only the newest token can be resumed now: the record takes it, and whatever it
/// owes that wait goes to it (the task, still idempotent; a resume owed, or one that found the old
/// token gone). An older report arriving late (an earlier deadline) is not taken. `None` when the
/// report is no such one.
fn repark(
    r: &Record,
    step: u32,
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Option<Decision> {
    let at_step = matches!(r.state, State::Waiting { step: s } | State::Advancing { step: s } if s == step);
    let newer = r.token.as_ref() != Some(token) && r.deadline.is_some_and(|d| deadline > d);
    if !at_step || !newer || !r.branches.is_empty() {
        return None;
    }
    let to = Record { token: Some(token.clone()), deadline: Some(deadline), ..r.next(r.state, now) };
    let d = Decision::new(Outcome::Applied).with_write(Cause::StepReady, Some(r), to);
    let generation = r.generation;
    // A resume that found the old token gone is owed no more: owed again, to the new token (a
    // failure's text is not kept then: the step is failed as baton's own).
    let again = match (&r.owed, r.succeeded.contains(&step)) {
        (Some(owed), _) => Some(owed.clone()),
        (None, true) => Some(Resume::Success { output: Value::Object(r.inputs.clone()) }),
        (None, false) => Some(Resume::Failure {
            error: crate::domain::asl::FAILED_ERROR.to_owned(),
            cause: "the step failed; its failure was sent again after Step Functions retried its report"
                .to_owned(),
        }),
    };
    Some(match (r.state, again) {
        (State::Advancing { .. }, Some(owed)) => {
            d.effect(resume_effect(token, &owed)).effect(Effect::MarkResumed { generation, step })
        }
        (State::Waiting { .. }, _) if r.next_attempt_at.is_none() => d
            .effect(Effect::CreateTask { generation, step, attempt: r.attempt() })
            .effect(Effect::DrainInbox { generation, step }),
        _ => d,
    })
}

/// The config version a record runs once Step Functions reports its next step (or branch):
/// the first report confirms the one its execution runs (`plan`'s); later ones keep the
/// record's.
fn version_at_step_ready(plan: &Plan, r: &Record) -> Option<String> {
    match r.state {
        State::Pending => plan.version.clone().or_else(|| r.config_version.clone()),
        _ => r.config_version.clone(),
    }
}

/// A step's input: the same input again ([`repeated_input`]), an input for a step that is not
/// the waiting one ([`not_the_waiting_step`]), or one merged into the waiting step
/// ([`merge_input`]).
#[allow(clippy::too_many_arguments)]
fn on_step_input(
    plan: &Plan,
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    (step, attempt): (u32, Option<u32>),
    outcome: &StepOutcome,
    data: &Map<String, Value>,
    now: OffsetDateTime,
) -> Decision {
    if let Some(repeat) = repeated_input(r, (id, source), hash, step, now) {
        return repeat;
    }
    if let Some(decision) =
        group::branch_input(plan, r, (id, source), hash, (step, attempt), (outcome, data), now)
    {
        return decision;
    }
    if let Some(elsewhere) = not_the_waiting_step(r, step) {
        return elsewhere;
    }
    if let Some(refused) = attempt_gate((&r.attempts, r.next_attempt_at), (id, source), attempt, outcome, now)
    {
        return refused;
    }
    let Some(token) = r.token.clone() else {
        // A waiting record always has a token; without one nothing can be resumed.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    merge_input(plan, r, (id, source), hash, step, (outcome, data), token, now)
}

/// What becomes of an input for a step or branch with `failed` attempts (and, during a backoff,
/// its next attempt due at `next_at`: its task may not be out yet) that names `attempt` (or
/// none), before it is merged: `None` when it may be.
fn attempt_gate(
    (failed, next_at): (&[FailedAttempt], Option<OffsetDateTime>),
    (id, source): (&EventId, Source),
    attempt: Option<u32>,
    outcome: &StepOutcome,
    now: OffsetDateTime,
) -> Option<Decision> {
    let running = running_attempt(failed);
    let earlier_applies = crate::mutants::active(crate::mutants::Mutation::EarlierAttemptApplied);
    // The next attempt's task is out once it is marked (found by review: a failure naming it
    // before then used it up, and its task was never published). Judged by the mark, never by
    // a clock: the sweeper publishes by its own, and a worker that answered within the skew
    // between two functions' clocks was told `ignored` for good (found by review). The engine
    // answers such an input 503 before it gets here ([`task_not_out`]).
    let unpublished = next_at.is_some()
        && !(crate::mutants::active(crate::mutants::Mutation::PublishedByTheClock)
            && next_at.is_some_and(|due| now >= due));
    match attempt {
        // An attempt that failed: only the running one can complete the step.
        Some(a) if a < running && !earlier_applies => {
            return Some(Decision::ignored(IgnoreReason::EarlierAttempt));
        }
        // No task of that attempt has gone out.
        Some(a) if a > running || a == running && unpublished => {
            return Some(Decision::ignored(IgnoreReason::OutOfOrder));
        }
        _ => {}
    }
    let backoff = next_at.is_some();
    let StepOutcome::Failed { retryable, .. } = outcome else { return None };
    // The same failure again, under an id a failed attempt already took (its `applied` line may
    // have been trimmed since): one failure is never two attempts (found by review).
    if failed.iter().any(|a| a.input == *id && a.source == source) {
        return Some(Decision::new(Outcome::Duplicate));
    }
    // While the next attempt's task may not be out yet, a failure that does not name it is the
    // failed attempt's, said again (found by the simulation: it used up an attempt that never
    // ran); one that names it came from its task, published before its mark (found by review).
    // A failure that says no attempt can succeed still ends the step.
    (backoff && *retryable && attempt != Some(running))
        .then(|| Decision::ignored(IgnoreReason::EarlierAttempt))
}

/// Whether `id` was applied to `step` of generation `g` (as far as the record remembers).
fn applied_to(r: &Record, id: &EventId, (g, step): (u32, u32)) -> bool {
    r.applied
        .iter()
        .any(|a| &a.id == id && a.generation.is_none_or(|x| x == g) && a.step.is_none_or(|s| s == step))
}

/// An input with this id applied to this step before, or to any step of an earlier generation
/// (whose steps may be numbered otherwise, in the config version it ran): the same input again,
/// or, with another payload, a conflict. An id applied to another step of this generation is not
/// a repeat: one event may feed several steps.
fn repeated_input(
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    step: u32,
    now: OffsetDateTime,
) -> Option<Decision> {
    let current_step = r.state.step();
    let earlier_run = |a: &AppliedInput| a.generation.is_some_and(|g| g != r.generation);
    let seen = r.applied.iter().rev().find(|a| {
        &a.id == id
            && a.source.is_none_or(|s| s == source)
            && (a.step.or(current_step) == Some(step) || earlier_run(a))
    })?;
    if payload_fingerprint(&seen.hash) != payload_fingerprint(hash) {
        return Some(
            Decision::new(Outcome::Rejected(RejectReason::IdempotencyKeyReused))
                .effect(Effect::Ledger { reason: IgnoreReason::IdempotencyKeyReused }),
        );
    }
    // The same input again. If it is the one that completed the step and the resume has been
    // owed for a while, it may never have reached Step Functions (a crash after the write): owe
    // it again. A twin still in flight (a concurrent redelivery, or the other side of the inbox
    // handshake) is inside the grace period and sends nothing, so the resume goes out once. A
    // repeat of an input of an earlier generation owes nothing.
    let d = Decision::new(Outcome::Duplicate);
    let in_this_run = seen.generation.unwrap_or(r.generation) == r.generation;
    if in_this_run
        && now - r.updated_at >= resend_after()
        && let Some(again) = group::resend_for_repeat(r, step, seen)
    {
        return Some(again);
    }
    Some(match (r.state, &r.owed, &r.token) {
        (State::Advancing { step: n }, Some(owed), Some(token))
            if n == step
                && in_this_run
                && r.applied.last() == Some(seen)
                && now - r.updated_at >= resend_after() =>
        {
            d.effect(resume_effect(token, owed))
                .effect(Effect::MarkResumed { generation: r.generation, step })
        }
        _ => d,
    })
}

/// What becomes of a new input for a step that is not the one waiting: buffered for a later
/// step (or a pending record), ignored for a step passed, advanced or ended. `None` when the step
/// is the one waiting.
fn not_the_waiting_step(r: &Record, step: u32) -> Option<Decision> {
    let current = match r.state {
        State::Pending => {
            return Some(
                Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: r.generation, step }),
            );
        }
        State::Waiting { step } | State::Advancing { step } => step,
        _ => return Some(Decision::ignored(IgnoreReason::Terminal)),
    };
    if step < current {
        return Some(Decision::ignored(IgnoreReason::StepAlreadyPassed));
    }
    if step > current {
        return Some(
            Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: r.generation, step }),
        );
    }
    match r.state {
        State::Waiting { .. } => None,
        _ => Some(Decision::ignored(IgnoreReason::StepAlreadyAdvanced)),
    }
}

/// A new input merged into the waiting step: its data joins the step's inputs, and its outcome
/// fails the step, completes it (its requirements met), or only adds (a heartbeat when in
/// progress).
#[allow(clippy::too_many_arguments)]
fn merge_input(
    plan: &Plan,
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    step: u32,
    (outcome, data): (&StepOutcome, &Map<String, Value>),
    token: TaskToken,
    now: OffsetDateTime,
) -> Decision {
    let mut to = r.next(r.state, now);
    let retry = retry_due(plan, (step, r.attempt(), r.deadline), outcome, now);
    if retry.is_some() {
        // Each attempt gathers its own inputs: the failed one's are dropped, its data with them.
        to.inputs = Map::new();
    } else {
        to.inputs.extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    // The record is one DynamoDB item (400 KB), holding the step's inputs twice once the resume
    // is owed: inputs that could not be written would leave the step unable ever to advance
    // (found by the simulation). So the merge is refused first, with a trace.
    let size = serde_json::to_string(&to.inputs).map_or(usize::MAX, |t| t.len());
    if let Some(refused) = admit(&mut to, size, (id, source), hash, step) {
        return refused;
    }
    match outcome {
        StepOutcome::Failed { error, cause, .. } => {
            if let Some(due) = retry {
                to.attempts.push(FailedAttempt::new(r.attempt(), (error, cause), (id, source), now));
                to.next_attempt_at = Some(due);
                let d = Decision::new(Outcome::Applied).with_write(Cause::AttemptFailed, Some(r), to);
                return beat_between_attempts(d, plan, step, &token);
            }
            let owed = Resume::Failure { error: error.clone(), cause: cause.clone() };
            to.state = State::Advancing { step };
            to.owed = Some(owed.clone());
            to.next_attempt_at = None;
            Decision::new(Outcome::Applied)
                .with_write(Cause::FailStep, Some(r), to)
                .effect(resume_effect(&token, &owed))
                .effect(Effect::MarkResumed { generation: r.generation, step })
        }
        StepOutcome::Succeeded if requirements_met(plan, step, &to.inputs) => {
            let owed = Resume::Success { output: Value::Object(to.inputs.clone()) };
            to.next_attempt_at = None;
            to.state = State::Advancing { step };
            to.owed = Some(owed.clone());
            Decision::new(Outcome::Applied)
                .with_write(Cause::Complete, Some(r), to)
                .effect(resume_effect(&token, &owed))
                .effect(Effect::MarkResumed { generation: r.generation, step })
        }
        StepOutcome::Succeeded => Decision::new(Outcome::Applied).with_write(Cause::Merge, Some(r), to),
        StepOutcome::InProgress => Decision::new(Outcome::Applied)
            .with_write(Cause::Merge, Some(r), to)
            .effect(Effect::SendTaskHeartbeat { token }),
    }
}

/// When the next attempt is due if `outcome` fails attempt `running` of `step` (whose deadline
/// is `deadline`), a failure that may be retried with an attempt left: `None` when the outcome
/// ends the step (or is no failure).
fn retry_due(
    plan: &Plan,
    (step, running, deadline): (u32, u32, Option<OffsetDateTime>),
    outcome: &StepOutcome,
    now: OffsetDateTime,
) -> Option<OffsetDateTime> {
    let StepOutcome::Failed { retryable, .. } = outcome else { return None };
    let may_retry = *retryable || crate::mutants::active(crate::mutants::Mutation::NonRetryableRetried);
    may_retry.then(|| next_attempt_due(plan, step, running, deadline, now)).flatten()
}

/// When the next attempt of `step` is due, after attempt `running` failed: `None` when the step
/// has no `retry`, no attempt is left, or the next one could not start before the step's
/// `deadline` (which covers every attempt).
fn next_attempt_due(
    plan: &Plan,
    step: u32,
    running: u32,
    deadline: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Option<OffsetDateTime> {
    let policy = plan.retry_of(step)?;
    let unbounded = crate::mutants::active(crate::mutants::Mutation::RetryUnbounded);
    let next = running.checked_add(1).filter(|n| *n <= policy.retry.attempts || unbounded)?;
    let wait = time::Duration::try_from(policy.retry.wait_before(next, policy.timeout)).ok()?;
    let wait = if crate::mutants::active(crate::mutants::Mutation::RetryWithoutBackoff) {
        time::Duration::ZERO
    } else {
        wait
    };
    let due = now + wait;
    deadline.is_none_or(|deadline| due < deadline).then_some(due)
}

/// `d` with a heartbeat on `token` when `step` keeps its token alive between attempts
/// ([`Plan::beats_between_attempts`]): Step Functions restarts a heartbeat timer only on
/// SendTaskHeartbeat, and hears no worker while baton waits out a backoff (found by review: a
/// step whose attempt failed late in its heartbeat window was timed out during the backoff,
/// with attempts left).
fn beat_between_attempts(d: Decision, plan: &Plan, step: u32, token: &TaskToken) -> Decision {
    if plan.beats_between_attempts(step) {
        d.effect(Effect::SendTaskHeartbeat { token: token.clone() })
    } else {
        d
    }
}

/// The next attempt's task, once its backoff has passed (`due`): a heartbeat first when the
/// step keeps its token alive between attempts, then the task published, then marked. A sweep
/// late past the step's `deadline` opens nothing: Step Functions has timed it out.
fn open_attempt(
    plan: &Plan,
    (generation, step, attempt): (u32, u32, u32),
    (due, deadline, token): (OffsetDateTime, Option<OffsetDateTime>, Option<&TaskToken>),
    now: OffsetDateTime,
) -> Vec<Effect> {
    if due > now || deadline.is_some_and(|deadline| now >= deadline) {
        return Vec::new();
    }
    let beat = token.filter(|_| plan.beats_between_attempts(step));
    beat.map(|token| Effect::SendTaskHeartbeat { token: token.clone() })
        .into_iter()
        .chain([
            Effect::CreateTask { generation, step, attempt },
            Effect::MarkAttemptOpened { generation, step, attempt },
        ])
        .collect()
}

/// Every attempt due of the step the record waits at, or of its group's open branches.
fn open_due_attempts(plan: &Plan, r: &Record, now: OffsetDateTime) -> Vec<Effect> {
    let State::Waiting { step } = r.state else { return Vec::new() };
    let g = r.generation;
    let step_due = r.next_attempt_at.map(|due| ((g, step, r.attempt()), (due, r.deadline, r.token.as_ref())));
    let branches_due = r.branches.iter().filter(|b| b.is_open()).filter_map(|b| {
        b.next_attempt_at.map(|due| ((g, b.step, b.attempt()), (due, b.deadline, b.token.as_ref())))
    });
    step_due.into_iter().chain(branches_due).flat_map(|(a, d)| open_attempt(plan, a, d, now)).collect()
}

/// The task of `attempt` went out: nothing more is due for it.
fn on_attempt_opened(
    r: &Record,
    (generation, step, attempt): (u32, u32, u32),
    now: OffsetDateTime,
) -> Decision {
    let mut to = r.next(r.state, now);
    let due = match to.branches.iter_mut().find(|b| b.step == step && b.is_open()) {
        Some(b) if b.attempt() == attempt => b.next_attempt_at.take(),
        Some(_) => None,
        None if r.attempt() == attempt && r.state == (State::Waiting { step }) => to.next_attempt_at.take(),
        None => None,
    };
    if generation != r.generation || r.state.kind() != Kind::Waiting || due.is_none() {
        return Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    }
    Decision::new(Outcome::Applied).with_write(Cause::AttemptOpened, Some(r), to)
}

/// Remembers that the input `id` was applied to `step` of `to` (the list bounded), unless the
/// inputs it leaves gathered, `size` bytes as JSON, pass [`MAX_STEP_INPUT_BYTES`]: then the
/// refusal, ledgered, is returned.
fn admit(
    to: &mut Record,
    size: usize,
    (id, source): (&EventId, Source),
    hash: &str,
    step: u32,
) -> Option<Decision> {
    if size > MAX_STEP_INPUT_BYTES {
        return Some(
            Decision::new(Outcome::Rejected(RejectReason::InputsTooLarge))
                .effect(Effect::Ledger { reason: IgnoreReason::InputsTooLarge }),
        );
    }
    to.applied.push(AppliedInput {
        id: id.clone(),
        hash: payload_fingerprint(hash).to_owned(),
        step: Some(step),
        generation: Some(to.generation),
        source: Some(source),
    });
    let excess = to.applied.len().saturating_sub(REMEMBERED_INPUTS);
    to.applied.drain(..excess);
    None
}

/// Are all of the step's required inputs present (and not null)?
pub fn requirements_met(plan: &Plan, step: u32, inputs: &Map<String, Value>) -> bool {
    plan.steps
        .get(step as usize)
        .is_some_and(|requires| requires.iter().all(|name| inputs.get(name).is_some_and(|v| !v.is_null())))
}

fn resume_effect(token: &TaskToken, owed: &Resume) -> Effect {
    match owed {
        Resume::Success { output } => {
            Effect::SendTaskSuccess { token: token.clone(), output: output.clone() }
        }
        Resume::Failure { error, cause } => fail_token(token, error, cause),
    }
}

fn on_finished(plan: &Plan, r: &Record, generation: u32, finish: &Finish, now: OffsetDateTime) -> Decision {
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    let left = match finish {
        Finish::Succeeded => group::left(plan, r, u32::MAX, now),
        _ => None,
    };
    let r = left.as_ref().unwrap_or(r);
    let (to_state, cause) = match finish {
        Finish::Succeeded
            if !r.missed.is_empty()
                && !crate::mutants::active(crate::mutants::Mutation::DegradedForgotten) =>
        {
            (State::Degraded, Cause::ReportSucceeded)
        }
        Finish::Succeeded => (State::Succeeded, Cause::ReportSucceeded),
        Finish::Failed { .. } => (State::Failed, Cause::ReportFailed),
        Finish::TimedOut => (State::TimedOut, Cause::ReportTimedOut),
        Finish::CompensationEnded { error, cause } => {
            return compensation::on_ended(plan, r, generation, (error, cause), now);
        }
    };
    if r.state == to_state {
        return Decision::new(Outcome::Duplicate);
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    let fits = match finish {
        Finish::Succeeded => {
            r.state == State::Advancing { step: plan.last_position() }
                || left.is_some() && r.state == State::Waiting { step: plan.last_position() }
        }
        _ => true,
    };
    if !fits || !is_allowed(Some(r.state), to_state, cause) {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    let mut to =
        Record { token: None, deadline: None, owed: None, next_attempt_at: None, ..r.next(to_state, now) };
    group::close_open_branches(&mut to, matches!(finish, Finish::TimedOut).then_some(now));
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}

fn on_tick(plan: &Plan, record: Option<&Record>, now: OffsetDateTime) -> Decision {
    let nothing = Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    let Some(r) = record else { return nothing };
    let idle = now - r.updated_at;
    match (r.state, &r.owed, &r.token) {
        (State::Pending, _, _) if idle >= RESTART_PENDING_AFTER => {
            Decision::new(Outcome::Applied).effect(Effect::StartExecution { generation: r.generation })
        }
        // The resume again, then the mark that it went out: a resume that finds its token gone
        // owes nothing more, and the record leaves the sweeper's work list (found by an attack
        // test: a crowd of advancing records whose executions were stopped held it for good).
        (State::Advancing { step }, Some(owed), Some(token)) if idle >= resend_after() => {
            Decision::new(Outcome::Applied)
                .effect(resume_effect(token, owed))
                .effect(Effect::MarkResumed { generation: r.generation, step })
        }
        (State::Waiting { .. } | State::Advancing { .. }, _, _) => {
            // A group may have attempts due and resumes owed at once.
            let mut d = Decision::new(Outcome::Applied);
            d.effects = open_due_attempts(plan, r, now);
            if idle >= resend_after() {
                d.effects.extend(group::resend_owed(r).map(|owed| owed.effects).unwrap_or_default());
            }
            if d.effects.is_empty() { nothing } else { d }
        }
        _ => nothing,
    }
}

/// Whether `input` answers, by name, the running attempt of a step, branch or compensation of
/// `record` whose task is not yet marked out: the mark follows the publish (by milliseconds, or,
/// after a crash between them, by a sweep), so the engine has the sender retry in a moment
/// rather than answer it for good (found by review: such an answer was `ignored` and lost).
pub fn task_not_out(record: Option<&Record>, input: &Input) -> bool {
    let Input::StepInput { id, source, step, generation, attempt: Some(attempt), .. } = input else {
        return compensation::task_not_out(record, input);
    };
    let Some(r) = record.filter(|r| r.state.kind() == Kind::Waiting) else { return false };
    let wait = match r.branches.iter().find(|b| b.step == *step && b.is_open()) {
        Some(b) => Some((&b.attempts, b.next_attempt_at)),
        None => (r.state.step() == Some(*step)).then_some((&r.attempts, r.next_attempt_at)),
    };
    let Some((failed, next_at)) = wait else { return false };
    // A repeat of an input applied to this step in this run (one event may feed several steps:
    // the same id applied elsewhere is another input; found by an attack test).
    let repeat = r.applied.iter().any(|a| {
        &a.id == id
            && a.source.is_none_or(|s| s == *source)
            && a.step == Some(*step)
            && a.generation.is_none_or(|g| g == r.generation)
    });
    let this_run = generation.is_none_or(|g| g == r.generation);
    next_at.is_some()
        && *attempt == running_attempt(failed)
        && this_run
        && !repeat
        && !crate::mutants::active(crate::mutants::Mutation::PublishedByTheClock)
}

mod compensation;
mod group;
mod stranded;
pub use compensation::{
    CANCELLED_ERROR, COMPENSATING_ERROR, Compensation, SkipReason, Trigger, Undo, UndoOutcome,
    plan as compensation_plan,
};
pub use group::{group_failed, unsettled};
pub use stranded::{NOT_FOUND, RUNNING, ended_as, execution_gone};
#[cfg(test)]
mod tests;
