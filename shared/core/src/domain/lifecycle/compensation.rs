//! Compensation: undoing, in reverse, the steps a failed (or cancelled) run completed.
//!
//! When a run fails or times out after steps completed, the state machine's Catch leads into a
//! reverse chain of compensation waits (`asl.rs`), one per step that declares `compensate`, a
//! group's together. Each wait sends `undo_ready` with its token; baton publishes the
//! compensation's task (`baton.compensation.requested`), and the external system acknowledges it
//! by a callback marked as a compensation. baton then resumes the wait, and Step Functions goes
//! on to the compensation before it.
//!
//! - **The plan is fixed when compensation begins** ([`plan`]): every step of the positions up
//!   to the one that failed, in reverse, a group's branches together. A step that completed and
//!   declares `compensate` is run; one that completed without it, or declares it and did not
//!   complete, is in the plan as skipped with its reason. The record moves to `compensating`
//!   with the first `undo_ready` (or with `cancel --compensate`), and no forward step moves after
//!   that.
//! - **A skipped step's wait is resumed at once.** The chain is fixed at synth time, the plan
//!   at run time: a branch that never completed still has its wait, answered `skipped`.
//! - **Attempts.** A failed acknowledgement with attempts left makes the next attempt due at
//!   once, inside the same wait; the sweeper publishes its task (the callback function cannot
//!   reach the outbound queue), as it does a retried step's. The last failure ends the compensation `failed`;
//!   the chain still goes on, so one stuck compensation does not keep the others from running.
//! - **A wait that Step Functions passed without baton's answer timed out.** The chain moves
//!   only when a wait is resumed or times out, so the next `undo_ready` of an earlier position
//!   (or the final report) settles every later compensation still open as `timed_out`.
//! - **The outcome**, when Step Functions reports the chain's end: `compensated` when every
//!   compensation run was acknowledged, `compensation_failed` when any was not; with nothing to
//!   run, how the forward run ended (`failed`, `timed_out`, `cancelled`).

use serde::{Deserialize, Serialize};
use serde_json::json;
use time::OffsetDateTime;

use super::{
    AppliedInput, BranchOutcome, Cause, Decision, Effect, FailedAttempt, Finish, IgnoreReason, Input,
    Outcome, Plan, Record, RejectReason, Resume, Source, State, StepOutcome, attempt_gate, fail_token, group,
    payload_fingerprint, resend_after, resume_effect, running_attempt,
};
use crate::domain::ids::{EventId, TaskToken};
use crate::mutants::{Mutation, active as mutant};

/// The error a cancel with `--compensate` fails the parked tokens with: the state machine's
/// Catch leads it into the compensation chain.
pub const CANCELLED_ERROR: &str = "baton.Cancelled";
/// The error a token reached while compensation runs is failed with.
pub const COMPENSATING_ERROR: &str = "baton.Compensating";
/// The error name Step Functions gives a missed deadline.
pub const TIMEOUT_ERROR: &str = "States.Timeout";
/// How many acknowledgement ids one compensation remembers, to recognise redelivery.
const REMEMBERED_ACKS: usize = 16;

/// Why compensation began: how the forward run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trigger {
    Failed { error: String, cause: String },
    TimedOut,
    Cancelled { reason: String },
}

impl Trigger {
    /// The trigger a Catch's error names.
    pub fn from_error(error: &str, cause: &str) -> Trigger {
        match error {
            TIMEOUT_ERROR => Trigger::TimedOut,
            CANCELLED_ERROR => Trigger::Cancelled { reason: cause.to_owned() },
            _ => Trigger::Failed { error: error.to_owned(), cause: cause.to_owned() },
        }
    }

    /// Where a run that had nothing to undo ends.
    fn plain_end(&self) -> State {
        match self {
            Trigger::Failed { .. } => State::Failed,
            Trigger::TimedOut => State::TimedOut,
            Trigger::Cancelled { .. } => State::Cancelled,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Trigger::Failed { .. } => "failed",
            Trigger::TimedOut => "timed_out",
            Trigger::Cancelled { .. } => "cancelled",
        }
    }
}

