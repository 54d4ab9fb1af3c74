//! The sweeper's tick: what a record owes, carried out again. A pending record's start; a timer
//! whose time has come; each wait's next attempt whose turn has come; each resume owed past its
//! grace.

use time::OffsetDateTime;

use super::effect::{Decision, Effect, failure, success};
use super::input::{Input, Outcome};
use super::plan::{Notice, Plan, Timer};
use super::position;
use super::record::{Kind, Record, State};
use super::resend_after;
use super::step_input::mark_for;
use super::step_ready::timer_wakes;
use super::table::Cause;
use super::wait::{Role, Wait, WaitId, WaitOutcome, WaitStatus};
use crate::limits::RESTART_PENDING_AFTER;
use crate::mutants::{Mutation, active as mutant};

pub(super) fn on_tick(plan: &Plan, r: &Record, now: OffsetDateTime) -> Decision {
    if r.state == State::Pending && now - r.updated_at >= RESTART_PENDING_AFTER {
        return Decision::new(Outcome::Applied).effect(Effect::StartExecution { generation: r.generation });
    }
    if let Some(woken) = wake(plan, r, now) {
        return woken;
    }
    if let Some(notices) = notify(plan, r, now) {
        return notices;
    }
    // An owed resume again, and the mark that it went out: one that finds its token gone owes
    // nothing more, and the record leaves the sweeper's work list (found by an attack test: a
    // crowd of advancing records whose executions were stopped held it for good).
    let effects: Vec<Effect> = r
        .live_waits()
        .filter_map(|w| match (&w.status, &w.token) {
            (WaitStatus::TaskDue { at }, _) => open_attempt(plan, r, w, *at, now),
            (WaitStatus::Owed { resume, since, .. }, Some(token)) if now - *since >= resend_after() => {
                Some(Effect::Resume {
                    wait: WaitId::of(r.generation, w),
                    token: token.clone(),
                    resume: resume.clone(),
                    mark: mark_for(r),
                })
            }
            _ => None,
        })
        .collect();
    if effects.is_empty() {
        Decision::nothing_owed()
    } else {
        Decision::new(Outcome::Applied).effects(effects)
    }
}

/// A timer step whose time has come, by this sweep's clock: its wait succeeds (with no output),
/// and with it the step, and its success is owed to its token. A timer that cannot wait (its
/// `until` could not be read from the start event, or lies past its timeout) fails instead, with
/// [`TIMER_ERROR`](super::TIMER_ERROR) and why: the workflow fails with it, rather than wait for
/// a time nobody knows. A timer that Step Functions has timed out already (the sweeper later
/// than the step's margin) is left to its timeout report.
fn wake(plan: &Plan, r: &Record, now: OffsetDateTime) -> Option<Decision> {
    let w = r.waits.iter().find(|w| w.wakes_at().is_some_and(|at| at <= now))?;
    let token = w.token.clone()?;
    let deadline = w.deadline?;
    if r.state.kind() != Kind::Waiting || now >= deadline {
        return None;
    }
    let s = plan.step(w.step)?;
    // What reach decided stands: a timer until a time sleeps until that time, or, when it could
    // not wait, until it was entered. (Judged again here, a newer token's later deadline could
    // call a time valid that reach found too late, and wake it before that time.)
    let timer = s.timer.as_ref()?;
    let genuine = match timer {
        Timer::After(_) => true,
        Timer::Until(pointer) => r.until_of(w.step, pointer).ok() == w.wakes_at(),
    };
    let (outcome, resume) = if genuine {
        (WaitOutcome::Succeeded, success(serde_json::Value::Object(serde_json::Map::new())))
    } else {
        let why = timer_wakes(timer, r, w.step, (s.timeout, deadline)).err().unwrap_or_else(|| {
            "the start event's time is later than the step's timeout let it wait when Step Functions reached it"
                .to_owned()
        });
        (WaitOutcome::Failed, failure(super::TIMER_ERROR, &why))
    };
    let mut to = r.next(r.state, now);
    let woken = to.wait_mut(w.step)?;
    woken.decide(outcome, resume.clone(), now);
    let wait = WaitId::of(r.generation, woken);
    let cause = position::settle(plan, &mut to, w.step, outcome);
    let mark = mark_for(&to);
    Some(Decision::new(Outcome::Applied).with_write(cause, Some(r), to).effect(Effect::Resume {
        wait,
        token,
        resume,
        mark,
    }))
}

