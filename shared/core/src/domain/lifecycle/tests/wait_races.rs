//! An adversarial review of the wait as the unit (lifecycle/wait.rs, table.rs): orderings where
//! features meet (repark x group x compensation x retry x marks x cancel x restart), each test
//! named by the behaviour an invariant of the review brief promises (1 allowed transitions, 2 one
//! execution per start, 3 one task per attempt, 4 each wait decided once and each owed resume
//! delivered once in effect, 5 terminal records never change, 6 nothing is lost, 7 every wait has
//! a deadline, 8 an input applies only to its generation, step and attempt). Tests whose names
//! start with `held_` kept their invariant; each other failed before its fix
//! (docs/SIMULATION_BUGS.md, rows 100 to 104).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::compensation::{ack, reached, saga, shipping_failed};
use super::retry::{at, failure, retried, waiting, with_attempt};
use super::*;

fn ready_at(generation: u32, step: u32, tok: &str, deadline: OffsetDateTime) -> Input {
    Input::StepReady { generation, step, token: token(tok), deadline }
}

/// The record after `d`: its write's, else `r` unchanged.
fn then(r: &Record, d: &Decision) -> Record {
    d.write.as_ref().map_or_else(|| r.clone(), |w| w.to.clone())
}

/// The resumes (and answers) `d` sends `tok`.
fn resumes_to(d: &Decision, tok: &str) -> Vec<Resume> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Resume { token: t, resume, .. } | Effect::Answer { token: t, resume }
                if *t == token(tok) =>
            {
                Some(resume.clone())
            }
            _ => None,
        })
        .collect()
}

/// review (0), then the group of fraud (1) and credit (2), both required, then payment (3).
fn grouped() -> Plan {
    with_group(plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["payment_ref"]]), (1, 2), &[])
}

fn ok(id: &str, step: u32) -> Input {
    let key = ["decision", "fraud_score", "credit_ok", "payment_ref"][step as usize];
    callback(id, step, StepOutcome::Succeeded, json!({ key: true }))
}

/// Review done, both branches reached (b1, b2).
fn at_group(p: &Plan) -> Record {
    let r = ready(p, &started(p), 0, "t0");
    let r = after(&run(p, Some(&r), &ok("cb-0", 0)));
    ready(p, &ready(p, &r, 1, "b1"), 2, "b2")
}

const LATER: time::Duration = Duration::seconds(3);

// ---------------------------------------------------------------------------------------------
// Repark (a wait reported again with a newer token) meets groups and compensation.

/// Invariant 4 (each owed resume is delivered exactly once in effect). Ordering: the group waits;
/// fraud (1) succeeds, its success owed to b1 while credit (2) waits; Step Functions' send of
/// fraud's report had been retried, so fraud's wait is re-entered and reported again with b1-b
/// (later deadline). The old token b1 is gone: only b1-b can take fraud's success. A step
/// reported so gets its owed resume on the new token (`repark`); a branch does not.
#[test]
fn a_branch_reported_again_while_its_success_is_owed_gets_the_success_on_the_new_token() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &ok("cb-1", 1)));
    assert!(wait_of(&r, 1).owed().is_some());
    let d = run(&p, Some(&r), &ready_at(1, 1, "b1-b", T0 + Duration::days(2) + LATER));
    assert_eq!(
        resumes_to(&d, "b1-b"),
        [Resume::Success { output: json!({"fraud_score": true}) }],
        "the success fraud is owed goes to the token Step Functions now waits on: {d:?}"
    );
}

/// Invariant 4. Ordering: both branches succeed (the group is decided, `advancing`, both
/// successes owed), then credit's wait is reported again with a newer token b2-b. Nothing ever
/// resumes b2-b: the group, and the run, hang until credit's deadline.
#[test]
fn a_branch_reported_again_after_its_group_was_decided_gets_its_owed_success() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &ok("cb-1", 1)));
    let r = after(&run(&p, Some(&r), &ok("cb-2", 2)));
    assert_eq!(r.state, State::Advancing { step: 1 });
    let d = run(&p, Some(&r), &ready_at(1, 2, "b2-b", T0 + Duration::days(2) + LATER));
    assert_eq!(
        resumes_to(&d, "b2-b"),
        [Resume::Success { output: json!({"credit_ok": true}) }],
        "credit's owed success goes to its new token: {d:?}"
    );
}

