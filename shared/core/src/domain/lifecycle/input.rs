//! Everything that can happen to a record ([`Input`]), and how each is classified ([`Outcome`]):
//! applied, buffered, a duplicate, ignored with a reason, or rejected with a reason. Nothing is
//! dropped without a name.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::record::Until;
use super::wait::WaitId;
use crate::domain::ids::{EventId, TaskToken};

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
    /// A domain event matched the workflow's `start.when`; `untils`, what its `timer: { until }`
    /// steps read from it ([`Input::start`] for a workflow without one).
    Start {
        event: EventId,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        untils: Vec<Until>,
    },
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
    /// A wait's owed resume went out to `token`: it reached Step Functions (`delivered`), or
    /// found the token gone (then an earlier copy may have reached it, or the wait ended without
    /// it). A mark for a token the wait no longer holds (it was reparked since) is nothing.
    Resumed { wait: WaitId, token: TaskToken, delivered: bool },
    /// The task of `attempt` of a wait went out (the first, or the next after a backoff).
    AttemptOpened { wait: WaitId, attempt: u32 },
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
    /// The start of a run by `event`, for a workflow with no `timer: { until }` step.
    pub fn start(event: EventId) -> Input {
        Input::Start { event, untils: Vec::new() }
    }

    /// The id of an input from outside, if it has one (for logs and the ledger).
    pub fn id(&self) -> Option<&EventId> {
        match self {
            Input::Start { event, .. } => Some(event),
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
