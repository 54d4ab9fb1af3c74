//! Compensation: undoing, in reverse, the steps a failed (or cancelled) run completed.
//!
//! When a run fails or times out after steps completed, the state machine's Catch leads into a
//! reverse chain of compensation waits (`asl.rs`), one per step that declares `compensate`, a
//! group's together. Each wait sends `undo_ready` with its token; baton publishes the
//! compensation's task (`baton.compensation.requested`), and the external system acknowledges it
//! by a callback marked as a compensation. baton then resumes the wait, and Step Functions goes
//! on to the compensation before it. Each compensation is a [`Wait`] of its own
//! ([`Role::Compensation`]): its attempts, its owed resume and its deadline are the wait's.
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
//!   reach the outbound queue), as it does a retried step's. The last failure ends the
//!   compensation `failed`; the chain still goes on, so one stuck compensation does not keep
//!   the others from running.
//! - **A wait that Step Functions passed without baton's answer timed out.** The chain moves
//!   only when a wait is resumed or times out, so the next `undo_ready` of an earlier position
//!   (or the final report) settles every later compensation still open as `timed_out`.
//! - **The outcome**, when Step Functions reports the chain's end: `compensated` when every
//!   compensation run was acknowledged, `compensation_failed` when any was not; with nothing to
//!   run, how the forward run ended (`failed`, `timed_out`, `cancelled`).

use serde::{Deserialize, Serialize};
use serde_json::json;
use time::OffsetDateTime;

use super::effect::{Decision, Effect, Mark, success};
use super::input::{Finish, IgnoreReason, Input, Outcome, RejectReason, Source, StepOutcome};
use super::plan::Plan;
use super::position;
use super::record::{AppliedInput, Record, State, payload_fingerprint};
use super::resend_after;
use super::step_input::{attempt_gate, repeated_input};
use super::table::Cause;
use super::wait::{FailedAttempt, Role, Wait, WaitId, WaitOutcome, WaitStatus};
use super::{marks, tick};
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
        self.run().filter(|u| u.wait.outcome() != Some(WaitOutcome::Succeeded))
    }

    pub fn undo(&self, step: u32) -> Option<&Undo> {
        self.undos.iter().find(|u| u.wait.step == step)
    }

    pub(super) fn undo_mut(&mut self, step: u32) -> Option<&mut Undo> {
        self.undos.iter_mut().find(|u| u.wait.step == step)
    }
}

/// One step in the compensation plan: its wait, and what the plan says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Undo {
    #[serde(flatten)]
    pub wait: Wait,
    /// Why it is not run (`None`: it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<SkipReason>,
    /// The acknowledgements applied to it, to recognise redelivery.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acks: Vec<AppliedInput>,
}

impl Undo {
    fn new(step: u32, skip: Option<SkipReason>) -> Undo {
        Undo { wait: Wait::unreached(step, Role::Compensation), skip, acks: Vec::new() }
    }

    /// The step it compensates.
    pub fn step(&self) -> u32 {
        self.wait.step
    }

