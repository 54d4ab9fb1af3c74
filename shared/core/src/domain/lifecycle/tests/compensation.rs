//! Compensation, decided one input at a time: reserve (0) and payment (1) declare `compensate`
//! (3 attempts), notify (2) does not, and shipping (3) fails.

use super::retry::at;
use super::*;

pub(super) fn saga() -> Plan {
    let mut p = plan(&[&["hold"], &["payment_ref"], &["sent"], &["tracking"]]);
    for step in [0, 1] {
        p.steps[step].compensate = Some(3);
    }
    p
}

/// How a compensation ended, in its own words (an acknowledged one succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UndoOutcome {
    Acknowledged,
    Failed,
    TimedOut,
    Skipped,
}

pub(super) fn undo_outcome(u: &Undo) -> Option<UndoOutcome> {
    u.wait.outcome().map(|o| match o {
        WaitOutcome::Succeeded => UndoOutcome::Acknowledged,
        WaitOutcome::Failed => UndoOutcome::Failed,
        WaitOutcome::Skipped => UndoOutcome::Skipped,
        WaitOutcome::TimedOut | WaitOutcome::Closed => UndoOutcome::TimedOut,
    })
}

pub(super) fn done(p: &Plan, r: &Record, step: u32, data: serde_json::Value) -> Record {
    let r = ready(p, r, step, &format!("t{step}"));
    after(&run(p, Some(&r), &callback(&format!("cb-{step}"), step, StepOutcome::Succeeded, data)))
}

/// Reserve, payment and notify done; shipping waits.
pub(super) fn shipping(p: &Plan) -> Record {
    let r = done(p, &started(p), 0, json!({"hold": "h-1"}));
    let r = done(p, &r, 1, json!({"payment_ref": "pay-1"}));
    let r = done(p, &r, 2, json!({"sent": true}));
    ready(p, &r, 3, "t3")
}

/// Shipping failed: its failure resume is owed.
pub(super) fn shipping_failed(p: &Plan) -> Record {
    let outcome =
        StepOutcome::Failed { error: "NoCarrier".into(), cause: "no carrier".into(), retryable: true };
    after(&run(p, Some(&shipping(p)), &callback("cb-ship", 3, outcome, json!({}))))
}

pub(super) fn undo_ready(step: u32, error: &str) -> Input {
    undo_ready_of(1, step, error)
}

pub(super) fn undo_ready_of(generation: u32, step: u32, error: &str) -> Input {
    Input::UndoReady {
        generation,
        step,
        token: token(&format!("u{step}")),
        deadline: T0 + Duration::days(3),
        error: error.into(),
        cause: "why".into(),
    }
}

/// The compensation of `step` reached, its first attempt's task out (and marked so).
pub(super) fn reached(p: &Plan, r: &Record, step: u32, error: &str) -> Record {
    let r = after(&run(p, Some(r), &undo_ready(step, error)));
    opened(p, &r, step, 1)
}

/// The task of `attempt` of the compensation of `step` marked out.
pub(super) fn opened(p: &Plan, r: &Record, step: u32, attempt: u32) -> Record {
    after(&run(p, Some(r), &Input::AttemptOpened { wait: uid(1, step), attempt }))
}

pub(super) fn ack(id: &str, step: u32, outcome: StepOutcome, attempt: Option<u32>) -> Input {
    ack_of(Some(1), id, step, outcome, attempt)
}

pub(super) fn ack_of(
    generation: Option<u32>,
    id: &str,
    step: u32,
    outcome: StepOutcome,
    attempt: Option<u32>,
) -> Input {
    Input::UndoInput {
        id: eid(id),
        hash: format!("h-{id}"),
        source: Source::Callback,
        step,
        outcome,
        generation,
        attempt,
    }
}

pub(super) fn refused(error: &str) -> StepOutcome {
    StepOutcome::Failed { error: error.into(), cause: "the bank said no".into(), retryable: true }
}

pub(super) fn ended(error: &str) -> Input {
    Input::Finished {
        generation: 1,
        finish: Finish::CompensationEnded { error: error.into(), cause: "why".into() },
    }
}

pub(super) fn outcomes(r: &Record) -> Vec<(u32, Option<UndoOutcome>)> {
    r.compensation
        .as_ref()
        .map(|c| c.undos.iter().map(|u| (u.step(), undo_outcome(u))).collect())
        .unwrap_or_default()
}

/// The task of `attempt` of `step`'s compensation: published, then marked out.
pub(super) fn undo_task(step: u32, attempt: u32) -> Effect {
    Effect::OpenAttempt { wait: uid(1, step), attempt, beat: None }
}

