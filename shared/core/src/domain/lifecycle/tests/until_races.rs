//! An attack on `timer: { until: /pointer }` (record.rs `Until`, `Record::until_of`,
//! step_ready.rs `reached` and `timer_wakes`, tick.rs `wake`): a newer token, a start that
//! crossed a deploy, a reload of the stored waits, restarts and redelivered start events, and a
//! timer that fails where an earlier step has a compensation. Invariants held: a timer ends once,
//! never before its time, never with another pointer's or generation's time, never sleeps
//! forever; a record round-trips unchanged; `decide` never panics.

use super::retry::at;
use super::*;
use crate::limits::ATTEMPT_OPEN_LAG;

const POINTER: &str = "/data/starts_at";

/// Step 0 a timer until the time at `pointer` (timeout 7 days), then payment (step 1).
fn until_plan(pointer: &str) -> Plan {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(Timer::Until(pointer.into()));
    p.steps[0].timeout = std::time::Duration::from_secs(7 * 86_400);
    p
}

fn rfc(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap()
}

/// The start input intake builds for `event` under `p`: what each until timer of `p` reads.
fn start_input(p: &Plan, id: &str, event: &serde_json::Value) -> Input {
    let untils = (0u32..)
        .zip(&p.steps)
        .filter_map(|(i, s)| match &s.timer {
            Some(Timer::Until(pointer)) => Some(Until::read(i, pointer, event)),
            _ => None,
        })
        .collect();
    Input::Start { event: eid(id), untils }
}

fn reach(
    p: &Plan,
    r: &Record,
    (step, tok): (u32, &str),
    deadline: OffsetDateTime,
    now: OffsetDateTime,
) -> Decision {
    let input = Input::StepReady { generation: r.generation, step, token: token(tok), deadline };
    at(p, Some(r), &input, now)
}

/// A timer whose time is too late for its first deadline sleeps until it entered (so that the
/// first sweep fails it). Step Functions retries the report's send: the newer token comes with
/// a deadline seconds later, under which the time fits. The sweep must not then wake the timer
/// with a success days before its time.
#[test]
fn a_newer_token_never_makes_a_timer_too_late_for_its_first_deadline_wake_before_its_time() {
    let p = until_plan(POINTER);
    let lag = Duration::try_from(ATTEMPT_OPEN_LAG).unwrap();
    let first_deadline = T0 + Duration::days(7);
    // One second later than the first deadline lets the sweep reach.
    let time = first_deadline - lag + Duration::seconds(1);
    let r = after(&run(&p, None, &start_input(&p, "evt-1", &json!({"data": {"starts_at": rfc(time)}}))));
    let r = after(&reach(&p, &r, (0, "tok-0"), first_deadline, T0 + Duration::seconds(5)));
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: T0 }, "too late: due at once, to fail");
    // Step Functions re-entered the wait two seconds later (the report's send was retried).
    let r = after(&reach(
        &p,
        &r,
        (0, "tok-1"),
        first_deadline + Duration::seconds(2),
        T0 + Duration::seconds(10),
    ));
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::seconds(15));
    assert_eq!(
        success_resumes(&d),
        0,
        "the timer until {time} woke at {} with a success, {} early: {:?}",
        T0 + Duration::seconds(15),
        time - (T0 + Duration::seconds(15)),
        d.effects
    );
}

/// The start crossed a deploy that changed the timer's pointer: intake read the old version's
/// pointer, the execution (and, after its first report, the record) runs the new one. The timer
/// must wait until the time the record's own version names, not wake at the old pointer's.
#[test]
fn a_start_that_crossed_a_deploy_changing_the_pointer_never_wakes_at_the_old_pointers_time() {
    let v1 = until_plan("/data/opens_at");
    let mut v2 = until_plan(POINTER);
    v2.version = "v2".into();
    let opens_at = T0 + Duration::hours(1);
    let starts_at = T0 + Duration::days(2);
    let event = json!({"data": {"opens_at": rfc(opens_at), "starts_at": rfc(starts_at)}});
    // Intake and the start, under v1.
    let r = after(&run(&v1, None, &start_input(&v1, "evt-1", &event)));
    // The execution runs v2: its first report is decided under v2, and the record follows it.
    let r = after(&reach(&v2, &r, (0, "tok-0"), T0 + Duration::days(7), T0 + Duration::seconds(5)));
    assert_eq!(r.config_version, "v2");
    let d = at(&v2, Some(&r), &Input::Tick, opens_at);
    assert_eq!(
        success_resumes(&d),
        0,
        "v2 waits until {POINTER} ({starts_at}); the timer woke at v1's /data/opens_at ({opens_at}): {:?} (sleeping {:?})",
        d.effects,
        wait_of(&r, 0).status
    );
}