/// A record's compensation: why it began, when, and its plan, fixed then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compensation {
    pub trigger: Trigger,
    #[serde(with = "time::serde::rfc3339")]
    pub began_at: OffsetDateTime,
    /// The step the record was at when it began (a group's first branch; `None`: pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u32>,
    /// In the order they run: by position, last first; a group's branches side by side.
    pub undos: Vec<Undo>,
}

impl Compensation {
    /// The compensations that run (not skipped).
    pub fn run(&self) -> impl Iterator<Item = &Undo> {
        self.undos.iter().filter(|u| u.skip.is_none())
    }

    /// The steps whose compensation ran and was not acknowledged: they stay undone.
    pub fn undone(&self) -> impl Iterator<Item = &Undo> {
        self.run().filter(|u| u.outcome != Some(UndoOutcome::Acknowledged))
    }

    fn undo(&self, step: u32) -> Option<&Undo> {
        self.undos.iter().find(|u| u.step == step)
    }

    fn undo_mut(&mut self, step: u32) -> Option<&mut Undo> {
        self.undos.iter_mut().find(|u| u.step == step)
    }
}

/// One step in the compensation plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Undo {
    pub step: u32,
    /// Why it is not run (`None`: it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<SkipReason>,
    /// Its wait's token, once Step Functions reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TaskToken>,
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub deadline: Option<OffsetDateTime>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<FailedAttempt>,
    /// Set while the running attempt's task is not known to be out (the first's from when its
    /// wait is reached, a next one's from the failure before it): until its mark, nothing
    /// answers that attempt, and the sweeper publishes it again when it is due.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// How it ended (`None`: not yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<UndoOutcome>,
    /// The resume its wait is owed, until it reaches Step Functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owed: Option<Resume>,
    /// The acknowledgements applied to it, to recognise redelivery.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acks: Vec<AppliedInput>,
}

impl Undo {
    fn new(step: u32, skip: Option<SkipReason>) -> Undo {
        Undo {
            step,
            skip,
            token: None,
            deadline: None,
            attempts: Vec::new(),
            next_attempt_at: None,
            outcome: None,
            owed: None,
            acks: Vec::new(),
        }
    }

    /// The attempt running (or next to go out).
    pub fn attempt(&self) -> u32 {
        running_attempt(&self.attempts)
    }

    /// Where it stands once compensation began: its outcome, or `skipped`, `waiting` (its task
    /// out), `pending` (its wait not reached yet).
    pub fn state(&self) -> &'static str {
        match (self.outcome, self.skip) {
            (Some(outcome), _) => outcome.as_str(),
            (None, Some(_)) => "skipped",
            (None, None) if self.waits() => "waiting",
            (None, None) => "pending",
        }
    }

    /// Waiting for its acknowledgement: reached, run, and not ended.
    pub fn waits(&self) -> bool {
        self.token.is_some() && self.skip.is_none() && self.outcome.is_none()
    }
}

/// Why a step in the plan is not compensated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// It declares `compensate` but did not complete in this generation.
    NotCompleted,
    /// It completed, and declares no `compensate`.
    NotDeclared,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NotCompleted => "not_completed",
            SkipReason::NotDeclared => "no_compensate_declared",
        }
    }
}

/// How one compensation ended. Each planned compensation ends with exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndoOutcome {
    Acknowledged,
    /// Its last attempt failed.
    Failed,
    /// Step Functions passed its wait without baton's answer (its deadline, or its `undo_ready`
    /// lost).
    TimedOut,
    Skipped,
}

impl UndoOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            UndoOutcome::Acknowledged => "acknowledged",
            UndoOutcome::Failed => "failed",
            UndoOutcome::TimedOut => "timed_out",
            UndoOutcome::Skipped => "skipped",
        }
    }
}