#[test]
fn a_failure_after_completed_steps_undoes_them_in_reverse_and_ends_compensated() {
    let p = saga();
    let r = shipping_failed(&p);
    // The plan, before anything runs: last position first; notify is listed as skipped.
    let planned = compensation_plan(&p, &r);
    let listed: Vec<(u32, Option<SkipReason>)> = planned.iter().map(|u| (u.step(), u.skip)).collect();
    assert_eq!(listed, [(2, Some(SkipReason::NotDeclared)), (1, None), (0, None)]);

    // The chain reaches payment's compensation first: compensation begins, in one write.
    let d = run(&p, Some(&r), &undo_ready(1, "NoCarrier"));
    assert_eq!(d.transition(), Some((Some(State::Advancing { step: 3 }), State::Compensating)));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Compensate));
    assert_eq!(d.effects, [undo_task(1, 1)]);
    let r = after(&d);
    // Until its task is marked out, nothing answers it.
    let unmarked = run(&p, Some(&r), &ack("ack-unmarked", 1, StepOutcome::Succeeded, Some(1)));
    assert_eq!(unmarked.outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
    let r = opened(&p, &r, 1, 1);
    let c = r.compensation.as_ref().unwrap();
    assert_eq!(c.trigger, Trigger::Failed { error: "NoCarrier".into(), cause: "why".into() });
    assert_eq!(outcomes(&r), [(2, Some(UndoOutcome::Skipped)), (1, None), (0, None)]);
    // The forward step is left: nothing owed to it; its token is kept, so that a copy of its
    // step_ready is known.
    assert_eq!((r.token().as_ref(), r.owed().as_ref()), (Some(&token("t3")), None));

    // No forward step moves any more; a cancel is refused.
    let late = run(&p, Some(&r), &callback("cb-ship-2", 3, StepOutcome::Succeeded, json!({"tracking": "x"})));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Compensating));
    assert_eq!(late.effects, [Effect::Ledger { reason: IgnoreReason::Compensating }]);
    let cancel = run(&p, Some(&r), &Input::Cancel { reason: "ops".into() });
    assert_eq!((cancel.outcome, cancel.write), (Outcome::Ignored(IgnoreReason::Compensating), None));

    acknowledged_in_turn(&p, &r);
}

/// The rest of [`a_failure_after_completed_steps_undoes_them_in_reverse_and_ends_compensated`]:
/// payment's compensation, then reserve's after a failed attempt, then the end.
fn acknowledged_in_turn(p: &Plan, r: &Record) {
    let (p, r) = (p.clone(), r.clone());
    // Reserve's acknowledgement before its wait is reached: its task has not gone out.
    let early = run(&p, Some(&r), &ack("ack-early", 0, StepOutcome::Succeeded, Some(1)));
    assert_eq!((early.outcome, early.write), (Outcome::Ignored(IgnoreReason::OutOfOrder), None));

    let d = run(&p, Some(&r), &ack("ack-pay", 1, StepOutcome::Succeeded, Some(1)));
    assert_eq!(d.outcome, Outcome::Applied);
    assert!(matches!(
        &d.effects[..],
        [Effect::Resume { wait: WaitId { step: 1, .. }, resume: Resume::Success { .. }, .. }]
    ));
    let r = after(&d);
    assert_eq!(
        run(&p, Some(&r), &ack("ack-pay", 1, StepOutcome::Succeeded, Some(1))).outcome,
        Outcome::Duplicate
    );
    let other = run(&p, Some(&r), &ack("ack-pay-2", 1, StepOutcome::Succeeded, Some(1)));
    assert_eq!(other.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced));
    let r = after(&run(&p, Some(&r), &resumed(&r, uid(1, 1), true)));

    // Reserve: attempt 1 fails, attempt 2 goes out at once and is acknowledged.
    let r = reached(&p, &r, 0, "NoCarrier");
    let d = run(&p, Some(&r), &ack("ack-res-1", 0, refused("BankDown"), Some(1)));
    // Attempt 2 is due at once; the sweeper publishes it.
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    let r = after(&d);
    assert_eq!(run(&p, Some(&r), &Input::Tick).effects, [undo_task(0, 2)]);
    let r = opened(&p, &r, 0, 2);
    let stale = run(&p, Some(&r), &ack("ack-res-late", 0, StepOutcome::Succeeded, Some(1)));
    assert_eq!(stale.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    let r = after(&run(&p, Some(&r), &ack("ack-res-2", 0, StepOutcome::Succeeded, Some(2))));

    let d = run(&p, Some(&r), &ended("NoCarrier"));
    assert_eq!(d.transition(), Some((Some(State::Compensating), State::Compensated)));
    let r = after(&d);
    assert_eq!(
        outcomes(&r),
        [
            (2, Some(UndoOutcome::Skipped)),
            (1, Some(UndoOutcome::Acknowledged)),
            (0, Some(UndoOutcome::Acknowledged))
        ]
    );
    assert_eq!(run(&p, Some(&r), &ended("NoCarrier")).outcome, Outcome::Duplicate);
    // A late acknowledgement after the end is ledgered; a new start opens generation 2.
    let late = run(&p, Some(&r), &ack("ack-late", 0, StepOutcome::Succeeded, Some(3)));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Terminal));
    let restarted = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    assert_eq!((restarted.generation, restarted.compensation.is_none()), (2, true));
}

