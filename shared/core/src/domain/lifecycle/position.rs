//! A position: a step with its one wait, or a parallel group with one wait per branch. Its waits
//! are decided one by one; the position is decided with the last of them, or with the first
//! required one that fails.
//!
//! - A required wait that does not succeed closes its open siblings and fails the position
//!   (`advancing` with its failure owed: Step Functions' Catch takes it from there). An
//!   optional branch's is recorded in [`Record::missed`] and the group goes on.
//! - Once no wait is open, the position is decided (`advancing`), and the next position's first
//!   report opens it.
//! - An optional branch reports how it ended (`reports.rs`); Step Functions may leave its group
//!   before that report arrives, and the group is then settled as Step Functions left it
//!   ([`left`]).

use time::OffsetDateTime;

use super::plan::Plan;
use super::record::{Kind, Record, State};
use super::table::Cause;
use super::wait::{Role, Wait, WaitOutcome, WaitStatus};
use crate::mutants::{Mutation, active as mutant};

/// Decides the position in `to` after its wait of `step` got `outcome` (already in the wait):
/// a required wait that did not succeed closes its open siblings and fails the position; once
/// no wait is open, the position is decided. Returns the cause of the write.
pub(super) fn settle(plan: &Plan, to: &mut Record, step: u32, outcome: WaitOutcome) -> Cause {
    // (The planted bug fails only a group that still waits: from one decided already, the
    // table allows no failure, and `decide` would stop the schedule instead of the checks.)
    let planted = mutant(Mutation::OptionalFailsGroup) && to.state.kind() == Kind::Waiting;
    let required = !plan.is_optional(step) || planted;
    if outcome != WaitOutcome::Succeeded && !required && !to.missed.contains(&step) {
        to.missed.push(step);
    }
    let first = to.waits.first().map_or(step, |w| w.step);
    if outcome != WaitOutcome::Succeeded && required {
        close(to, None);
        to.state = State::Advancing { step: first };
        return Cause::FailStep;
    }
    // Still waiting for a sibling; or the group had advanced already (an optional branch's
    // timeout overtook the success baton owed it).
    if to.waits.iter().any(Wait::is_open) || to.state.kind() != Kind::Waiting {
        return Cause::BranchDone;
    }
    to.state = State::Advancing { step: first };
    Cause::Complete
}

/// Closes every wait of the position still open: timed out if its deadline has passed by
/// `timed_out_at` (the time of a timeout report), closed otherwise. On a timeout report, a
/// success Step Functions never confirmed timed out too: its wait's deadline or heartbeat ran
/// out before its resume arrived (a failure that had arrived would have failed the group first;
/// that timeout is the one reported; found by the simulation: a clock jump past a branch's
/// heartbeat, its success then refused). A failure still owed past its deadline, likewise.
pub(super) fn close(to: &mut Record, timed_out_at: Option<OffsetDateTime>) {
    for w in &mut to.waits {
        // (Step Functions' clock, which timed the wait out, and this function's may be apart.)
        let skew = crate::limits::MAX_CLOCK_SKEW;
        let missed_deadline = matches!((timed_out_at, w.deadline), (Some(at), Some(d)) if d <= at + skew);
        let success_refused = w.outcome() == Some(WaitOutcome::Succeeded) && w.unsure();
        let failure_late = w.outcome() == Some(WaitOutcome::Failed) && w.owed().is_some() && missed_deadline;
        if w.is_open() {
            w.end(if missed_deadline { WaitOutcome::TimedOut } else { WaitOutcome::Closed });
        } else if timed_out_at.is_some() && success_refused || failure_late {
            w.end(WaitOutcome::TimedOut);
        }
    }
}

/// Ends every wait of a record that ended: nothing is owed to any any more.
pub(super) fn end_run(to: &mut Record) {
    for w in &mut to.waits {
        w.settle();
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
    let first = r.waits.first().filter(|w| w.role == Role::Branch)?.step;
    let later = plan.next_position(first).is_some_and(|next| step >= next);
    let required_done =
        r.waits.iter().all(|w| plan.is_optional(w.step) || w.outcome() == Some(WaitOutcome::Succeeded));
    let open = r.waits.iter().any(Wait::is_open);
    if r.state != (State::Waiting { step: first }) || !later || !required_done || !open {
        return None;
    }
    let mut settled = r.clone();
    for w in &mut settled.waits {
        if w.is_open() {
            let missed_deadline = w.deadline.is_none_or(|d| d <= now);
            w.end(if missed_deadline { WaitOutcome::TimedOut } else { WaitOutcome::Failed });
            if !settled.missed.contains(&w.step) {
                settled.missed.push(w.step);
            }
        } else if let WaitStatus::Owed { outcome, .. } = w.status {
            w.status = match outcome {
                WaitOutcome::Succeeded => WaitStatus::Resumed { outcome, confirmed: false },
                _ => WaitStatus::Ended { outcome },
            };
        }
    }
    Some(settled)
}

/// Whether the parallel group the record is at failed: a required branch failed or timed out,
/// or a branch was closed by such a failure.
pub fn group_failed(plan: &Plan, r: &Record) -> bool {
    r.at_group()
        && r.waits.iter().any(|w| {
            w.outcome() == Some(WaitOutcome::Closed)
                || !plan.is_optional(w.step)
                    && matches!(w.outcome(), Some(WaitOutcome::Failed | WaitOutcome::TimedOut))
        })
}