/// The compensation plan for `r` as it stands: what compensation would do if the run failed
/// where the record is, by position, last first. A record already compensating has its own,
/// fixed when it began.
pub fn plan(plan: &Plan, r: &Record) -> Vec<Undo> {
    let Some(at) = r.state.step() else { return Vec::new() };
    let current = plan.position(at);
    let mut undos = Vec::new();
    let mut first = current.first;
    let mut last = current.last;
    loop {
        for step in first..=last {
            let completed = completed(plan, r, step, current.first) || mutant(Mutation::UndoOfIncompleteStep);
            let declared = plan.compensation_of(step).is_some();
            match (completed, declared) {
                (true, true) => undos.push(Undo::new(step, None)),
                (true, false) => undos.push(Undo::new(step, Some(SkipReason::NotDeclared))),
                (false, true) => undos.push(Undo::new(step, Some(SkipReason::NotCompleted))),
                (false, false) => {}
            }
        }
        let Some(before) = first.checked_sub(1) else { break };
        let position = plan.position(before);
        (first, last) = (position.first, position.last);
    }
    undos
}

/// Whether `step` completed in the record's generation, the record being at the position that
/// starts at `current`.
fn completed(plan: &Plan, r: &Record, step: u32, current: u32) -> bool {
    // A branch whose success baton applied did its work, even where Step Functions timed it
    // out before the resume arrived (an optional branch is then missed, a required one fails
    // its group): its sender was told `applied` (found by review).
    let applied = r.succeeded.contains(&step) && !mutant(Mutation::RacedSuccessForgotten);
    if step < current {
        return !r.missed.contains(&step) || applied;
    }
    if plan.group_of(step).is_some() {
        return applied
            || r.branches.iter().any(|b| b.step == step && b.outcome == Some(BranchOutcome::Succeeded));
    }
    let at_step = r.state == State::Advancing { step } || r.state == State::Stranded { at: Some(step) };
    at_step && (matches!(r.owed, Some(Resume::Success { .. })) || r.succeeded.contains(&step))
}

/// `r` moved into compensation for `trigger`: the plan fixed, the forward step's token, deadline
/// and owed resume dropped, and open branches closed.
fn begin(p: &Plan, r: &Record, trigger: Trigger, now: OffsetDateTime) -> Record {
    let undos = plan(p, r);
    // The token stays, as in a cancelled record: a copy of its step_ready is then known.
    let mut to = Record {
        deadline: None,
        owed: None,
        next_attempt_at: None,
        compensation: Some(Compensation { trigger, began_at: now, at: r.state.step(), undos }),
        ..r.next(State::Compensating, now)
    };
    for b in &mut to.branches {
        b.owed = None;
    }
    group::close_open_branches(&mut to, None);
    to
}

