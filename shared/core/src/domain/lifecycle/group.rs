//! Parallel groups: branches that wait side by side, each on its own task token.
//!
//! A record at a group is `waiting{first}`, `first` being the index of the group's first branch,
//! while any branch is open, and `advancing{first}` once every branch has an outcome (or a
//! required one failed and closed the rest); the next position's `step_ready` moves it on, as
//! after a step. Each branch keeps its own token, deadline, inputs, outcome and owed resume in
//! [`Record::branches`], so every branch write is the same one conditional write of the record.
//!
//! - The first branch's `step_ready` opens the group (every branch listed, that one with its
//!   token); each other branch's joins it. Inputs for a branch not yet reached are buffered, as
//!   for a step not yet waiting, and drained when it is.
//! - An input completes or fails its branch only. A required branch that fails closes its open
//!   siblings and fails the group; an optional one is recorded in [`Record::missed`] and the
//!   group goes on.
//! - A branch's resume is owed until Step Functions takes it. While the group still waits, the
//!   engine tells the record it was delivered ([`Input::Resumed`]), so the sweeper re-sends only
//!   what is still owed.
//! - An optional branch reports how it ended ([`Input::BranchEnded`]): its success, or what its
//!   own catch caught (a timeout, or its task failing without baton). That report is the truth
//!   for the branch: a success baton sent may not have reached Step Functions (its token gone,
//!   or the deadline passed on the way). The execution's success waits until every optional
//!   branch is settled by it ([`Record::confirmed`] or [`Record::missed`]), so `succeeded` and
//!   `degraded` are never a guess; nothing else waits for it.

use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::{
    AppliedInput, Branch, BranchOutcome, Cause, Decision, Effect, FailedAttempt, IgnoreReason, Kind, Outcome,
    Plan, Record, Resume, Source, Span, State, StepOutcome, requirements_met, resume_effect,
};
use crate::domain::ids::{EventId, TaskToken};
use crate::mutants::{Mutation, active as mutant};

/// A branch's `step_ready`. `expected` is the first step of the position the record moves to
/// next (`None`: it is not between positions).
#[allow(clippy::too_many_arguments)]
pub(super) fn on_branch_ready(
    plan: &Plan,
    r: &Record,
    group: Span,
    expected: Option<u32>,
    (generation, step): (u32, u32),
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    let ready = |d: Decision| {
        d.effect(Effect::CreateTask { generation, step, attempt: 1 })
            .effect(Effect::DrainInbox { generation, step })
    };
    if expected == Some(group.first) {
        let config_version = super::version_at_step_ready(plan, r);
        let mut to = super::Record {
            token: None,
            deadline: None,
            inputs: Map::new(),
            owed: None,
            config_version,
            branches: (group.first..=group.last).map(Branch::new).collect(),
            attempts: Vec::new(),
            next_attempt_at: None,
            ..r.next(State::Waiting { step: group.first }, now)
        };
        open(&mut to, step, token, deadline);
        return ready(Decision::new(Outcome::Applied).with_write(Cause::StepReady, Some(r), to));
    }
    let at_group = r.state.step() == Some(group.first) && !r.state.is_terminal();
    match branch(r, step).filter(|_| at_group) {
        Some(b) if b.token.as_ref() == Some(token) => ready(Decision::new(Outcome::Duplicate)),
        // Reported again with a new token and a later deadline: its send was retried, the wait
        // re-entered, and only the newest token can be resumed (`lifecycle::repark`).
        Some(b)
            if b.is_open()
                && b.deadline.is_some_and(|d| deadline > d)
                && r.state == (State::Waiting { step: group.first }) =>
        {
            let mut to = r.next(r.state, now);
            open(&mut to, step, token, deadline);
            let d = Decision::new(Outcome::Applied).with_write(Cause::BranchReady, Some(r), to);
            match b.next_attempt_at {
                None => d
                    .effect(Effect::CreateTask { generation, step, attempt: b.attempt() })
                    .effect(Effect::DrainInbox { generation, step }),
                Some(_) => d,
            }
        }
        Some(b) if b.token.is_none() && b.is_open() && r.state == (State::Waiting { step: group.first }) => {
            let mut to = r.next(r.state, now);
            open(&mut to, step, token, deadline);
            ready(Decision::new(Outcome::Applied).with_write(Cause::BranchReady, Some(r), to))
        }
        // The group failed before this branch was reached: its token dies with the execution.
        Some(b) if b.outcome == Some(BranchOutcome::Closed) => Decision::ignored(IgnoreReason::GroupFailed),
        Some(_) => Decision::ignored(IgnoreReason::OutOfOrder),
        None if r.state.step().is_some_and(|current| step < current) => {
            Decision::ignored(IgnoreReason::StepAlreadyPassed)
        }
        // Its token is left alone, as a step's would be: the record may be the one behind.
        None => Decision::ignored(IgnoreReason::OutOfOrder),
    }
}

