//! Stranded records: an execution that ended without the report baton waits for.
//!
//! Step Functions tells baton everything through its reports. When an execution ends without
//! one (stopped from the console or the API rather than by baton, a report lost past its
//! dead-letter queue's retention, a failure nothing catches), the record would wait for ever,
//! and the sweeper would list it as due at every sweep. So:
//!
//! - **The sweeper notices it** ([`Input::ExecutionGone`]): a live record whose deadline (or
//!   last change) passed long ago, with nothing owed, whose execution Step Functions reports
//!   closed, or gone, moves to `stranded`. It leaves the sweeper's lists, counts in
//!   `RecordsStranded` (alarmed), and shows in `baton status`.
//! - **Nothing moves a stranded record but a person** ([`Input::End`], `baton end`): every other
//!   input is ignored with the reason `stranded`, and ledgered, so a late report or callback
//!   leaves a trace. The operator's plan says how the execution ended and what stays undone.
//! - **It ends as its execution did**: a compensation that had begun settles as at the chain's
//!   end (`compensated` when every compensation run was acknowledged, `compensation_failed`
//!   otherwise); a forward run ends `succeeded` (or `degraded`) if the execution succeeded,
//!   `timed_out`, `cancelled` if it was aborted, and `failed` otherwise.

use super::{Decision, IgnoreReason, Input, Outcome, Plan, Record, State, compensation, group};
use time::OffsetDateTime;

/// The status a running execution has: never stranded, never ended by `baton end`.
pub const RUNNING: &str = "RUNNING";
/// The status an execution Step Functions no longer knows is named by.
pub const NOT_FOUND: &str = "NOT_FOUND";

/// Decides the inputs that strand or end a record, and every input of a stranded record
/// (`None`: the input is decided as before).
pub(super) fn route(
    _plan: &Plan,
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Option<Decision> {
    let nothing = || Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed));
    match (input, record) {
        (Input::ExecutionGone { .. } | Input::End { .. }, None) => Some(nothing()),
        (Input::ExecutionGone { generation, status }, Some(r)) => Some(on_gone(r, *generation, status, now)),
        (Input::End { generation, status, .. }, Some(r)) => Some(on_end(r, *generation, status, now)),
        (_, Some(r)) if r.state == State::Stranded => Some(while_stranded(r, input)),
        _ => None,
    }
}

/// The execution of `generation` ended (`status`) without its report.
fn on_gone(r: &Record, generation: u32, status: &str, now: OffsetDateTime) -> Decision {
    if generation != r.generation || status == RUNNING {
        return Decision::new(Outcome::Ignored(IgnoreReason::OutOfOrder));
    }
    if r.state == State::Stranded {
        return Decision::new(Outcome::Duplicate);
    }
    if r.state.is_terminal() {
        return Decision::new(Outcome::Ignored(IgnoreReason::Terminal));
    }
    // Nothing is owed any more: no token of it can be resumed. The token stays, as in a
    // cancelled record, so that a late copy of its step_ready is known.
    let mut to = Record { deadline: None, owed: None, next_attempt_at: None, ..r.next(State::Stranded, now) };
    group::close_open_branches(&mut to, None);
    for u in to.compensation.iter_mut().flat_map(|c| c.undos.iter_mut()) {
        u.owed = None;
        u.next_attempt_at = None;
    }
    Decision::new(Outcome::Applied).with_write(super::Cause::ExecutionGone, Some(r), to)
}

/// An operator ends the stranded record as its execution ended (`status`).
fn on_end(r: &Record, generation: u32, status: &str, now: OffsetDateTime) -> Decision {
    match r.state {
        State::Stranded if generation == r.generation && status != RUNNING => {}
        State::Stranded if generation != r.generation => {
            return Decision::ignored(IgnoreReason::StaleGeneration);
        }
        _ if r.state.is_terminal() => return Decision::ignored(IgnoreReason::Terminal),
        // Live (or its execution running): only a stranded record is ended so.
        _ => return Decision::ignored(IgnoreReason::OutOfOrder),
    }
    let mut to = Record { token: None, ..r.next(State::Stranded, now) };
    to.state = match to.compensation.as_mut() {
        Some(c) => compensation::settle(c),
        None => ended_as(status, !r.missed.is_empty()),
    };
    Decision::new(Outcome::Applied).with_write(super::Cause::End, Some(r), to)
}

/// Where a forward run whose execution ended with `status` ends.
pub fn ended_as(status: &str, missed: bool) -> State {
    match status {
        "SUCCEEDED" if missed => State::Degraded,
        "SUCCEEDED" => State::Succeeded,
        "TIMED_OUT" => State::TimedOut,
        "ABORTED" => State::Cancelled,
        _ => State::Failed,
    }
}

/// Any other input of a stranded record: nothing waits for it. Ledgered when it came from
/// outside or from a report; the sweeper's and the engine's own bookkeeping owe nothing.
fn while_stranded(r: &Record, input: &Input) -> Decision {
    match input {
        Input::Start { event } if r.start_events.contains(event) => Decision::new(Outcome::Duplicate),
        Input::Tick | Input::Resumed { .. } | Input::AttemptOpened { .. } => {
            Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed))
        }
        _ => Decision::ignored(IgnoreReason::Stranded),
    }
}
