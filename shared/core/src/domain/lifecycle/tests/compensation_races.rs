//! Attacks on compensation: orderings, redeliveries, early and late acknowledgements,
//! generations, and seeded random walks that check the compensation invariants after every
//! decision (written by an adversarial review). `held_…` tests pinned what held; the others each
//! failed on a finding, fixed since (`docs/SIMULATION_BUGS.md` rows 66 to 74), and now pin it.
//!
//! The plans and helpers are `compensation.rs`'s.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::compensation::{
    UndoOutcome, ack, ack_of, done, ended, opened, outcomes, reached, refused, saga, shipping_failed,
    undo_outcome, undo_ready, undo_ready_of,
};
use super::retry::at;
use super::*;

// ---------------------------------------------------------------------------------------------
// Plans and helpers.

/// The error Step Functions gives a missed deadline.
const TIMEOUT_ERROR_NAME: &str = "States.Timeout";

/// review (0), the group of fraud (1) and the optional address (2), then payment (3); review,
/// fraud and address declare `compensate`.
fn grouped() -> Plan {
    with_compensation(
        with_group(plan(&[&["decision"], &["fraud_score"], &["address_ok"], &["payment_ref"]]), (1, 2), &[2]),
        &[(0, 2), (1, 2), (2, 1)],
    )
}

fn undo_of(r: &Record, step: u32) -> &Undo {
    r.compensation.as_ref().and_then(|c| c.undo(step)).expect("planned")
}

/// The record after `d`: its write's, else `r` unchanged.
fn then(r: &Record, d: &Decision) -> Record {
    d.write.as_ref().map_or_else(|| r.clone(), |w| w.to.clone())
}

/// A resume effect as (token, payload).
fn resume_of(e: &Effect) -> Option<(String, String)> {
    match e {
        Effect::Resume { token, resume, .. } | Effect::Answer { token, resume } => {
            Some((token.expose().to_owned(), format!("{resume:?}")))
        }
        _ => None,
    }
}

/// The tokens given two different resumes across `ds`.
fn conflicting_resumes(ds: &[&Decision]) -> Vec<String> {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut conflicts = Vec::new();
    for (token, payload) in ds.iter().flat_map(|d| &d.effects).filter_map(resume_of) {
        match seen.get(&token) {
            Some(first) if *first != payload => conflicts.push(format!("{token}: {first} / then {payload}")),
            Some(_) => {}
            None => {
                seen.insert(token, payload);
            }
        }
    }
    conflicts
}

fn undo_tasks(d: &Decision) -> Vec<(u32, u32)> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            Effect::OpenAttempt { wait, attempt, .. } if wait.compensation => Some((wait.step, *attempt)),
            _ => None,
        })
        .collect()
}

/// Review done, the group opened by fraud's step_ready (address's still on its way), fraud done.
fn fraud_done(p: &Plan) -> Record {
    let r = done(p, &started(p), 0, json!({"decision": "ok"}));
    let r = ready(p, &r, 1, "t1");
    after(&run(p, Some(&r), &callback("cb-fraud", 1, StepOutcome::Succeeded, json!({"fraud_score": 1}))))
}

/// Every compensation of `r` (saga) acknowledged in turn, then the end: `compensated`.
fn compensated(p: &Plan, r: &Record) -> (Record, Vec<Decision>) {
    let mut ds = Vec::new();
    let mut step = |r: &Record, input: &Input| {
        let d = run(p, Some(r), input);
        let to = then(r, &d);
        ds.push(d);
        to
    };
    let r = step(r, &undo_ready(1, "NoCarrier"));
    let r = step(&r, &Input::AttemptOpened { wait: uid(1, 1), attempt: 1 });
    let r = step(&r, &ack("a1", 1, StepOutcome::Succeeded, Some(1)));
    let r = step(&r, &undo_ready(0, "NoCarrier"));
    let r = step(&r, &Input::AttemptOpened { wait: uid(1, 0), attempt: 1 });
    let r = step(&r, &ack("a0", 0, StepOutcome::Succeeded, Some(1)));
    let r = step(&r, &ended("NoCarrier"));
    assert_eq!(r.state, State::Compensated);
    (r, ds)
}

// ---------------------------------------------------------------------------------------------
// Findings: these fail.

/// One token, one resume. Payment's wait was resumed with its acknowledgement (success); the
/// chain ended and the record is `compensated`. A redelivered `undo_ready` of payment's wait
/// (SQS is at-least-once) goes to `begin_at_undo_ready`, which fails the same token with
/// `baton.Terminal`: a second, different resume.
#[test]
fn an_undo_ready_redelivered_after_the_end_fails_no_token() {
    let p = saga();
    let (r, mut ds) = compensated(&p, &shipping_failed(&p));
    ds.push(run(&p, Some(&r), &undo_ready(1, "NoCarrier")));
    let all: Vec<&Decision> = ds.iter().collect();
    assert_eq!(conflicting_resumes(&all), Vec::<String>::new(), "u1 got two different resumes");
}