    /// Where it stands once compensation began: its outcome, or `skipped`, `waiting` (its task
    /// out), `pending` (its wait not reached yet).
    pub fn state(&self) -> &'static str {
        match (self.wait.outcome(), self.skip) {
            (Some(outcome), _) => outcome.name(Role::Compensation),
            (None, Some(_)) => "skipped",
            (None, None) if self.waits() => "waiting",
            (None, None) => "pending",
        }
    }

    /// Waiting for its acknowledgement: reached, run, and not ended.
    pub fn waits(&self) -> bool {
        self.skip.is_none() && self.wait.waits()
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

/// The compensation plan for `r` as it stands: what compensation would do if the run failed
/// where the record is, by position, last first. A record already compensating has its own,
/// fixed when it began.
pub fn plan(plan: &Plan, r: &Record) -> Vec<Undo> {
    let Some(at) = r.state.step() else { return Vec::new() };
    let current = plan.position(at);
    let mut undos = Vec::new();
    let mut span = current;
    loop {
        for step in span.steps() {
            let completed = completed(r, step, current.first) || mutant(Mutation::UndoOfIncompleteStep);
            // A timer has nothing to undo, whatever a plan says (`baton validate` refuses one that
            // declares `compensate`; found by an attack test).
            let declared = plan.compensation_of(step).is_some() && plan.timer_of(step).is_none();
            match (completed, declared) {
                (true, true) => undos.push(Undo::new(step, None)),
                (true, false) => undos.push(Undo::new(step, Some(SkipReason::NotDeclared))),
                (false, true) => undos.push(Undo::new(step, Some(SkipReason::NotCompleted))),
                (false, false) => {}
            }
        }
        let Some(before) = span.first.checked_sub(1) else { break };
        span = plan.position(before);
    }
    undos
}

/// Whether `step` completed in the record's generation, the record being at the position that
/// starts at `current`.
fn completed(r: &Record, step: u32, current: u32) -> bool {
    // A branch whose success baton applied did its work, even where Step Functions timed it
    // out before the resume arrived (an optional branch is then missed, a required one fails
    // its group): its sender was told `applied` (found by review).
    let applied = r.succeeded.contains(&step) && !mutant(Mutation::RacedSuccessForgotten);
    if step < current {
        return !r.missed.contains(&step) || applied;
    }
    applied || r.wait(step).is_some_and(|w| w.outcome() == Some(WaitOutcome::Succeeded))
}

/// `r` moved into compensation for `trigger`: the plan fixed, the forward waits ended (an open
/// one closed), and each compensation's wait not reached yet.
fn begin(p: &Plan, r: &Record, trigger: Trigger, now: OffsetDateTime) -> Record {
    let undos = plan(p, r);
    let mut to = Record {
        compensation: Some(Compensation { trigger, began_at: now, at: r.state.step(), undos }),
        ..r.next(State::Compensating, now)
    };
    // The step's token stays, as in a cancelled record: a copy of its step_ready is then known.
    for w in to.waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.deadline = None;
    }
    position::close(&mut to, None);
    position::end_run(&mut to);
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
        && !plan.has(*step)
    {
        return Some(Decision::new(Outcome::Rejected(RejectReason::UnknownStep)));
    }
    if let Some(r) = record.filter(|r| r.state == State::Compensating) {
        return Some(decide(plan, r, input, now));
    }
    let nothing = || Decision::ignored(IgnoreReason::OutOfOrder);
    Some(match (input, record) {
        (Input::UndoReady { token, .. }, None) => {
            nothing().effect(Effect::fail(token, "baton.NoRecord", "no workflow record for this execution"))
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
fn decide(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    match input {
        Input::Start { event, .. } if r.start_events.contains(event) => Decision::new(Outcome::Duplicate),
        Input::Start { .. } => Decision::ignored(IgnoreReason::AlreadyRunning),
        Input::StepReady { generation, step, token, .. } => {
            on_step_ready(plan, r, (*generation, *step), token)
        }
        Input::StepInput { id, hash, source, step, generation, .. } => match generation {
            Some(g) if *g > r.generation => {
                Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: *g, step: *step })
            }
            _ => repeated_input(r, (id, *source), hash, *step, now).unwrap_or_else(|| {
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
        Input::ExecutionGone { .. } | Input::End { .. } => Decision::nothing_owed(),
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
        Input::Resumed { wait, token, delivered } => marks::on_resumed(r, (*wait, token), *delivered, now),
        Input::AttemptOpened { wait, attempt } => marks::on_attempt_opened(r, *wait, *attempt, now),
        Input::Tick => tick::on_tick(plan, r, now),
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
    let known = r.waits.iter().any(|w| w.token.as_ref() == Some(token));
    let at = r.compensation.as_ref().and_then(|c| c.at).map(|at| plan.position(at).first);
    if known || at.is_some_and(|first| step < first) {
        return d;
    }
    d.effect(Effect::fail(token, COMPENSATING_ERROR, "the workflow is compensating; no forward step runs"))
}

/// Step Functions reached a compensation's wait. A record not compensating yet begins, with the
/// run's error as its trigger, in the same write.
fn begin_at_undo_ready(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    let Input::UndoReady { generation, step, token, deadline, error, cause } = input else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    // Another generation's execution ended before this one started (a record restarts only
    // once terminal): its wait is owed nothing, and was perhaps resumed already.
    if *generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    if let Some(ended) = super::step_ready::reported_after_the_end(r, token) {
        return ended;
    }
    let mut to = begin(plan, r, Trigger::from_error(error, cause), now);
    let effects = match to.compensation.as_ref().and_then(|c| c.undo(*step)) {
        Some(_) => reach(&mut to, *step, token, (*deadline, now)),
        None => vec![skip_unplanned(token)],
    };
    Decision::new(Outcome::Applied).with_write(Cause::Compensate, Some(r), to).effects(effects)
}

/// The answer to a wait the plan has no step for (a branch the record never reached): nothing
/// to undo.
fn skip_unplanned(token: &TaskToken) -> Effect {
    Effect::Answer { token: token.clone(), resume: success(json!({"compensation": "skipped"})) }
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
    let w = &u.wait;
    if w.token.as_ref() == Some(token) {
        // Redelivery of the wait that already won: the task's creation and the resume are
        // idempotent, so a crash after the write is repaired by running them again.
        let d = Decision::new(Outcome::Duplicate);
        return match (&w.status, w.owed()) {
            (_, Some(resume)) => d.effect(Effect::Answer { token: token.clone(), resume: resume.clone() }),
            (WaitStatus::TaskDue { .. }, None) if u.waits() && w.deadline.is_none_or(|d| now < d) => {
                d.effect(open_attempt(generation, step, w.attempt()))
            }
            (_, None) => d,
        };
    }
    // Reported again with a new token and a later deadline: its send was retried and the wait
    // re-entered; only the newest token can be resumed, and what the wait owes goes to it, as a
    // step's (`step_ready.rs`, `repark`; found by an attack: an acknowledgement owed to the old
    // token never reached the new one).
    if u.skip.is_none() && w.reparks() && w.newer(token, deadline) {
        let mut to = r.next(r.state, now);
        let due = w.task_due();
        let Some(new) = to.compensation.as_mut().and_then(|c| c.undo_mut(step)).map(|u| &mut u.wait) else {
            return Decision::ignored(IgnoreReason::OutOfOrder);
        };
        new.repark(token, deadline, now, |w| {
            let outcome = w.outcome().unwrap_or(WaitOutcome::Succeeded);
            success(json!({"compensation": outcome.name(Role::Compensation)}))
        });
        let owed = new.owed().cloned();
        let d = Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
        return match (owed, due) {
            (Some(resume), _) => d.effect(Effect::Resume {
                wait: WaitId { generation, step, compensation: true },
                token: token.clone(),
                resume,
                mark: Mark::Always,
            }),
            (None, Some(_)) => d.effect(open_attempt(generation, step, w.attempt())),
            (None, None) => d,
        };
    }
    if w.token.is_some() || w.outcome().is_some() {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    let mut to = r.next(r.state, now);
    let effects = reach(&mut to, step, token, (deadline, now));
    Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to).effects(effects)
}

/// Records in `to` that the compensation of `step` was reached, with its token: every
/// compensation before its group in the plan is settled (Step Functions passed it, with baton's
/// answer or without: still open, it timed out), and its task is owed, or, skipped, its resume.
fn reach(
    to: &mut Record,
    step: u32,
    token: &TaskToken,
    (deadline, now): (OffsetDateTime, OffsetDateTime),
) -> Vec<Effect> {
    let generation = to.generation;
    let Some(c) = to.compensation.as_mut() else { return Vec::new() };
    let index = c.undos.iter().position(|x| x.wait.step == step).unwrap_or(0);
    let group = group_start(c, index);
    for passed in c.undos.iter_mut().take(group).filter(|u| u.wait.outcome().is_none()) {
        passed.wait.end(if passed.skip.is_some() { WaitOutcome::Skipped } else { WaitOutcome::TimedOut });
    }
    let Some(u) = c.undo_mut(step) else { return Vec::new() };
    u.wait.token = Some(token.clone());
    u.wait.deadline = Some(deadline);
    // Reported after its deadline: Step Functions has passed the wait (found by review: its task
    // went out for a wait already timed out).
    if deadline <= now && u.skip.is_none() {
        u.wait.end(WaitOutcome::TimedOut);
        return Vec::new();
    }
    let Some(reason) = u.skip else {
        // Until its task is marked out, nothing answers the attempt.
        u.wait.status = WaitStatus::TaskDue { at: now };
        return vec![open_attempt(generation, step, 1)];
    };
    let resume = success(json!({"compensation": "skipped", "reason": reason.as_str()}));
    u.wait.decide(WaitOutcome::Skipped, resume.clone(), now);
    vec![Effect::Resume {
        wait: WaitId { generation, step, compensation: true },
        token: token.clone(),
        resume,
        mark: Mark::Always,
    }]
}

/// The task of `attempt` of the compensation of `step`: published, then marked out.
fn open_attempt(generation: u32, step: u32, attempt: u32) -> Effect {
    Effect::OpenAttempt { wait: WaitId { generation, step, compensation: true }, attempt, beat: None }
}

/// Where the group of the plan's `index`-th compensation starts in the plan: the compensations
/// of one position are listed side by side, in step order.
fn group_start(c: &Compensation, index: usize) -> usize {
    let mut start = index;
    while start > 0 && c.undos[start - 1].wait.step < c.undos[start].wait.step {
        start -= 1;
    }
    start
}

/// A callback for a compensation: acknowledged, or an attempt failed.
fn on_undo_input(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
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
    if let Some(seen) = u.acks.iter().find(|a| a.id == *id && a.source == *source) {
        if payload_fingerprint(&seen.hash) != payload_fingerprint(hash) {
            return Decision::new(Outcome::Rejected(RejectReason::IdempotencyKeyReused))
                .effect(Effect::Ledger { reason: IgnoreReason::IdempotencyKeyReused });
        }
        let d = Decision::new(Outcome::Duplicate);
        return match (&u.wait.status, &u.wait.token) {
            (WaitStatus::Owed { resume, since, .. }, Some(token)) if now - *since >= resend_after() => d
                .effect(Effect::Resume {
                    wait: WaitId { generation: r.generation, step: *step, compensation: true },
                    token: token.clone(),
                    resume: resume.clone(),
                    mark: Mark::Always,
                }),
            _ => d,
        };
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    if u.skip.is_some() || u.wait.token.is_none() {
        // Not run, or its task not out yet: nothing this could acknowledge.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    if u.wait.outcome().is_some() {
        return Decision::ignored(IgnoreReason::StepAlreadyAdvanced);
    }
    // The running attempt's task is not known to be out: nothing can answer it yet (found by
    // the simulation: a failure named the attempt before its task went out, and the next
    // attempt's was published with it skipped).
    if u.wait.task_due().is_some() {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    if let Some(refused) = attempt_gate((&u.wait.failed, None), (id, *source), *attempt, outcome, now) {
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
        step,
        generation,
        source,
    });
    let excess = u.acks.len().saturating_sub(REMEMBERED_ACKS);
    u.acks.drain(..excess);
    let running = u.wait.attempt();
    let end = match outcome {
        StepOutcome::Succeeded => WaitOutcome::Succeeded,
        StepOutcome::Failed { error, cause, retryable } => {
            let attempts = plan.compensation_of(step).unwrap_or(1);
            let failed = FailedAttempt::new(running, (error, cause), (id, source), now);
            if *retryable && (running < attempts || mutant(Mutation::UndoRetryUnbounded)) {
                // The next attempt is due at once; the sweeper publishes it (the callback
                // function has no access to the outbound queue), as a retried step's.
                u.wait.fail_attempt(failed, now);
                return Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
            }
            u.wait.failed.push(failed);
            WaitOutcome::Failed
        }
        StepOutcome::InProgress => return Decision::ignored(IgnoreReason::OutOfOrder),
    };
    let resume = success(json!({"compensation": end.name(Role::Compensation)}));
    u.wait.decide(end, resume.clone(), now);
    let token = u.wait.token.clone();
    let d = Decision::new(Outcome::Applied).with_write(Cause::Undo, Some(r), to);
    match token {
        Some(token) => d.effect(Effect::Resume {
            wait: WaitId { generation, step, compensation: true },
            token,
            resume,
            mark: Mark::Always,
        }),
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
        match u.wait.outcome() {
            None => u.wait.end(if u.skip.is_some() { WaitOutcome::Skipped } else { WaitOutcome::TimedOut }),
            Some(_) => u.wait.settle(),
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
fn on_cancel(plan: &Plan, r: &Record, reason: &str, now: OffsetDateTime) -> Option<Decision> {
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
    let open = r.waits.iter().filter(|w| w.waits()).filter_map(|w| w.token.as_ref());
    let mut d = Decision::new(Outcome::Applied).with_write(Cause::Compensate, Some(r), to);
    for token in open {
        d = d.effect(Effect::fail(token, CANCELLED_ERROR, reason));
    }
    Some(d)
}
