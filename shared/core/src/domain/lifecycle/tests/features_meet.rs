//! Orderings an adversarial review tried against the fixes of the outside review: stranded
//! records (with compensation, groups, retry and generations), the mark that says a next
//! attempt's task is out (`task_not_out`), heartbeats between attempts, and the work a record
//! owes the sweeper. Each test names the invariant it holds (the numbered list of the review
//! brief: 1 allowed transitions, 2 one execution per start, 3 one task per attempt, 4 each step
//! advances once and each owed resume is delivered once, 5 terminal records never change, 6
//! nothing is lost, 7 every wait has a deadline, 8 every answer tells the truth, 9 an input
//! applies only to the generation, step and attempt it was meant for) and the ordering it tries.
//! The tests whose names start with `held_` kept the invariants.

use super::compensation::{ack, ended, opened, reached, saga, shipping_failed, undo_ready};
use super::retry::{at, failure, retried, waiting, with_attempt};
use super::*;

fn gone(generation: u32, status: &str) -> Input {
    Input::ExecutionGone { generation, status: status.into(), error: None }
}

fn end(generation: u32, status: &str) -> Input {
    Input::End { generation, status: status.into(), error: None, reason: "stopped from the console".into() }
}

/// review (0), then a last group of fraud (1, required) and the optional address (2).
fn last_group() -> Plan {
    with_group(plan(&[&["decision"], &["fraud_score"], &["address_ok"]]), (1, 2), &[2])
}

/// [`last_group`] with `retry: { attempts: 3, backoff: 10m }` on both branches, and a 1 h
/// heartbeat when `heartbeat`.
fn retried_group(heartbeat: bool) -> Plan {
    let retry = Retry { attempts: 3, backoff: std::time::Duration::from_secs(600) };
    let timeout = std::time::Duration::from_secs(2 * 86_400);
    let heartbeat = heartbeat.then_some(std::time::Duration::from_secs(3600));
    with_retry(last_group(), &[1, 2], retry, (timeout, heartbeat))
}

fn review_ok(p: &Plan) -> Record {
    let r = ready(p, &started(p), 0, "t0");
    after(&run(p, Some(&r), &callback("cb-review", 0, StepOutcome::Succeeded, json!({"decision": "ok"}))))
}

/// Review done and both branches of the last group reached (tokens t1, t2).
fn at_group(p: &Plan) -> Record {
    ready(p, &ready(p, &review_ok(p), 1, "t1"), 2, "t2")
}

fn branch_failure(id: &str, step: u32, attempt: Option<u32>) -> Input {
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable: true };
    with_attempt(callback(id, step, outcome, json!({})), attempt)
}

fn heartbeats(d: &Decision) -> Vec<TaskToken> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            Effect::SendTaskHeartbeat { token } | Effect::OpenAttempt { beat: Some(token), .. } => {
                Some(token.clone())
            }
            _ => None,
        })
        .collect()
}

fn tasks(d: &Decision) -> Vec<(u32, u32)> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CreateTask { wait, attempt } | Effect::OpenAttempt { wait, attempt, .. } => {
                Some((wait.step, *attempt))
            }
            _ => None,
        })
        .collect()
}