/// The same after a restart: generation 2 runs, and generation 1's redelivered `undo_ready`
/// fails payment's token (resumed with success) with `baton.StaleGeneration`.
#[test]
fn an_undo_ready_redelivered_after_a_restart_fails_no_token() {
    let p = saga();
    let (r, mut ds) = compensated(&p, &shipping_failed(&p));
    let r = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    assert_eq!(r.generation, 2);
    ds.push(run(&p, Some(&r), &undo_ready(1, "NoCarrier")));
    let all: Vec<&Decision> = ds.iter().collect();
    assert_eq!(conflicting_resumes(&all), Vec::<String>::new(), "u1 got two different resumes");
}

/// One token, one resume, for the forward token compensation fails into the chain. A cancel
/// with `--compensate` at the group fails address's token; Step Functions goes on to payment
/// (3), whose `step_ready` is failed `baton.Compensating`. After the end, the same `step_ready`
/// redelivered is failed again with `baton.Terminal`.
#[test]
fn a_step_ready_failed_into_the_chain_is_not_failed_again_after_the_end() {
    let p = grouped();
    let r = ready(&p, &fraud_done(&p), 2, "t2");
    let cancel = run(&p, Some(&r), &Input::CancelCompensate { reason: "ops".into() });
    let r = after(&cancel);
    let payment = Input::StepReady { generation: 1, step: 3, token: token("t3"), deadline: T0 };
    let into_chain = run(&p, Some(&r), &payment);
    let r = reached(&p, &r, 1, CANCELLED_ERROR);
    let r = after(&run(&p, Some(&r), &ack("a1", 1, StepOutcome::Succeeded, None)));
    let r = reached(&p, &r, 0, CANCELLED_ERROR);
    let r = after(&run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, None)));
    let r = after(&run(&p, Some(&r), &ended(CANCELLED_ERROR)));
    assert_eq!(r.state, State::Compensated);
    let again = run(&p, Some(&r), &payment);
    assert_eq!(conflicting_resumes(&[&cancel, &into_chain, &again]), Vec::<String>::new());
}

/// Generations, and one token one resume. Generation 1 ran notify (its token t2 resumed with
/// success), compensated, and restarted; generation 2 compensates from reserve. Generation 1's
/// `step_ready` of notify, redelivered now, reaches the compensating branch of `decide`, which
/// never looks at its generation: notify is past where generation 2's compensation began, so t2
/// is failed `baton.Compensating`. (A waiting record fails it `baton.StaleGeneration`, another
/// payload again.)
#[test]
fn a_stale_generation_step_ready_while_compensating_is_stale_and_not_failed() {
    let p = saga();
    let (r, mut ds) = compensated(&p, &shipping_failed(&p));
    let r = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    let r = ready(&p, &r, 0, "g2-t0");
    let r =
        after(&run(&p, Some(&r), &callback("cb-0-g2", 0, StepOutcome::Succeeded, json!({"hold": "h-2"}))));
    let r = after(&run(&p, Some(&r), &undo_ready_of(2, 0, "Boom")));
    assert_eq!((r.generation, r.state), (2, State::Compensating));
    let notify = Input::StepReady { generation: 1, step: 2, token: token("t2"), deadline: T0 };
    let d = run(&p, Some(&r), &notify);
    let outcome = d.outcome;
    ds.push(d);
    let mut all: Vec<&Decision> = ds.iter().collect();
    let gen1 = shipping_decisions(&p);
    all.splice(0..0, gen1.iter());
    assert_eq!(conflicting_resumes(&all), Vec::<String>::new(), "answered {outcome:?}, not stale_generation");
}

/// The forward decisions that brought `saga` to shipping failed (their resumes included).
fn shipping_decisions(p: &Plan) -> Vec<Decision> {
    let mut ds = Vec::new();
    let mut r = started(p);
    for (step, data) in
        [(0, json!({"hold": "h-1"})), (1, json!({"payment_ref": "pay-1"})), (2, json!({"sent": true}))]
    {
        r = ready(p, &r, step, &format!("t{step}"));
        let d = run(p, Some(&r), &callback(&format!("cb-{step}"), step, StepOutcome::Succeeded, data));
        r = after(&d);
        ds.push(d);
    }
    ds
}