/// The record at a parallel group, settled as Step Functions left it, when a report for a later
/// position (`step`; `u32::MAX` for the execution's success) shows that it did while an optional
/// branch was still open in the record: Step Functions passes a group only once every required
/// branch took its resume, so an open branch must be an optional one that its own catch ended
/// (baton sent it nothing; the report is still on its way). It is recorded as not succeeded,
/// timed out if its deadline has passed (the report, when it comes, is a duplicate). A success
/// still owed may or may not have reached Step Functions: it stays a success, unconfirmed until
/// the branch's report. `None` when the record is not at such a group, or a required branch has
/// not succeeded (then Step Functions cannot have left it).
pub(super) fn left(plan: &Plan, r: &Record, step: u32, now: OffsetDateTime) -> Option<Record> {
    let first = r.branches.first()?.step;
    let later = plan.next_position(first).is_some_and(|next| step >= next);
    let required_done =
        r.branches.iter().all(|b| plan.is_optional(b.step) || b.outcome == Some(BranchOutcome::Succeeded));
    let open = r.branches.iter().any(Branch::is_open);
    if r.state != (State::Waiting { step: first }) || !later || !required_done || !open {
        return None;
    }
    let mut settled = r.clone();
    for b in settled.branches.iter_mut().filter(|b| b.is_open()) {
        let missed_deadline = b.deadline.is_none_or(|d| d <= now);
        b.end(if missed_deadline { BranchOutcome::TimedOut } else { BranchOutcome::Failed });
        if !settled.missed.contains(&b.step) {
            settled.missed.push(b.step);
        }
    }
    for b in &mut settled.branches {
        b.unconfirmed |= matches!(b.owed.take(), Some(Resume::Success { .. }));
    }
    Some(settled)
}

fn open(to: &mut Record, step: u32, token: &TaskToken, deadline: OffsetDateTime) {
    if let Some(b) = to.branches.iter_mut().find(|b| b.step == step) {
        b.token = Some(token.clone());
        b.deadline = Some(deadline);
    }
}

fn branch(r: &Record, step: u32) -> Option<&Branch> {
    r.branches.iter().find(|b| b.step == step)
}

/// A new input for a branch of the group the record is at, or was at when it ended. `None` when
/// `step` is no such branch: the input is decided as any step's.
pub(super) fn branch_input(
    plan: &Plan,
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    (step, attempt): (u32, Option<u32>),
    (outcome, data): (&StepOutcome, &Map<String, Value>),
    now: OffsetDateTime,
) -> Option<Decision> {
    let b = branch(r, step)?;
    if b.outcome == Some(BranchOutcome::Closed) {
        return Some(Decision::ignored(IgnoreReason::GroupFailed));
    }
    Some(match r.state {
        _ if r.state.is_terminal() => Decision::ignored(IgnoreReason::Terminal),
        State::Waiting { .. } if b.token.is_none() => {
            Decision::new(Outcome::Buffered).effect(Effect::Buffer { generation: r.generation, step })
        }
        State::Waiting { .. } if b.is_open() => {
            super::attempt_gate((&b.attempts, b.next_attempt_at), (id, source), attempt, outcome, now)
                .unwrap_or_else(|| merge(plan, r, (id, source), hash, step, (outcome, data), now))
        }
        _ => Decision::ignored(IgnoreReason::StepAlreadyAdvanced),
    })
}