/// Invariant 6 and "it ends as its execution did" (lifecycle/stranded.rs): a run stranded at a
/// last parallel group whose optional branch was still open in the record (its own report, and
/// the execution's, were lost) and whose execution SUCCEEDED went past the group without that
/// branch's success: Step Functions ended it through its own catch. Ordering: required branch
/// succeeds, both reports lost, the sweeper strands the record, `baton end` ends it as
/// SUCCEEDED. The workflow must end `degraded`, as the success report would have made it
/// (`group::left`), never `succeeded` with an optional branch that did not succeed.
#[test]
fn a_run_stranded_at_a_last_group_with_an_optional_branch_open_ends_degraded_when_it_succeeded() {
    let p = last_group();
    let r = at_group(&p);
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-fraud", 1, StepOutcome::Succeeded, json!({"fraud_score": 2})),
    ));
    assert_eq!(r.state, State::Waiting { step: 1 }, "address is still open");
    // What the lost success report would have decided: degraded.
    let reported = run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded });
    assert_eq!(after(&reported).state, State::Degraded);
    let stranded = after(&run(&p, Some(&r), &gone(1, "SUCCEEDED")));
    let ended = after(&run(&p, Some(&stranded), &end(1, "SUCCEEDED")));
    assert_eq!(
        ended.state,
        State::Degraded,
        "the optional branch never succeeded, yet the stranded run ended {} (missed: {:?}, address: {:?})",
        ended.state,
        ended.missed,
        ended.waits.iter().find(|b| b.step == 2).and_then(|b| b.outcome())
    );
}

/// Invariant 9 and 6: a retried step's next attempt, not marked out yet, answered under a
/// `webhook-id` that an earlier step already took (receipts are kept per target, so the same id
/// for another step is another callback). Ordering: step 0 applied under `shared`; step 1's
/// attempt 1 fails; its attempt 2 is answered under `shared` before its mark. The answer must
/// be retried in a moment (`task_not_out`), not decided: decided, it is ignored `out_of_order`
/// for good, and attempt 2's answer is lost.
#[test]
fn an_answer_to_an_unmarked_next_attempt_under_an_id_another_step_took_is_not_out_yet() {
    let retry = Retry { attempts: 3, backoff: std::time::Duration::from_secs(600) };
    let p = with_retry(
        plan(&[&["decision"], &["payment_ref"]]),
        &[1],
        retry,
        (std::time::Duration::from_secs(2 * 86_400), None),
    );
    let r = ready(&p, &started(&p), 0, "t0");
    let r =
        after(&run(&p, Some(&r), &callback("shared", 0, StepOutcome::Succeeded, json!({"decision": "ok"}))));
    let r = ready(&p, &r, 1, "t1");
    let fail = with_attempt(
        callback(
            "pay-fail-1",
            1,
            StepOutcome::Failed { error: "Declined".into(), cause: "card".into(), retryable: true },
            json!({}),
        ),
        Some(1),
    );
    let r = after(&run(&p, Some(&r), &fail));
    assert!(r.next_attempt_at().is_some(), "attempt 2 is due, not marked out");
    let answer =
        with_attempt(callback("shared", 1, StepOutcome::Succeeded, json!({"payment_ref": "pay-7"})), Some(2));
    // The same answer under a fresh id is asked to retry.
    let fresh =
        with_attempt(callback("fresh", 1, StepOutcome::Succeeded, json!({"payment_ref": "pay-7"})), Some(2));
    assert!(task_not_out(Some(&r), &fresh));
    let decided = run(&p, Some(&r), &answer);
    assert!(
        task_not_out(Some(&r), &answer),
        "not asked to retry: decided now it is {:?}, and attempt 2's answer is lost",
        decided.outcome
    );
}

/// The same as the test before, for a branch of a parallel group: invariant 9 and 6. Ordering:
/// review applied under `shared`; fraud's attempt 1 fails; fraud's attempt 2 is answered under
/// `shared` before its mark.
#[test]
fn an_answer_to_a_branchs_unmarked_next_attempt_under_an_id_another_step_took_is_not_out_yet() {
    let p = retried_group(false);
    let r = ready(&p, &started(&p), 0, "t0");
    let r =
        after(&run(&p, Some(&r), &callback("shared", 0, StepOutcome::Succeeded, json!({"decision": "ok"}))));
    let r = ready(&p, &ready(&p, &r, 1, "t1"), 2, "t2");
    let r = after(&run(&p, Some(&r), &branch_failure("fraud-fail-1", 1, Some(1))));
    let answer =
        with_attempt(callback("shared", 1, StepOutcome::Succeeded, json!({"fraud_score": 1})), Some(2));
    let decided = run(&p, Some(&r), &answer);
    assert!(
        task_not_out(Some(&r), &answer),
        "not asked to retry: decided now it is {:?}, and attempt 2's answer is lost",
        decided.outcome
    );
}

