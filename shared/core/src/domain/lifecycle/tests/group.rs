//! Parallel groups, decided one input at a time: review (0), then the group `checks` of fraud
//! (1), credit (2) and the optional address (3), then payment (4).

use super::*;

fn grouped() -> Plan {
    with_group(
        plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["address_ok"], &["payment_ref"]]),
        (1, 3),
        &[3],
    )
}

fn input(id: &str, step: u32, data: serde_json::Value) -> Input {
    callback(id, step, StepOutcome::Succeeded, data)
}

fn failed(id: &str, step: u32) -> Input {
    callback(
        id,
        step,
        StepOutcome::Failed { error: "no".into(), cause: "said no".into(), retryable: true },
        json!({}),
    )
}

/// The record with review done and every branch of the group reached.
fn at_group(p: &Plan) -> Record {
    let r = ready(p, &started(p), 0, "t0");
    let r = after(&run(p, Some(&r), &input("cb-review", 0, json!({"decision": "ok"}))));
    let r = ready(p, &r, 2, "t2");
    let r = ready(p, &r, 1, "t1");
    ready(p, &r, 3, "t3")
}

fn outcome(r: &Record, step: u32) -> Option<WaitOutcome> {
    r.waits.iter().find(|b| b.step == step).and_then(|b| b.outcome())
}

#[test]
fn the_first_branch_reached_opens_the_group_and_each_other_joins_it_once() {
    let p = grouped();
    let r = ready(&p, &started(&p), 0, "t0");
    let r = after(&run(&p, Some(&r), &input("cb-review", 0, json!({"decision": "ok"}))));
    let deadline = T0 + time::Duration::days(1);
    let d = run(&p, Some(&r), &Input::StepReady { generation: 1, step: 2, token: token("t2"), deadline });
    assert_eq!(d.transition(), Some((Some(State::Advancing { step: 0 }), State::Waiting { step: 1 })));
    assert_eq!(d.effects, [create(wid(1, 2), 1), Effect::DrainInbox { generation: 1, step: 2 }]);
    let r = after(&d);
    assert_eq!(
        r.waits.iter().map(|b| (b.step, b.token.is_some())).collect::<Vec<_>>(),
        [(1, false), (2, true), (3, false)]
    );
    let d = run(&p, Some(&r), &Input::StepReady { generation: 1, step: 1, token: token("t1"), deadline: T0 });
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::BranchReady));
    let again = run(
        &p,
        Some(&after(&d)),
        &Input::StepReady { generation: 1, step: 1, token: token("t1"), deadline: T0 },
    );
    assert_eq!(again.outcome, Outcome::Duplicate);
    assert!(again.write.is_none());
}

#[test]
fn the_group_advances_once_every_branch_has_an_outcome_and_the_next_step_follows_it() {
    let p = grouped();
    let r = at_group(&p);
    let d = run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3})));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::BranchDone));
    assert_eq!(
        d.effects,
        [Effect::Resume {
            wait: wid(1, 1),
            token: token("t1"),
            resume: Resume::Success { output: json!({"fraud_score": 3}) },
            mark: Mark::Always
        },]
    );
    let r = after(&d);
    assert_eq!(r.state, State::Waiting { step: 1 });
    // A branch's input moves no sibling.
    assert_eq!((outcome(&r, 2), outcome(&r, 3)), (None, None));
    assert!(r.waits.iter().filter(|b| b.step != 1).all(|b| b.inputs.is_empty()));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 1), true)));
    assert!(r.waits[0].owed().is_none());
    let r = after(&run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true}))));
    let d = run(&p, Some(&r), &input("cb-address", 3, json!({"address_ok": true})));
    assert_eq!(d.transition(), Some((Some(State::Waiting { step: 1 }), State::Advancing { step: 1 })));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::Complete));
    // The group is decided: the last resume is marked only should it find its token gone (a
    // delivered one is followed by the next step's report).
    assert_eq!(d.effects, [resume_ok(wid(1, 3), "t3", json!({"address_ok": true}), Mark::IfGone)]);
    let r = ready(&p, &after(&d), 4, "t4");
    assert_eq!((r.state, r.branches().count()), (State::Waiting { step: 4 }, 0));
    let r = after(&run(&p, Some(&r), &input("cb-pay", 4, json!({"payment_ref": "p"}))));
    let end = after(&run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded }));
    assert_eq!(end.state, State::Succeeded);
}

