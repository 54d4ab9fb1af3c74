//! Step Functions reached a step (or a branch) and parked on its token: the position opens (the
//! first report of a step, or of any branch of a group), a branch of the group joins it, or the
//! wait the record is at is reported again with a newer token (its report's send was retried,
//! re-entering the wait).

use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::effect::{Decision, Effect, failure, success};
use super::input::{IgnoreReason, Outcome, RejectReason};
use super::plan::{Plan, Span, Timer};
use super::position;
use super::record::{Kind, Record, State};
use super::table::Cause;
use super::wait::{Role, Wait, WaitId, WaitOutcome, WaitStatus};
use crate::domain::ids::TaskToken;

pub(super) fn on_step_ready(
    plan: &Plan,
    r: &Record,
    (generation, step): (u32, u32),
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    if generation != r.generation {
        // An execution of another generation: end it rather than leave it parked.
        return Decision::ignored(IgnoreReason::StaleGeneration).effect(Effect::fail(
            token,
            "baton.StaleGeneration",
            "the workflow record has moved to another generation",
        ));
    }
    if let Some(ended) = reported_after_the_end(r, token) {
        return ended;
    }
    if !plan.has(step) {
        return Decision::new(Outcome::Rejected(RejectReason::UnknownStep)).effect(Effect::fail(
            token,
            "baton.UnknownStep",
            "the step is not in the workflow's config",
        ));
    }
    // Step Functions may leave a parallel group before the record hears how its optional
    // branches ended (their reports travel apart, on an unordered queue): the group is settled
    // as Step Functions left it ([`position::left`]).
    let left = position::left(plan, r, step, now);
    let r = left.as_ref().unwrap_or(r);
    let expected = match r.state {
        State::Pending => Some(0),
        State::Advancing { step: n } => plan.next_position(n),
        State::Waiting { step: n } if left.is_some() => plan.next_position(n),
        _ => None,
    };
    let position = plan.position(step);
    if expected == Some(position.first) {
        return open(plan, r, position, (step, token, deadline), now);
    }
    let at_position = r.state.step() == Some(position.first);
    match r.wait(step).filter(|_| at_position) {
        Some(w) if w.role == Role::Step => step_again(plan, r, w, token, deadline, now),
        Some(w) => branch_again(plan, r, w, token, deadline, now),
        None if r.state.step().is_some_and(|current| step < current) => {
            Decision::ignored(IgnoreReason::StepAlreadyPassed)
        }
        // Its token is left alone: the record may be the one behind.
        None => Decision::ignored(IgnoreReason::OutOfOrder),
    }
}

/// A report of a wait (a step's, a branch's or a compensation's) to a record that ended. After a
/// compensation, the execution has ended with its chain: a copy of a report it sent (its token
/// resumed, failed into the chain, or passed) is owed nothing more (found by review: such a
/// token got a second, different resume). Otherwise its token is failed, so that its execution
/// ends rather than waits out its deadline. `None` while the record lives.
pub(super) fn reported_after_the_end(r: &Record, token: &TaskToken) -> Option<Decision> {
    if !r.state.is_terminal() {
        return None;
    }
    if r.compensation.is_some() {
        return Some(Decision::ignored(IgnoreReason::Terminal));
    }
    Some(Decision::ignored(IgnoreReason::Terminal).effect(Effect::fail(
        token,
        "baton.Terminal",
        &format!("the workflow record is already {}", r.state),
    )))
}

/// A step's report, for the step the record is at: a newer token, a copy of the report that
/// won, or one the step is past.
fn step_again(
    plan: &Plan,
    r: &Record,
    w: &Wait,
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    if w.newer(token, deadline) {
        return repark(r, w, token, deadline, now);
    }
    if r.state.kind() == Kind::Waiting && w.token.as_ref() == Some(token) {
        // Redelivery of the report that already won. Task creation and the drain are
        // idempotent, so a crash after the write is repaired by running them again.
        return Decision::new(Outcome::Duplicate).effects(ready(
            plan,
            (r.generation, w.step),
            w.deadline,
            now,
        ));
    }
    Decision::ignored(IgnoreReason::StepAlreadyPassed)
}