/// Invariant 4 and 7, held: a compensating record whose execution was stopped mid-chain, with
/// one compensation acknowledged (its resume still owed) and one between attempts, is stranded
/// owing nothing, and ends as the chain would have: the acknowledged one undone, the other
/// not. Ordering: payment's compensation acknowledged (resume owed), reserve's attempt 1 failed
/// (attempt 2 due), execution stopped, ExecutionGone, Tick, End.
#[test]
fn held_a_stranded_compensation_owes_no_resume_nor_attempt_and_ends_with_what_stays_undone() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("ack-pay", 1, StepOutcome::Succeeded, Some(1))));
    let r = reached(&p, &r, 0, "NoCarrier");
    let refused = StepOutcome::Failed { error: "StockDown".into(), cause: "no".into(), retryable: true };
    let r = after(&run(&p, Some(&r), &ack("ack-res-1", 0, refused, Some(1))));
    assert!(r.owes_work(), "the owed resume and the next attempt are work");
    let stranded = after(&run(&p, Some(&r), &gone(1, "ABORTED")));
    assert!(!stranded.owes_work());
    let tick = at(&p, Some(&stranded), &Input::Tick, T0 + Duration::hours(2));
    assert!(tick.effects.is_empty() && tick.write.is_none(), "{:?}", tick.effects);
    let late = run(&p, Some(&stranded), &ack("ack-res-2", 0, StepOutcome::Succeeded, Some(2)));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Stranded));
    assert_eq!(late.effects, [Effect::Ledger { reason: IgnoreReason::Stranded }]);
    let done = after(&run(&p, Some(&stranded), &end(1, "ABORTED")));
    assert_eq!(done.state, State::CompensationFailed);
    let c = done.compensation.as_ref().unwrap();
    let undone: Vec<u32> = c.undone().map(|u| u.step()).collect();
    assert_eq!(undone, [0], "payment was refunded; reserve stays undone");
}

/// Invariant 4 and 7, held: a group stranded while one branch waits out its backoff and the
/// other's resume is owed owes nothing, and a mark of that attempt (or a Resumed) landing after
/// the strand writes nothing. Ordering: address succeeds (resume owed), fraud's attempt 1 fails,
/// ExecutionGone, then the sweeper's Tick and the late marks.
#[test]
fn held_a_group_stranded_between_attempts_owes_nothing_and_late_marks_write_nothing() {
    let p = retried_group(true);
    let r = at_group(&p);
    let r = after(&run(
        &p,
        Some(&r),
        &callback("cb-addr", 2, StepOutcome::Succeeded, json!({"address_ok": true})),
    ));
    let r = after(&run(&p, Some(&r), &branch_failure("fraud-fail-1", 1, Some(1))));
    assert!(r.owes_work());
    let stranded = after(&run(&p, Some(&r), &gone(1, "ABORTED")));
    assert!(!stranded.owes_work(), "{:?}", stranded.waits);
    for input in [
        Input::Tick,
        Input::AttemptOpened { wait: wid(1, 1), attempt: 2 },
        resumed(&stranded, wid(1, 2), true),
    ] {
        let d = at(&p, Some(&stranded), &input, T0 + Duration::hours(1));
        assert!(d.write.is_none() && d.effects.is_empty(), "{input:?}: {:?}", d.effects);
    }
}

