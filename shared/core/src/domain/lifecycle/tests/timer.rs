//! A timer step: reached, it sleeps until its `after` has passed since Step Functions entered it;
//! the sweeper wakes it once, never before its time; nothing else moves it but a cancel, its
//! deadline, or a newer token.

use super::retry::at;
use super::*;

/// pay-out (0) after the cooling-off timer (step 0 is the timer: 24h, its timeout 24h15m), then
/// payment (1).
fn cooling_off() -> Plan {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(Timer::After(std::time::Duration::from_secs(24 * 3600)));
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

/// A timer until the time the start event holds at `/data/starts_at` (step 0, its timeout 7
/// days), then payment (1).
fn until_start() -> Plan {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(Timer::Until("/data/starts_at".into()));
    p.steps[0].timeout = std::time::Duration::from_secs(7 * 86_400);
    p
}

/// A run started by an event whose `data.starts_at` is `starts_at`.
fn started_at(p: &Plan, starts_at: serde_json::Value) -> Record {
    let event = json!({"data": {"starts_at": starts_at}});
    let untils = vec![Until::read(0, "/data/starts_at", &event)];
    after(&run(p, None, &Input::Start { event: eid("evt-1"), untils }))
}

/// Step Functions entered the until-timer at `T0`.
fn entered_until(p: &Plan, r: &Record) -> Decision {
    let deadline = T0 + Duration::days(7);
    let input = Input::StepReady { generation: r.generation, step: 0, token: token("tok-0"), deadline };
    at(p, Some(r), &input, T0 + Duration::seconds(5))
}

#[test]
fn a_timer_until_a_time_sleeps_until_the_time_its_start_event_held_and_wakes_then() {
    let p = until_start();
    let r = started_at(&p, json!("2026-12-01T09:30:00Z"));
    let r = after(&entered_until(&p, &r));
    let time = datetime!(2026-12-01 09:30 UTC);
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: time });
    let early = at(&p, Some(&r), &Input::Tick, time - Duration::milliseconds(1));
    assert!(early.write.is_none(), "{early:?}");
    let woke = at(&p, Some(&r), &Input::Tick, time);
    assert_eq!(after(&woke).state, State::Advancing { step: 0 });
    assert_eq!(woke.effects, vec![resume_ok(wid(1, 0), "tok-0", json!({}), Mark::IfGone)]);
}

#[test]
fn a_time_already_past_wakes_the_timer_at_the_first_sweep() {
    let p = until_start();
    let r = after(&entered_until(&p, &started_at(&p, json!("2020-01-01T00:00:00+01:00"))));
    assert_eq!(r.due_at(), datetime!(2019-12-31 23:00 UTC) - RESEND_RESUME_AFTER, "due at once");
    let woke = at(&p, Some(&r), &Input::Tick, T0 + Duration::seconds(6));
    assert_eq!(woke.effects, vec![resume_ok(wid(1, 0), "tok-0", json!({}), Mark::IfGone)]);
}

#[test]
fn a_time_that_cannot_be_read_fails_the_step_at_the_first_sweep_saying_why() {
    let p = until_start();
    for (held, why) in [
        (json!(null), "the start event has no time at /data/starts_at"),
        (json!(1_764_000_000), "the start event's /data/starts_at is not an RFC 3339 time but a number"),
        (
            json!("next tuesday"),
            "the start event's /data/starts_at is not an RFC 3339 time (\"next tuesday\": ",
        ),
        // Later than the step's timeout (7 days from T0) lets the sweep reach it.
        (
            json!("2026-12-29T00:00:00Z"),
            "the start event's /data/starts_at is 2026-12-29T00:00:00Z, later than",
        ),
    ] {
        let r = after(&entered_until(&p, &started_at(&p, held.clone())));
        assert_eq!(r.due_at(), T0 - RESEND_RESUME_AFTER, "{held}: due at once");
        let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::seconds(6));
        let failed = after(&d);
        assert_eq!(
            (failed.state, wait_of(&failed, 0).outcome()),
            (State::Advancing { step: 0 }, Some(WaitOutcome::Failed))
        );
        let [Effect::Resume { resume: Resume::Failure { error, cause }, .. }] = d.effects.as_slice() else {
            panic!("{held}: one failure owed: {:?}", d.effects)
        };
        assert_eq!(error, TIMER_ERROR);
        assert!(cause.starts_with(why), "{held}: {cause}");
    }
}

#[test]
fn a_restart_reads_the_time_of_its_own_start_event() {
    let p = until_start();
    let first = started_at(&p, json!("2026-12-01T09:30:00Z"));
    let mut ended = first.clone();
    ended.state = State::Succeeded;
    let event = json!({"data": {"starts_at": "2027-01-01T00:00:00Z"}});
    let untils = vec![Until::read(0, "/data/starts_at", &event)];
    let again = after(&run(&p, Some(&ended), &Input::Start { event: eid("evt-2"), untils }));
    assert_eq!(again.generation, 2);
    assert_eq!(again.until_of(0, "/data/starts_at"), Ok(datetime!(2027-01-01 00:00 UTC)));
}