/// Invariant 4 and 6. Ordering: fraud succeeds while credit waits; the engine's send to b1 finds
/// it gone (mark `resumed`, not delivered); then fraud's wait is reported again with b1-b. A
/// step's success is owed again to the new token in that order (`repark`, R -> W); a branch's
/// is dropped.
#[test]
fn a_branchs_success_that_found_its_token_gone_is_owed_again_to_the_newer_token() {
    let p = grouped();
    let r = at_group(&p);
    let r = after(&run(&p, Some(&r), &ok("cb-1", 1)));
    let r = after(&run(&p, Some(&r), &resumed(&r, wid(1, 1), false)));
    assert!(wait_of(&r, 1).unconfirmed());
    let d = run(&p, Some(&r), &ready_at(1, 1, "b1-b", T0 + Duration::days(2) + LATER));
    let r2 = then(&r, &d);
    assert!(
        !resumes_to(&d, "b1-b").is_empty() || wait_of(&r2, 1).owed().is_some(),
        "fraud's success is neither sent nor owed to b1-b: {d:?}"
    );
}

/// Invariant 4 (and the compensation's outcome). Ordering: payment's compensation is reached
/// (u1), acknowledged (its success owed to u1), then its wait is reported again with u1-b (its
/// undo_ready's send retried). u1-b never gets the acknowledgement: the chain waits until the
/// compensation's deadline, and the run ends `compensation_failed` though payment was undone.
#[test]
fn a_compensation_reported_again_after_its_acknowledgement_gets_the_acknowledgement() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    let r = after(&run(&p, Some(&r), &ack("ack-1", 1, StepOutcome::Succeeded, None)));
    let undo = r.compensation.as_ref().unwrap().undo(1).unwrap();
    assert!(undo.wait.owed().is_some());
    let deadline = undo.wait.deadline.unwrap() + LATER;
    let input = Input::UndoReady {
        generation: 1,
        step: 1,
        token: token("u1-b"),
        deadline,
        error: "NoCarrier".into(),
        cause: "why".into(),
    };
    let d = run(&p, Some(&r), &input);
    assert!(
        !resumes_to(&d, "u1-b").is_empty(),
        "the acknowledgement owed to payment's compensation goes to its new token: {d:?}"
    );
}

/// Invariant 4 and 6. Ordering: review succeeds (advancing, success owed to t0); the engine sends
/// it to t0 while Step Functions re-enters the wait (its report's send retried) and reports
/// t0-b; the repark is written first (success owed to t0-b, sent with mark `if_gone`); then
/// the mark of the send to t0 lands: gone. The mark names only the wait, not the token, so it
/// takes t0-b's owed success for delivered-or-gone: if the repark's own send to t0-b failed,
/// nothing sends it again.
#[test]
fn a_gone_mark_of_the_old_tokens_send_after_a_repark_leaves_the_new_tokens_resume_owed() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let r = after(&run(&p, Some(&r), &ok("cb-0", 0)));
    let r = after(&run(&p, Some(&r), &ready_at(1, 0, "t0-b", T0 + Duration::days(2) + LATER)));
    assert_eq!(r.token(), Some(token("t0-b")));
    let r = then(
        &r,
        &run(&p, Some(&r), &Input::Resumed { wait: wid(1, 0), token: token("t0"), delivered: false }),
    );
    let sweep = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1));
    assert!(
        !resumes_to(&sweep, "t0-b").is_empty(),
        "t0-b's success, never known to be taken, is no longer owed: {:?}",
        r.waits
    );
}