/// Cancel `--compensate` at a group with an open optional branch whose `step_ready` is still on
/// its way: fraud succeeded, address (optional) not reached yet. The cancel fails no token at
/// all (the group's only known token was resumed), and address's `step_ready`, arriving next,
/// is ignored as "a step the run had reached" without a failure. Step Functions stays parked on
/// address until its timeout, and the compensation chain does not start until then; a plain
/// cancel would have failed it (`baton.Terminal`).
#[test]
fn cancel_compensate_at_a_group_fails_the_token_of_a_branch_reached_after_it() {
    let p = grouped();
    let r = fraud_done(&p);
    let cancel = run(&p, Some(&r), &Input::CancelCompensate { reason: "customer withdrew".into() });
    assert_eq!(cancel.transition(), Some((Some(State::Waiting { step: 1 }), State::Compensating)));
    let r = after(&cancel);
    let address =
        Input::StepReady { generation: 1, step: 2, token: token("t2"), deadline: T0 + Duration::days(2) };
    let late = run(&p, Some(&r), &address);
    let failed = cancel
        .effects
        .iter()
        .chain(&late.effects)
        .any(|e| fails(std::slice::from_ref(e), "t2") || fails(std::slice::from_ref(e), "t1"));
    assert!(
        failed,
        "no parked token is failed: cancel {:?}; address's step_ready {:?} {:?}",
        cancel.effects, late.outcome, late.effects
    );
}

/// Truthful outcomes / no lost acknowledgement. The decision that reaches payment's wait
/// publishes its task (CreateUndoTask), and only then does the engine submit its mark
/// (AttemptOpened). An acknowledgement that arrives in between was sent after the task went out:
/// the engine has its sender retry (`task_not_out`, a 503 with Retry-After) instead of the
/// decision's final `out_of_order`, and the retry after the mark is applied. (Found by this
/// attack: it was answered `ignored` and the run ended `compensation_failed`.)
#[test]
fn held_an_acknowledgement_between_the_task_and_its_mark_is_retried_not_lost() {
    let p = saga();
    let reach = run(&p, Some(&shipping_failed(&p)), &undo_ready(1, "NoCarrier"));
    assert_eq!(undo_tasks(&reach), [(1, 1)], "the task goes out with this decision");
    let r = after(&reach);
    let early_ack = ack("a1", 1, StepOutcome::Succeeded, Some(1));
    assert!(task_not_out(Some(&r), &early_ack), "the engine asks the sender to retry");
    assert!(
        task_not_out(Some(&r), &ack("a1-none", 1, StepOutcome::Succeeded, None)),
        "naming no attempt too"
    );
    assert!(
        !task_not_out(Some(&r), &ack("a1-later", 1, StepOutcome::Succeeded, Some(2))),
        "a later attempt is out of order"
    );
    let r = opened(&p, &r, 1, 1);
    assert!(!task_not_out(Some(&r), &early_ack), "once marked, it is decided");
    let retried = at(&p, Some(&r), &early_ack, T0 + Duration::seconds(1));
    assert_eq!(retried.outcome, Outcome::Applied);
    let r = then(&r, &retried);
    let r = reached(&p, &r, 0, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, Some(1))));
    assert_eq!(after(&run(&p, Some(&r), &ended("NoCarrier"))).state, State::Compensated);
}

/// A compensation task owed only while its wait can still be answered. Payment's attempt 1
/// failed; attempt 2 is due at once, but its task did not go out (the mark never landed, or the
/// sweeper was late). The sweeper ticks after the wait's deadline: Step Functions has timed the
/// wait out, yet attempt 2's task is published. The forward path refuses that ("a sweep late
/// past the step's deadline opens nothing"); here the external system undoes payment while the
/// record will call it `timed_out` (an operator told to finish by hand undoes it twice).
#[test]
fn the_sweeper_publishes_no_compensation_attempt_after_its_wait_timed_out() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("a1", 1, refused("BankDown"), Some(1))));
    let deadline = undo_of(&r, 1).wait.deadline.expect("a deadline");
    let late = at(&p, Some(&r), &Input::Tick, deadline + Duration::hours(1));
    assert_eq!(undo_tasks(&late), [], "a task published after its wait's deadline ({deadline})");
}

/// Rule 2 of the lifecycle: "a start event already seen is a duplicate, whatever the state". A
/// compensating record answers its own start event's redelivery `ignored (already_running)`,
/// and ledgers it so.
#[test]
fn a_start_event_redelivered_while_compensating_is_a_duplicate() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let d = run(&p, Some(&r), &Input::start(eid("evt-1")));
    assert_eq!((d.outcome, d.effects), (Outcome::Duplicate, vec![]));
}