#[test]
fn a_compensation_that_fails_every_attempt_ends_compensation_failed_and_the_chain_goes_on() {
    let p = with_compensation(saga(), &[(0, 3), (1, 2)]);
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("a1", 1, refused("BankDown"), Some(1))));
    // Attempt 2 named before its task went out: nothing to answer yet (the attempt is not used).
    let early = run(&p, Some(&r), &ack("a2-early", 1, refused("BankDown"), Some(2)));
    assert_eq!((early.outcome, early.write), (Outcome::Ignored(IgnoreReason::OutOfOrder), None));
    let r = opened(&p, &r, 1, 2);
    let d = run(&p, Some(&r), &ack("a2", 1, refused("BankDown"), Some(2)));
    // The last attempt failed: the wait is resumed all the same, so the chain goes on.
    assert!(
        matches!(&d.effects[..], [Effect::Resume { resume: Resume::Success { .. }, .. }]),
        "{:?}",
        d.effects
    );
    let r = after(&d);
    let r = reached(&p, &r, 0, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, Some(1))));
    let r = after(&run(&p, Some(&r), &ended("NoCarrier")));
    assert_eq!(r.state, State::CompensationFailed);
    let c = r.compensation.as_ref().unwrap();
    let undone: Vec<u32> = c.undone().map(|u| u.step()).collect();
    assert_eq!(undone, [1], "payment stays undone; reserve was undone");
    assert_eq!(c.undos[1].wait.failed.len(), 2);
}

#[test]
fn a_wait_passed_without_an_answer_timed_out() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    // Payment's wait timed out: Step Functions moved on to reserve's.
    let r = reached(&p, &r, 0, "NoCarrier");
    assert_eq!(outcomes(&r)[1], (1, Some(UndoOutcome::TimedOut)));
    // Its acknowledgement, late, changes nothing.
    let late = run(&p, Some(&r), &ack("a-late", 1, StepOutcome::Succeeded, Some(1)));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced));
    let r = after(&run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, None)));
    assert_eq!(after(&run(&p, Some(&r), &ended("NoCarrier"))).state, State::CompensationFailed);
}

#[test]
fn with_nothing_completed_to_undo_the_run_ends_as_it_failed_or_timed_out() {
    let p = saga();
    // Reserve's deadline passed: it never completed; its wait is answered skipped at once.
    let r = ready(&p, &started(&p), 0, "t0");
    let d = run(&p, Some(&r), &undo_ready(0, "States.Timeout"));
    assert!(matches!(
        &d.effects[..],
        [Effect::Resume { wait: WaitId { step: 0, .. }, resume: Resume::Success { .. }, .. }]
    ));
    let r = after(&d);
    assert_eq!(r.compensation.as_ref().map(|c| c.trigger.clone()), Some(Trigger::TimedOut));
    assert_eq!(outcomes(&r), [(0, Some(UndoOutcome::Skipped))]);
    assert_eq!(after(&run(&p, Some(&r), &ended("States.Timeout"))).state, State::TimedOut);
}

#[test]
fn when_every_wait_report_is_lost_the_end_report_begins_and_ends_compensation_in_one_write() {
    let p = saga();
    let d = run(&p, Some(&shipping_failed(&p)), &ended("NoCarrier"));
    assert_eq!(d.transition(), Some((Some(State::Advancing { step: 3 }), State::CompensationFailed)));
    assert_eq!(
        outcomes(&after(&d)),
        [(2, Some(UndoOutcome::Skipped)), (1, Some(UndoOutcome::TimedOut)), (0, Some(UndoOutcome::TimedOut))]
    );
}

