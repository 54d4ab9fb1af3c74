//! An operator's cancel (without `--compensate`, or with nothing completed to compensate).

use time::OffsetDateTime;

use super::effect::{Decision, Effect};
use super::input::{IgnoreReason, Outcome};
use super::position;
use super::record::{Record, State};
use super::table::Cause;
use super::wait::{Role, WaitOutcome};

pub(super) fn on_cancel(r: &Record, reason: &str, now: OffsetDateTime) -> Decision {
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
    let mut to = r.next(State::Cancelled, now);
    for w in to.waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.deadline = None;
    }
    position::close(&mut to, None);
    position::end_run(&mut to);
    let d = Decision::new(Outcome::Applied).with_write(Cause::Cancel, Some(r), to.clone()).effect(stop);
    fail_parked(d, &to, reason)
}

/// `d`, failing every token the cancelled record `r` parks on as well: the waits the cancel
/// closed (the step's, or the group's open branches). That ends the execution even where a stop
/// of a token wait is deferred (the local emulator); on AWS the tokens are already gone. A wait
/// decided before the cancel is not failed: its token was owed (and perhaps sent) another resume,
/// and gets no second, different one (found by an attack: an advancing step's token got its
/// failure and `baton.Cancelled`); the stop ends its execution.
fn fail_parked(mut d: Decision, r: &Record, reason: &str) -> Decision {
    let parked = r.waits.iter().filter(|w| w.outcome() == Some(WaitOutcome::Closed));
    for token in parked.filter_map(|w| w.token.as_ref()) {
        d = d.effect(Effect::fail(token, "baton.Cancelled", reason));
    }
    d
}