/// An optional branch's own report (`branch_ended`) that arrives once the record compensates is
/// decided `ignored (compensating)`, a final answer, but `unsettled` says it must wait for
/// another report (a compensating record has no step, so `step > current` holds): the engine
/// retries it through its queue for as long as compensation runs (days), towards the DLQ.
#[test]
fn a_branch_report_while_compensating_is_final_not_unsettled() {
    let p = grouped();
    let r = ready(&p, &fraud_done(&p), 2, "t2");
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-address", 2, StepOutcome::Succeeded, json!({"address_ok": 1})),
    ));
    let r = ready(&p, &r, 3, "t3");
    let report = Input::BranchEnded { generation: 1, step: 2, error: None };
    assert!(!unsettled(&p, Some(&r), &report), "at payment, the report is decided");
    let failed = StepOutcome::Failed { error: "Declined".into(), cause: "no".into(), retryable: false };
    let r = after(&run(&p, Some(&r), &callback("cb-pay", 3, failed, json!({}))));
    let r = reached(&p, &r, 1, "Declined");
    assert_eq!(run(&p, Some(&r), &report).outcome, Outcome::Ignored(IgnoreReason::Compensating));
    assert!(!unsettled(&p, Some(&r), &report), "held as unsettled while compensating");
}

/// Writes follow the table. A worker fails reserve with the error name `baton.Cancelled` (any
/// text is taken); Step Functions' Catch runs the chain, and reserve's `undo_ready` is lost. The
/// end report begins and ends compensation in one write: nothing ran, so the run ends as its
/// trigger says, `cancelled`; `advancing{0} -> cancelled` by `compensation_ended` is no row of
/// TRANSITIONS (nor are `waiting`/`pending -> cancelled`): `decide` panics in debug; in release
/// the store's condition, derived from the same table, would refuse the write.
#[test]
fn an_end_report_with_a_cancel_error_and_nothing_run_follows_the_table() {
    let p = saga();
    let r = ready(&p, &started(&p), 0, "t0");
    let outcome = StepOutcome::Failed {
        error: CANCELLED_ERROR.into(),
        cause: "worker gave up".into(),
        retryable: false,
    };
    let r = after(&run(&p, Some(&r), &callback("cb-0", 0, outcome, json!({}))));
    assert_eq!(r.state, State::Advancing { step: 0 });
    let decided = catch_unwind(AssertUnwindSafe(|| run(&p, Some(&r), &ended(CANCELLED_ERROR))));
    assert!(decided.is_ok(), "decide chose a write outside TRANSITIONS (advancing{{0}} -> cancelled)");
}

// ---------------------------------------------------------------------------------------------
// Held: regression tests.

#[test]
fn held_a_redelivered_undo_ready_is_a_duplicate_that_repeats_only_idempotent_effects() {
    let p = saga();
    let first = run(&p, Some(&shipping_failed(&p)), &undo_ready(1, "NoCarrier"));
    let r = after(&first);
    // Before the mark: the same task again (idempotent), no write.
    let again = run(&p, Some(&r), &undo_ready(1, "NoCarrier"));
    assert_eq!((again.outcome, again.write.is_none()), (Outcome::Duplicate, true));
    assert_eq!(again.effects, first.effects);
    // After the mark: nothing.
    let r = opened(&p, &r, 1, 1);
    let again = run(&p, Some(&r), &undo_ready(1, "NoCarrier"));
    assert_eq!((again.outcome, again.effects), (Outcome::Duplicate, vec![]));
    // After the acknowledgement, before its delivery is marked: the same resume again.
    let d = run(&p, Some(&r), &ack("a1", 1, StepOutcome::Succeeded, Some(1)));
    let r = after(&d);
    let again = run(&p, Some(&r), &undo_ready(1, "NoCarrier"));
    assert_eq!(conflicting_resumes(&[&d, &again]), Vec::<String>::new());
    assert!(again.write.is_none());
    // Another token for the same wait (never from Step Functions) is ignored, answered nothing.
    let other = Input::UndoReady {
        generation: 1,
        step: 1,
        token: token("u1-other"),
        deadline: T0,
        error: "NoCarrier".into(),
        cause: "why".into(),
    };
    let d = run(&p, Some(&r), &other);
    assert_eq!((d.outcome, d.write.is_none()), (Outcome::Ignored(IgnoreReason::OutOfOrder), true));
    assert!(d.effects.iter().all(|e| resume_of(e).is_none()));
}

