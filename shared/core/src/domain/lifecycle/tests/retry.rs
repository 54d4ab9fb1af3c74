//! Bounded retry of a step: a failed attempt with attempts left waits out its backoff inside
//! the same task-token wait, then the next attempt's task goes out; the last attempt's failure,
//! or one the sender marks not retryable, fails the step.

use super::*;

/// review (0) with `retry: { attempts: 3, backoff: 10m }` and a 2-day timeout, then payment (1).
pub(super) fn retried() -> Plan {
    let retry = Retry { attempts: 3, backoff: std::time::Duration::from_secs(600) };
    with_retry(
        plan(&[&["decision"], &["payment_ref"]]),
        &[0],
        retry,
        (std::time::Duration::from_secs(2 * 86_400), None),
    )
}

pub(super) fn at(p: &Plan, r: Option<&Record>, input: &Input, now: OffsetDateTime) -> Decision {
    let (w, k) = names();
    decide(p, (&w, &k), r, input, now)
}

pub(super) fn failure(id: &str, retryable: bool, attempt: Option<u32>) -> Input {
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable };
    with_attempt(callback(id, 0, outcome, json!({"note": id})), attempt)
}

fn success(id: &str, attempt: Option<u32>) -> Input {
    with_attempt(callback(id, 0, StepOutcome::Succeeded, json!({"decision": "approve"})), attempt)
}

pub(super) fn with_attempt(mut input: Input, n: Option<u32>) -> Input {
    if let Input::StepInput { attempt, .. } = &mut input {
        *attempt = n;
    }
    input
}

/// The record waiting at review, its first attempt running.
pub(super) fn waiting(p: &Plan) -> Record {
    ready(p, &started(p), 0, "t0")
}

/// Fails the running attempt at `now`, then opens the next one once its backoff has passed.
fn fail_and_reopen(p: &Plan, r: &Record, id: &str, now: OffsetDateTime) -> Record {
    let r = after(&at(p, Some(r), &failure(id, true, None), now));
    let due = r.next_attempt_at().expect("a next attempt");
    let d = at(p, Some(&r), &Input::Tick, due);
    let attempt = r.attempt();
    assert_eq!(d.effects, [open(wid(1, 0), attempt, None),]);
    after(&at(p, Some(&r), &Input::AttemptOpened { wait: wid(1, 0), attempt }, due))
}

#[test]
fn a_failed_attempt_with_attempts_left_waits_its_backoff_and_then_publishes_the_next_task() {
    let p = retried();
    let r = waiting(&p);
    let d = at(&p, Some(&r), &failure("cb-1", true, None), T0);
    assert_eq!(d.outcome, Outcome::Applied);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::AttemptFailed));
    // No resume: the step's token keeps waiting, within the same deadline.
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    let r = after(&d);
    assert_eq!(
        (r.state, r.attempt(), r.deadline()),
        (State::Waiting { step: 0 }, 2, Some(T0 + Duration::days(2)))
    );
    assert_eq!(r.next_attempt_at(), Some(T0 + Duration::minutes(10)));
    assert_eq!((r.attempts()[0].attempt, r.attempts()[0].error.as_str()), (1, "Rejected"));
    assert!(r.inputs().is_empty(), "each attempt gathers its own inputs");
    // Not before its backoff.
    let early = at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(9));
    assert!(early.effects.is_empty() && early.write.is_none());
    let r = fail_and_reopen(&p, &waiting(&p), "cb-1", T0);
    assert_eq!((r.attempt(), r.next_attempt_at()), (2, None));
    // The mark again, or a tick after it: nothing more is due.
    let again = at(&p, Some(&r), &Input::AttemptOpened { wait: wid(1, 0), attempt: 2 }, T0);
    assert_eq!(again.outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    assert!(at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1)).effects.is_empty());
}

/// Step Functions restarts a step's heartbeat timer only on SendTaskHeartbeat, and hears no
/// worker while baton waits out a backoff: with a `heartbeat`, baton beats as the attempt fails
/// and again as the next attempt's task goes out, before it is published (found by review: an
/// attempt failing late in its heartbeat window left the step timed out during the backoff).
#[test]
fn a_retried_step_with_a_heartbeat_is_kept_alive_across_its_backoff() {
    let mut p = retried();
    p.steps[0].heartbeat = Some(std::time::Duration::from_secs(3600));
    let r = waiting(&p);
    let d = at(&p, Some(&r), &failure("cb-1", true, None), T0);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::AttemptFailed));
    assert_eq!(
        d.effects,
        [Effect::SendTaskHeartbeat { token: token("t0") }],
        "no beat as the attempt failed"
    );
    let r = after(&d);
    let due = r.next_attempt_at().expect("a next attempt");
    let opened = at(&p, Some(&r), &Input::Tick, due);
    assert_eq!(opened.effects, [open(wid(1, 0), 2, Some("t0")),], "no beat as the next attempt opened");
    // Without a heartbeat declared, nothing is sent but the task.
    assert!(at(&retried(), Some(&waiting(&retried())), &failure("cb-1", true, None), T0).effects.is_empty());
}

