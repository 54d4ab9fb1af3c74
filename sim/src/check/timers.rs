//! Timer steps: the sweeper wakes a timer once its time has come, never before (by Step
//! Functions' clock, which entered the step; the functions' clocks may be apart from it by the
//! schedule's spread), and a cancel during a timer ends its execution as at any step. (That a
//! timer ends once is `each_step_advances_at_most_once`, and that its token takes one resume is
//! `at_most_one_resume_accepted`.)

use baton_core::domain::lifecycle::{Cause, Kind, State, Timer};
use baton_core::ports::orchestrator::ExecutionStatus;

use super::{Checker, Seen, execution_arn};

/// The timer of `step` in `r`'s config version and that step's `timeout`, if it is a timer step.
fn timer_of(
    s: &Seen<'_>,
    r: &baton_core::domain::lifecycle::Record,
    step: u32,
) -> Option<(Timer, time::Duration)> {
    let config = s.version_of(Some(&r.config_version))?;
    let st = config.workflow(r.workflow.as_str())?.steps.get(step as usize)?;
    Some((st.timer.clone()?, time::Duration::try_from(st.timeout).ok()?))
}

/// A timer completes only once its time has come: `after` its entry (by Step Functions' clock,
/// which set its deadline `timeout` after it), or the time its start event held; and one whose
/// time could not be read never completes (it fails its workflow).
fn a_timer_never_wakes_before_its_time(c: &mut Checker<'_>, s: &Seen<'_>) {
    let spread = s.stack.skews().spread();
    for (w, step) in super::completions(s) {
        let r = &w.to;
        let Some((timer, timeout)) = timer_of(s, r, step) else { continue };
        let Some(deadline) = r.wait(step).and_then(|t| t.deadline) else { continue };
        let due = match &timer {
            Timer::After(after) => time::Duration::try_from(*after).ok().map(|a| deadline - timeout + a),
            Timer::Until(pointer) => r.until_of(step, pointer).ok(),
        };
        c.check("a_timer_never_wakes_before_its_time", due.is_some_and(|due| w.at + spread >= due), || {
            format!(
                "{}/{} generation {} woke timer step {step} ({timer}) at {}, before its time {due:?}",
                r.workflow, r.key, r.generation, w.at
            )
        });
    }
}

fn a_timer_never_blocks_a_cancel(c: &mut Checker<'_>, s: &Seen<'_>) {
    for w in s.writes.iter() {
        let r = &w.to;
        let Some(State::Waiting { step }) = w.from else { continue };
        let cancelled =
            r.state.kind() == Kind::Cancelled && r.history.last().is_some_and(|h| h.cause == Cause::Cancel);
        if !cancelled || timer_of(s, r, step).is_none() {
            continue;
        }
        let arn = execution_arn(r);
        let running = s.model.executions.get(&arn).is_some_and(|e| e.status == ExecutionStatus::Running);
        c.check("a_timer_never_blocks_a_cancel", !running, || {
            format!(
                "{}/{} generation {} was cancelled during its timer, and its execution still runs",
                r.workflow, r.key, r.generation
            )
        });
    }
}

pub(super) fn all(c: &mut Checker<'_>, s: &Seen<'_>) {
    a_timer_never_wakes_before_its_time(c, s);
    a_timer_never_blocks_a_cancel(c, s);
}