/// Invariant 5 and 9, held: after `baton end`, a start event opens generation 2 clean; every
/// input of generation 1 that arrives late (its ExecutionGone, an End, a report, a step_ready,
/// a callback naming it) changes nothing, and a step_ready of generation 1 has its token failed.
/// Ordering: stranded at review, ended, restarted, then generation 1's leftovers.
#[test]
fn held_after_an_end_a_restart_is_a_clean_generation_that_generation_ones_leftovers_never_move() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let stranded = after(&run(&p, Some(&r), &gone(1, "ABORTED")));
    let ended = after(&run(&p, Some(&stranded), &end(1, "ABORTED")));
    assert!(ended.state.is_terminal());
    let d = run(&p, Some(&ended), &Input::start(eid("evt-2")));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Restart));
    let g2 = after(&d);
    assert_eq!(
        (g2.generation, g2.compensation.is_none(), g2.token().is_none(), g2.waits.is_empty()),
        (2, true, true, true)
    );
    let g2 = ready(&p, &g2, 0, "g2-t0");
    let mut stale_callback = callback("late-1", 0, StepOutcome::Succeeded, json!({"hold": "old"}));
    if let Input::StepInput { generation, .. } = &mut stale_callback {
        *generation = Some(1);
    }
    for input in [
        gone(1, "ABORTED"),
        end(1, "ABORTED"),
        Input::Finished { generation: 1, finish: Finish::Failed { error: "x".into(), cause: "y".into() } },
        stale_callback,
        ack("ack-old", 1, StepOutcome::Succeeded, Some(1)),
        Input::UndoReady {
            generation: 1,
            step: 0,
            token: token("u0-old"),
            deadline: T0 + Duration::days(1),
            error: "NoCarrier".into(),
            cause: "why".into(),
        },
    ] {
        let d = run(&p, Some(&g2), &input);
        assert!(d.write.is_none(), "{input:?} moved generation 2: {:?}", d.transition());
    }
    let old_ready =
        Input::StepReady { generation: 1, step: 1, token: token("t1-old"), deadline: T0 + Duration::days(1) };
    let d = run(&p, Some(&g2), &old_ready);
    assert!(d.write.is_none());
    assert!(
        d.effects.iter().any(|e| fails(std::slice::from_ref(e), "t1-old")),
        "a parked token of generation 1 is failed: {:?}",
        d.effects
    );
}

/// Invariant 7 (a retried step with a heartbeat is kept alive across its backoff), held for a
/// group: each branch that fails an attempt is beaten on its own token, and each next attempt
/// opened by the sweeper is beaten before its task goes out; a Tick past a branch's deadline
/// beats and publishes nothing for it. Ordering: both branches fail attempt 1, one Tick after
/// both backoffs, then a Tick past the deadline with a fresh failure due.
#[test]
fn held_each_branch_between_attempts_is_beaten_on_its_own_token() {
    let p = retried_group(true);
    let r = at_group(&p);
    let d = run(&p, Some(&r), &branch_failure("f-1", 1, Some(1)));
    assert_eq!(heartbeats(&d), [token("t1")]);
    let r = after(&d);
    let d = run(&p, Some(&r), &branch_failure("a-1", 2, Some(1)));
    assert_eq!(heartbeats(&d), [token("t2")]);
    let r = after(&d);
    let tick = at(&p, Some(&r), &Input::Tick, T0 + Duration::minutes(11));
    let mut beaten = heartbeats(&tick);
    beaten.sort_by_key(|t| t.expose().to_owned());
    assert_eq!(beaten, [token("t1"), token("t2")]);
    let mut opened_tasks = tasks(&tick);
    opened_tasks.sort_unstable();
    assert_eq!(opened_tasks, [(1, 2), (2, 2)]);
    // Each task is opened after a beat on its own branch's token (the engine beats first).
    for (beat, task) in [(token("t1"), 1), (token("t2"), 2)] {
        let opens = |e: &Effect| matches!(e, Effect::OpenAttempt { wait, beat: Some(b), .. } if wait.step == task && *b == beat);
        assert!(tick.effects.iter().any(opens), "{:?}", tick.effects);
    }
    let late = at(&p, Some(&r), &Input::Tick, T0 + Duration::days(3));
    assert!(heartbeats(&late).is_empty() && tasks(&late).is_empty(), "{:?}", late.effects);
}