#[test]
fn held_acknowledgements_for_the_wrong_step_attempt_or_generation_change_nothing() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let cases = [
        (ack("x-notify", 2, StepOutcome::Succeeded, None), Outcome::Ignored(IgnoreReason::OutOfOrder)),
        (ack("x-ship", 3, StepOutcome::Succeeded, None), Outcome::Ignored(IgnoreReason::OutOfOrder)),
        (ack("x-unknown", 9, StepOutcome::Succeeded, None), Outcome::Rejected(RejectReason::UnknownStep)),
        (ack("x-reserve", 0, StepOutcome::Succeeded, None), Outcome::Ignored(IgnoreReason::OutOfOrder)),
        (ack("x-a2", 1, StepOutcome::Succeeded, Some(2)), Outcome::Ignored(IgnoreReason::OutOfOrder)),
        (
            ack_of(Some(2), "x-g2", 1, StepOutcome::Succeeded, None),
            Outcome::Ignored(IgnoreReason::StaleGeneration),
        ),
        (
            ack_of(Some(0), "x-g0", 1, StepOutcome::Succeeded, None),
            Outcome::Ignored(IgnoreReason::StaleGeneration),
        ),
        (ack("x-progress", 1, StepOutcome::InProgress, None), Outcome::Ignored(IgnoreReason::OutOfOrder)),
    ];
    for (input, expected) in cases {
        let d = run(&p, Some(&r), &input);
        assert_eq!((d.outcome, d.write.is_none()), (expected, true), "{input:?}");
        assert!(d.effects.iter().all(|e| matches!(e, Effect::Ledger { .. })), "{input:?}: {:?}", d.effects);
    }
    // Attempt 1 failed, attempt 2 out: attempt 1's late success is an earlier attempt's.
    let r = after(&run(&p, Some(&r), &ack("a1", 1, refused("BankDown"), Some(1))));
    let r = opened(&p, &r, 1, 2);
    let late = run(&p, Some(&r), &ack("a1-late", 1, StepOutcome::Succeeded, Some(1)));
    assert_eq!((late.outcome, late.write), (Outcome::Ignored(IgnoreReason::EarlierAttempt), None));
    // The failure of attempt 1 again (its id) is a duplicate; under its id with another payload,
    // a conflict.
    let again = run(&p, Some(&r), &ack("a1", 1, refused("BankDown"), Some(1)));
    assert_eq!((again.outcome, again.write), (Outcome::Duplicate, None));
    let mut reused = ack("a1", 1, StepOutcome::Succeeded, Some(2));
    if let Input::UndoInput { hash, .. } = &mut reused {
        *hash = "h-other".into();
    }
    let d = run(&p, Some(&r), &reused);
    assert_eq!((d.outcome, d.write), (Outcome::Rejected(RejectReason::IdempotencyKeyReused), None));
    assert_eq!(undo_of(&r, 1).wait.failed.len(), 1);
}

#[test]
fn held_attempts_never_pass_the_limit_nor_skip_and_the_outcome_is_set_once() {
    let p = saga();
    let mut r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let mut published = vec![(1, 1)];
    for attempt in 1..=3 {
        let d = run(&p, Some(&r), &ack(&format!("f{attempt}"), 1, refused("BankDown"), None));
        assert_eq!(d.outcome, Outcome::Applied);
        r = after(&d);
        let tick = at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(1));
        published.extend(undo_tasks(&tick));
        if attempt < 3 {
            // Named before its task is marked out: nothing answers it yet.
            let early = run(&p, Some(&r), &ack(&format!("e{attempt}"), 1, StepOutcome::Succeeded, None));
            assert_eq!(early.outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
            r = opened(&p, &r, 1, attempt + 1);
        }
    }
    assert_eq!(published, [(1, 1), (1, 2), (1, 3)]);
    assert_eq!(undo_outcome(undo_of(&r, 1)), Some(UndoOutcome::Failed));
    assert_eq!(undo_of(&r, 1).wait.failed.len(), 3);
    // Nothing more goes out or changes it.
    for input in [
        ack("late", 1, StepOutcome::Succeeded, None),
        ack("late-4", 1, StepOutcome::Succeeded, Some(4)),
        Input::AttemptOpened { wait: uid(1, 1), attempt: 4 },
        Input::Tick,
    ] {
        let d = at(&p, Some(&r), &input, T0 + Duration::minutes(10));
        assert_eq!(undo_tasks(&d), [], "{input:?}");
        assert_eq!(outcomes(&then(&r, &d)), outcomes(&r), "{input:?}");
    }
}