#[test]
fn a_required_branch_that_fails_closes_its_siblings_and_their_late_inputs_are_ignored() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-address", 3, json!({"address_ok": true}))));
    let d = run(&p, Some(&r), &failed("cb-fraud", 1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    assert_eq!(d.effects, [resume_failed(wid(1, 1), "t1", ("no", "said no"), Mark::IfGone)]);
    let r = after(&d);
    assert_eq!(r.state, State::Advancing { step: 1 });
    assert_eq!(
        (outcome(&r, 1), outcome(&r, 2), outcome(&r, 3)),
        (Some(WaitOutcome::Failed), Some(WaitOutcome::Closed), Some(WaitOutcome::Succeeded))
    );
    let late = run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true})));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::GroupFailed));
    assert_eq!(late.effects, [Effect::Ledger { reason: IgnoreReason::GroupFailed }]);
    let finish = Finish::Failed { error: "no".into(), cause: String::new() };
    let end = after(&run(&p, Some(&r), &Input::Finished { generation: 1, finish }));
    assert_eq!(end.state, State::Failed);
    let later = run(&p, Some(&end), &input("cb-credit", 2, json!({"credit_ok": true})));
    assert_eq!(later.outcome, Outcome::Ignored(IgnoreReason::GroupFailed));
    assert!(later.write.is_none());
}

#[test]
fn an_optional_branch_that_times_out_never_blocks_the_group_and_the_workflow_ends_degraded() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3}))));
    let ended = Input::BranchEnded { generation: 1, step: 3, error: Some("States.Timeout".into()) };
    let d = run(&p, Some(&r), &ended);
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::BranchDone));
    let r = after(&d);
    assert_eq!(
        (outcome(&r, 3), r.missed.clone(), r.state),
        (Some(WaitOutcome::TimedOut), vec![3], State::Waiting { step: 1 })
    );
    assert_eq!(run(&p, Some(&r), &ended).outcome, Outcome::Duplicate);
    let r = after(&run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true}))));
    assert_eq!(r.state, State::Advancing { step: 1 });
    let r = ready(&p, &r, 4, "t4");
    let r = after(&run(&p, Some(&r), &input("cb-pay", 4, json!({"payment_ref": "p"}))));
    let end = after(&run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded }));
    assert_eq!((end.state, end.missed.clone()), (State::Degraded, vec![3]));
}

#[test]
fn an_optional_branch_that_fails_by_callback_is_missed_and_the_group_goes_on() {
    let p = grouped();
    let r = at_group(&p);
    let d = run(&p, Some(&r), &failed("cb-address", 3));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::BranchDone));
    let r = after(&d);
    assert_eq!(
        (outcome(&r, 3), r.missed.clone(), outcome(&r, 1)),
        (Some(WaitOutcome::Failed), vec![3], None)
    );
    // Its own catch reports the failure baton sent: nothing new.
    let report = Input::BranchEnded { generation: 1, step: 3, error: Some("no".into()) };
    assert_eq!(run(&p, Some(&r), &report).outcome, Outcome::Duplicate);
}

#[test]
fn inputs_for_a_branch_not_yet_reached_are_buffered_until_it_is() {
    let p = grouped();
    // Before the workflow reaches the group at all.
    let r = ready(&p, &started(&p), 0, "t0");
    let d = run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true})));
    assert_eq!(d.effects, [Effect::Buffer { generation: 1, step: 2 }]);
    // The group is open, but this branch's step_ready is still on its way.
    let r = after(&run(&p, Some(&r), &input("cb-review", 0, json!({"decision": "ok"}))));
    let r = ready(&p, &r, 1, "t1");
    let d = run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true})));
    assert_eq!(
        (d.outcome, d.effects.clone()),
        (Outcome::Buffered, vec![Effect::Buffer { generation: 1, step: 2 }])
    );
}

#[test]
fn the_sweeper_resends_only_what_is_still_owed_and_a_cancel_fails_every_open_branch() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3}))));
    let later = |r: &Record, input: &Input| {
        decide(&p, (&names().0, &names().1), Some(r), input, T0 + RESEND_RESUME_AFTER)
    };
    assert_eq!(
        later(&r, &Input::Tick).effects,
        [Effect::Resume {
            wait: wid(1, 1),
            token: token("t1"),
            resume: Resume::Success { output: json!({"fraud_score": 3}) },
            mark: Mark::Always
        },]
    );
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 1), true)));
    assert_eq!(later(&r, &Input::Tick).outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    let d = run(&p, Some(&r), &Input::Cancel { reason: "ops".into() });
    let failed_tokens: Vec<&str> = d
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Answer { token, resume: Resume::Failure { .. } } => Some(token.expose()),
            _ => None,
        })
        .collect();
    assert_eq!(failed_tokens, ["t2", "t3"]);
    assert_eq!(
        (outcome(&after(&d), 2), outcome(&after(&d), 1)),
        (Some(WaitOutcome::Closed), Some(WaitOutcome::Succeeded))
    );
}

#[test]
fn a_required_branch_that_times_out_is_named_and_the_rest_are_closed() {
    let p = grouped();
    let r = at_group(&p);
    let mut r = r;
    r.waits[0].deadline = Some(T0 - Duration::minutes(1));
    r.waits[1].deadline = Some(T0 + Duration::days(1));
    let end = after(&run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::TimedOut }));
    assert_eq!(end.state, State::TimedOut);
    assert_eq!(
        (outcome(&end, 1), outcome(&end, 2)),
        (Some(WaitOutcome::TimedOut), Some(WaitOutcome::Closed))
    );
}

