//! Attack tests of the answer to an attempt whose task baton has not yet marked out: 503
//! `task_not_out` with `Retry-After: 1`, nothing kept for its `webhook-id` (callback.rs
//! `not_out_yet`, `lifecycle/tick.rs` `task_not_out`), and its retry applied once the mark lands.
//! Driven through the real callback use case over the simulated world.

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{State, WaitOutcome};
use baton_core::ports::store::WorkflowStore;
use baton_core::use_cases::callback::Answer;
use baton_sim::world::{Fault, World, drive, lock};
use baton_sim::{CONFIG, EPOCH, SAGA_WORKFLOW, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const RETRIED: &str = r#"
workflows:
  retried:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: intake
        requires: [seen]
        timeout: 1h
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 2h
        retry: { attempts: 3, backoff: 30s }
"#;

fn retried_stack(seed: u64) -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(World::new(seed, start, false), None, RETRIED, Default::default())
}

fn verify(outcome: &str, attempt: u32) -> Value {
    let mut b = json!({"workflow": "retried", "key": "r", "step": "verify", "outcome": outcome,
        "generation": 1, "attempt": attempt});
    if outcome == "failed" {
        b["error"] = json!("Unreachable");
        b["cause"] = json!("the scanner timed out");
    } else {
        b["data"] = json!({"verdict": "ok"});
    }
    b
}

fn receipt_kept(s: &Stack, workflow: &str, key: &str, id: &str) -> bool {
    let w = s.config.workflow(workflow).unwrap();
    let trace = drive(s.memory.trace(&w.name, &CorrelationKey::parse(key).unwrap())).unwrap();
    trace.receipts.iter().any(|r| r.id.as_str() == id)
}

fn says(a: &Answer) -> (u16, Option<u32>, Option<&str>) {
    (a.status.as_u16(), a.retry_after, a.body["status"].as_str().or(a.body["error"].as_str()))
}

/// Record `retried/r` at verify, its attempt 1 failed, attempt 2 due and not marked out.
fn at_unmarked_attempt_2(s: &Stack, intake_id: &str) {
    send(s, &event("start-r", "order.placed", "r", json!({})));
    settle(s);
    let seen = json!({"workflow": "retried", "key": "r", "step": "intake", "outcome": "succeeded",
        "data": {"seen": true}});
    assert_eq!(says(&callback(s, intake_id, &seen)), (200, None, Some("applied")));
    settle(s);
    assert_eq!(says(&callback(s, "v-fail-1", &verify("failed", 1))), (200, None, Some("applied")));
}

/// Invariant 8 (a 503 `task_not_out` asks for a retry in a second, and keeps nothing for its
/// id, so the retry after the mark is applied): the callback function's read of the record
/// before the receipt fails once (DynamoDB unavailable for that call). Ordering: attempt 2's
/// task is due and published, its worker answers before the mark with that first read failing
/// (the engine's own read then finds the attempt unmarked), the mark lands, and the worker
/// retries a second later as told. The retry must be applied: a receipt written for the early
/// answer is held for the 30-second lease, and the retry is answered `in_progress` until it
/// passes (what the early check was added for).
#[test]
fn an_answer_before_the_mark_is_retried_in_a_second_when_the_first_read_of_the_record_fails() {
    let s = retried_stack(29);
    at_unmarked_attempt_2(&s, "r-seen");
    s.world.advance(Duration::seconds(30));
    s.world.script("ddb.GetItem(record)", Fault::Before);
    let early = callback(&s, "v-ok-2", &verify("succeeded", 2));
    let kept = receipt_kept(&s, "retried", "r", "v-ok-2");
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(lock(&s.publisher.log).iter().any(|p| p.task.attempt == 2), "attempt 2 went out, marked");
    s.world.advance(Duration::seconds(1));
    let retry = callback(&s, "v-ok-2", &verify("succeeded", 2));
    assert_eq!(
        (says(&early), kept, says(&retry)),
        ((503, Some(1), Some("unavailable")), false, (200, None, Some("applied"))),
        "early answer {}, retried a second later, after the mark: {}",
        early.body,
        retry.body
    );
}