#[test]
fn cancel_with_compensate_fails_the_parked_token_into_the_chain_and_a_second_cancel_is_refused() {
    let p = saga();
    let r = shipping(&p);
    let d = run(&p, Some(&r), &Input::CancelCompensate { reason: "customer withdrew".into() });
    assert_eq!(d.transition(), Some((Some(State::Waiting { step: 3 }), State::Compensating)));
    assert_eq!(d.effects, [Effect::fail(&token("t3"), CANCELLED_ERROR, "customer withdrew")]);
    let r = after(&d);
    assert_eq!(r.compensation.as_ref().map(|c| c.trigger.as_str()), Some("cancelled"));
    let again = run(&p, Some(&r), &Input::CancelCompensate { reason: "again".into() });
    assert_eq!(again.outcome, Outcome::Ignored(IgnoreReason::Compensating));
    // The chain's waits arrive with the cancel's error: the plan stays the one fixed at cancel.
    let r = after(&run(&p, Some(&r), &undo_ready(1, CANCELLED_ERROR)));
    assert_eq!(r.compensation.as_ref().map(|c| c.undos.len()), Some(3));

    // With nothing completed to undo, `--compensate` is a plain cancel.
    let first = ready(&p, &started(&p), 0, "t0");
    let d = run(&p, Some(&first), &Input::CancelCompensate { reason: "nothing done".into() });
    assert_eq!(d.transition(), Some((Some(State::Waiting { step: 0 }), State::Cancelled)));
}

#[test]
fn in_a_failed_group_only_the_branches_that_completed_are_undone_side_by_side() {
    // review (0), the group of fraud (1) and credit (2), both with `compensate`, then payment (3).
    let p = with_compensation(
        with_group(plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["payment_ref"]]), (1, 2), &[]),
        &[(1, 3), (2, 3)],
    );
    let r = done(&p, &started(&p), 0, json!({"decision": "ok"}));
    let r = ready(&p, &r, 1, "t1");
    let r = ready(&p, &r, 2, "t2");
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-fraud", 1, StepOutcome::Succeeded, json!({"fraud_score": 1})),
    ));
    let r = after(&run(&p, Some(&r), &callback("cb-credit", 2, refused("NoCredit"), json!({}))));
    let listed: Vec<(u32, Option<SkipReason>)> =
        compensation_plan(&p, &r).iter().map(|u| (u.step(), u.skip)).collect();
    assert_eq!(listed, [(1, None), (2, Some(SkipReason::NotCompleted)), (0, Some(SkipReason::NotDeclared))]);
    // Both waits of the group's compensation arrive, in either order; credit's is skipped.
    let r = after(&run(&p, Some(&r), &undo_ready(2, "NoCredit")));
    let r = reached(&p, &r, 1, "NoCredit");
    assert_eq!(outcomes(&r), [(1, None), (2, Some(UndoOutcome::Skipped)), (0, None)]);
    let r = after(&run(&p, Some(&r), &ack("a1", 1, StepOutcome::Succeeded, None)));
    assert_eq!(after(&run(&p, Some(&r), &ended("NoCredit"))).state, State::Compensated);
}

#[test]
fn the_sweeper_re_sends_an_owed_resume_and_republishes_an_attempt_that_did_not_go_out() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("a1", 1, refused("BankDown"), Some(1))));
    // The next attempt is due at once: the sweeper lists it on time, and publishes its task.
    assert_eq!(r.due_at(), r.updated_at - crate::limits::RESEND_RESUME_AFTER);
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(1));
    assert_eq!(d.effects, [undo_task(1, 2)]);
    let r = opened(&p, &r, 1, 2);
    assert_eq!(r.due_at(), T0 + Duration::days(3), "then it is due at its wait's deadline");
    let r = after(&run(&p, Some(&r), &ack("a2", 1, StepOutcome::Succeeded, Some(2))));
    // Acknowledged, its resume not marked delivered: re-sent after the grace only.
    assert!(run(&p, Some(&r), &Input::Tick).effects.is_empty());
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(5));
    assert!(matches!(
        &d.effects[..],
        [Effect::Resume { wait: WaitId { step: 1, .. }, resume: Resume::Success { .. }, .. }]
    ));
}

#[test]
fn a_redelivered_step_ready_of_a_step_the_run_reached_is_not_failed_while_compensating() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    // Payment's token was resumed with its success, shipping's failed: a copy of either
    // step_ready is owed nothing (a failure now would be a second, different resume).
    for step in [1, 3] {
        let ready = Input::StepReady { generation: 1, step, token: token(&format!("t{step}")), deadline: T0 };
        let d = run(&p, Some(&r), &ready);
        assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::Compensating));
        assert_eq!(d.effects, [Effect::Ledger { reason: IgnoreReason::Compensating }], "step {step}");
    }
    // A step past where compensation began (a group a cancel let go on) is failed into the chain.
    let at_payment = reached(&p, &done(&p, &started(&p), 0, json!({"hold": "h-1"})), 0, CANCELLED_ERROR);
    let later = Input::StepReady { generation: 1, step: 2, token: token("t2"), deadline: T0 };
    let d = run(&p, Some(&at_payment), &later);
    assert!(
        matches!(&d.effects[..], [Effect::Ledger { .. }, Effect::Answer { resume: Resume::Failure { error, .. }, .. }] if error == COMPENSATING_ERROR),
        "{:?}",
        d.effects
    );
}
