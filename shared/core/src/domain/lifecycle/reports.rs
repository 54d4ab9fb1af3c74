//! Step Functions' own reports: how the execution finished, and how an optional branch ended
//! (each optional branch reports it on its way out of its group).
//!
//! An optional branch's report is the truth for the branch. It travels apart from the others,
//! so it may come before the branch's `step_ready` (it is retried until the group opens:
//! [`unsettled`]), or after Step Functions left the group (then the branch is settled in
//! [`Record::missed`] or [`Record::confirmed`] alone). A failure corrects a success baton sent
//! that never reached Step Functions. The execution's success waits until every optional branch
//! is settled by its report, so `succeeded` and `degraded` are never a guess.

use time::OffsetDateTime;

use super::compensation;
use super::effect::Decision;
use super::input::{Finish, IgnoreReason, Input, Outcome};
use super::plan::Plan;
use super::position;
use super::record::{Record, State};
use super::table::{Cause, is_allowed};
use super::wait::{Role, Wait, WaitOutcome};
use crate::mutants::{Mutation, active as mutant};

pub(super) fn on_finished(
    plan: &Plan,
    r: &Record,
    generation: u32,
    finish: &Finish,
    now: OffsetDateTime,
) -> Decision {
    if generation != r.generation {
        return Decision::ignored(IgnoreReason::StaleGeneration);
    }
    let left = match finish {
        Finish::Succeeded => position::left(plan, r, u32::MAX, now),
        _ => None,
    };
    let r = left.as_ref().unwrap_or(r);
    let (to_state, cause) = match finish {
        Finish::Succeeded if !r.missed.is_empty() && !mutant(Mutation::DegradedForgotten) => {
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
    let mut to = r.next(to_state, now);
    position::close(&mut to, matches!(finish, Finish::TimedOut).then_some(now));
    position::end_run(&mut to);
    // The step's token and deadline go with the run; a branch keeps its own, for the trace.
    for w in to.waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.token = None;
        w.deadline = None;
    }
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}

/// An optional branch reported how it ended: with `error`, its own catch caught a timeout or
/// its task's failure; without, Step Functions took baton's success.
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
    if position::group_failed(plan, r) {
        return Decision::new(Outcome::Duplicate);
    }
    let Some(w) = r.wait(step).filter(|w| w.role == Role::Branch) else {
        // Its group is not reached yet: the report is retried until it is ([`unsettled`]).
        if r.state.step().is_none_or(|current| step > current) {
            return Decision::ignored(IgnoreReason::OutOfOrder);
        }
        // Its group is passed: only the branch's settlement is left to record.
        let mut to = r.next(r.state, now);
        if error.is_some() { &mut to.missed } else { &mut to.confirmed }.push(step);
        return Decision::new(Outcome::Applied).with_write(Cause::BranchDone, Some(r), to);
    };
    let Some(error) = error else { return confirmed(r, w, now) };
    if !(w.is_open() || w.outcome() == Some(WaitOutcome::Succeeded)) {
        // Already decided by baton: it failed the branch, and this is its catch's report.
        return Decision::new(Outcome::Duplicate);
    }
    let outcome = if error.starts_with("States.") && error.contains("Timeout") {
        WaitOutcome::TimedOut
    } else {
        WaitOutcome::Failed
    };
    let mut to = r.next(r.state, now);
    if let Some(w) = to.wait_mut(step) {
        // Step Functions ended the branch: nothing owed to its token reaches it any more.
        w.end(outcome);
    }
    let cause = position::settle(plan, &mut to, step, outcome);
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}

/// An optional branch of the group the record is at reported that Step Functions took its
/// success: baton's success is confirmed, and nothing is owed to its token any more.
fn confirmed(r: &Record, w: &Wait, now: OffsetDateTime) -> Decision {
    if w.outcome() != Some(WaitOutcome::Succeeded) {
        // Step Functions can take only a success baton decided and wrote first.
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    let mut to = r.next(r.state, now);
    to.confirmed.push(w.step);
    if let Some(w) = to.wait_mut(w.step) {
        w.end(WaitOutcome::Succeeded);
    }
    Decision::new(Outcome::Applied).with_write(Cause::BranchDone, Some(r), to)
}

/// Whether `input` must wait for another report before it can be decided truly (the engine
/// has it retried through its queue): an optional branch's report before its group opened (a
/// branch's `step_ready` opens it, seconds away), or the execution's success before every
/// optional branch is settled by its own report (sent before Step Functions left its group, so
/// already on the queue). A branch still open at the group the record is at needs no report:
/// baton sent it nothing, so Step Functions ended it without baton (`position::left`).
pub fn unsettled(plan: &Plan, record: Option<&Record>, input: &Input) -> bool {
    // A compensating record has no step and no group to wait for: its answer is final.
    let Some(r) = record.filter(|r| !r.state.is_terminal() && r.state != State::Compensating) else {
        return false;
    };
    let branch = |step: u32| r.wait(step).filter(|w| w.role == Role::Branch);
    match input {
        Input::BranchEnded { generation, step, .. } if *generation == r.generation => {
            let group = plan.position(*step);
            branch(*step).is_none() && r.state.step().is_none_or(|current| current < group.first)
        }
        Input::Finished { generation, finish: Finish::Succeeded } if *generation == r.generation => {
            plan.optional().any(|step| {
                !r.missed.contains(&step)
                    && !r.confirmed.contains(&step)
                    && !branch(step).is_some_and(Wait::is_open)
            })
        }
        _ => false,
    }
}