/// The reminders and escalation levels of a waiting step whose time has come, by this sweep's
/// clock ([`super::plan::StepPlan::notices`]): claimed by one write (how many of the step's
/// notices are behind it, and the next one's time), then published. Every level due goes out, in
/// order; of the reminders due, a sweep late past several sends the last only, with its count.
/// None goes out once the wait is decided (its claim would find it decided), none twice, none
/// before its time; a crash between the claim and the publish loses those, never repeats them.
fn notify(plan: &Plan, r: &Record, now: OffsetDateTime) -> Option<Decision> {
    let w = r.step_wait().filter(|w| w.status == WaitStatus::Open && r.state.kind() == Kind::Waiting)?;
    let schedule = plan.step(w.step)?.notices();
    let at = w.notice_at.filter(|at| *at <= now && w.deadline.is_none_or(|d| now < d))?;
    let after = |d: std::time::Duration| time::Duration::try_from(d).unwrap_or(time::Duration::MAX);
    let behind = w.notified as usize;
    // When the wait began: each notice's time counts from it.
    let began = at - after(schedule.get(behind)?.0);
    let due = schedule[behind..].iter().take_while(|(t, _)| began + after(*t) <= now).count();
    let last_reminder = schedule[..behind + due].iter().rposition(|(_, n)| matches!(n, Notice::Reminder(_)));
    let (wait, attempt) = (WaitId::of(r.generation, w), w.attempt());
    // (The planted bug forgets which levels went out: every level due so far goes out again.)
    let from = if mutant(Mutation::EscalationsRepeated) { 0 } else { behind };
    let effects: Vec<Effect> = (from..behind + due)
        .filter_map(|i| match schedule[i].1 {
            Notice::Escalation(level) => Some(Effect::Escalate { wait, attempt, level }),
            Notice::Reminder(count) if Some(i) == last_reminder && i >= behind => {
                Some(Effect::Remind { wait, attempt, count })
            }
            Notice::Reminder(_) => None,
        })
        .collect();
    let mut to = r.next(r.state, now);
    let claimed = to.wait_mut(w.step)?;
    claimed.notified = u32::try_from(behind + due).ok()?;
    claimed.notice_at = schedule.get(behind + due).map(|(t, _)| began + after(*t));
    Some(Decision::new(Outcome::Applied).with_write(Cause::Notified, Some(r), to).effects(effects))
}

/// The task of the next attempt of `w`, once due at `due`: a heartbeat first when the step keeps
/// its token alive between attempts, then the task published, then marked. A sweep late past the
/// wait's deadline opens nothing: Step Functions has timed it out.
fn open_attempt(
    plan: &Plan,
    r: &Record,
    w: &Wait,
    due: OffsetDateTime,
    now: OffsetDateTime,
) -> Option<Effect> {
    if due > now || w.deadline.is_some_and(|deadline| now >= deadline) {
        return None;
    }
    let keeps_alive = w.role != Role::Compensation && plan.beats_between_attempts(w.step);
    let beat = w.token.clone().filter(|_| keeps_alive);
    Some(Effect::OpenAttempt { wait: WaitId::of(r.generation, w), attempt: w.attempt(), beat })
}

/// Whether `input` answers, by name, the running attempt of a wait of `record` whose task is
/// not yet marked out: the mark follows the publish (by milliseconds, or, after a crash between
/// them, by a sweep), so the engine has the sender retry in a moment rather than answer it for
/// good (found by review: such an answer was `ignored` and lost).
pub fn task_not_out(record: Option<&Record>, input: &Input) -> bool {
    match input {
        Input::StepInput { id, source, step, generation, attempt: Some(attempt), .. } => {
            let Some(r) = record.filter(|r| r.state.kind() == Kind::Waiting) else { return false };
            let Some(w) = r.wait(*step).filter(|w| w.is_open()) else { return false };
            // A repeat of an input applied to this step in this run (one event may feed several
            // steps: the same id applied elsewhere is another input; found by an attack test).
            let repeat = r.applied.iter().any(|a| {
                &a.id == id && a.source == *source && a.step == *step && a.generation == r.generation
            });
            let this_run = generation.is_none_or(|g| g == r.generation);
            awaits_mark(w, Some(*attempt)) && this_run && !repeat && !mutant(Mutation::PublishedByTheClock)
        }
        Input::UndoInput { id, step, generation, attempt, .. } => {
            let Some(r) = record.filter(|r| r.state == State::Compensating) else { return false };
            let Some(u) = r.compensation.as_ref().and_then(|c| c.undo(*step)) else { return false };
            let repeat = u.acks.iter().any(|a| a.id == *id);
            let this_run = generation.is_none_or(|g| g == r.generation);
            u.wait.waits() && awaits_mark(&u.wait, *attempt) && !repeat && this_run
        }
        _ => false,
    }
}

/// Whether `w`'s running attempt (the one `attempt` names, if it names one) is due and not yet
/// marked out.
fn awaits_mark(w: &Wait, attempt: Option<u32>) -> bool {
    w.task_due().is_some() && attempt.is_none_or(|a| a == w.attempt())
}
