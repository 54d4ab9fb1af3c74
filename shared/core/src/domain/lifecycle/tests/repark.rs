//! A wait reported again with a new token and a later deadline: Step Functions retried the
//! report's send after it failed, re-entering the wait. The record takes the newest token, and
//! whatever it owed the wait goes to it; an older report arriving late is not taken.

use super::compensation::{reached, saga, shipping_failed};
use super::*;

fn ready_at(generation: u32, step: u32, tok: &str, deadline: OffsetDateTime) -> Input {
    Input::StepReady { generation, step, token: token(tok), deadline }
}

#[test]
fn a_step_reported_again_with_a_later_deadline_waits_on_the_new_token() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let later = T0 + Duration::days(2) + Duration::seconds(3);
    let d = run(&p, Some(&r), &ready_at(1, 0, "t0-b", later));
    let again = after(&d);
    assert_eq!(
        (again.state, again.token().clone(), again.deadline()),
        (State::Waiting { step: 0 }, Some(token("t0-b")), Some(later))
    );
    assert_eq!(
        d.effects,
        [create(wid(1, 0), 1), Effect::DrainInbox { generation: 1, step: 0 }],
        "the task is asked for again (idempotently) and the inbox drained"
    );
    // The older report arriving late is not taken: the new token stays.
    let stale = run(&p, Some(&again), &ready_at(1, 0, "t0", T0 + Duration::days(2)));
    assert!(stale.write.is_none(), "{stale:?}");
    // The completion resumes the new token.
    let done = run(&p, Some(&again), &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"})));
    assert!(
        matches!(done.effects.first(), Some(Effect::Resume { token: t, resume: Resume::Success { .. }, .. }) if *t == token("t0-b"))
    );
}

#[test]
fn a_step_reported_again_while_its_resume_is_owed_gets_the_resume_on_the_new_token() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let advancing =
        after(&run(&p, Some(&r), &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"}))));
    let later = T0 + Duration::days(2) + Duration::seconds(3);
    let d = run(&p, Some(&advancing), &ready_at(1, 0, "t0-b", later));
    assert_eq!(after(&d).token(), Some(token("t0-b")));
    assert_eq!(
        d.effects,
        [Effect::Resume {
            wait: wid(1, 0),
            token: token("t0-b"),
            resume: Resume::Success { output: json!({"decision": "ok"}) },
            mark: Mark::IfGone
        },]
    );
    // The old token's resume found it gone first: the success is owed again to the new one.
    let gone = after(&run(&p, Some(&advancing), &resumed(&advancing, wid(1, 0), false)));
    // (Its wait keeps the success, unconfirmed: for the repark below, and for compensation.)
    assert_eq!((gone.owed(), wait_of(&gone, 0).unconfirmed(), gone.owes_work()), (None, true, false));
    let d = run(&p, Some(&gone), &ready_at(1, 0, "t0-b", later));
    assert!(
        matches!(d.effects.first(), Some(Effect::Resume { token: t, resume: Resume::Success { output }, .. }) if *t == token("t0-b") && *output == json!({"decision": "ok"})),
        "{:?}",
        d.effects
    );
}

#[test]
fn a_branch_and_a_compensation_reported_again_wait_on_their_new_tokens() {
    let p = with_group(plan(&[&["a"], &["b"]]), (0, 1), &[]);
    let r = ready(&p, &ready(&p, &started(&p), 0, "b0"), 1, "b1");
    let later = T0 + Duration::days(2) + Duration::seconds(3);
    let d = run(&p, Some(&r), &ready_at(1, 1, "b1-b", later));
    let again = after(&d);
    let b1 = again.waits.iter().find(|b| b.step == 1).unwrap();
    assert_eq!((b1.token.clone(), b1.deadline), (Some(token("b1-b")), Some(later)));
    assert!(d.effects.contains(&create(wid(1, 1), 1)));

    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let undo_deadline = r.compensation.as_ref().unwrap().undo(1).unwrap().wait.deadline.unwrap();
    let input = Input::UndoReady {
        generation: 1,
        step: 1,
        token: token("u1-b"),
        deadline: undo_deadline + Duration::seconds(2),
        error: "NoCarrier".into(),
        cause: "why".into(),
    };
    let d = run(&p, Some(&r), &input);
    let u = after(&d).compensation.unwrap().undos.into_iter().find(|u| u.step() == 1).unwrap();
    assert_eq!(u.wait.token, Some(token("u1-b")));
}