#[test]
fn held_attempt_opened_and_resumed_marks_out_of_order_or_twice_are_nothing_owed() {
    let p = saga();
    let r = after(&run(&p, Some(&shipping_failed(&p)), &undo_ready(1, "NoCarrier")));
    let nothing = Outcome::Ignored(IgnoreReason::NothingOwed);
    for input in [
        Input::AttemptOpened { wait: uid(1, 1), attempt: 2 },
        Input::AttemptOpened { wait: uid(1, 0), attempt: 1 },
        Input::AttemptOpened { wait: uid(2, 1), attempt: 1 },
        resumed(&r, uid(1, 1), true),
    ] {
        let d = run(&p, Some(&r), &input);
        assert_eq!((d.outcome, d.write.is_none()), (nothing, true), "{input:?}");
    }
    let r = opened(&p, &r, 1, 1);
    let twice = run(&p, Some(&r), &Input::AttemptOpened { wait: uid(1, 1), attempt: 1 });
    assert_eq!((twice.outcome, twice.write.is_none()), (nothing, true));
    let r = after(&run(&p, Some(&r), &ack("a1", 1, StepOutcome::Succeeded, None)));
    let r = after(&run(&p, Some(&r), &resumed(&r, uid(1, 1), false)));
    let twice = run(&p, Some(&r), &resumed(&r, uid(1, 1), true));
    assert_eq!((twice.outcome, twice.write.is_none()), (nothing, true));
    assert_eq!(undo_outcome(undo_of(&r, 1)), Some(UndoOutcome::Acknowledged));
}

#[test]
fn held_the_sweeper_resends_only_after_the_grace_and_always_the_same_resume() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let acked = run(&p, Some(&r), &ack("a1", 1, StepOutcome::Succeeded, None));
    let r = after(&acked);
    let mut ds = vec![acked.clone()];
    for seconds in [0, 10, 29, 30, 3_600, 86_400 * 5] {
        let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::seconds(seconds));
        assert_eq!(d.write, None);
        assert_eq!(undo_tasks(&d), []);
        ds.push(d);
    }
    assert!(ds[1].effects.is_empty() && ds[2].effects.is_empty(), "inside the grace, nothing");
    assert!(!ds[4].effects.is_empty(), "after the grace, the owed resume");
    let all: Vec<&Decision> = ds.iter().collect();
    assert_eq!(conflicting_resumes(&all), Vec::<String>::new());
}

#[test]
fn held_no_forward_input_moves_a_compensating_record_and_each_is_ledgered() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let comp = Outcome::Ignored(IgnoreReason::Compensating);
    let ledger = Effect::Ledger { reason: IgnoreReason::Compensating };
    for input in [
        callback("cb-ship-late", 3, StepOutcome::Succeeded, json!({"tracking": "x"})),
        callback("cb-notify-late", 2, StepOutcome::Succeeded, json!({"sent": true})),
        callback("cb-new", 0, StepOutcome::InProgress, json!({})),
        Input::BranchEnded { generation: 1, step: 2, error: None },
        Input::Cancel { reason: "ops".into() },
        Input::CancelCompensate { reason: "ops".into() },
        Input::StepReady { generation: 1, step: 0, token: token("t0"), deadline: T0 },
        Input::StepReady { generation: 1, step: 3, token: token("t3"), deadline: T0 },
    ] {
        let d = run(&p, Some(&r), &input);
        assert_eq!(
            (d.outcome, d.write.is_none(), &d.effects[..]),
            (comp, true, &[ledger.clone()][..]),
            "{input:?}"
        );
    }
    // The input that completed payment, again: a duplicate, with no resume.
    let d = run(&p, Some(&r), &callback("cb-1", 1, StepOutcome::Succeeded, json!({"payment_ref": "pay-1"})));
    assert_eq!((d.outcome, d.write.is_none(), d.effects.len()), (Outcome::Duplicate, true, 0));
    assert_eq!(run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded }).write, None);
}

#[test]
fn held_compensation_begun_from_pending_undoes_nothing_and_ends_as_the_run_did() {
    let p = saga();
    // Reserve's step_ready lost, its wait timed out: the chain's first wait reaches a pending record.
    let d = run(&p, Some(&started(&p)), &undo_ready(0, TIMEOUT_ERROR_NAME));
    assert_eq!(d.transition(), Some((Some(State::Pending), State::Compensating)));
    assert!(
        matches!(&d.effects[..], [Effect::Answer { resume: Resume::Success { .. }, .. }]),
        "{:?}",
        d.effects
    );
    assert_eq!(undo_tasks(&d), []);
    let r = after(&d);
    assert_eq!(outcomes(&r), []);
    // Reserve's step_ready, late: failed into the chain, which Step Functions passed already.
    let late =
        run(&p, Some(&r), &Input::StepReady { generation: 1, step: 0, token: token("t0"), deadline: T0 });
    assert_eq!(late.write, None);
    let end = run(&p, Some(&r), &ended(TIMEOUT_ERROR_NAME));
    assert_eq!(end.transition(), Some((Some(State::Compensating), State::TimedOut)));
    // The end report alone, from pending.
    let d = run(&p, Some(&started(&p)), &ended("Boom"));
    assert_eq!(d.transition(), Some((Some(State::Pending), State::Failed)));
}