/// An input merged into an open branch: its data joins the branch's inputs; its outcome fails
/// the branch, completes it, or only adds (a heartbeat when in progress).
fn merge(
    plan: &Plan,
    r: &Record,
    (id, source): (&EventId, Source),
    hash: &str,
    step: u32,
    (outcome, data): (&StepOutcome, &Map<String, Value>),
    now: OffsetDateTime,
) -> Decision {
    let mut to = r.next(r.state, now);
    let Some(i) = to.branches.iter().position(|b| b.step == step) else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    let Some(token) = to.branches[i].token.clone() else {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    let b = &to.branches[i];
    let retry = super::retry_due(plan, (step, b.attempt(), b.deadline), outcome, now);
    if retry.is_some() {
        // Each attempt gathers its own inputs: the failed one's are dropped, its data with them.
        to.branches[i].inputs = Map::new();
    } else {
        to.branches[i].inputs.extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if mutant(Mutation::SiblingMerge) {
        for b in to.branches.iter_mut().filter(|b| b.is_open() && b.step != step) {
            b.inputs.extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    // Every branch's inputs share the one item, and are held twice once their resumes are owed:
    // the group's together are held to what one step may gather.
    let size = to
        .branches
        .iter()
        .map(|b| serde_json::to_string(&b.inputs).map_or(usize::MAX, |t| t.len()))
        .fold(0, usize::saturating_add);
    if let Some(refused) = super::admit(&mut to, size, (id, source), hash, step) {
        return refused;
    }
    let owed = match outcome {
        StepOutcome::Failed { error, cause, .. } => {
            if let Some(due) = retry {
                let b = &mut to.branches[i];
                b.attempts.push(FailedAttempt::new(b.attempt(), (error, cause), (id, source), now));
                b.next_attempt_at = Some(due);
                let d = Decision::new(Outcome::Applied).with_write(Cause::AttemptFailed, Some(r), to);
                return super::beat_between_attempts(d, plan, step, &token);
            }
            Resume::Failure { error: error.clone(), cause: cause.clone() }
        }
        StepOutcome::Succeeded if requirements_met(plan, step, &to.branches[i].inputs) => {
            Resume::Success { output: Value::Object(to.branches[i].inputs.clone()) }
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
    let ended = match owed {
        Resume::Failure { .. } => BranchOutcome::Failed,
        Resume::Success { .. } => BranchOutcome::Succeeded,
    };
    if ended == BranchOutcome::Succeeded && !to.succeeded.contains(&step) {
        to.succeeded.push(step);
    }
    let resume = resume_effect(&token, &owed);
    to.branches[i].owed = Some(owed);
    let cause = settle(plan, &mut to, step, ended);
    let waits = to.state.kind() == Kind::Waiting;
    owe(Decision::new(Outcome::Applied).with_write(cause, Some(r), to), resume, waits, (r.generation, step))
}

/// Gives branch `step` its outcome in `to`, and decides the group: a required branch that did
/// not succeed closes its open siblings and fails it; once no branch is open, it advances.
/// Returns the cause of the write.
fn settle(plan: &Plan, to: &mut Record, step: u32, outcome: BranchOutcome) -> Cause {
    // (The planted bug fails only a group that still waits: from one decided already, the
    // table allows no failure, and `decide` would stop the schedule instead of the checks.)
    let planted = mutant(Mutation::OptionalFailsGroup) && to.state.kind() == Kind::Waiting;
    let required = !plan.is_optional(step) || planted;
    if let Some(b) = to.branches.iter_mut().find(|b| b.step == step) {
        b.end(outcome);
        if outcome != BranchOutcome::Succeeded {
            b.owed = b.owed.take().filter(|o| matches!(o, Resume::Failure { .. }));
        }
    }
    if outcome != BranchOutcome::Succeeded && !required && !to.missed.contains(&step) {
        to.missed.push(step);
    }
    let first = to.branches.first().map_or(step, |b| b.step);
    if outcome != BranchOutcome::Succeeded && required {
        close_open_branches(to, None);
        to.state = State::Advancing { step: first };
        return Cause::FailStep;
    }
    // Still waiting for a sibling; or the group had advanced already (an optional branch's
    // timeout overtook the success baton owed it).
    if to.branches.iter().any(Branch::is_open) || to.state.kind() != Kind::Waiting {
        return Cause::BranchDone;
    }
    to.state = State::Advancing { step: first };
    Cause::Complete
}

/// `d` with the branch's resume, and, while its group still waits, the mark that it was
/// delivered.
fn owe(d: Decision, resume: Effect, waits: bool, (generation, step): (u32, u32)) -> Decision {
    let d = d.effect(resume);
    if waits { d.effect(Effect::MarkResumed { generation, step }) } else { d }
}

/// Closes every branch still open: timed out if its deadline has passed by `timed_out_at` (the
/// time of a timeout report), closed otherwise. Nothing is owed to any branch any more: the
/// execution has ended (or the group failed, and the failing branch's own resume is owed apart).
pub(super) fn close_open_branches(to: &mut Record, timed_out_at: Option<OffsetDateTime>) {
    for b in &mut to.branches {
        // (Step Functions' clock, which timed the branch out, and this function's may be apart.)
        let skew = crate::limits::MAX_CLOCK_SKEW;
        let missed_deadline = matches!((timed_out_at, b.deadline), (Some(at), Some(d)) if d <= at + skew);
        // A resume Step Functions never confirmed, in a group that timed out: the branch's wait
        // timed out before its resume arrived, by its deadline or by its heartbeat, which baton
        // does not watch (a failure that had arrived would have failed the group first; that
        // timeout is the one reported). Found by the simulation: a clock jump past a branch's
        // heartbeat, its success then refused.
        let unconfirmed = matches!(b.outcome, Some(BranchOutcome::Succeeded | BranchOutcome::Failed))
            && (b.unconfirmed || b.owed.is_some());
        let success_refused = unconfirmed && b.outcome == Some(BranchOutcome::Succeeded);
        if b.is_open() || unconfirmed && (missed_deadline || success_refused && timed_out_at.is_some()) {
            let timed_out = missed_deadline || success_refused;
            b.end(if timed_out { BranchOutcome::TimedOut } else { BranchOutcome::Closed });
        }
    }
    if to.state.is_terminal() {
        for b in &mut to.branches {
            b.owed = None;
        }
    }
}

/// An optional branch reported how it ended: with `error`, its own catch caught a timeout or
/// its task's failure; without, Step Functions took baton's success.
///
/// The report is the truth for the branch. It travels apart from the others, so it may come
/// before the branch's `step_ready` (it is retried until the group opens: [`unsettled`]), or
/// after Step Functions left the group (then the branch is settled in [`Record::missed`] or
/// [`Record::confirmed`] alone). A failure corrects a success baton sent that never reached
/// Step Functions.
pub(super) fn on_branch_ended(
    plan: &Plan,
    r: &Record,
    (generation, step): (u32, u32),
    error: Option<&str>,
    now: OffsetDateTime,
) -> Decision {
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    // Only an optional branch reports its own end.
    if !plan.is_optional(step) {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    if r.missed.contains(&step) || r.confirmed.contains(&step) {
        return Decision::new(Outcome::Duplicate);
    }
    if r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::Terminal);
    }
    // The group the record is at failed, and the execution with it: nothing is applied to its
    // branches any more, and how an earlier group's branch ended changes nothing.
    if group_failed(plan, r) {
        return Decision::new(Outcome::Duplicate);
    }
    let Some(b) = branch(r, step) else {
        // Its group is not reached yet: the report is retried until it is ([`unsettled`]).
        if r.state.step().is_none_or(|current| step > current) {
            return Decision::ignored(IgnoreReason::OutOfOrder);
        }
        // Its group is passed: only the branch's settlement is left to record.
        let mut to = r.next(r.state, now);
        if error.is_some() { &mut to.missed } else { &mut to.confirmed }.push(step);
        return Decision::new(Outcome::Applied).with_write(Cause::BranchDone, Some(r), to);
    };
    let Some(error) = error else { return succeeded(r, step, now) };
    if !(b.is_open() || b.outcome == Some(BranchOutcome::Succeeded)) {
        // Already decided by baton: it failed the branch, and this is its catch's report.
        return Decision::new(Outcome::Duplicate);
    }
    let outcome = if error.starts_with("States.") && error.contains("Timeout") {
        BranchOutcome::TimedOut
    } else {
        BranchOutcome::Failed
    };
    let mut to = r.next(r.state, now);
    if let Some(b) = to.branches.iter_mut().find(|b| b.step == step) {
        // Step Functions ended the branch: nothing owed to its token reaches it any more.
        b.owed = None;
        b.outcome = None;
        b.unconfirmed = false;
    }
    let cause = settle(plan, &mut to, step, outcome);
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}

/// An optional branch of the group the record is at reported that Step Functions took its
/// success: baton's success is confirmed, and nothing is owed to its token any more.
fn succeeded(r: &Record, step: u32, now: OffsetDateTime) -> Decision {
    let Some(b) = branch(r, step).filter(|b| b.outcome == Some(BranchOutcome::Succeeded)) else {
        // Step Functions can take only a success baton decided and wrote first.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    };
    let mut to = r.next(r.state, now);
    to.confirmed.push(step);
    if let Some(b) = to.branches.iter_mut().find(|x| x.step == b.step) {
        b.owed = None;
        b.unconfirmed = false;
    }
    Decision::new(Outcome::Applied).with_write(Cause::BranchDone, Some(r), to)
}

/// Whether the group the record is at failed: a required branch failed or timed out, or a
/// branch was closed by such a failure.
pub fn group_failed(plan: &Plan, r: &Record) -> bool {
    r.branches.iter().any(|b| {
        b.outcome == Some(BranchOutcome::Closed)
            || !plan.is_optional(b.step)
                && matches!(b.outcome, Some(BranchOutcome::Failed | BranchOutcome::TimedOut))
    })
}

/// A branch's resume went out while its group waits: no longer owed. Found gone, its success
/// is unconfirmed: the branch's own report may still say it ended without it.
pub(super) fn on_resumed(
    r: &Record,
    (generation, step): (u32, u32),
    delivered: bool,
    now: OffsetDateTime,
) -> Decision {
    if generation == r.generation && r.branches.is_empty() && r.state == (State::Advancing { step }) {
        return step_resumed(r, now);
    }
    let owed = branch(r, step).is_some_and(|b| b.owed.is_some());
    if generation != r.generation || !owed || r.state.kind() != Kind::Waiting {
        return Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    }
    let mut to = r.next(r.state, now);
    if let Some(b) = to.branches.iter_mut().find(|b| b.step == step) {
        b.unconfirmed = !delivered && matches!(b.owed, Some(Resume::Success { .. }));
        b.owed = None;
    }
    Decision::new(Outcome::Applied).with_write(Cause::BranchResumed, Some(r), to)
}

/// A step's resume found its token gone: nothing is owed to that token any more, and the record
/// leaves the sweeper's work list. The token stays, as in a cancelled record, so that a copy of
/// its step_ready is known; a success is kept in [`Record::succeeded`], for compensation and for
/// the wait should Step Functions report it again with a new token (`lifecycle::repark`).
fn step_resumed(r: &Record, now: OffsetDateTime) -> Decision {
    let (Some(owed), Some(step)) = (&r.owed, r.state.step()) else {
        return Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    };
    let mut to = r.next(r.state, now);
    if matches!(owed, Resume::Success { .. }) && !to.succeeded.contains(&step) {
        to.succeeded.push(step);
    }
    to.owed = None;
    Decision::new(Outcome::Applied).with_write(Cause::StepResumed, Some(r), to)
}

/// The sweeper's re-send of every branch resume still owed (`None`: none is).
pub(super) fn resend_owed(r: &Record) -> Option<Decision> {
    let mut d = Decision::new(Outcome::Applied);
    for b in &r.branches {
        if let (Some(owed), Some(token)) = (&b.owed, &b.token) {
            d = owe(d, resume_effect(token, owed), r.state.kind() == Kind::Waiting, (r.generation, b.step));
        }
    }
    (!d.effects.is_empty()).then_some(d)
}

/// The same input again, for a branch: if it is the one that decided the branch and the resume
/// is still owed, owe it again (`None`: nothing to re-send).
pub(super) fn resend_for_repeat(r: &Record, step: u32, seen: &AppliedInput) -> Option<Decision> {
    if r.state.is_terminal() {
        return None;
    }
    let b = branch(r, step)?;
    let (owed, token) = (b.owed.as_ref()?, b.token.as_ref()?);
    let last_for_branch =
        r.applied.iter().rev().find(|a| a.step == Some(step) && a.generation == Some(r.generation));
    (last_for_branch == Some(seen)).then(|| {
        let waits = r.state.kind() == Kind::Waiting;
        owe(Decision::new(Outcome::Duplicate), resume_effect(token, owed), waits, (r.generation, step))
    })
}

/// Whether `input` must wait for another report before it can be decided truly (the engine
/// has it retried through its queue): an optional branch's report before its group opened (a
/// branch's `step_ready` opens it, seconds away), or the execution's success before every
/// optional branch is settled by its own report (sent before Step Functions left its group, so
/// already on the queue). A branch still open at the group the record is at needs no report:
/// baton sent it nothing, so Step Functions ended it without baton ([`left`]).
pub fn unsettled(plan: &Plan, record: Option<&Record>, input: &super::Input) -> bool {
    // A compensating record has no step and no group to wait for: its answer is final.
    let Some(r) = record.filter(|r| !r.state.is_terminal() && r.state != State::Compensating) else {
        return false;
    };
    match input {
        super::Input::BranchEnded { generation, step, .. } if *generation == r.generation => {
            let group = plan.position(*step);
            branch(r, *step).is_none() && r.state.step().is_none_or(|current| current < group.first)
        }
        super::Input::Finished { generation, finish: super::Finish::Succeeded }
            if *generation == r.generation =>
        {
            plan.optional.iter().any(|step| {
                !r.missed.contains(step)
                    && !r.confirmed.contains(step)
                    && !branch(r, *step).is_some_and(Branch::is_open)
            })
        }
        _ => false,
    }
}