/// Invariant 7 (and 3). Ordering: review's step_ready is read after its deadline (its queue was
/// slow): Step Functions has already timed the wait out. A compensation's wait reported so is
/// ended timed out and gets no task (`compensation::reach`); a step's is opened and its task
/// published for a wait that can never be resumed.
#[test]
fn a_step_ready_read_after_its_deadline_publishes_no_task() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let r = started(&p);
    let d = at(&p, Some(&r), &ready_at(1, 0, "t0", T0 - Duration::minutes(1)), T0);
    let tasks: Vec<_> = d.effects.iter().filter(|e| matches!(e, Effect::CreateTask { .. })).collect();
    assert!(tasks.is_empty(), "a task published for a wait Step Functions timed out: {:?}", d.effects);
}

/// Invariant 4 (never two different resumes for one token). Ordering: review fails (its failure
/// owed to t0, the record advancing); an operator cancels before the next report. The cancel
/// answers t0 again, with another failure (`baton.Cancelled`), though the record owed it
/// `Rejected` (a `cancel --compensate` fails only the waits still waiting).
#[test]
fn a_cancel_of_an_advancing_step_sends_its_token_no_second_different_resume() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable: true };
    let failed = run(&p, Some(&r), &callback("cb-0", 0, outcome, json!({})));
    let r = after(&failed);
    assert_eq!(r.state, State::Advancing { step: 0 });
    let cancel = run(&p, Some(&r), &Input::Cancel { reason: "operator".into() });
    let mut all = resumes_to(&failed, "t0");
    all.extend(resumes_to(&cancel, "t0"));
    all.dedup();
    assert_eq!(all.len(), 1, "t0 is sent two different resumes: {all:?}");
}

// ---------------------------------------------------------------------------------------------
// Held.

/// Invariant 2: a start event redelivered in every state of its run starts only its own
/// generation, and after a restart only the new one.
#[test]
fn held_a_start_event_redelivered_anywhere_starts_one_execution_per_generation() {
    let p = plan(&[&["decision"]]);
    let start = Input::start(eid("evt-1"));
    let r = started(&p);
    let executions = |d: &Decision| -> Vec<u32> {
        d.effects
            .iter()
            .filter_map(|e| match e {
                Effect::StartExecution { generation } => Some(*generation),
                _ => None,
            })
            .collect()
    };
    assert_eq!(executions(&run(&p, Some(&r), &start)), [1]);
    let waiting = ready(&p, &r, 0, "t0");
    assert!(executions(&run(&p, Some(&waiting), &start)).is_empty());
    let done = after(&run(&p, Some(&waiting), &ok("cb-0", 0)));
    let done = after(&run(&p, Some(&done), &Input::Finished { generation: 1, finish: Finish::Succeeded }));
    assert_eq!(run(&p, Some(&done), &start).outcome, Outcome::Duplicate);
    let g2 = after(&run(&p, Some(&done), &Input::start(eid("evt-2"))));
    assert_eq!(g2.generation, 2);
    assert_eq!(executions(&run(&p, Some(&g2), &start)), [2], "only the pending generation's, idempotently");
}

/// Invariant 5: a terminal record (each ending) ignores every late input with a ledger reason
/// and no write, and its waits have all ended.
#[test]
fn held_a_terminal_record_never_changes_and_ledgers_late_inputs() {
    let p = grouped();
    let r = at_group(&p);
    let cancelled = after(&run(&p, Some(&r), &Input::Cancel { reason: "op".into() }));
    assert!(cancelled.waits.iter().all(|w| matches!(w.status, WaitStatus::Ended { .. })));
    for input in [
        ok("cb-1", 1),
        ready_at(1, 1, "b1-b", T0 + Duration::days(3)),
        Input::BranchEnded { generation: 1, step: 2, error: None },
        Input::Finished { generation: 1, finish: Finish::Succeeded },
        Input::Finished { generation: 1, finish: Finish::TimedOut },
        resumed(&cancelled, wid(1, 1), false),
        Input::AttemptOpened { wait: wid(1, 1), attempt: 1 },
        Input::Tick,
    ] {
        let d = run(&p, Some(&cancelled), &input);
        assert!(d.write.is_none(), "{input:?} wrote {:?}", d.transition());
    }
}

