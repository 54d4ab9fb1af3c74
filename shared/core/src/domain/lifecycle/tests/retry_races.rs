//! Orderings an adversarial review tried against bounded retry's invariants. The first five
//! failed before their fixes; each comment says what went wrong then. The `held_` ones held.
//! They share `retry.rs`'s helpers.

use super::*;

use super::retry::{at, failure, retried, waiting, with_attempt};
use crate::domain::lifecycle::task_not_out;

/// A domain event that fails step 0 (events name no attempt).
fn event_failure(id: &str) -> Input {
    let outcome =
        StepOutcome::Failed { error: "Declined".into(), cause: "payment declined".into(), retryable: true };
    let mut input = callback(id, 0, outcome, json!({}));
    if let Input::StepInput { source, .. } = &mut input {
        *source = Source::Event;
    }
    input
}

fn opened(generation: u32, attempt: u32) -> Input {
    Input::AttemptOpened { wait: wid(generation, 0), attempt }
}

/// The attempts whose tasks the decision sends out.
fn create_tasks(d: &Decision) -> Vec<u32> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CreateTask { attempt, .. } | Effect::OpenAttempt { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

/// Fails the running attempt at `now`, then opens the next once its backoff has passed.
fn fail_and_reopen(p: &Plan, r: &Record, input: &Input, now: OffsetDateTime) -> (Record, OffsetDateTime) {
    let r = after(&at(p, Some(r), input, now));
    let due = r.next_attempt_at().expect("a next attempt");
    let attempt = r.attempt();
    assert_eq!(create_tasks(&at(p, Some(&r), &Input::Tick, due)), [attempt]);
    (after(&at(p, Some(&r), &opened(r.generation, attempt), due)), due)
}

// ---------------------------------------------------------------------------------------------
// Failing: bugs.

/// Invariant 5 (never stuck). Tick at `due` publishes attempt 2 (CreateTask, then the engine
/// submits AttemptOpened). The worker of attempt 2 answers a failure naming attempt 2 before the
/// mark lands (the publish→mark window, or a crash after the publish that the next sweep
/// repairs). Once it was ignored as `earlier_attempt`, though it is the running attempt's own:
/// after the mark the record waited on an attempt that already failed, until the 2-day
/// deadline, and attempt 3 never ran. Now the engine has its sender retry (`task_not_out`, a
/// 503), and the retry after the mark fails the attempt.
#[test]
fn a_failure_of_the_published_attempt_before_its_mark_fails_it() {
    let p = retried();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let due = r.next_attempt_at().unwrap();
    assert_eq!(create_tasks(&at(&p, Some(&r), &Input::Tick, due)), [2]);
    // The published attempt 2 fails at once, before AttemptOpened{2} is applied: held back.
    let f2 = failure("cb-2", true, Some(2));
    assert!(task_not_out(Some(&r), &f2), "the engine asks the sender to retry");
    let r = after(&at(&p, Some(&r), &opened(1, 2), due + Duration::seconds(2)));
    assert!(!task_not_out(Some(&r), &f2), "once marked, it is decided");
    let d = at(&p, Some(&r), &f2, due + Duration::seconds(3));
    let later = at(&p, Some(&after(&d)), &Input::Tick, due + Duration::hours(1));
    assert_eq!(
        (d.outcome, d.write.as_ref().map(|w| w.cause), create_tasks(&later)),
        (Outcome::Applied, Some(Cause::AttemptFailed), vec![3]),
        "attempt 2's own failure was dropped; the record waits on a failed attempt"
    );
}

/// Invariant 6 (the same input is answered the same way). The same failure of attempt 2,
/// delivered first in the publish→mark window and again (queue redelivery) after the mark, was
/// answered `ignored` the first time and `applied` the second. Now the first gets no final
/// answer (a 503: retry), and the second is applied.
#[test]
fn the_same_failure_twice_is_answered_the_same_way() {
    let p = retried();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let f2 = failure("cb-2", true, Some(2));
    assert!(task_not_out(Some(&r), &f2));
    let due = r.next_attempt_at().unwrap();
    let r = after(&at(&p, Some(&r), &opened(1, 2), due + Duration::seconds(2)));
    let first = at(&p, Some(&r), &f2, due + Duration::seconds(3));
    let again = at(&p, Some(&after(&first)), &f2, due + Duration::seconds(4));
    assert_eq!((first.outcome, again.outcome), (Outcome::Applied, Outcome::Duplicate));
}

/// Whether the next attempt's task is out is judged by its mark, never by a clock: the sweeper
/// publishes by its own clock, and a worker that answers within the skew between two functions'
/// clocks was answered `ignored` (`out_of_order`) for good, and the step waited to its deadline
/// (found by review). Before or after the due time, an answer naming the unmarked attempt is
/// held for a retry; one naming a later attempt, or an earlier one, is decided at once.
#[test]
fn whether_an_attempts_task_is_out_is_judged_by_its_mark_not_by_the_clock() {
    let p = retried();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let due = r.next_attempt_at().unwrap();
    let ok2 =
        with_attempt(callback("cb-ok2", 0, StepOutcome::Succeeded, json!({"decision": "approve"})), Some(2));
    assert!(
        task_not_out(Some(&r), &ok2),
        "an answer to attempt 2 before the sweeper's clock reached its due time"
    );
    assert!(!task_not_out(Some(&r), &failure("cb-3", true, Some(3))));
    assert!(!task_not_out(Some(&r), &failure("cb-1b", true, Some(1))));
    assert!(!task_not_out(Some(&r), &failure("cb-none", true, None)), "an answer naming no attempt");
    let r = after(&at(&p, Some(&r), &opened(1, 2), due - Duration::seconds(1)));
    let d = at(&p, Some(&r), &ok2, due - Duration::seconds(1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Complete), "the marked attempt's answer");
}

/// Invariant 5 (no attempt opens at or after the deadline). Attempt 1 fails 15 minutes before
/// the deadline: attempt 2 is due 5 minutes before it, so the failure is retried. The sweep that
/// opens it comes late (sweeps are periodic; one crashed, or the index lagged) and lands at the
/// deadline: attempt 2's task is published on a token Step Functions has already timed out.
#[test]
fn a_late_tick_opens_no_attempt_at_the_deadline() {
    let p = retried();
    let r = waiting(&p);
    let deadline = r.deadline().unwrap();
    let r = after(&at(&p, Some(&r), &failure("cb-1", true, None), deadline - Duration::minutes(15)));
    assert_eq!(r.next_attempt_at(), Some(deadline - Duration::minutes(5)));
    let late = at(&p, Some(&r), &Input::Tick, deadline);
    assert_eq!(create_tasks(&late), Vec::<u32>::new(), "an attempt opened at the deadline");
    let later = at(&p, Some(&r), &Input::Tick, deadline + Duration::minutes(1));
    assert_eq!(create_tasks(&later), Vec::<u32>::new(), "an attempt opened after the deadline");
}

/// Invariant 6 (a redelivery is never counted as two failed attempts). A domain event fails
/// attempt 1 (events name no attempt). Attempt 2 runs and its worker heartbeats 32 times (each
/// heartbeat is an applied input). The event is redelivered late (at-least-once queue): the
/// bounded `applied` list has forgotten it, although `Record.attempts` still names it as the
/// input that failed attempt 1, and it fails attempt 2 too.
#[test]
fn a_redelivered_failure_is_not_counted_again_after_32_heartbeats() {
    let p = retried();
    let (mut r, due) = fail_and_reopen(&p, &waiting(&p), &event_failure("evt-declined"), T0);
    assert_eq!(r.attempt(), 2);
    for i in 0..REMEMBERED_INPUTS {
        let hb = callback(&format!("hb-{i}"), 0, StepOutcome::InProgress, json!({}));
        r = after(&at(&p, Some(&r), &with_attempt(hb, Some(2)), due + Duration::minutes(i as i64 + 1)));
    }
    assert_eq!(r.attempts()[0].input, eid("evt-declined"), "the record still names the input");
    let again = at(&p, Some(&r), &event_failure("evt-declined"), due + Duration::hours(2));
    assert_eq!(
        (again.outcome, again.write.as_ref().map(|w| (w.cause, w.to.attempts().len()))),
        (Outcome::Duplicate, None),
        "the same event failed a second attempt"
    );
}

/// Invariant 4 (a non-retryable failure is never retried), arguable: attempt 1 fails
/// (retryable); during the backoff another sender says the step failed for good
/// (retryable: false, naming no attempt). It is ignored as `earlier_attempt`, and attempt 2's
/// task goes out anyway.
#[test]
fn a_non_retryable_failure_in_the_backoff_ends_the_step() {
    let p = retried();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let due = r.next_attempt_at().unwrap();
    let d = at(&p, Some(&r), &failure("cb-final", false, None), T0 + Duration::minutes(1));
    let r = d.write.as_ref().map_or(r, |w| w.to.clone());
    let tick = at(&p, Some(&r), &Input::Tick, due);
    assert_eq!(
        (d.outcome, create_tasks(&tick)),
        (Outcome::Applied, vec![]),
        "a non-retryable failure was ignored and the step retried"
    );
}

// ---------------------------------------------------------------------------------------------
// Holding: orderings tried that kept the invariants (they pass).

/// Duplicate ticks and marks, a stale mark after the next failure, a redelivered failure: at most
/// three distinct CreateTask attempts, each after its backoff, the third failure fails the step.
#[test]
fn held_duplicate_ticks_and_marks_never_publish_more_than_attempts() {
    let p = retried();
    let mut published = Vec::new();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    // Early tick: nothing.
    assert!(create_tasks(&at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(9))).is_empty());
    let due2 = r.next_attempt_at().unwrap();
    published.extend(create_tasks(&at(&p, Some(&r), &Input::Tick, due2)));
    published.extend(create_tasks(&at(&p, Some(&r), &Input::Tick, due2 + Duration::seconds(5))));
    let r = after(&at(&p, Some(&r), &opened(1, 2), due2));
    assert_eq!(at(&p, Some(&r), &opened(1, 2), due2).outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    // The first failure again: duplicate.
    assert_eq!(at(&p, Some(&r), &failure("cb-1", true, None), due2).outcome, Outcome::Duplicate);
    let t2 = due2 + Duration::minutes(1);
    let r = after(&at(&p, Some(&r), &failure("cb-2", true, Some(2)), t2));
    assert_eq!(r.next_attempt_at(), Some(t2 + Duration::minutes(20)));
    // A stale mark of attempt 2 in the second backoff: nothing.
    assert_eq!(at(&p, Some(&r), &opened(1, 2), t2).outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    assert!(create_tasks(&at(&p, Some(&r), &Input::Tick, t2 + Duration::minutes(19))).is_empty());
    let due3 = r.next_attempt_at().unwrap();
    published.extend(create_tasks(&at(&p, Some(&r), &Input::Tick, due3)));
    let r = after(&at(&p, Some(&r), &opened(1, 3), due3));
    // Late answers of attempts 1 and 2: ignored.
    for a in [1, 2] {
        let late = at(&p, Some(&r), &failure(&format!("late-{a}"), true, Some(a)), due3);
        assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    }
    let d = at(&p, Some(&r), &failure("cb-3", true, None), due3 + Duration::minutes(1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    let r = after(&d);
    assert!(create_tasks(&at(&p, Some(&r), &Input::Tick, due3 + Duration::hours(1))).is_empty());
    published.sort();
    published.dedup();
    assert_eq!(published, [2, 3]);
}

/// Cancel in the publish→mark window, a restart, and the first generation's stale mark and
/// answers: the new generation starts on attempt 1, the cancelled record never changes.
#[test]
fn held_a_restart_starts_on_attempt_one_and_stale_marks_do_nothing() {
    let p = retried();
    let r = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let due = r.next_attempt_at().unwrap();
    assert_eq!(create_tasks(&at(&p, Some(&r), &Input::Tick, due)), [2]);
    let cancelled = after(&at(&p, Some(&r), &Input::Cancel { reason: "x".into() }, due));
    for input in [opened(1, 2), Input::Tick, failure("cb-2", true, Some(2))] {
        let d = at(&p, Some(&cancelled), &input, due + Duration::hours(1));
        assert!(d.write.is_none() && create_tasks(&d).is_empty(), "{input:?}: {d:?}");
    }
    let restarted = after(&at(&p, Some(&cancelled), &Input::start(eid("evt-2")), due));
    assert_eq!((restarted.generation, restarted.attempt(), restarted.next_attempt_at()), (2, 1, None));
    let input =
        Input::StepReady { generation: 2, step: 0, token: token("t2"), deadline: due + Duration::days(2) };
    let d = at(&p, Some(&restarted), &input, due);
    assert_eq!(create_tasks(&d), [1]);
    let r2 = after(&d);
    assert_eq!(at(&p, Some(&r2), &opened(1, 2), due).outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    // Generation 1's attempt-2 answer, naming its generation: not applied to generation 2.
    let mut stale = failure("cb-2", true, Some(2));
    if let Input::StepInput { generation, .. } = &mut stale {
        *generation = Some(1);
    }
    assert!(at(&p, Some(&r2), &stale, due).write.is_none());
}

/// A failure whose backoff would reach the deadline fails the step; a retryable failure during
/// the backoff uses up no attempt; a Finished report in the backoff ends the record and ticks
/// after it publish nothing.
#[test]
fn held_deadline_and_backoff_edges() {
    let p = retried();
    let r = waiting(&p);
    let deadline = r.deadline().unwrap();
    let d = at(&p, Some(&r), &failure("cb-1", true, None), deadline - Duration::minutes(10));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    let r = after(&at(&p, Some(&r), &failure("cb-1", true, None), T0));
    let d = at(&p, Some(&r), &failure("cb-x", true, None), T0 + Duration::minutes(1));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    let fin = Input::Finished { generation: 1, finish: Finish::TimedOut };
    let ended = after(&at(&p, Some(&r), &fin, T0 + Duration::minutes(2)));
    assert_eq!(ended.next_attempt_at(), None);
    assert!(create_tasks(&at(&p, Some(&ended), &Input::Tick, T0 + Duration::hours(1))).is_empty());
    assert_eq!(at(&p, Some(&ended), &fin, T0 + Duration::hours(1)).outcome, Outcome::Duplicate);
}
