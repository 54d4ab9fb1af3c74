//! A timer step: reached, it sleeps until its `after` has passed since Step Functions entered it;
//! the sweeper wakes it once, never before its time; nothing else moves it but a cancel, its
//! deadline, or a newer token.

use super::retry::at;
use super::*;

/// pay-out (0) after the cooling-off timer (step 0 is the timer: 24h, its timeout 24h15m), then
/// payment (1).
fn cooling_off() -> Plan {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(std::time::Duration::from_secs(24 * 3600));
    p.steps[0].timeout = std::time::Duration::from_secs(24 * 3600 + 15 * 60);
    p
}

/// Step Functions entered the timer at `T0`: its report carries the deadline `timeout` after.
fn entered(p: &Plan, r: &Record, tok: &str) -> Decision {
    let input = Input::StepReady {
        generation: r.generation,
        step: 0,
        token: token(tok),
        deadline: T0 + Duration::hours(24) + Duration::minutes(15),
    };
    at(p, Some(r), &input, T0 + Duration::seconds(40))
}

#[test]
fn a_timer_sleeps_from_when_step_functions_entered_it_and_publishes_no_task() {
    let p = cooling_off();
    let d = entered(&p, &started(&p), "tok-0");
    let r = after(&d);
    assert_eq!(r.state, State::Waiting { step: 0 });
    // The report sat 40 seconds in the queue: the timer counts from Step Functions' entry.
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: T0 + Duration::hours(24) });
    assert!(d.effects.is_empty(), "no task, nothing to drain: {:?}", d.effects);
    assert!(r.owes_work(), "the sweeper's work list holds it");
    assert_eq!(r.due_at(), T0 + Duration::hours(24) - RESEND_RESUME_AFTER, "listed on time");
}

#[test]
fn the_sweeper_wakes_a_timer_once_and_never_before_its_time() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    let early = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(24) - Duration::milliseconds(1));
    assert_eq!(early.outcome, Outcome::Ignored(IgnoreReason::NothingOwed));
    assert!(early.write.is_none());

    let woke = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(24));
    let r = after(&woke);
    assert_eq!(r.state, State::Advancing { step: 0 });
    assert_eq!(wait_of(&r, 0).outcome(), Some(WaitOutcome::Succeeded));
    assert_eq!(woke.effects, vec![resume_ok(wid(1, 0), "tok-0", json!({}), Mark::IfGone)]);

    // A sweep again, or a second sweeper alongside, finds the success owed, not a timer: it
    // re-sends that success after the grace, and never decides the step twice.
    let again = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(24) + Duration::seconds(1));
    assert!(again.write.is_none() && again.effects.is_empty(), "{again:?}");
    let later = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(24) + RESEND_RESUME_AFTER);
    assert!(later.write.is_none());
    assert_eq!(later.effects, vec![resume_ok(wid(1, 0), "tok-0", json!({}), Mark::IfGone)]);
}

#[test]
fn a_timer_past_its_deadline_is_left_to_step_functions_timeout() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    let late = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(25));
    assert!(late.write.is_none() && late.effects.is_empty(), "{late:?}");
}

#[test]
fn a_cancel_during_a_timer_ends_it_and_fails_its_token() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    let d = at(&p, Some(&r), &Input::Cancel { reason: "customer withdrew".into() }, T0 + Duration::hours(1));
    let cancelled = after(&d);
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(wait_of(&cancelled, 0).outcome(), Some(WaitOutcome::Closed));
    assert!(fails(&d.effects, "tok-0"), "{:?}", d.effects);
    let tick = at(&p, Some(&cancelled), &Input::Tick, T0 + Duration::hours(24));
    assert!(tick.write.is_none() && tick.effects.is_empty(), "a cancelled timer never wakes: {tick:?}");
}

#[test]
fn an_input_naming_a_timer_step_is_refused_and_moves_nothing() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    let d =
        at(&p, Some(&r), &callback("cb-1", 0, StepOutcome::Succeeded, json!({})), T0 + Duration::hours(1));
    assert_eq!(d.outcome, Outcome::Rejected(RejectReason::UnknownStep));
    assert!(d.write.is_none() && d.effects.is_empty());
}

#[test]
fn a_newer_token_for_a_timer_keeps_its_time_and_wakes_to_the_new_token() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    // Step Functions retried the report's send: the wait re-entered a second later.
    let newer = Input::StepReady {
        generation: 1,
        step: 0,
        token: token("tok-1"),
        deadline: T0 + Duration::hours(24) + Duration::minutes(15) + Duration::seconds(1),
    };
    let d = at(&p, Some(&r), &newer, T0 + Duration::minutes(1));
    let r = after(&d);
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: T0 + Duration::hours(24) });
    let woke = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(24));
    assert_eq!(woke.effects, vec![resume_ok(wid(1, 0), "tok-1", json!({}), Mark::IfGone)]);
}

#[test]
fn inputs_for_the_step_after_a_timer_wait_in_the_inbox_until_it_is_reached() {
    let p = cooling_off();
    let r = after(&entered(&p, &started(&p), "tok-0"));
    let early = callback("cb-pay", 1, StepOutcome::Succeeded, json!({"payment_ref": "p-1"}));
    let d = at(&p, Some(&r), &early, T0 + Duration::hours(1));
    assert_eq!(d.outcome, Outcome::Buffered);
    assert!(matches!(d.effects.as_slice(), [Effect::Buffer { generation: 1, step: 1 }]));
}
