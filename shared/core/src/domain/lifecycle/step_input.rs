//! A step's input (a callback, or a domain event the step accepts): the same input again, an
//! input for a step that is not the waiting one (buffered, or ignored), or one merged into its
//! wait, which it may decide, and with it the position.

use std::sync::Arc;

use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::effect::{Decision, Effect, Mark, failure, success};
use super::input::{IgnoreReason, Input, Outcome, RejectReason, Source, StepOutcome};
use super::plan::Plan;
use super::position;
use super::record::{
    AppliedInput, Kind, MAX_STEP_INPUT_BYTES, REMEMBERED_INPUTS, Record, State, payload_fingerprint,
};
use super::table::Cause;
use super::wait::{FailedAttempt, Role, WaitId, WaitOutcome, running_attempt};
use super::{requirements_met, resend_after};
use crate::domain::ids::EventId;
use crate::mutants::{Mutation, active as mutant};

pub(super) fn on_step_input(plan: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> Decision {
    let Input::StepInput { id, hash, source, step, outcome, data, generation, attempt } = input else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    let (who, step) = ((id, *source), *step);
    // A timer takes no input: the callback function refuses one (403) and no event routes to it,
    // so one that names it anyway is refused as naming no step that takes input.
    if !plan.has(step) || plan.timer_of(step).is_some() {
        return Decision::new(Outcome::Rejected(RejectReason::UnknownStep));
    }
    match *generation {
        // An input that an earlier run applied to this step is the same input again, whatever
        // run it was sent for (found by the simulation: an early input drained into its
        // generation, then retried after a restart, was answered `ignored`); only as applied to
        // this step of that run, though: one event may feed several steps, and one a stale run
        // never applied to this step is stale (found by the simulation: an early input for a
        // later step, drained after a restart, was taken as a repeat of its application to an
        // earlier step).
        Some(g) if g < r.generation => repeated_input(r, who, hash, step, now)
            .filter(|_| applied_to(r, id, (g, step)))
            .unwrap_or_else(|| Decision::ignored(IgnoreReason::StaleGeneration)),
        Some(g) if g > r.generation => {
            Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: g, step })
        }
        _ => {
            if let Some(repeat) = repeated_input(r, who, hash, step, now) {
                return repeat;
            }
            if let Some(elsewhere) = not_its_wait(r, step) {
                return elsewhere;
            }
            let Some(w) = r.wait(step) else { return Decision::ignored(IgnoreReason::OutOfOrder) };
            if let Some(refused) = attempt_gate((&w.failed, w.task_due()), who, *attempt, outcome, now) {
                return refused;
            }
            merge(plan, r, (who, hash), step, (outcome, data), now)
        }
    }
}

/// Whether `id` was applied to `step` of generation `g` (as far as the record remembers).
fn applied_to(r: &Record, id: &EventId, (g, step): (u32, u32)) -> bool {
    r.applied.iter().any(|a| &a.id == id && a.generation == g && a.step == step)
}

/// What becomes of an input for a step whose wait is not open at the position the record waits
/// at: buffered for a later step (or a pending record, or a branch not reached yet), ignored for
/// a step passed or advanced, a closed branch, or a record that ended. `None` when its wait is
/// open and may take it.
fn not_its_wait(r: &Record, step: u32) -> Option<Decision> {
    let buffer =
        || Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: r.generation, step });
    if let Some(w) = r.wait(step) {
        // The group failed while the branch was open: nothing more is applied to it.
        if w.role == Role::Branch && w.outcome() == Some(WaitOutcome::Closed) {
            return Some(Decision::ignored(IgnoreReason::GroupFailed));
        }
        if r.state.is_terminal() {
            return Some(Decision::ignored(IgnoreReason::Terminal));
        }
        return match r.state.kind() {
            Kind::Waiting if w.waits() => None,
            Kind::Waiting if w.token.is_none() && w.is_open() => Some(buffer()),
            _ => Some(Decision::ignored(IgnoreReason::StepAlreadyAdvanced)),
        };
    }
    let current = match r.state {
        State::Pending => return Some(buffer()),
        State::Waiting { step } | State::Advancing { step } => step,
        _ => return Some(Decision::ignored(IgnoreReason::Terminal)),
    };
    Some(if step < current { Decision::ignored(IgnoreReason::StepAlreadyPassed) } else { buffer() })
}