/// Decides the inputs compensation owns: every input of a record compensating, and the
/// compensation inputs of any other (`None`: the input is decided as before compensation; a
/// `cancel --compensate` with nothing to undo, as a plain cancel).
pub(super) fn route(
    plan: &Plan,
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Option<Decision> {
    if let Input::UndoInput { step, .. } = input
        && *step as usize >= plan.steps.len()
    {
        return Some(Decision::new(Outcome::Rejected(RejectReason::UnknownStep)));
    }
    if let Some(r) = record.filter(|r| r.state == State::Compensating) {
        return Some(decide(plan, r, input, now));
    }
    let nothing = || Decision::ignored(IgnoreReason::OutOfOrder);
    Some(match (input, record) {
        (Input::UndoReady { token, .. }, None) => {
            nothing().effect(fail_token(token, "baton.NoRecord", "no workflow record for this execution"))
        }
        (Input::UndoReady { .. }, Some(r)) => begin_at_undo_ready(plan, r, input, now),
        (Input::UndoInput { .. }, Some(r)) => on_undo_input(plan, r, input, now),
        (Input::Finished { generation, finish: Finish::CompensationEnded { error, cause } }, Some(r)) => {
            on_ended(plan, r, *generation, (error, cause), now)
        }
        (Input::CancelCompensate { reason }, Some(r)) => return on_cancel(plan, r, reason, now),
        (
            Input::UndoInput { .. } | Input::Finished { finish: Finish::CompensationEnded { .. }, .. },
            None,
        ) => nothing(),
        _ => return None,
    })
}

/// Decides an input for a record that is compensating.
pub(super) fn decide(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    match input {
        Input::Start { event } if r.start_events.contains(event) => Decision::new(Outcome::Duplicate),
        Input::Start { .. } => Decision::ignored(IgnoreReason::AlreadyRunning),
        Input::StepReady { generation, step, token, .. } => {
            on_step_ready(plan, r, (*generation, *step), token)
        }
        Input::StepInput { id, hash, source, step, generation, .. } => match generation {
            Some(g) if *g > r.generation => {
                Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: *g, step: *step })
            }
            _ => super::repeated_input(r, (id, *source), hash, *step, now).unwrap_or_else(|| {
                if generation.is_some_and(|g| g < r.generation) {
                    return Decision::ignored(IgnoreReason::StaleGeneration);
                }
                if mutant(Mutation::CompensatingNotLedgered) {
                    return Decision::new(Outcome::Ignored(IgnoreReason::Compensating));
                }
                Decision::ignored(IgnoreReason::Compensating)
            }),
        },
        // Decided by `stranded::route`.
        Input::ExecutionGone { .. } | Input::End { .. } => {
            Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed))
        }
        Input::UndoReady { generation, step, token, deadline, .. } => {
            on_undo_ready(r, (*generation, *step), token, *deadline, now)
        }
        Input::UndoInput { .. } => on_undo_input(plan, r, input, now),
        Input::Finished { generation, finish } => match finish {
            Finish::Succeeded => Decision::ignored(IgnoreReason::OutOfOrder),
            _ => on_ended(plan, r, *generation, ("", ""), now),
        },
        Input::BranchEnded { .. } | Input::Cancel { .. } | Input::CancelCompensate { .. } => {
            Decision::ignored(IgnoreReason::Compensating)
        }
        Input::Resumed { generation, step, .. } => on_resumed(r, (*generation, *step), now),
        Input::AttemptOpened { generation, step, attempt } => {
            on_attempt_opened(r, (*generation, *step, *attempt), now)
        }
        Input::Tick => on_tick(r, now),
    }
}

/// A step's `step_ready` while compensating. A token the record knows (the one it was parked on,
/// or a branch's), or a step before where the run stood, was resumed, failed or closed already:
/// a copy of its report is owed nothing (found by the simulation: a resumed token got a second,
/// different resume). Any other (a step past where the run stood, which a cancel's failure of
/// optional branches let Step Functions reach; or a branch of that group never reached) is
/// failed, so that the chain runs. Another generation's is owed nothing either: its execution
/// ended before this generation started.
fn on_step_ready(plan: &Plan, r: &Record, (generation, step): (u32, u32), token: &TaskToken) -> Decision {
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    let d = Decision::ignored(IgnoreReason::Compensating);
    let known = r.token.as_ref() == Some(token) || r.branches.iter().any(|b| b.token.as_ref() == Some(token));
    let at = r.compensation.as_ref().and_then(|c| c.at).map(|at| plan.position(at).first);
    if known || at.is_some_and(|first| step < first) {
        return d;
    }
    d.effect(fail_token(token, COMPENSATING_ERROR, "the workflow is compensating; no forward step runs"))
}

/// Step Functions reached a compensation's wait. A record not compensating yet begins, with the
/// run's error as its trigger, in the same write.
pub(super) fn begin_at_undo_ready(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    let Input::UndoReady { generation, step, token, deadline, error, cause } = input else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    // Another generation's execution ended before this one started (a record restarts only
    // once terminal): its wait is owed nothing, and was perhaps resumed already.
    if *generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    // The record ended after compensating: the execution ended with its chain, and every wait
    // of it was resumed or passed (a copy after the end is owed nothing more).
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
    let mut to = begin(plan, r, Trigger::from_error(error, cause), now);
    let effects = match to.compensation.as_ref().and_then(|c| c.undo(*step)) {
        Some(_) => reach(&mut to, (*generation, *step), token, (*deadline, now)),
        None => vec![skip_unplanned(token)],
    };
    let mut d = Decision::new(Outcome::Applied).with_write(Cause::Compensate, Some(r), to);
    d.effects = effects;
    d
}

