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

use time::OffsetDateTime;

use super::compensation;
use super::effect::Decision;
use super::input::{IgnoreReason, Input, Outcome};
use super::plan::Plan;
use super::position;
use super::record::{Kind, Record, State, payload_fingerprint};
use super::table::Cause;
use super::wait::{Role, WaitOutcome, WaitStatus};

/// The status a running execution has: never stranded, never ended by `baton end`.
pub const RUNNING: &str = "RUNNING";
/// The status an execution Step Functions no longer knows is named by.
pub const NOT_FOUND: &str = "NOT_FOUND";

/// Whether an execution of `status` has ended for good, or is gone: only then is its record
/// stranded or ended. Running, waiting for a redrive, or a status this version of baton does not
/// know: it may still report (found by an attack test: a redrive pending stranded its record).
pub fn execution_gone(status: &str) -> bool {
    matches!(status, "SUCCEEDED" | "FAILED" | "TIMED_OUT" | "ABORTED" | NOT_FOUND)
}

/// Decides the inputs that strand or end a record, and every input of a stranded record
/// (`None`: the input is decided as before).
pub(super) fn route(
    plan: &Plan,
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Option<Decision> {
    match (input, record) {
        (Input::ExecutionGone { .. } | Input::End { .. }, None) => Some(Decision::nothing_owed()),
        (Input::ExecutionGone { generation, status, .. }, Some(r)) => {
            Some(on_gone(plan, r, *generation, status, now))
        }
        (Input::End { generation, status, error, .. }, Some(r)) => {
            Some(on_end(plan, r, *generation, (status, error.as_deref()), now))
        }
        (_, Some(r)) if r.state.kind() == Kind::Stranded => Some(while_stranded(r, input)),
        _ => None,
    }
}

/// The execution of `generation` ended (`status`) without its report.
fn on_gone(plan: &Plan, r: &Record, generation: u32, status: &str, now: OffsetDateTime) -> Decision {
    // A pending record whose execution never started is owed its start, by the sweeper, not a
    // person (found by an attack test).
    let never_started = r.state == State::Pending && status == NOT_FOUND;
    if generation != r.generation || !execution_gone(status) || never_started {
        return Decision::new(Outcome::Ignored(IgnoreReason::OutOfOrder));
    }
    if r.state.kind() == Kind::Stranded {
        return Decision::new(Outcome::Duplicate);
    }
    if r.state.is_terminal() {
        return Decision::new(Outcome::Ignored(IgnoreReason::Terminal));
    }
    // Nothing is owed any more: the record leaves the sweeper's lists. What it was doing stays
    // (its step, an owed resume, its waits' outcomes, its compensation), for the plan of what
    // stays undone; an open wait ended with the run, timed out if past its deadline, else
    // closed (a success never confirmed is settled by the end, as its report would have:
    // `on_end`); an open optional branch is missed (found by an attack test: a run that
    // succeeded past it ended `succeeded`, not `degraded`).
    let mut to = r.next(State::Stranded { at: r.state.step() }, now);
    for w in to.waits.iter_mut().filter(|w| w.is_open()) {
        let past = w.deadline.is_some_and(|d| d <= now);
        if w.role == Role::Branch && plan.is_optional(w.step) && !to.missed.contains(&w.step) {
            to.missed.push(w.step);
        }
        w.end(if past { WaitOutcome::TimedOut } else { WaitOutcome::Closed });
    }
    for w in to.waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.deadline = None;
    }
    // A compensation whose next attempt was due is due no more: nothing will answer it.
    for u in to.compensation.iter_mut().flat_map(|c| c.undos.iter_mut()) {
        if u.wait.task_due().is_some() {
            u.wait.status = WaitStatus::Open;
        }
    }
    Decision::new(Outcome::Applied).with_write(Cause::ExecutionGone, Some(r), to)
}