/// A required branch's success whose resume found its token gone, before its deadline, and then
/// the group's timeout report: Step Functions timed the branch out by its heartbeat (baton
/// watches no heartbeat), so it ends `timed_out`, never `succeeded` in a group that failed
/// (found by the simulation, a clock jump past the heartbeat).
#[test]
fn a_success_refused_before_its_deadline_then_the_groups_timeout_ends_the_branch_timed_out() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3}))));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 1), false)));
    assert_eq!(outcome(&r, 1), Some(WaitOutcome::Succeeded));
    let timed_out = Input::Finished { generation: 1, finish: Finish::TimedOut };
    let r = after(&run(&p, Some(&r), &timed_out));
    assert_eq!(r.state, State::TimedOut);
    assert_eq!(outcome(&r, 1), Some(WaitOutcome::TimedOut));
    assert!(crate::domain::lifecycle::group_failed(&p, &r));
}

/// The same for a group that advanced with its last success owed (never marked delivered):
/// the timeout report ends that branch `timed_out`; and so does `baton end` of a record stranded
/// there whose execution timed out.
#[test]
fn a_last_success_still_owed_when_the_group_times_out_ends_the_branch_timed_out() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true}))));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 2), true)));
    let r = after(&run(&p, Some(&r), &failed("cb-address", 3)));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 3), true)));
    let r = after(&run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3}))));
    assert_eq!(r.state, State::Advancing { step: 1 });
    let timed_out = Input::Finished { generation: 1, finish: Finish::TimedOut };
    let ended = after(&run(&p, Some(&r), &timed_out));
    assert_eq!(outcome(&ended, 1), Some(WaitOutcome::TimedOut));
    assert_eq!(outcome(&ended, 2), Some(WaitOutcome::Succeeded), "its success was delivered");

    let gone =
        Input::ExecutionGone { generation: 1, status: "FAILED".into(), error: Some("States.Timeout".into()) };
    let stranded = after(&run(&p, Some(&r), &gone));
    let end = Input::End {
        generation: 1,
        status: "FAILED".into(),
        error: Some("States.Timeout".into()),
        reason: "ops".into(),
    };
    let ended = after(&run(&p, Some(&stranded), &end));
    assert_eq!(ended.state, State::TimedOut);
    assert_eq!(outcome(&ended, 1), Some(WaitOutcome::TimedOut));
}

/// `baton end` of a run whose execution succeeded while an optional branch's success was never
/// confirmed (its report lost with the execution): baton cannot tell whether Step Functions
/// took it, and ends the run `degraded`, never a `succeeded` that could hide a missed branch.
#[test]
fn an_end_after_success_with_an_optional_success_unconfirmed_is_degraded() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3}))));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 1), true)));
    let r = after(&run(&p, Some(&r), &input("cb-credit", 2, json!({"credit_ok": true}))));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 2), true)));
    let r = after(&run(&p, Some(&r), &input("cb-address", 3, json!({"address_ok": true}))));
    assert_eq!(r.state, State::Advancing { step: 1 });
    let gone = Input::ExecutionGone { generation: 1, status: "SUCCEEDED".into(), error: None };
    let stranded = after(&run(&p, Some(&r), &gone));
    let end = Input::End { generation: 1, status: "SUCCEEDED".into(), error: None, reason: "ops".into() };
    assert_eq!(after(&run(&p, Some(&stranded), &end)).state, State::Degraded);
}

/// A branch's resume owed while its siblings keep the record busy is re-sent a grace after it
/// became owed, however often the record is written since (`make sim`, seed 15237: each write
/// of a busy wide group put the re-send off, and the owed resume starved).
#[test]
fn an_owed_branch_resume_is_due_a_grace_after_it_became_owed_whatever_is_written_since() {
    let p = grouped();
    let (w, k) = names();
    let r = at_group(&p);
    let owed_at = T0 + time::Duration::seconds(5);
    let d = decide(&p, (&w, &k), Some(&r), &input("cb-fraud", 1, json!({"fraud_score": 3})), owed_at);
    let mut r = after(&d);
    let due = r.due_at();
    assert!(r.owes_work(), "the fraud branch's resume is owed");
    // Listed at the time it became owed: the sweeper takes what was due a grace before its tick.
    assert_eq!(due, owed_at);
    // Partial inputs of the credit branch, one every 10 s: each is a write of the record.
    for i in 1..=5 {
        let later = owed_at + time::Duration::seconds(10 * i);
        let d =
            decide(&p, (&w, &k), Some(&r), &input(&format!("cb-note-{i}"), 2, json!({ "note": i })), later);
        r = after(&d);
        assert_eq!(r.updated_at, later);
        assert_eq!(r.due_at(), due, "write {i} put the owed resume off");
    }
}