/// Invariant 3 and 9, held: a `cancel --compensate` while a retried step waits out its backoff
/// owes no next attempt of it (no forward task goes out once compensation began), and a mark of
/// that attempt landing after (the sweeper's Tick decided before the cancel) changes nothing.
#[test]
fn held_cancel_compensate_between_attempts_owes_no_next_attempt_and_a_late_mark_changes_nothing() {
    let retry = Retry { attempts: 3, backoff: std::time::Duration::from_secs(600) };
    let p = with_retry(saga(), &[1], retry, (std::time::Duration::from_secs(86_400), None));
    let r = ready(&p, &started(&p), 0, "t0");
    let r = after(&run(&p, Some(&r), &callback("cb-0", 0, StepOutcome::Succeeded, json!({"hold": "h"}))));
    let r = ready(&p, &r, 1, "t1");
    let fail = with_attempt(
        callback(
            "pay-1",
            1,
            StepOutcome::Failed { error: "Declined".into(), cause: "c".into(), retryable: true },
            json!({}),
        ),
        Some(1),
    );
    let r = after(&run(&p, Some(&r), &fail));
    assert!(r.next_attempt_at().is_some());
    let d = run(&p, Some(&r), &Input::CancelCompensate { reason: "ops".into() });
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Compensate));
    let k = after(&d);
    assert_eq!(k.next_attempt_at(), None);
    let tick = at(&p, Some(&k), &Input::Tick, T0 + Duration::minutes(30));
    assert!(tasks(&tick).iter().all(|(step, _)| *step != 1), "{:?}", tick.effects);
    let mark = run(&p, Some(&k), &Input::AttemptOpened { wait: wid(1, 1), attempt: 2 });
    assert!(mark.write.is_none(), "{:?}", mark.transition());
    let answer =
        with_attempt(callback("pay-2", 1, StepOutcome::Succeeded, json!({"payment_ref": "p"})), Some(2));
    assert!(!task_not_out(Some(&k), &answer), "a forward answer while compensating is decided, and ledgered");
    assert_eq!(run(&p, Some(&k), &answer).outcome, Outcome::Ignored(IgnoreReason::Compensating));
}

/// Invariant 4, held: the compensation's next attempt is asked to wait for its mark
/// (`task_not_out`), and once its task is marked out the same acknowledgement is applied once;
/// its repeat is a duplicate that re-sends the owed resume only after the grace.
#[test]
fn held_a_compensations_unmarked_attempt_waits_for_its_mark_and_is_applied_once() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("ack-1", 1, super::compensation::refused("BankDown"), Some(1))));
    let second = ack("ack-2", 1, StepOutcome::Succeeded, Some(2));
    assert!(task_not_out(Some(&r), &second));
    let r = opened(&p, &r, 1, 2);
    assert!(!task_not_out(Some(&r), &second));
    let d = run(&p, Some(&r), &second);
    assert_eq!(d.outcome, Outcome::Applied);
    let r = after(&d);
    assert!(!task_not_out(Some(&r), &second), "a repeat is answered from its receipt, never held");
    let twin = run(&p, Some(&r), &second);
    assert_eq!((twin.outcome, twin.effects.len()), (Outcome::Duplicate, 0));
    let later = at(&p, Some(&r), &second, T0 + RESEND_RESUME_AFTER);
    assert_eq!(later.outcome, Outcome::Duplicate);
    assert!(later.effects.iter().any(|e| matches!(
        e,
        Effect::Resume { resume: Resume::Success { .. }, .. }
            | Effect::Answer { resume: Resume::Success { .. }, .. }
    )));
}