/// An operator ends the stranded record as its execution ended (`status`, with `error`).
fn on_end(
    plan: &Plan,
    r: &Record,
    generation: u32,
    (status, error): (&str, Option<&str>),
    now: OffsetDateTime,
) -> Decision {
    match r.state {
        State::Stranded { .. } if generation == r.generation && execution_gone(status) => {}
        State::Stranded { .. } if generation != r.generation => {
            return Decision::ignored(IgnoreReason::StaleGeneration);
        }
        _ if r.state.is_terminal() => return Decision::ignored(IgnoreReason::Terminal),
        // Live (or its execution not gone): only a stranded record is ended so.
        _ => return Decision::ignored(IgnoreReason::OutOfOrder),
    }
    let mut to = r.next(State::Stranded { at: None }, now);
    to.state = match to.compensation.as_mut() {
        Some(c) => compensation::settle(c),
        // An optional branch whose success Step Functions never confirmed (its report lost
        // with the execution) may have been missed: the run ends `degraded`, which sends a
        // person to look, rather than `succeeded`, which could hide it (found by the simulation).
        None => ended_as((status, error), !r.missed.is_empty() || unconfirmed_optional(plan, r)),
    };
    // A run that timed out at a group: a wait whose resume was never confirmed timed out, as
    // its report would have said (found by the simulation: a required branch's success, its
    // token gone, was left succeeded in a group that timed out).
    if to.state == State::TimedOut {
        position::close(&mut to, Some(now));
    }
    position::end_run(&mut to);
    for w in to.waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.token = None;
    }
    Decision::new(Outcome::Applied).with_write(Cause::End, Some(r), to)
}

/// Whether an optional branch of the run is settled by no report of its own: neither its success
/// confirmed, nor missed (its report lost with the execution; a run that succeeded passed every
/// group).
fn unconfirmed_optional(plan: &Plan, r: &Record) -> bool {
    plan.optional().any(|step| !r.confirmed.contains(&step) && !r.missed.contains(&step))
}

/// Where a forward run whose execution ended with `status` (and `error`, its `Fail` state's or
/// its stop's) ends: as its report would have ended it (found by an attack test: a step that
/// timed out, its report lost, ended `failed`).
pub fn ended_as((status, error): (&str, Option<&str>), missed: bool) -> State {
    let timed_out = [super::TIMED_OUT_ERROR, compensation::TIMEOUT_ERROR];
    match (status, error) {
        ("SUCCEEDED", _) if missed => State::Degraded,
        ("SUCCEEDED", _) => State::Succeeded,
        ("TIMED_OUT", _) => State::TimedOut,
        ("ABORTED", _) => State::Cancelled,
        ("FAILED", Some(e)) if timed_out.contains(&e) => State::TimedOut,
        ("FAILED", Some(compensation::CANCELLED_ERROR)) => State::Cancelled,
        _ => State::Failed,
    }
}

/// Any other input of a stranded record: nothing waits for it. Ledgered when it came from
/// outside or from a report; the sweeper's and the engine's own bookkeeping owe nothing.
fn while_stranded(r: &Record, input: &Input) -> Decision {
    match input {
        Input::Start { event, .. } if r.start_events.contains(event) => Decision::new(Outcome::Duplicate),
        // Its run has not ended: refused as while it ran, so that a copy of the event after
        // the end never starts a later run (found by the simulation: a producer's late retry,
        // ledgered `stranded`, restarted the workflow weeks later).
        Input::Start { .. } => Decision::ignored(IgnoreReason::AlreadyRunning),
        // An input the run applied before it was stranded, again (a drain that died after its
        // write, finished by the sweeper): a duplicate, as it was applied, never `stranded`
        // (found by the simulation, seed 28386: its inbox entry was settled ignored).
        Input::StepInput { id, source, hash, step, .. }
            if r.applied.iter().any(|a| {
                &a.id == id
                    && a.source == *source
                    && a.step == *step
                    && a.generation == r.generation
                    && payload_fingerprint(&a.hash) == payload_fingerprint(hash)
            }) =>
        {
            Decision::new(Outcome::Duplicate)
        }
        Input::Tick | Input::Resumed { .. } | Input::AttemptOpened { .. } => Decision::nothing_owed(),
        _ => Decision::ignored(IgnoreReason::Stranded),
    }
}