/// The start crossed a deploy that made step 0 a timer until a time: its start event holds a
/// good time there, yet the run was never read for it.
#[test]
fn a_start_that_crossed_a_deploy_adding_an_until_timer_fails_the_run_saying_its_time_cannot_be_known() {
    let mut v1 = plan(&[&[], &["payment_ref"]]);
    v1.steps[0].timer = Some(Timer::After(std::time::Duration::from_secs(3600)));
    v1.steps[0].timeout = std::time::Duration::from_secs(3600 + 15 * 60);
    let mut v2 = until_plan(POINTER);
    v2.version = "v2".into();
    let starts_at = T0 + Duration::days(2);
    let event = json!({"data": {"starts_at": rfc(starts_at)}});
    let r = after(&run(&v1, None, &start_input(&v1, "evt-1", &event)));
    let r = after(&reach(&v2, &r, (0, "tok-0"), T0 + Duration::days(7), T0 + Duration::seconds(5)));
    assert_eq!(r.config_version, "v2");
    // The start was read by v1, which had no such timer, and the record keeps no event: the
    // time cannot be known, and the run fails at once, saying so, rather than guess or sleep on.
    let d = at(&v2, Some(&r), &Input::Tick, T0 + Duration::seconds(6));
    let [Effect::Resume { resume: Resume::Failure { error, cause }, .. }] = d.effects.as_slice() else {
        panic!("the event held {POINTER} = {starts_at}, unread: one failure owed: {:?}", d.effects)
    };
    assert_eq!(error, TIMER_ERROR);
    assert!(
        cause.contains("before a deploy made this step wait until the time at /data/starts_at"),
        "{cause}"
    );
}

/// The record's waits are stored as JSON (times in microseconds); the time read from the start
/// event keeps nanoseconds. Reloaded, the record must be the one written, and its timer must not
/// wake before the event's time.
#[test]
fn a_sleeping_until_time_round_trips_through_the_stored_waits_and_never_wakes_early_after_a_reload() {
    let p = until_plan(POINTER);
    let event = json!({"data": {"starts_at": "2026-12-01T09:30:00.0000005Z"}});
    let time = datetime!(2026-12-01 09:30:00.000_000_5 UTC);
    let r = after(&run(&p, None, &start_input(&p, "evt-1", &event)));
    let r = after(&reach(&p, &r, (0, "tok-0"), T0 + Duration::days(7), T0 + Duration::seconds(5)));
    // Kept to the microsecond the store keeps, rounded up: never earlier than the event's time.
    let kept = datetime!(2026-12-01 09:30:00.000_001 UTC);
    assert!(kept >= time);
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: kept });
    let stored = serde_json::to_string(&r.waits).unwrap();
    let reloaded = Record { waits: serde_json::from_str(&stored).unwrap(), ..r.clone() };
    let before = datetime!(2026-12-01 09:30 UTC);
    let d = at(&p, Some(&reloaded), &Input::Tick, before);
    assert_eq!(success_resumes(&d), 0, "reloaded, the timer until {time} woke at {before}: {:?}", d.effects);
    assert_eq!(reloaded.waits, r.waits, "the waits changed in the store: {stored}");
}

/// Restarts and redelivered start events: each generation sleeps until its own event's time; a
/// copy of a start event re-read (another config, another reading) changes nothing.
#[test]
fn each_generation_sleeps_until_its_own_start_events_time_and_a_redelivered_start_changes_nothing() {
    let p = until_plan(POINTER);
    let first = T0 + Duration::hours(1);
    let second = T0 + Duration::days(3);
    let ev = |t: OffsetDateTime| json!({"data": {"starts_at": rfc(t)}});
    let r = after(&run(&p, None, &start_input(&p, "evt-1", &ev(first))));
    // A copy of evt-1 holding another time (a producer's retry, re-read): a duplicate.
    let dup = run(&p, Some(&r), &start_input(&p, "evt-1", &ev(second)));
    assert_eq!(dup.outcome, Outcome::Duplicate);
    assert!(dup.write.is_none());
    let r = after(&reach(&p, &r, (0, "tok-0"), T0 + Duration::days(7), T0 + Duration::seconds(5)));
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: first });
    // evt-2 while it runs: ignored, nothing read into the record.
    let running = at(&p, Some(&r), &start_input(&p, "evt-2", &ev(second)), T0 + Duration::seconds(10));
    assert_eq!(running.outcome, Outcome::Ignored(IgnoreReason::AlreadyRunning));
    let r = after(&at(&p, Some(&r), &Input::Cancel { reason: "t".into() }, T0 + Duration::seconds(20)));
    let r = after(&at(&p, Some(&r), &start_input(&p, "evt-3", &ev(second)), T0 + Duration::seconds(30)));
    assert_eq!((r.generation, r.until_of(0, POINTER)), (2, Ok(second)));
    // The first generation's report, late: stale; evt-1 again: a duplicate.
    let stale =
        Input::StepReady { generation: 1, step: 0, token: token("tok-0b"), deadline: T0 + Duration::days(8) };
    assert_eq!(
        at(&p, Some(&r), &stale, T0 + Duration::seconds(35)).outcome,
        Outcome::Ignored(IgnoreReason::StaleGeneration)
    );
    assert_eq!(at(&p, Some(&r), &start_input(&p, "evt-1", &ev(first)), T0).outcome, Outcome::Duplicate);
    let r = after(&reach(
        &p,
        &r,
        (0, "tok-g2"),
        T0 + Duration::days(7) + Duration::minutes(1),
        T0 + Duration::minutes(1),
    ));
    assert_eq!(wait_of(&r, 0).status, WaitStatus::Sleeping { until: second });
    let early = at(&p, Some(&r), &Input::Tick, first + Duration::minutes(1));
    assert!(
        early.write.is_none() && early.effects.is_empty(),
        "woke at the first generation's time: {early:?}"
    );
    let woke = at(&p, Some(&r), &Input::Tick, second);
    assert_eq!(woke.effects, vec![resume_ok(wid(2, 0), "tok-g2", json!({}), Mark::IfGone)]);
    let again = at(&p, Some(&after(&woke)), &Input::Tick, second + Duration::seconds(1));
    assert_eq!(success_resumes(&again), 0, "woke twice: {again:?}");
}

