//! The engine's own marks, after it carried out a decision's effects: a wait's resume went out
//! (delivered, or its token found gone), or its attempt's task went out. Each names its wait.

use time::OffsetDateTime;

use super::effect::Decision;
use super::input::Outcome;
use super::record::{Kind, Record};
use super::table::Cause;
use super::wait::{Wait, WaitId};
use crate::domain::ids::TaskToken;

/// The record's wait `id` names, to change in `to`, with the cause of the write: a
/// compensation's while compensating, else the position's while it waits or advances.
fn named(to: &mut Record, id: WaitId) -> Option<(&mut Wait, Kind)> {
    let kind = to.state.kind();
    if id.generation != to.generation {
        return None;
    }
    match (id.compensation, kind) {
        (true, Kind::Compensating) => {
            to.compensation.as_mut()?.undo_mut(id.step).map(|u| (&mut u.wait, kind))
        }
        (false, Kind::Waiting | Kind::Advancing) => to.wait_mut(id.step).map(|w| (w, kind)),
        _ => None,
    }
}

/// A wait's owed resume went out to `token`: no longer owed. Found gone, a success is
/// unconfirmed: the branch's own report, or the run's end, may still say it ended without it.
/// The mark of a send to an older token (the wait was reparked since) is nothing: what is owed
/// to the newer one stays owed (found by an attack).
pub(super) fn on_resumed(
    r: &Record,
    (id, token): (WaitId, &TaskToken),
    delivered: bool,
    now: OffsetDateTime,
) -> Decision {
    let mut to = r.next(r.state, now);
    let Some((w, kind)) =
        named(&mut to, id).filter(|(w, _)| w.owed().is_some() && w.token.as_ref() == Some(token))
    else {
        return Decision::nothing_owed();
    };
    w.resumed(delivered);
    let cause = match kind {
        Kind::Compensating => Cause::Undo,
        Kind::Waiting => Cause::BranchResumed,
        _ => Cause::StepResumed,
    };
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}

/// The task of `attempt` of a wait went out: nothing more is due for it.
pub(super) fn on_attempt_opened(r: &Record, id: WaitId, attempt: u32, now: OffsetDateTime) -> Decision {
    let mut to = r.next(r.state, now);
    let opened = match named(&mut to, id) {
        Some((w, kind @ (Kind::Waiting | Kind::Compensating))) => w.attempt_opened(attempt).map(|()| kind),
        _ => None,
    };
    let Some(kind) = opened else { return Decision::nothing_owed() };
    let cause = if kind == Kind::Compensating { Cause::Undo } else { Cause::AttemptOpened };
    Decision::new(Outcome::Applied).with_write(cause, Some(r), to)
}