/// The answer to a wait the plan has no step for (a branch the record never reached): nothing
/// to undo.
fn skip_unplanned(token: &TaskToken) -> Effect {
    Effect::SendTaskSuccess { token: token.clone(), output: json!({"compensation": "skipped"}) }
}

/// A compensation's wait reached, in a compensating record: its task goes out (or, skipped,
/// its wait is resumed at once).
fn on_undo_ready(
    r: &Record,
    (generation, step): (u32, u32),
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    let Some(c) = &r.compensation else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    let Some(u) = c.undo(step) else {
        return Decision::ignored(IgnoreReason::OutOfOrder).effect(skip_unplanned(token));
    };
    if u.token.as_ref() == Some(token) {
        // Redelivery of the wait that already won: the task's creation and the resume are
        // idempotent, so a crash after the write is repaired by running them again.
        let d = Decision::new(Outcome::Duplicate);
        return match (&u.owed, u.next_attempt_at) {
            (Some(owed), _) => d.effect(resume_effect(token, owed)),
            (None, Some(_)) if u.waits() && u.deadline.is_none_or(|d| now < d) => {
                let mut d = d;
                d.effects.extend(open_attempt(generation, step, u.attempt()));
                d
            }
            (None, _) => d,
        };
    }
    // Reported again with a new token and a later deadline: its send was retried and the wait
    // re-entered; only the newest token can be resumed (`lifecycle::repark`).
    if u.waits() && u.deadline.is_some_and(|d| deadline > d) {
        let mut to = r.next(r.state, now);
        let due = u.next_attempt_at;
        if let Some(u) = to.compensation.as_mut().and_then(|c| c.undo_mut(step)) {
            u.token = Some(token.clone());
            u.deadline = Some(deadline);
        }
        let mut d = Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
        if due.is_some() {
            d.effects.extend(open_attempt(generation, step, u.attempt()));
        }
        return d;
    }
    if u.token.is_some() || u.outcome.is_some() {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    let mut to = r.next(r.state, now);
    let effects = reach(&mut to, (generation, step), token, (deadline, now));
    let mut d = Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
    d.effects = effects;
    d
}

/// Records in `to` that the compensation of `step` was reached, with its token: every
/// compensation before its group in the plan is settled (Step Functions passed it, with baton's
/// answer or without: still open, it timed out), and its task is owed, or, skipped, its resume.
fn reach(
    to: &mut Record,
    (generation, step): (u32, u32),
    token: &TaskToken,
    (deadline, now): (OffsetDateTime, OffsetDateTime),
) -> Vec<Effect> {
    let Some(c) = to.compensation.as_mut() else { return Vec::new() };
    let index = c.undos.iter().position(|x| x.step == step).unwrap_or(0);
    let group = group_start(c, index);
    for passed in c.undos.iter_mut().take(group).filter(|x| x.outcome.is_none()) {
        passed.outcome =
            Some(if passed.skip.is_some() { UndoOutcome::Skipped } else { UndoOutcome::TimedOut });
        passed.next_attempt_at = None;
        passed.owed = None;
    }
    let Some(u) = c.undo_mut(step) else { return Vec::new() };
    u.token = Some(token.clone());
    u.deadline = Some(deadline);
    // Reported after its deadline: Step Functions has passed the wait (found by review: its task
    // went out for a wait already timed out).
    if deadline <= now && u.skip.is_none() {
        u.outcome = Some(UndoOutcome::TimedOut);
        return Vec::new();
    }
    let Some(reason) = u.skip else {
        // Until its task is marked out, nothing answers the attempt (see `next_attempt_at`).
        u.next_attempt_at = Some(now);
        return open_attempt(generation, step, 1).to_vec();
    };
    let owed = Resume::Success { output: json!({"compensation": "skipped", "reason": reason.as_str()}) };
    u.outcome = Some(UndoOutcome::Skipped);
    u.owed = Some(owed.clone());
    vec![resume_effect(token, &owed), Effect::MarkResumed { generation, step }]
}

/// The task of `attempt` of the compensation of `step`: published, then marked out.
fn open_attempt(generation: u32, step: u32, attempt: u32) -> [Effect; 2] {
    [
        Effect::CreateUndoTask { generation, step, attempt },
        Effect::MarkAttemptOpened { generation, step, attempt },
    ]
}

/// Where the group of the plan's `index`-th compensation starts in the plan: the compensations
/// of one position are listed side by side, in step order.
fn group_start(c: &Compensation, index: usize) -> usize {
    let mut start = index;
    while start > 0 && c.undos[start - 1].step < c.undos[start].step {
        start -= 1;
    }
    start
}

/// Whether `input`, an acknowledgement of the running attempt of a compensation of `record`,
/// comes while that attempt's task is not yet marked out: its task may be out (the mark
/// follows the publish), so the engine has the sender retry in a moment rather than answer for
/// good (found by review: an acknowledgement in that window was answered `ignored` and lost).
pub(super) fn task_not_out(record: Option<&Record>, input: &Input) -> bool {
    let Input::UndoInput { id, step, generation, attempt, .. } = input else { return false };
    let Some(r) = record.filter(|r| r.state == State::Compensating) else { return false };
    let Some(u) = r.compensation.as_ref().and_then(|c| c.undo(*step)) else { return false };
    let repeat = u.acks.iter().any(|a| a.id == *id);
    let this_run = generation.is_none_or(|g| g == r.generation);
    u.waits()
        && u.next_attempt_at.is_some()
        && !repeat
        && this_run
        && attempt.is_none_or(|a| a == u.attempt())
}

/// A callback for a compensation: acknowledged, or an attempt failed.
pub(super) fn on_undo_input(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    let Input::UndoInput { id, hash, source, step, outcome, generation, attempt } = input else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    if generation.is_some_and(|g| g != r.generation) {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    let Some(c) = &r.compensation else {
        // Compensation has not begun: no compensation task went out.
        let reason = if r.state.is_terminal() { IgnoreReason::Terminal } else { IgnoreReason::OutOfOrder };
        return Decision::ignored(reason);
    };
    let Some(u) = c.undo(*step) else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    if let Some(seen) = u.acks.iter().find(|a| a.id == *id && a.source == Some(*source)) {
        if payload_fingerprint(&seen.hash) != payload_fingerprint(hash) {
            return Decision::new(Outcome::Rejected(RejectReason::IdempotencyKeyReused))
                .effect(Effect::Ledger { reason: IgnoreReason::IdempotencyKeyReused });
        }
        let d = Decision::new(Outcome::Duplicate);
        return match (&u.owed, &u.token) {
            (Some(owed), Some(token)) if now - r.updated_at >= resend_after() => d
                .effect(resume_effect(token, owed))
                .effect(Effect::MarkResumed { generation: r.generation, step: *step }),
            _ => d,
        };
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    if u.skip.is_some() || u.token.is_none() {
        // Not run, or its task not out yet: nothing this could acknowledge.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    if u.outcome.is_some() {
        return Decision::ignored(IgnoreReason::StepAlreadyAdvanced);
    }
    // The running attempt's task is not known to be out: nothing can answer it yet (found by
    // the simulation: a failure named the attempt before its task went out, and the next
    // attempt's was published with it skipped).
    if u.next_attempt_at.is_some() {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    if let Some(refused) = attempt_gate((&u.attempts, None), (id, *source), *attempt, outcome, now) {
        return refused;
    }
    acknowledge(plan, r, (id, *source, hash), *step, outcome, now)
}

/// A new acknowledgement applied to the waiting compensation of `step`.
fn acknowledge(
    plan: &Plan,
    r: &Record,
    (id, source, hash): (&EventId, Source, &str),
    step: u32,
    outcome: &StepOutcome,
    now: OffsetDateTime,
) -> Decision {
    let generation = r.generation;
    let mut to = r.next(r.state, now);
    let Some(u) = to.compensation.as_mut().and_then(|c| c.undo_mut(step)) else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    u.acks.push(AppliedInput {
        id: id.clone(),
        hash: payload_fingerprint(hash).to_owned(),
        step: Some(step),
        generation: Some(generation),
        source: Some(source),
    });
    let excess = u.acks.len().saturating_sub(REMEMBERED_ACKS);
    u.acks.drain(..excess);
    let running = u.attempt();
    let end = match outcome {
        StepOutcome::Succeeded => UndoOutcome::Acknowledged,
        StepOutcome::Failed { error, cause, retryable } => {
            let attempts = plan.compensation_of(step).map_or(1, |c| c.attempts);
            if *retryable && (running < attempts || mutant(Mutation::UndoRetryUnbounded)) {
                // The next attempt is due at once; the sweeper publishes it (the callback
                // function has no access to the outbound queue), as a retried step's.
                u.attempts.push(FailedAttempt::new(running, (error, cause), (id, source), now));
                u.next_attempt_at = Some(now);
                return Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
            }
            u.attempts.push(FailedAttempt::new(running, (error, cause), (id, source), now));
            UndoOutcome::Failed
        }
        StepOutcome::InProgress => return Decision::ignored(IgnoreReason::OutOfOrder),
    };
    let owed = Resume::Success { output: json!({"compensation": end.as_str()}) };
    u.outcome = Some(end);
    u.next_attempt_at = None;
    u.owed = Some(owed.clone());
    let token = u.token.clone();
    let d = Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
    match token {
        Some(token) => {
            d.effect(resume_effect(&token, &owed)).effect(Effect::MarkResumed { generation, step })
        }
        None => d,
    }
}

/// Step Functions passed the last compensation: every one still open is settled, and the record
/// ends. A record that never heard a compensation's wait (every `undo_ready` lost) begins and
/// ends in the one write.
pub(super) fn on_ended(
    plan: &Plan,
    r: &Record,
    generation: u32,
    (error, cause): (&str, &str),
    now: OffsetDateTime,
) -> Decision {
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    if r.state.is_terminal() {
        return if r.compensation.is_some() {
            Decision::new(Outcome::Duplicate)
        } else {
            Decision::ignored(IgnoreReason::Terminal)
        };
    }
    let mut to = if r.state == State::Compensating {
        r.next(r.state, now)
    } else {
        begin(plan, r, Trigger::from_error(error, cause), now)
    };
    let Some(c) = to.compensation.as_mut() else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    let planted = mutant(Mutation::CompensatedDespiteFailure) && r.state == State::Compensating;
    to.state = if planted && c.run().next().is_some() { State::Compensated } else { settle(c) };
    Decision::new(Outcome::Applied).with_write(Cause::CompensationEnded, Some(r), to)
}

/// Ends every compensation still open (timed out: nothing will answer it now; a skipped one,
/// skipped) and says where the record ends: `compensated` when every compensation run was
/// acknowledged, `compensation_failed` when any was not, and with nothing run, how the forward
/// run ended.
pub(super) fn settle(c: &mut Compensation) -> State {
    for u in &mut c.undos {
        u.owed = None;
        u.next_attempt_at = None;
        if u.outcome.is_none() {
            u.outcome = Some(if u.skip.is_some() { UndoOutcome::Skipped } else { UndoOutcome::TimedOut });
        }
    }
    if c.run().next().is_none() {
        c.trigger.plain_end()
    } else if c.undone().next().is_none() {
        State::Compensated
    } else {
        State::CompensationFailed
    }
}

/// `cancel --compensate`: a waiting record moves into compensation, and its parked tokens are
/// failed with [`CANCELLED_ERROR`], which the state machine's Catch leads into the chain. With
/// nothing completed to undo it is a plain cancel; a record between steps is asked again.
pub(super) fn on_cancel(plan: &Plan, r: &Record, reason: &str, now: OffsetDateTime) -> Option<Decision> {
    match r.state {
        _ if r.state.is_terminal() => return Some(Decision::ignored(IgnoreReason::Terminal)),
        State::Waiting { .. } => {}
        // Its resume is on its way: the next step's wait is seconds away.
        State::Advancing { .. } => return Some(Decision::ignored(IgnoreReason::OutOfOrder)),
        _ => return None,
    }
    if !self::plan(plan, r).iter().any(|u| u.skip.is_none()) {
        return None;
    }
    let trigger = Trigger::Cancelled { reason: reason.to_owned() };
    let to = begin(plan, r, trigger, now);
    let open = r.branches.iter().filter(|b| b.is_open()).filter_map(|b| b.token.as_ref());
    let mut d = Decision::new(Outcome::Applied).with_write(Cause::Compensate, Some(r), to);
    for token in r.token.iter().chain(open) {
        d = d.effect(fail_token(token, CANCELLED_ERROR, reason));
    }
    Some(d)
}

/// A compensation's resume went out: no longer owed.
fn on_resumed(r: &Record, (generation, step): (u32, u32), now: OffsetDateTime) -> Decision {
    let owed = r.compensation.as_ref().and_then(|c| c.undo(step)).is_some_and(|u| u.owed.is_some());
    if generation != r.generation || !owed {
        return Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    }
    let mut to = r.next(r.state, now);
    if let Some(u) = to.compensation.as_mut().and_then(|c| c.undo_mut(step)) {
        u.owed = None;
    }
    Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to)
}

/// The task of a compensation's next attempt went out: nothing more is due for it.
fn on_attempt_opened(
    r: &Record,
    (generation, step, attempt): (u32, u32, u32),
    now: OffsetDateTime,
) -> Decision {
    let due = r
        .compensation
        .as_ref()
        .and_then(|c| c.undo(step))
        .is_some_and(|u| u.waits() && u.attempt() == attempt && u.next_attempt_at.is_some());
    if generation != r.generation || !due {
        return Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    }
    let mut to = r.next(r.state, now);
    if let Some(u) = to.compensation.as_mut().and_then(|c| c.undo_mut(step)) {
        u.next_attempt_at = None;
    }
    Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to)
}

/// The sweeper: every owed resume re-sent after the grace, and every next attempt's task that
/// did not go out published again.
fn on_tick(r: &Record, now: OffsetDateTime) -> Decision {
    let mut d = Decision::new(Outcome::Applied);
    let g = r.generation;
    let idle = now - r.updated_at >= resend_after();
    for u in r.compensation.iter().flat_map(|c| &c.undos) {
        match (&u.owed, &u.token, u.next_attempt_at) {
            (Some(owed), Some(token), _) if idle => {
                d = d
                    .effect(resume_effect(token, owed))
                    .effect(Effect::MarkResumed { generation: g, step: u.step });
            }
            // Not past its wait's deadline: Step Functions has passed it then.
            (None, Some(_), Some(due)) if u.waits() && due <= now && u.deadline.is_none_or(|d| now < d) => {
                d.effects.extend(open_attempt(g, u.step, u.attempt()));
            }
            _ => {}
        }
    }
    if d.effects.is_empty() { Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed)) } else { d }
}

/// When a compensating record is due for the sweeper, which lists a record a grace after it is
/// due: an owed resume then (its re-send waits out the grace anyway), a next attempt on time,
/// else the earliest open wait's deadline.
pub(super) fn due_at(r: &Record) -> Option<OffsetDateTime> {
    let c = r.compensation.as_ref()?;
    let attempts = c
        .undos
        .iter()
        .filter_map(|u| u.next_attempt_at)
        .map(|next| next - crate::limits::RESEND_RESUME_AFTER);
    // An owed resume does not hold back another compensation's attempt (as for a group's
    // branches, found by an attack test).
    if c.undos.iter().any(|u| u.owed.is_some()) {
        return Some(attempts.fold(r.updated_at, OffsetDateTime::min));
    }
    let deadlines = c.undos.iter().filter(|u| u.waits()).filter_map(|u| u.deadline);
    attempts.chain(deadlines).min().or(Some(r.updated_at))
}