#[test]
fn held_compensation_begun_from_advancing_with_a_success_owed_undoes_that_step() {
    let p = saga();
    // Payment completed (its success owed); notify's step_ready never came and notify timed out.
    let r = done(&p, &done(&p, &started(&p), 0, json!({"hold": "h"})), 1, json!({"payment_ref": "p"}));
    assert_eq!(r.state, State::Advancing { step: 1 });
    let d = run(&p, Some(&r), &undo_ready(1, TIMEOUT_ERROR_NAME));
    assert_eq!(undo_tasks(&d), [(1, 1)]);
    let listed: Vec<(u32, Option<SkipReason>)> =
        after(&d).compensation.unwrap().undos.iter().map(|u| (u.step(), u.skip)).collect();
    assert_eq!(listed, [(1, None), (0, None)]);
    // From a failure owed, the failed step is not undone.
    let r = shipping_failed(&p);
    let d = run(&p, Some(&r), &undo_ready(3, "NoCarrier"));
    assert_eq!((undo_tasks(&d), d.effects.iter().filter_map(resume_of).count()), (vec![], 1));
}

#[test]
fn held_a_lost_undo_ready_times_the_wait_out_and_its_late_answers_change_nothing() {
    let p = saga();
    let r = after(&run(&p, Some(&shipping_failed(&p)), &undo_ready(1, "NoCarrier")));
    // Payment's task went out but its mark was lost; the chain moved to reserve.
    let r = reached(&p, &r, 0, "NoCarrier");
    assert_eq!(undo_outcome(undo_of(&r, 1)), Some(UndoOutcome::TimedOut));
    assert_eq!(undo_of(&r, 1).wait.task_due(), None, "nothing more goes out for it");
    for input in [
        undo_ready(1, "NoCarrier"),
        ack("a1", 1, StepOutcome::Succeeded, Some(1)),
        Input::AttemptOpened { wait: uid(1, 1), attempt: 1 },
        resumed(&r, uid(1, 1), true),
    ] {
        let d = run(&p, Some(&r), &input);
        assert_eq!(d.write, None, "{input:?}");
        assert!(d.effects.iter().all(|e| resume_of(e).is_none()), "{input:?}: {:?}", d.effects);
    }
    assert_eq!(undo_tasks(&at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1))), []);
    let r = after(&run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, None)));
    assert_eq!(after(&run(&p, Some(&r), &ended("NoCarrier"))).state, State::CompensationFailed);
}

#[test]
fn held_a_cancel_with_compensate_at_a_group_fails_its_open_branch_and_plans_the_rest() {
    let p = grouped();
    let r = ready(&p, &fraud_done(&p), 2, "t2");
    let d = run(&p, Some(&r), &Input::CancelCompensate { reason: "ops".into() });
    assert_eq!(d.effects, [Effect::fail(&token("t2"), CANCELLED_ERROR, "ops")]);
    let r = after(&d);
    let listed: Vec<(u32, Option<SkipReason>)> =
        r.compensation.as_ref().unwrap().undos.iter().map(|u| (u.step(), u.skip)).collect();
    assert_eq!(listed, [(1, None), (2, Some(SkipReason::NotCompleted)), (0, None)]);
    // Address's wait is answered skipped; fraud's input, late, is ledgered; the group's
    // branches are closed.
    let d = run(&p, Some(&r), &undo_ready(2, CANCELLED_ERROR));
    assert!(matches!(
        &d.effects[..],
        [Effect::Resume { wait: WaitId { step: 2, .. }, resume: Resume::Success { .. }, .. }]
    ));
    let late = run(&p, Some(&r), &callback("cb-addr", 2, StepOutcome::Succeeded, json!({"address_ok": 1})));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Compensating));
    assert!(r.waits.iter().all(|b| b.outcome().is_some() && b.owed().is_none()));
}