/// What becomes of an input for a wait with `failed` attempts (and, while its running attempt's
/// task is not out, that task due at `task_due`) that names `attempt` (or none), before it is
/// merged: `None` when it may be.
pub(super) fn attempt_gate(
    (failed, task_due): (&[FailedAttempt], Option<OffsetDateTime>),
    (id, source): (&EventId, Source),
    attempt: Option<u32>,
    outcome: &StepOutcome,
    now: OffsetDateTime,
) -> Option<Decision> {
    let running = running_attempt(failed);
    let earlier_applies = mutant(Mutation::EarlierAttemptApplied);
    // The next attempt's task is out once it is marked (found by review: a failure naming it
    // before then used it up, and its task was never published). Judged by the mark, never by
    // a clock: the sweeper publishes by its own, and a worker that answered within the skew
    // between two functions' clocks was told `ignored` for good (found by review). The engine
    // answers such an input 503 before it gets here (`task_not_out`).
    let unpublished = task_due.is_some()
        && !(mutant(Mutation::PublishedByTheClock) && task_due.is_some_and(|due| now >= due));
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
    (task_due.is_some() && *retryable && attempt != Some(running))
        .then(|| Decision::ignored(IgnoreReason::EarlierAttempt))
}

/// An input with this id applied to this step before, or to any step of an earlier generation
/// (whose steps may be numbered otherwise, in the config version it ran): the same input again,
/// or, with another payload, a conflict. An id applied to another step of this generation is not
/// a repeat: one event may feed several steps.
pub(super) fn repeated_input(
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    step: u32,
    now: OffsetDateTime,
) -> Option<Decision> {
    let seen =
        r.applied.iter().rev().find(|a| {
            &a.id == id && a.source == source && (a.step == step || a.generation != r.generation)
        })?;
    if payload_fingerprint(&seen.hash) != payload_fingerprint(hash) {
        return Some(
            Decision::new(Outcome::Rejected(RejectReason::IdempotencyKeyReused))
                .effect(Effect::Ledger { reason: IgnoreReason::IdempotencyKeyReused }),
        );
    }
    // The same input again. If it is the one that decided its wait and the resume has been
    // owed for a while, it may never have reached Step Functions (a crash after the write): owe
    // it again. A twin still in flight (a concurrent redelivery, or the other side of the inbox
    // handshake) is inside the grace period and sends nothing, so the resume goes out once. A
    // repeat of an input of an earlier generation owes nothing.
    let d = Decision::new(Outcome::Duplicate);
    let decided_it = r
        .applied
        .iter()
        .rev()
        .find(|a| a.step == step && a.generation == r.generation)
        .is_some_and(|last| last == seen);
    let Some(w) = r.wait(step).filter(|_| decided_it && !r.state.is_terminal()) else { return Some(d) };
    Some(match (&w.status, &w.token) {
        (super::wait::WaitStatus::Owed { resume, since, .. }, Some(token))
            if now - *since >= resend_after() =>
        {
            d.effect(Effect::Resume {
                wait: WaitId::of(r.generation, w),
                token: token.clone(),
                resume: resume.clone(),
                mark: mark_for(r),
            })
        }
        _ => d,
    })
}

/// How the engine marks a resume of a wait of `r`: always while the record still waits (the
/// sweeper must not send it again while its siblings, or the other compensations, wait), else
/// only when its token was gone.
pub(super) fn mark_for(r: &Record) -> Mark {
    match r.state.kind() {
        Kind::Waiting | Kind::Compensating => Mark::Always,
        _ => Mark::IfGone,
    }
}