/// Invariant 9 and 6 (an input applies to the attempt it was meant for; nothing is lost):
/// receipts are kept per target, so a worker may answer verify under a `webhook-id` it used for
/// intake. Ordering: intake applied under `shared`; verify's attempt 1 fails; verify's attempt 2
/// answered under `shared` before its mark; the sweep marks it; the same answer again. The first
/// answer must be 503 `task_not_out` (nothing kept), and the retry applied: answered `ignored`
/// instead, the answer is kept on its receipt and attempt 2 never completes.
#[test]
fn an_answer_before_the_mark_under_an_id_another_step_took_is_503_then_applied() {
    let s = retried_stack(31);
    at_unmarked_attempt_2(&s, "shared");
    let early = callback(&s, "shared", &verify("succeeded", 2));
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(lock(&s.publisher.log).iter().any(|p| p.task.attempt == 2), "attempt 2 went out");
    let later = callback(&s, "shared", &verify("succeeded", 2));
    assert_eq!(
        (says(&early), says(&later)),
        ((503, Some(1), Some("unavailable")), (200, None, Some("applied"))),
        "early: {}; after the mark: {}",
        early.body,
        later.body
    );
}

fn saga_stack() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(
        World::new(37, start, false),
        None,
        &format!("{CONFIG}{SAGA_WORKFLOW}"),
        Default::default(),
    )
}

fn saga(step: &str, outcome: &str, data: Value) -> Value {
    let mut b = json!({"workflow": "saga", "key": "k", "step": step, "outcome": outcome, "data": data});
    if outcome == "failed" {
        b["error"] = json!("NoCarrier");
        b["cause"] = json!("no carrier today");
    }
    b
}

fn undo(step: &str, outcome: &str, attempt: u32) -> Value {
    let mut b = json!({"workflow": "saga", "key": "k", "step": step, "outcome": outcome, "compensation": true,
        "generation": 1, "attempt": attempt});
    if outcome == "failed" {
        b["error"] = json!("BankDown");
        b["cause"] = json!("the bank did not answer");
    }
    b
}

/// Invariant 9 and 8 (held): after a deploy that renumbered the steps, the answer to the second
/// attempt of `charge`'s compensation before its mark is asked to retry in a second (the early
/// check pins the step by name), and once the sweep marks it, the same answer acknowledges
/// `charge`, not the step that took its old index. Ordering: ship fails, charge's compensation
/// attempt 1 fails, deploy (a step inserted first), attempt 2 answered early, sweep, again.
#[test]
fn held_a_compensations_unmarked_attempt_after_a_renumbering_deploy_is_503_then_lands_on_its_step() {
    let s = saga_stack();
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    for (id, step, data) in [
        ("k-hold", "reserve", json!({"hold": "h"})),
        ("k-charge", "charge", json!({"charge_ref": "c"})),
        ("k-points", "points", json!({"points": 4})),
    ] {
        assert_eq!(says(&callback(&s, id, &saga(step, "succeeded", data))), (200, None, Some("applied")));
        settle(&s);
    }
    assert_eq!(
        says(&callback(&s, "k-ship", &saga("ship", "failed", json!({})))),
        (200, None, Some("applied"))
    );
    settle(&s);
    assert_eq!(saga_record(&s).state, State::Compensating);
    assert_eq!(says(&callback(&s, "k-undo-1", &undo("charge", "failed", 1))), (200, None, Some("applied")));
    let yaml = format!("{CONFIG}{SAGA_WORKFLOW}").replace(
        "      - name: reserve\n",
        "      - name: precheck\n        requires: [ok]\n        timeout: 20m\n      - name: reserve\n",
    );
    s.deploy(baton_core::domain::config::Config::parse(&yaml).unwrap());
    let early = callback(&s, "k-undo-2", &undo("charge", "succeeded", 2));
    assert_eq!(says(&early), (503, Some(1), Some("unavailable")), "{}", early.body);
    assert!(!receipt_kept(&s, "saga", "k", "k-undo-2"));
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    let later = callback(&s, "k-undo-2", &undo("charge", "succeeded", 2));
    assert_eq!(says(&later), (200, None, Some("applied")), "{}", later.body);
    let r = saga_record(&s);
    let v1 = s.config.workflow("saga").unwrap();
    let outcome = |name: &str| {
        let index = v1.step_index(name).unwrap();
        r.compensation.as_ref().unwrap().undo(index).unwrap().wait.outcome()
    };
    assert_eq!(outcome("charge"), Some(WaitOutcome::Succeeded));
    assert_eq!(outcome("points"), None);
}

fn saga_record(s: &Stack) -> baton_core::domain::lifecycle::Record {
    s.record("saga", "k").expect("the record")
}