#[test]
fn the_backoff_doubles_and_the_last_attempts_failure_fails_the_step() {
    let p = retried();
    let r = fail_and_reopen(&p, &waiting(&p), "cb-1", T0);
    let now = T0 + Duration::hours(1);
    let second = after(&at(&p, Some(&r), &failure("cb-2", true, None), now));
    assert_eq!(second.next_attempt_at(), Some(now + Duration::minutes(20)));
    let r = fail_and_reopen(&p, &r, "cb-2", now);
    assert_eq!(r.attempt(), 3);
    let d = at(&p, Some(&r), &failure("cb-3", true, None), now + Duration::hours(1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    assert!(
        matches!(d.effects.as_slice(), [Effect::Resume { resume: Resume::Failure { error, .. }, .. }] if error == "Rejected")
    );
    assert_eq!(after(&d).attempts().len(), 2, "the failed attempts before the last stay on the record");
}

#[test]
fn a_failed_attempts_cause_is_kept_short_enough_for_ten_in_the_record() {
    let p = retried();
    let long = StepOutcome::Failed { error: "E".into(), cause: "x".repeat(32_768), retryable: true };
    let d = at(&p, Some(&waiting(&p)), &callback("cb-long", 0, long, json!({})), T0);
    assert_eq!(after(&d).attempts()[0].cause.chars().count(), MAX_ATTEMPT_CAUSE_CHARS);
}

#[test]
fn a_failure_marked_not_retryable_fails_the_step_at_once() {
    let p = retried();
    let d = at(&p, Some(&waiting(&p)), &failure("cb-1", false, None), T0);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    assert_eq!(after(&d).next_attempt_at(), None);
}

#[test]
fn no_attempt_is_started_that_could_not_begin_before_the_deadline() {
    let p = retried();
    let d = at(
        &p,
        Some(&waiting(&p)),
        &failure("cb-1", true, None),
        T0 + Duration::days(2) - Duration::minutes(5),
    );
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
}

#[test]
fn a_late_input_for_an_earlier_attempt_is_ignored_and_never_completes_the_running_one() {
    let p = retried();
    let r = fail_and_reopen(&p, &waiting(&p), "cb-1", T0);
    let late = at(&p, Some(&r), &success("cb-late", Some(1)), T0 + Duration::hours(1));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    assert_eq!(late.effects, [Effect::Ledger { reason: IgnoreReason::EarlierAttempt }]);
    assert!(late.write.is_none());
    // The same failure again is a duplicate, not a second failed attempt.
    assert_eq!(at(&p, Some(&r), &failure("cb-1", true, None), T0).outcome, Outcome::Duplicate);
    // During a backoff, a failure (from another sender, or the same one under another id) is
    // the failed attempt's: it uses up no attempt that never ran.
    let waiting_next = after(&at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0));
    let again = at(&p, Some(&waiting_next), &failure("cb-other", true, None), T0 + Duration::minutes(1));
    assert_eq!(again.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    // A success in the backoff completes the step.
    let early = at(&p, Some(&waiting_next), &success("cb-early", None), T0 + Duration::minutes(1));
    assert_eq!(
        early.write.as_ref().map(|w| (w.cause, w.to.next_attempt_at())),
        Some((Cause::Complete, None))
    );
    // The running attempt's own input completes the step.
    let d = at(&p, Some(&r), &success("cb-2", Some(2)), T0 + Duration::hours(1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Complete));
}

#[test]
fn a_step_without_retry_has_one_attempt() {
    let p = plan(&[&["decision"]]);
    let d = at(&p, Some(&waiting(&p)), &failure("cb-1", true, None), T0);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
}

/// review (0), then the group of fraud (1, `retry: { attempts: 2, backoff: 10m }`) and the
/// optional address (2, the same retry), then payment (3).
fn grouped_retried() -> Plan {
    let retry = Retry { attempts: 2, backoff: std::time::Duration::from_secs(600) };
    let timeout = std::time::Duration::from_secs(2 * 86_400);
    let p =
        with_group(plan(&[&["decision"], &["fraud_score"], &["address_ok"], &["payment_ref"]]), (1, 2), &[2]);
    with_retry(p, &[1, 2], retry, (timeout, None))
}

fn branch_input(id: &str, step: u32, outcome: StepOutcome, attempt: Option<u32>) -> Input {
    with_attempt(callback(id, step, outcome, json!({"fraud_score": 3, "address_ok": true})), attempt)
}

fn branch_failure(id: &str, step: u32, retryable: bool) -> Input {
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable };
    branch_input(id, step, outcome, None)
}

/// The record at the group, both branches reached.
fn at_retried_group(p: &Plan) -> Record {
    let r = waiting(p);
    let r = after(&at(p, Some(&r), &success("cb-review", None), T0));
    ready(p, &ready(p, &r, 1, "t1"), 2, "t2")
}

fn branch(r: &Record, step: u32) -> &Wait {
    r.waits.iter().find(|b| b.step == step).expect("the branch")
}

#[test]
fn a_branchs_failed_attempt_waits_its_backoff_while_its_siblings_go_on() {
    let p = grouped_retried();
    let r = at_retried_group(&p);
    let d = at(&p, Some(&r), &branch_failure("cb-f1", 1, true), T0);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::AttemptFailed));
    assert!(d.effects.is_empty(), "no resume: the branch's token keeps waiting: {:?}", d.effects);
    let r = after(&d);
    let fraud = branch(&r, 1);
    assert_eq!(
        (fraud.is_open(), fraud.attempt(), fraud.task_due()),
        (true, 2, Some(T0 + Duration::minutes(10)))
    );
    assert_eq!(
        (r.attempts().len(), r.next_attempt_at()),
        (0, None),
        "the record's own attempts are a step's"
    );
    assert_eq!(r.failed_attempts(1)[0].error, "Rejected");
    assert_eq!(r.due_at(), T0 + Duration::minutes(10) - crate::limits::RESEND_RESUME_AFTER);
    // The sibling is untouched, and completes on its own.
    let ok = StepOutcome::Succeeded;
    let r = after(&at(&p, Some(&r), &branch_input("cb-a1", 2, ok, None), T0 + Duration::minutes(1)));
    assert_eq!(
        (branch(&r, 2).outcome(), r.state),
        (Some(WaitOutcome::Succeeded), State::Waiting { step: 1 })
    );
    // Not before its backoff; then the branch's second task goes out, and is marked.
    assert!(
        at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(9))
            .effects
            .iter()
            .all(|e| !matches!(e, Effect::CreateTask { .. }))
    );
    let due = T0 + Duration::minutes(10);
    let d = at(&p, Some(&r), &Input::Tick, due);
    let opened = [open(wid(1, 1), 2, None)];
    assert!(d.effects.starts_with(&opened), "{:?}", d.effects);
    let mark = Input::AttemptOpened { wait: wid(1, 1), attempt: 2 };
    let r = after(&at(&p, Some(&r), &mark, due));
    assert_eq!(branch(&r, 1).task_due(), None);
    assert_eq!(at(&p, Some(&r), &mark, due).outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    // A late success for attempt 1 is ignored; the second attempt's own completes the group.
    let late = at(&p, Some(&r), &branch_input("cb-late", 1, StepOutcome::Succeeded, Some(1)), due);
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    let d = at(&p, Some(&r), &branch_input("cb-f2", 1, StepOutcome::Succeeded, Some(2)), due);
    assert_eq!(d.transition(), Some((Some(State::Waiting { step: 1 }), State::Advancing { step: 1 })));
}