/// Invariant 5, held: once a stranded compensation is ended, its chain's leftovers (a copy of
/// an undo_ready, the chain's end report, an acknowledgement) never move the record, and the
/// undo_ready's token is owed nothing.
#[test]
fn held_an_ended_compensation_ignores_its_chains_leftovers() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let done = after(&run(&p, Some(&after(&run(&p, Some(&r), &gone(1, "ABORTED")))), &end(1, "ABORTED")));
    assert!(done.state.is_terminal());
    for input in
        [undo_ready(0, "NoCarrier"), ended("NoCarrier"), ack("ack-late", 0, StepOutcome::Succeeded, Some(1))]
    {
        let d = run(&p, Some(&done), &input);
        assert!(d.write.is_none(), "{input:?}");
        assert!(
            !d.effects.iter().any(|e| matches!(e, Effect::Resume { .. } | Effect::Answer { .. })),
            "{input:?}: {:?}",
            d.effects
        );
    }
}

/// A group has at most 20 branches: the config says so, with the path; 20 are taken.
#[test]
fn held_a_group_of_twenty_one_branches_is_refused_and_twenty_are_taken() {
    let yaml = |n: usize| {
        let branches: String = (0..n)
            .map(|i| format!("            - {{ name: b{i}, requires: [x{i}], timeout: 10m }}\n"))
            .collect();
        format!(
            "workflows:\n  wide:\n    start: {{ when: {{ type: [\"s\"] }}, key: /subject }}\n    steps:\n      - parallel:\n          name: g\n          branches:\n{branches}"
        )
    };
    assert!(crate::domain::config::Config::parse(&yaml(20)).is_ok());
    let refused = crate::domain::config::Config::parse(&yaml(21)).expect_err("21 branches");
    let text = refused.to_string();
    assert!(text.contains("20") && text.contains("branches"), "{text}");
}

/// Invariant 4, held: the failure resume owed to a step that failed for good (its last attempt)
/// is dropped when the record is stranded, and the completing input sent again is a plain
/// ledgered input, no resend.
#[test]
fn held_a_stranded_record_owes_no_resume_its_repeated_input_would_resend() {
    let p = retried();
    let r = waiting(&p);
    let r = after(&at(&p, Some(&r), &failure("cb-last", false, Some(1)), T0));
    assert_eq!(r.state, State::Advancing { step: 0 });
    let stranded = after(&at(&p, Some(&r), &gone(1, "FAILED"), T0 + Duration::hours(1)));
    let again = at(&p, Some(&stranded), &failure("cb-last", false, Some(1)), T0 + Duration::hours(2));
    assert!(
        !again.effects.iter().any(|e| matches!(
            e,
            Effect::Resume { resume: Resume::Failure { .. }, .. }
                | Effect::Answer { resume: Resume::Failure { .. }, .. }
        )),
        "{:?}",
        again.effects
    );
    assert_eq!(after(&run(&p, Some(&stranded), &end(1, "FAILED"))).state, State::Failed);
}

/// Invariant 5 and 2 (a record ends only once its execution has, and never while its
/// execution runs): Step Functions names an execution that an operator redrives
/// `PENDING_REDRIVE` until it runs again; it is not closed (the sweeper never strands it:
/// `ExecutionStatus::is_closed`). Ordering: a step waits, its execution failed without its
/// report, and is redriven; `baton end` (or a sweep) then reads PENDING_REDRIVE. Neither
/// ExecutionGone nor End may take it for ended, as neither takes RUNNING.
#[test]
fn an_execution_pending_redrive_neither_strands_nor_ends_its_record() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let waiting = ready(&p, &started(&p), 0, "t0");
    let d = run(&p, Some(&waiting), &gone(1, "PENDING_REDRIVE"));
    assert!(d.write.is_none(), "a record whose execution is about to run again was {:?}", d.transition());
    let stranded = after(&run(&p, Some(&waiting), &gone(1, "FAILED")));
    let d = run(&p, Some(&stranded), &end(1, "PENDING_REDRIVE"));
    assert!(d.write.is_none(), "a record whose execution is about to run again was {:?}", d.transition());
}
