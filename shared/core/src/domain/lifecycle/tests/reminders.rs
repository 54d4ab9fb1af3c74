//! Reminders of a step's task and its escalation levels: due from when Step Functions entered
//! the step, claimed by a write before each goes out, each once, levels in order, never more
//! reminders than `times`, nothing once the wait is decided.

use super::retry::at;
use super::*;

/// review (0): reminded 1h after it began, then every 2h, three times; its timeout 1d.
fn reminded() -> Plan {
    let mut p = plan(&[&["decision"], &["payment_ref"]]);
    p.steps[0].timeout = std::time::Duration::from_secs(24 * 3600);
    p.steps[0].remind = Some(Remind {
        after: std::time::Duration::from_secs(3600),
        every: std::time::Duration::from_secs(2 * 3600),
        times: 3,
    });
    p
}

/// Step Functions entered review at `T0` (its deadline a day after), reported 10 seconds later.
fn waiting(p: &Plan) -> Record {
    let input =
        Input::StepReady { generation: 1, step: 0, token: token("tok-0"), deadline: T0 + Duration::days(1) };
    after(&at(p, Some(&started(p)), &input, T0 + Duration::seconds(10)))
}

fn reminder(count: u32) -> Effect {
    Effect::Remind { wait: wid(1, 0), attempt: 1, count }
}

#[test]
fn the_first_reminder_is_due_after_its_delay_from_when_the_step_began_and_listed_on_time() {
    let p = reminded();
    let r = waiting(&p);
    assert_eq!(wait_of(&r, 0).notice_at, Some(T0 + Duration::hours(1)));
    assert!(r.owes_work());
    assert_eq!(r.due_at(), T0 + Duration::hours(1) - RESEND_RESUME_AFTER);
    let early = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1) - Duration::milliseconds(1));
    assert!(early.write.is_none() && early.effects.is_empty(), "{early:?}");
}

#[test]
fn each_reminder_is_claimed_then_published_with_its_count_and_no_more_than_times() {
    let p = reminded();
    let mut r = waiting(&p);
    for (count, due) in [(1, 1), (2, 3), (3, 5)] {
        let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(due));
        assert_eq!(d.effects, vec![reminder(count)], "reminder {count}");
        r = after(&d);
        assert_eq!(r.history.last().map(|h| h.cause), Some(Cause::Notified));
        assert_eq!(wait_of(&r, 0).notified, count);
        // The same sweep again, or a second sweeper: nothing more until the next one's time.
        let again = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(due) + Duration::minutes(1));
        assert!(again.write.is_none() && again.effects.is_empty(), "{again:?}");
    }
    assert_eq!(wait_of(&r, 0).notice_at, None, "three reminders, then none");
    assert!(!r.owes_work());
    let later = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(20));
    assert!(later.write.is_none() && later.effects.is_empty(), "{later:?}");
}

#[test]
fn a_sweep_late_past_two_reminders_sends_the_last_of_them_only() {
    let p = reminded();
    let r = waiting(&p);
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(4));
    assert_eq!(d.effects, vec![reminder(2)]);
    assert_eq!(wait_of(&after(&d), 0).notice_at, Some(T0 + Duration::hours(5)));
}

#[test]
fn no_reminder_goes_out_once_the_step_is_answered_or_cancelled() {
    let p = reminded();
    let r = waiting(&p);
    let answered = after(&at(
        &p,
        Some(&r),
        &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": 1})),
        T0 + Duration::minutes(30),
    ));
    assert_eq!(wait_of(&answered, 0).notice_at, None);
    let d = at(&p, Some(&answered), &Input::Tick, T0 + Duration::hours(1));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::Remind { .. })), "{:?}", d.effects);
    let cancelled =
        after(&at(&p, Some(&r), &Input::Cancel { reason: "withdrawn".into() }, T0 + Duration::minutes(30)));
    let d = at(&p, Some(&cancelled), &Input::Tick, T0 + Duration::hours(1));
    assert!(d.write.is_none() && d.effects.is_empty(), "{d:?}");
}

#[test]
fn a_reminder_names_the_running_attempt_of_a_retried_step() {
    let mut p = reminded();
    p.steps[0].retry = Some(Retry { attempts: 2, backoff: std::time::Duration::from_secs(60) });
    let r = waiting(&p);
    let failed = StepOutcome::Failed { error: "Busy".into(), cause: "later".into(), retryable: true };
    let failed_at = T0 + Duration::minutes(59) + Duration::seconds(30);
    let r = after(&at(&p, Some(&r), &callback("cb-f", 0, failed, json!({})), failed_at));
    // Between attempts, the first reminder's time passes and none goes out: the next attempt's
    // task is not out.
    let between = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1) + Duration::seconds(10));
    assert!(between.effects.is_empty() && between.write.is_none(), "{between:?}");
    let opened = after(&at(
        &p,
        Some(&r),
        &Input::AttemptOpened { wait: wid(1, 0), attempt: 2 },
        T0 + Duration::minutes(61),
    ));
    let d = at(&p, Some(&opened), &Input::Tick, T0 + Duration::minutes(61));
    assert_eq!(d.effects, vec![Effect::Remind { wait: wid(1, 0), attempt: 2, count: 1 }]);
}

/// review (0) as [`reminded`] (reminders at 1h, 3h and 5h), escalated at 2h and 4h.
fn escalated() -> Plan {
    let mut p = reminded();
    p.steps[0].escalate =
        vec![std::time::Duration::from_secs(2 * 3600), std::time::Duration::from_secs(4 * 3600)];
    p
}

fn level(level: u32) -> Effect {
    Effect::Escalate { wait: wid(1, 0), attempt: 1, level }
}

#[test]
fn escalation_levels_go_out_each_once_in_order_between_the_reminders() {
    let p = escalated();
    let mut r = waiting(&p);
    for (hours, effect) in
        [(1, reminder(1)), (2, level(1)), (3, reminder(2)), (4, level(2)), (5, reminder(3))]
    {
        let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(hours));
        assert_eq!(d.effects, vec![effect], "at {hours}h");
        r = after(&d);
        let again = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(hours) + Duration::minutes(1));
        assert!(again.write.is_none() && again.effects.is_empty(), "nothing again at {hours}h: {again:?}");
    }
    assert_eq!((wait_of(&r, 0).notified, wait_of(&r, 0).notice_at), (5, None));
}

#[test]
fn a_sweep_late_past_every_notice_sends_each_level_in_order_and_the_last_reminder() {
    let p = escalated();
    let d = at(&p, Some(&waiting(&p)), &Input::Tick, T0 + Duration::hours(4) + Duration::minutes(30));
    assert_eq!(d.effects, vec![level(1), reminder(2), level(2)]);
    assert_eq!(wait_of(&after(&d), 0).notice_at, Some(T0 + Duration::hours(5)));
}

#[test]
fn an_answer_from_whoever_holds_the_task_ends_it_and_no_later_level_goes_out() {
    let p = escalated();
    let r = waiting(&p);
    let r = after(&at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(2)));
    let answered = after(&at(
        &p,
        Some(&r),
        &callback("lead-1", 0, StepOutcome::Succeeded, json!({"decision": "approve"})),
        T0 + Duration::hours(2) + Duration::minutes(5),
    ));
    assert_eq!(answered.state, State::Advancing { step: 0 });
    let d = at(&p, Some(&answered), &Input::Tick, T0 + Duration::hours(4));
    assert!(
        !d.effects.iter().any(|e| matches!(e, Effect::Escalate { .. } | Effect::Remind { .. })),
        "{:?}",
        d.effects
    );
}