/// A branch's report, for the group the record is at: a copy of the one that reached it, a
/// newer token, the branch joining its group, or one its group is past.
fn branch_again(
    plan: &Plan,
    r: &Record,
    w: &Wait,
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    let waiting = r.state.kind() == Kind::Waiting;
    if w.token.as_ref() == Some(token) {
        return Decision::new(Outcome::Duplicate).effects(ready(
            plan,
            (r.generation, w.step),
            w.deadline,
            now,
        ));
    }
    // As a step's: open, owed, or its resume found the old token gone, while the group waits
    // or after it was decided (found by an attack: a branch's owed success never reached the
    // newer token).
    if w.newer(token, deadline) {
        return repark(r, w, token, deadline, now);
    }
    if waiting && w.status == WaitStatus::Unreached {
        let mut to = r.next(r.state, now);
        if let Some(branch) = to.wait_mut(w.step) {
            *branch = reached(plan, r, (w.step, Role::Branch), token, deadline);
        }
        return Decision::new(Outcome::Applied).with_write(Cause::BranchReady, Some(r), to).effects(ready(
            plan,
            (r.generation, w.step),
            Some(deadline),
            now,
        ));
    }
    // The group failed before this branch was reached: its token dies with the execution.
    if w.outcome() == Some(WaitOutcome::Closed) {
        return Decision::ignored(IgnoreReason::GroupFailed);
    }
    Decision::ignored(IgnoreReason::OutOfOrder)
}