#[test]
fn a_branchs_last_attempt_or_a_non_retryable_failure_ends_it_as_without_retry() {
    let p = grouped_retried();
    // Not retryable: the required branch fails the group at once.
    let d = at(&p, Some(&at_retried_group(&p)), &branch_failure("cb-f1", 1, false), T0);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    assert_eq!(branch(&after(&d), 1).outcome(), Some(WaitOutcome::Failed));
    // The optional branch's last attempt: it is missed, and the group goes on.
    let r = after(&at(&p, Some(&at_retried_group(&p)), &branch_failure("cb-a1", 2, true), T0));
    let due = branch(&r, 2).task_due().expect("a second attempt");
    let r = after(&at(&p, Some(&r), &Input::AttemptOpened { wait: wid(1, 2), attempt: 2 }, due));
    let d = at(&p, Some(&r), &branch_failure("cb-a2", 2, true), due);
    let r = after(&d);
    assert_eq!((branch(&r, 2).outcome(), r.missed.as_slice()), (Some(WaitOutcome::Failed), &[2][..]));
    assert_eq!(branch(&r, 2).failed.len(), 1);
}

#[test]
fn a_group_that_fails_while_a_branch_waits_out_its_backoff_opens_no_attempt() {
    let p = grouped_retried();
    // The optional address in its backoff; then the required fraud fails for good.
    let r = after(&at(&p, Some(&at_retried_group(&p)), &branch_failure("cb-a1", 2, true), T0));
    let r = after(&at(&p, Some(&r), &branch_failure("cb-f1", 1, false), T0));
    assert_eq!((branch(&r, 2).outcome(), branch(&r, 2).task_due()), (Some(WaitOutcome::Closed), None));
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::CreateTask { .. })), "{:?}", d.effects);
    // Nor does a sweep past the branch's deadline.
    let r = after(&at(&p, Some(&at_retried_group(&p)), &branch_failure("cb-a1", 2, true), T0));
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::days(3));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::CreateTask { .. })), "{:?}", d.effects);
}