/// Invariant 8: a repark during a retried step's backoff keeps the attempt count and due time,
/// opens nothing early, and the next attempt's heartbeat goes to the new token.
#[test]
fn held_a_repark_in_the_backoff_neither_opens_early_nor_loses_the_attempt() {
    let mut p = retried();
    p.steps[0].heartbeat = Some(std::time::Duration::from_secs(3600));
    let r = waiting(&p);
    let r = after(&at(&p, Some(&r), &failure("f-1", true, None), T0));
    let due = r.next_attempt_at().unwrap();
    let d =
        at(&p, Some(&r), &ready_at(1, 0, "t0-b", T0 + Duration::days(2) + LATER), T0 + Duration::minutes(1));
    assert!(
        d.effects.iter().all(|e| !matches!(e, Effect::OpenAttempt { .. } | Effect::CreateTask { .. })),
        "{:?}",
        d.effects
    );
    let r = after(&d);
    assert_eq!((r.attempt(), r.next_attempt_at()), (2, Some(due)));
    assert!(at(&p, Some(&r), &Input::Tick, due - Duration::seconds(1)).effects.is_empty());
    assert_eq!(at(&p, Some(&r), &Input::Tick, due).effects, [open(wid(1, 0), 2, Some("t0-b"))]);
}

/// Invariant 8: a failure naming attempt 1, redelivered after attempt 2 opened, changes nothing.
#[test]
fn held_a_redelivered_first_attempt_failure_never_fails_the_second() {
    let p = retried();
    let r = waiting(&p);
    let r = after(&at(&p, Some(&r), &failure("f-1", true, Some(1)), T0));
    let due = r.next_attempt_at().unwrap();
    let r = after(&at(&p, Some(&r), &Input::AttemptOpened { wait: wid(1, 0), attempt: 2 }, due));
    let again = at(&p, Some(&r), &failure("f-1", true, Some(1)), due);
    assert!(again.write.is_none(), "{again:?}");
    let other = at(&p, Some(&r), &with_attempt(failure("f-9", true, Some(1)), Some(1)), due);
    assert_eq!(other.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
}

// ---------------------------------------------------------------------------------------------
// Random walks: every input the queues may deliver, in any order, any number of times, with the
// engine's marks fed back; invariants checked after each decision.

/// What a walk found wrong, with the path that led there.
#[expect(clippy::too_many_lines, reason = "one walk: each decision, then every check of it, in order")]
fn walk(p: &Plan, pool: &[Input], seed: u64, len: usize) -> Option<String> {
    let mut rng = Rng::seeded(seed);
    let (w, k) = names();
    let mut record: Option<Record> = Some(started(p));
    let mut dynamic: Vec<Input> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut now = T0;
    let mut resumes: HashMap<String, Vec<String>> = HashMap::new();
    let mut tasks: HashMap<(u32, u32, bool), Vec<u32>> = HashMap::new();
    let mut terminal_at: Option<(u32, State)> = None;
    for _ in 0..len {
        now += Duration::seconds(rng.below(900) as i64);
        let input = if !dynamic.is_empty() && rng.below(3) == 0 {
            let i = rng.below(dynamic.len());
            dynamic.swap_remove(i)
        } else {
            pool[rng.below(pool.len())].clone()
        };
        path.push(format!("{input:?} @+{}s", (now - T0).whole_seconds()));
        let decided = catch_unwind(AssertUnwindSafe(|| decide(p, (&w, &k), record.as_ref(), &input, now)));
        let d = match decided {
            Ok(d) => d,
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                return Some(format!("decide panicked: {msg}\npath:\n{}", path.join("\n")));
            }
        };
        for e in &d.effects {
            match e {
                Effect::Resume { wait, token, resume, mark } => {
                    let seen = resumes.entry(token.expose().to_owned()).or_default();
                    let text = format!("{resume:?}");
                    if !seen.contains(&text) {
                        seen.push(text);
                    }
                    let delivered = rng.below(2) == 0;
                    if *mark == Mark::Always || !delivered {
                        dynamic.push(Input::Resumed { wait: *wait, token: token.clone(), delivered });
                    }
                }
                Effect::CreateTask { wait, attempt } | Effect::OpenAttempt { wait, attempt, .. } => {
                    let list = tasks.entry((wait.generation, wait.step, wait.compensation)).or_default();
                    if !list.contains(attempt) {
                        list.push(*attempt);
                    }
                    if let Effect::OpenAttempt { .. } = e {
                        dynamic.push(Input::AttemptOpened { wait: *wait, attempt: *attempt });
                    }
                    let max = if wait.compensation {
                        p.compensation_of(wait.step).unwrap_or(1)
                    } else {
                        p.step(wait.step).and_then(|s| s.retry).map_or(1, |r| r.attempts)
                    };
                    if *attempt > max {
                        return Some(format!(
                            "task of attempt {attempt} > {max}\npath:\n{}",
                            path.join("\n")
                        ));
                    }
                }
                _ => {}
            }
        }
        let after_d = d.write.as_ref().map(|w| &w.to).or(record.as_ref());
        for e in &d.effects {
            match e {
                Effect::Resume { wait, token, .. } => {
                    let held = after_d.and_then(|r| {
                        if wait.compensation {
                            r.compensation
                                .as_ref()
                                .and_then(|c| c.undo(wait.step))
                                .and_then(|u| u.wait.token.clone())
                        } else {
                            r.wait(wait.step).and_then(|w| w.token.clone())
                        }
                    });
                    if held.as_ref() != Some(token) {
                        return Some(format!(
                            "resume of {wait} to {token:?}, the wait holds {held:?}\npath:\n{}",
                            path.join("\n")
                        ));
                    }
                }
                Effect::OpenAttempt { wait, attempt, .. } => {
                    let prior = after_d.and_then(|r| {
                        if wait.compensation {
                            r.compensation.as_ref().and_then(|c| c.undo(wait.step)).map(|u| u.wait.clone())
                        } else {
                            r.wait(wait.step).cloned()
                        }
                    });
                    let fine = prior.as_ref().is_some_and(|w| {
                        w.attempt() == *attempt
                            && w.task_due().is_some_and(|due| due <= now)
                            && w.deadline.is_none_or(|dl| now < dl)
                    });
                    if !fine {
                        return Some(format!(
                            "attempt {attempt} of {wait} opened from {prior:?} at +{}s\npath:\n{}",
                            (now - T0).whole_seconds(),
                            path.join("\n")
                        ));
                    }
                }
                _ => {}
            }
        }
        if let Some(write) = &d.write {
            let to = &write.to;
            if let Some((g, s)) = terminal_at
                && g == to.generation
                && s != to.state
            {
                return Some(format!("terminal {s} changed to {}\npath:\n{}", to.state, path.join("\n")));
            }
            if to.state.is_terminal() {
                terminal_at = Some((to.generation, to.state));
                let undos = to.compensation.iter().flat_map(|c| c.undos.iter().map(|u| &u.wait));
                if let Some(w) =
                    to.waits.iter().chain(undos).find(|w| !matches!(w.status, WaitStatus::Ended { .. }))
                {
                    return Some(format!(
                        "terminal with a wait not ended: {w:?}\npath:\n{}",
                        path.join("\n")
                    ));
                }
            }
            record = Some(to.clone());
        }
        if let Some((t, list)) = resumes.iter().find(|(_, l)| l.len() > 1) {
            return Some(format!("two resumes for {t}: {list:?}\npath:\n{}", path.join("\n")));
        }
    }
    None
}