/// What a wait Step Functions reached owes: its task, unless its deadline has passed (Step
/// Functions has timed it out, and its report is on its way: found by an attack, a task went
/// out for a wait already over), and its buffered inputs drained. A timer owes neither: it
/// takes no input.
fn ready(
    plan: &Plan,
    (generation, step): (u32, u32),
    deadline: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Vec<Effect> {
    if plan.timer_of(step).is_some() {
        return Vec::new();
    }
    let task = Effect::CreateTask { wait: WaitId { generation, step, compensation: false }, attempt: 1 };
    let live = deadline.is_none_or(|d| now < d);
    live.then_some(task).into_iter().chain([Effect::DrainInbox { generation, step }]).collect()
}

/// The position `span` opens: a step with its one wait, reached; or a group with a wait per
/// branch, the one reported reached.
fn open(
    plan: &Plan,
    r: &Record,
    span: Span,
    (step, token, deadline): (u32, &TaskToken, OffsetDateTime),
    now: OffsetDateTime,
) -> Decision {
    // The first step's report confirms the generation's config version: the one its
    // execution runs (`plan`'s, the engine reads the report in it). It differs from the
    // version written at the start only when the start crossed a deploy; no step has
    // happened yet, so the record follows its execution.
    let config_version = match r.state {
        State::Pending => plan.version.clone(),
        _ => r.config_version.clone(),
    };
    let role = if plan.group_of(step).is_some() { Role::Branch } else { Role::Step };
    let waits =
        span.steps()
            .map(|s| {
                if s == step {
                    reached(plan, r, (s, role), token, deadline)
                } else {
                    Wait::unreached(s, role)
                }
            })
            .collect();
    let to = Record { waits, config_version, ..r.next(State::Waiting { step: span.first }, now) };
    Decision::new(Outcome::Applied).with_write(Cause::StepReady, Some(r), to).effects(ready(
        plan,
        (r.generation, step),
        Some(deadline),
        now,
    ))
}

/// The wait of `step`, reached with `token` until `deadline`: open (its first reminder due, if it
/// declares `remind`), or, a timer's, sleeping until its time ([`timer_wakes`]; a timer that
/// cannot wait sleeps until it entered, so that the next sweep fails it). Times count from when
/// Step Functions entered the step (by Step Functions' clock, which set the deadline `timeout`
/// after it: a report that waited in the queue shortens the wait, and never lengthens it).
fn reached(
    plan: &Plan,
    r: &Record,
    (step, role): (u32, Role),
    token: &TaskToken,
    deadline: OffsetDateTime,
) -> Wait {
    let mut w = Wait::reached(step, role, token, deadline);
    let Some(s) = plan.step(step) else { return w };
    let entered = entered(s.timeout, deadline);
    let after = |d: std::time::Duration| {
        entered.saturating_add(time::Duration::try_from(d).unwrap_or(time::Duration::MAX))
    };
    if let Some(timer) = &s.timer {
        let until = timer_wakes(timer, r, step, (s.timeout, deadline)).unwrap_or(entered);
        w.status = WaitStatus::Sleeping { until };
    } else if role == Role::Step {
        // Reminders and escalation are a step's only (`tick::notify`; `baton validate` refuses
        // them on a branch, and on a timer: found by an attack test, a branch's would be owed
        // and never sent).
        w.notice_at = s.notices().first().map(|(t, _)| after(*t));
    }
    w
}

/// When Step Functions entered a step of `timeout` whose wait ends at `deadline`.
fn entered(timeout: std::time::Duration, deadline: OffsetDateTime) -> OffsetDateTime {
    deadline - time::Duration::try_from(timeout).unwrap_or(time::Duration::ZERO)
}

/// When the timer of `step` (of `timeout`, its wait ending at `deadline`) wakes: `after` Step
/// Functions entered it, or at the time its run's start event held (at once, if that has passed).
/// Or why it cannot wait: that time could not be read, or is past what its timeout lets the
/// sweep that wakes it reach (Step Functions would time the step out first). Reach and wake
/// ask it alike (`tick::wake`).
pub(super) fn timer_wakes(
    timer: &Timer,
    r: &Record,
    step: u32,
    (timeout, deadline): (std::time::Duration, OffsetDateTime),
) -> Result<OffsetDateTime, String> {
    match timer {
        Timer::After(after) => Ok(entered(timeout, deadline)
            .saturating_add(time::Duration::try_from(*after).unwrap_or(time::Duration::MAX))),
        Timer::Until(pointer) => {
            let at = r.until_of(step, pointer)?;
            let latest = deadline.saturating_sub(
                time::Duration::try_from(crate::limits::ATTEMPT_OPEN_LAG).unwrap_or(time::Duration::ZERO),
            );
            if at > latest {
                let rfc = |t: OffsetDateTime| {
                    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
                };
                return Err(format!(
                    "the start event's {pointer} is {}, later than the step's timeout lets it wait (until {})",
                    rfc(at),
                    rfc(latest)
                ));
            }
            Ok(at)
        }
    }
}

/// Step Functions reported the wait `w` again with a new token and a later deadline: the
/// report's send failed and the wait was retried (`asl.rs`, the wait's `Retry`), re-entering it.
/// Only the newest token can be resumed now: the record takes it, and whatever it owes that wait
/// goes to it (the task, still idempotent; a resume owed, or one that found the old token gone).
/// An older report arriving late (an earlier deadline) is not taken.
fn repark(
    r: &Record,
    w: &Wait,
    token: &TaskToken,
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    if !w.reparks() {
        return Decision::ignored(IgnoreReason::OutOfOrder);
    }
    let mut to = r.next(r.state, now);
    let Some(new) = to.wait_mut(w.step) else { return Decision::ignored(IgnoreReason::OutOfOrder) };
    // A resume that found the old token gone is owed again, to the new one (a failure's text is
    // not kept then: the step is failed as baton's own).
    new.repark(token, deadline, now, |w| match w.outcome() {
        Some(WaitOutcome::Succeeded) => success(Value::Object(Map::clone(&w.inputs))),
        _ => failure(
            super::FAILED_ERROR,
            "the step failed; its failure was sent again after Step Functions retried its report",
        ),
    });
    let new = new.clone();
    let cause = if w.role == Role::Branch { Cause::BranchReady } else { Cause::StepReady };
    let generation = r.generation;
    let mark = super::step_input::mark_for(&to);
    let d = Decision::new(Outcome::Applied).with_write(cause, Some(r), to);
    match (&new.status, new.owed()) {
        (_, Some(resume)) => d.effect(Effect::Resume {
            wait: WaitId::of(generation, &new),
            token: token.clone(),
            resume: resume.clone(),
            mark,
        }),
        (WaitStatus::Open, None) => d
            .effect(Effect::CreateTask { wait: WaitId::of(generation, &new), attempt: new.attempt() })
            .effect(Effect::DrainInbox { generation, step: new.step }),
        _ => d,
    }
}