/// A cancel before the first sweep of a timer whose time cannot be read: cancelled, its token
/// failed once; no sweep fails or wakes it afterwards.
#[test]
fn a_cancel_before_the_sweep_of_an_unreadable_timer_ends_it_and_no_sweep_touches_it_after() {
    let p = until_plan(POINTER);
    let r = after(&run(&p, None, &start_input(&p, "evt-1", &json!({"data": {}}))));
    let r = after(&reach(&p, &r, (0, "tok-0"), T0 + Duration::days(7), T0 + Duration::seconds(5)));
    let d = at(&p, Some(&r), &Input::Cancel { reason: "withdrawn".into() }, T0 + Duration::seconds(6));
    let cancelled = after(&d);
    assert_eq!(cancelled.state, State::Cancelled);
    assert!(fails(&d.effects, "tok-0"));
    let tick = at(&p, Some(&cancelled), &Input::Tick, T0 + Duration::seconds(7));
    assert!(tick.write.is_none() && tick.effects.is_empty(), "{tick:?}");
}

/// A timer that cannot wait fails after an earlier step with a compensation completed: decide
/// does not panic on the way into compensation, and the failure names the pointer.
#[test]
fn an_unreadable_timer_after_a_compensable_step_fails_into_compensation_without_a_panic() {
    let mut p = with_compensation(plan(&[&["a"], &[]]), &[(0, 1)]);
    p.steps[1].timer = Some(Timer::Until(POINTER.into()));
    p.steps[1].timeout = std::time::Duration::from_secs(86_400);
    let r = after(&run(&p, None, &start_input(&p, "evt-1", &json!({"data": {"starts_at": true}}))));
    let r = after(&reach(&p, &r, (0, "tok-0"), T0 + Duration::days(1), T0 + Duration::seconds(1)));
    let r = after(&at(
        &p,
        Some(&r),
        &callback("cb-0", 0, StepOutcome::Succeeded, json!({"a": 1})),
        T0 + Duration::seconds(2),
    ));
    let r = after(&at(&p, Some(&r), &resumed(&r, wid(1, 0), true), T0 + Duration::seconds(3)));
    let r = after(&reach(
        &p,
        &r,
        (1, "tok-1"),
        T0 + Duration::days(1) + Duration::seconds(4),
        T0 + Duration::seconds(5),
    ));
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::seconds(6));
    let [Effect::Resume { resume: Resume::Failure { error, cause }, .. }] = d.effects.as_slice() else {
        panic!("one failure owed: {:?}", d.effects)
    };
    assert_eq!(error, TIMER_ERROR);
    assert!(cause.contains(POINTER), "{cause}");
    let r = after(&d);
    let r = after(&at(&p, Some(&r), &resumed(&r, wid(1, 1), true), T0 + Duration::seconds(7)));
    // Step Functions' chain compensates step 0 for the timer's failure.
    let undo = Input::UndoReady {
        generation: 1,
        step: 0,
        token: token("u0"),
        deadline: T0 + Duration::days(3),
        error: TIMER_ERROR.into(),
        cause: cause.clone(),
    };
    let d = at(&p, Some(&r), &undo, T0 + Duration::seconds(8));
    assert_eq!(after(&d).state, State::Compensating, "{d:?}");
}