fn walks(p: &Plan, pool: &[Input], n: u64, len: usize) -> Vec<String> {
    (1..=n).filter_map(|seed| walk(p, pool, seed, len)).take(3).collect()
}

fn step_ready_late(step: u32, tok: &str, extra: i64) -> Input {
    ready_at(1, step, tok, T0 + Duration::days(2) + Duration::seconds(extra))
}

fn bfail(id: &str, step: u32, retryable: bool, attempt: Option<u32>) -> Input {
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable };
    with_attempt(callback(id, step, outcome, json!({})), attempt)
}

/// Invariants 1, 3, 4, 5: a retried group with an optional branch and compensation, under every
/// input its queues may deliver, reparks included.
#[test]
fn held_random_walks_over_a_retried_group_with_compensation_keep_the_invariants() {
    let retry = Retry { attempts: 2, backoff: std::time::Duration::from_secs(60) };
    let p = with_compensation(
        with_retry(
            with_group(
                plan(&[&["decision"], &["fraud_score"], &["address_ok"], &["payment_ref"]]),
                (1, 2),
                &[2],
            ),
            &[1, 2],
            retry,
            (std::time::Duration::from_secs(2 * 86_400), Some(std::time::Duration::from_secs(3600))),
        ),
        &[(0, 2), (1, 2), (2, 1)],
    );
    let pool = vec![
        Input::start(eid("evt-1")),
        step_ready_late(0, "t0", 0),
        ok("cb-0", 0),
        step_ready_late(1, "b1", 0),
        step_ready_late(2, "b2", 0),
        step_ready_late(1, "b1-b", 5),
        step_ready_late(2, "b2-b", 5),
        callback("cb-1", 1, StepOutcome::Succeeded, json!({"fraud_score": 1})),
        callback("cb-2", 2, StepOutcome::Succeeded, json!({"address_ok": true})),
        bfail("f-1", 1, true, Some(1)),
        bfail("f-1b", 1, true, Some(2)),
        bfail("f-2", 2, true, None),
        Input::BranchEnded { generation: 1, step: 2, error: Some("States.Timeout".into()) },
        Input::BranchEnded { generation: 1, step: 2, error: None },
        step_ready_late(3, "t3", 0),
        Input::Finished { generation: 1, finish: Finish::Succeeded },
        Input::Tick,
        Input::Tick,
        Input::Cancel { reason: "op".into() },
        Input::CancelCompensate { reason: "op".into() },
        Input::UndoReady {
            generation: 1,
            step: 1,
            token: token("u1"),
            deadline: T0 + Duration::days(3),
            error: "Rejected".into(),
            cause: "why".into(),
        },
        Input::UndoReady {
            generation: 1,
            step: 0,
            token: token("u0"),
            deadline: T0 + Duration::days(3),
            error: "Rejected".into(),
            cause: "why".into(),
        },
        ack("a-1", 1, StepOutcome::Succeeded, None),
        ack("a-0", 0, StepOutcome::Succeeded, None),
        super::compensation::ended("Rejected"),
        Input::Finished { generation: 1, finish: Finish::TimedOut },
    ];
    let found = walks(&p, &pool, 60_000, 30);
    assert!(found.is_empty(), "{}", found.join("\n\n"));
}