#[test]
fn held_restart_after_compensated_starts_clean_and_generation_one_inputs_are_stale() {
    let p = saga();
    let (r, _) = compensated(&p, &shipping_failed(&p));
    assert_eq!(run(&p, Some(&r), &ended("NoCarrier")).outcome, Outcome::Duplicate);
    let late = run(&p, Some(&r), &ack("a-late", 0, StepOutcome::Succeeded, Some(1)));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Terminal));
    let dup = run(&p, Some(&r), &ack("a0", 0, StepOutcome::Succeeded, Some(1)));
    assert_eq!((dup.outcome, dup.effects.len()), (Outcome::Duplicate, 0));
    let d = run(&p, Some(&r), &Input::start(eid("evt-2")));
    assert_eq!(d.transition(), Some((Some(State::Compensated), State::Pending)));
    let r = after(&d);
    assert_eq!((r.generation, r.compensation.is_none(), r.waits.is_empty()), (2, true, true));
    for input in [
        ack("a0", 0, StepOutcome::Succeeded, Some(1)),
        ended("NoCarrier"),
        Input::AttemptOpened { wait: uid(1, 0), attempt: 1 },
        resumed(&r, uid(1, 0), true),
        Input::Tick,
    ] {
        let d = run(&p, Some(&r), &input);
        assert_eq!(d.write, None, "{input:?}");
        assert_eq!(undo_tasks(&d), [], "{input:?}");
    }
    // Generation 2 compensates on its own plan.
    let r = ready(&p, &r, 0, "g2-t0");
    let r =
        after(&run(&p, Some(&r), &callback("cb-0-g2", 0, StepOutcome::Succeeded, json!({"hold": "h-2"}))));
    let d = run(&p, Some(&r), &undo_ready_of(2, 0, "Boom"));
    assert_eq!(d.effects[0], Effect::OpenAttempt { wait: uid(2, 0), attempt: 1, beat: None });
    let r = after(&d);
    assert_eq!(outcomes(&r), [(0, None)]);
}

#[test]
fn held_a_group_s_compensations_run_together_in_either_order_and_before_the_earlier_position() {
    let p = grouped();
    let r = ready(&p, &fraud_done(&p), 2, "t2");
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-address", 2, StepOutcome::Succeeded, json!({"address_ok": 1})),
    ));
    let r = ready(&p, &r, 3, "t3");
    let failed = StepOutcome::Failed { error: "Declined".into(), cause: "no".into(), retryable: false };
    let r = after(&run(&p, Some(&r), &callback("cb-pay", 3, failed, json!({}))));
    let d = run(&p, Some(&r), &undo_ready(2, "Declined"));
    assert_eq!(undo_tasks(&d), [(2, 1)]);
    let r = opened(&p, &after(&d), 2, 1);
    let d = run(&p, Some(&r), &undo_ready(1, "Declined"));
    assert_eq!(undo_tasks(&d), [(1, 1)]);
    let r = opened(&p, &after(&d), 1, 1);
    assert_eq!(outcomes(&r), [(1, None), (2, None), (0, None)], "siblings are not settled by each other");
    let r = after(&run(&p, Some(&r), &ack("a2", 2, StepOutcome::Succeeded, None)));
    // Reserve's wait reached: fraud, never acknowledged, timed out; address stays acknowledged.
    let r = reached(&p, &r, 0, "Declined");
    assert_eq!(
        outcomes(&r),
        [(1, Some(UndoOutcome::TimedOut)), (2, Some(UndoOutcome::Acknowledged)), (0, None)]
    );
}

/// An optional branch's success that raced its deadline: baton applied it (its worker was told
/// `applied`, so its side effect happened) and owed the resume, but Step Functions timed the
/// branch out first, and its own report says so: the branch is missed. When the run fails
/// later, its compensation still runs: it did its work (found by review: the plan called it
/// `not_completed`).
#[test]
fn an_optional_branchs_applied_success_that_raced_its_deadline_is_compensated() {
    let p = grouped();
    let r = fraud_done(&p);
    let r = ready(&p, &r, 2, "t2");
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-addr", 2, StepOutcome::Succeeded, json!({"address_ok": true})),
    ));
    let timed_out = Input::BranchEnded { generation: 1, step: 2, error: Some(TIMEOUT_ERROR_NAME.into()) };
    let r = after(&run(&p, Some(&r), &timed_out));
    assert_eq!(r.missed, [2], "the branch is missed: Step Functions timed it out");
    let r = ready(&p, &r, 3, "t3");
    let failed = StepOutcome::Failed { error: "Declined".into(), cause: "no".into(), retryable: false };
    let r = after(&run(&p, Some(&r), &callback("cb-pay", 3, failed, json!({}))));
    let r = after(&run(&p, Some(&r), &undo_ready(2, "Declined")));
    assert_eq!(r.state, State::Compensating);
    assert_eq!(undo_of(&r, 2).skip, None, "the applied success is left undone: {:?}", undo_of(&r, 2));
    assert_eq!(undo_of(&r, 1).skip, None);
}