/// A new input merged into its open wait: its data joins the wait's inputs, and its outcome
/// fails the attempt (retried, with an attempt left), decides the wait (failed, or succeeded
/// once its requirements are met, and with it perhaps the position), or only adds (a heartbeat
/// when in progress).
fn merge(
    plan: &Plan,
    r: &Record,
    ((id, source), hash): ((&EventId, Source), &str),
    step: u32,
    (outcome, data): (&StepOutcome, &Map<String, Value>),
    now: OffsetDateTime,
) -> Decision {
    let mut to = r.next(r.state, now);
    let Some(w) = to.wait_mut(step) else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    let Some(token) = w.token.clone() else {
        // A wait that waits always has a token; without one nothing can be resumed.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    let retry = retry_due(plan, (step, w.attempt(), w.deadline), outcome, now);
    if retry.is_some() {
        // Each attempt gathers its own inputs: the failed one's are dropped, its data with them.
        w.inputs = Arc::default();
    } else {
        Arc::make_mut(&mut w.inputs).extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if mutant(Mutation::SiblingMerge) {
        for b in to.waits.iter_mut().filter(|b| b.is_open() && b.step != step) {
            Arc::make_mut(&mut b.inputs).extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    // The record is one DynamoDB item (400 KB), holding the inputs of every wait of the position
    // twice once their resumes are owed: inputs that could not be written would leave the step
    // unable ever to advance (found by the simulation). So the merge is refused first, with a
    // trace; a group's waits together are held to what one step may gather.
    let size = to
        .waits
        .iter()
        .map(|w| crate::json_len::json_len(&w.inputs).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add);
    if let Some(refused) = admit(&mut to, size, (id, source), hash, step) {
        return refused;
    }
    let generation = to.generation;
    let Some(w) = to.wait_mut(step) else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    let (decided, resume) = match outcome {
        StepOutcome::Failed { error, cause, .. } => {
            if let Some(due) = retry {
                w.fail_attempt(FailedAttempt::new(w.attempt(), (error, cause), (id, source), now), due);
                let d = Decision::new(Outcome::Applied).with_write(Cause::AttemptFailed, Some(r), to);
                return beat_between_attempts(d, plan, step, &token);
            }
            (WaitOutcome::Failed, failure(error, cause))
        }
        StepOutcome::Succeeded if requirements_met(plan, step, &w.inputs) => {
            (WaitOutcome::Succeeded, success(Value::Object(Map::clone(&w.inputs))))
        }
        StepOutcome::Succeeded => {
            return Decision::new(Outcome::Applied).with_write(Cause::Merge, Some(r), to);
        }
        StepOutcome::InProgress => {
            return Decision::new(Outcome::Applied)
                .with_write(Cause::Merge, Some(r), to)
                .effect(Effect::SendTaskHeartbeat { token });
        }
    };
    w.decide(decided, resume.clone(), now);
    let wait = WaitId::of(generation, w);
    if decided == WaitOutcome::Succeeded && w.role == Role::Branch && !to.succeeded.contains(&step) {
        to.succeeded.push(step);
    }
    let cause = position::settle(plan, &mut to, step, decided);
    let mark = mark_for(&to);
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to).effect(Effect::Resume {
        wait,
        token,
        resume,
        mark,
    })
}

/// When the next attempt is due if `outcome` fails attempt `running` of `step` (whose deadline
/// is `deadline`), a failure that may be retried with an attempt left: `None` when the outcome
/// ends the wait (or is no failure).
fn retry_due(
    plan: &Plan,
    (step, running, deadline): (u32, u32, Option<OffsetDateTime>),
    outcome: &StepOutcome,
    now: OffsetDateTime,
) -> Option<OffsetDateTime> {
    let StepOutcome::Failed { retryable, .. } = outcome else { return None };
    let may_retry = *retryable || mutant(Mutation::NonRetryableRetried);
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
    let s = plan.step(step)?;
    let retry = s.retry?;
    let next = running.checked_add(1).filter(|n| *n <= retry.attempts || mutant(Mutation::RetryUnbounded))?;
    let wait = time::Duration::try_from(retry.wait_before(next, s.timeout)).ok()?;
    let wait = if mutant(Mutation::RetryWithoutBackoff) { time::Duration::ZERO } else { wait };
    let due = now + wait;
    deadline.is_none_or(|deadline| due < deadline).then_some(due)
}

/// `d` with a heartbeat on `token` when `step` keeps its token alive between attempts
/// ([`Plan::beats_between_attempts`]): Step Functions restarts a heartbeat timer only on
/// SendTaskHeartbeat, and hears no worker while baton waits out a backoff (found by review: a
/// step whose attempt failed late in its heartbeat window was timed out during the backoff,
/// with attempts left).
fn beat_between_attempts(
    d: Decision,
    plan: &Plan,
    step: u32,
    token: &crate::domain::ids::TaskToken,
) -> Decision {
    if plan.beats_between_attempts(step) {
        d.effect(Effect::SendTaskHeartbeat { token: token.clone() })
    } else {
        d
    }
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
        step,
        generation: to.generation,
        source,
    });
    let excess = to.applied.len().saturating_sub(REMEMBERED_INPUTS);
    to.applied.drain(..excess);
    None
}