/// Invariants 1, 3, 4, 5, 8: a retried step, reparked, restarted, cancelled and stranded.
#[test]
fn held_random_walks_over_a_retried_step_with_restarts_keep_the_invariants() {
    let mut p = retried();
    p.steps[0].heartbeat = Some(std::time::Duration::from_secs(3600));
    p.steps[0].compensate = Some(2);
    let pool = vec![
        Input::start(eid("evt-1")),
        Input::start(eid("evt-2")),
        step_ready_late(0, "t0", 0),
        step_ready_late(0, "t0-b", 7),
        callback("cb-0", 0, StepOutcome::Succeeded, json!({"decision": "ok"})),
        failure("f-1", true, Some(1)),
        failure("f-2", true, Some(2)),
        failure("f-3", true, None),
        failure("f-x", false, None),
        step_ready_late(1, "t1", 0),
        callback("cb-1", 1, StepOutcome::Succeeded, json!({"payment_ref": "p"})),
        Input::Finished { generation: 1, finish: Finish::Succeeded },
        Input::Finished { generation: 1, finish: Finish::TimedOut },
        Input::Tick,
        Input::Tick,
        Input::Cancel { reason: "op".into() },
        Input::ExecutionGone { generation: 1, status: "ABORTED".into(), error: None },
        Input::End { generation: 1, status: "ABORTED".into(), error: None, reason: "op".into() },
        ready_at(2, 0, "g2-t0", T0 + Duration::days(4)),
    ];
    let found = walks(&p, &pool, 60_000, 30);
    assert!(found.is_empty(), "{}", found.join("\n\n"));
}
