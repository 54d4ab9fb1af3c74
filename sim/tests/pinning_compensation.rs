//! Compensation inputs across a deploy that renumbers steps, and answers to an attempt whose task
//! is not yet marked out: each driven through the real callback use case over the simulated
//! world.

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{State, WaitOutcome};
use baton_core::ports::store::WorkflowStore;
use baton_sim::world::{World, drive, lock};
use baton_sim::{CONFIG, EPOCH, SAGA_WORKFLOW, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

fn saga_stack() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(
        World::new(5, start, false),
        None,
        &format!("{CONFIG}{SAGA_WORKFLOW}"),
        Default::default(),
    )
}

fn saga_record(s: &Stack, key: &str) -> baton_core::domain::lifecycle::Record {
    s.record("saga", key).expect("the record")
}

fn step(key: &str, step: &str, outcome: &str, data: Value) -> Value {
    let mut body = json!({"workflow": "saga", "key": key, "step": step, "outcome": outcome, "data": data});
    if outcome == "failed" {
        body["error"] = json!("NoCarrier");
        body["cause"] = json!("no carrier today");
    }
    body
}

fn applied(s: &Stack, id: &str, body: &Value) {
    let a = callback(s, id, body);
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{id}: {}", a.body);
    settle(s);
}

/// A saga compensating `charge` and `points`, their tasks out; then a deploy inserts a step
/// before every compensable one (charge is step 1, points step 2 in the record's version; 2 and
/// 3 in the new one). The refund of `charge`, called back to the new functions, acknowledges
/// `charge`, never `points` (found by review).
#[test]
fn a_compensations_acknowledgement_after_a_deploy_that_renumbered_steps_lands_on_its_own_step() {
    let s = saga_stack();
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    applied(&s, "cb-hold", &step("k", "reserve", "succeeded", json!({"hold": "h"})));
    applied(&s, "cb-charge", &step("k", "charge", "succeeded", json!({"charge_ref": "c"})));
    applied(&s, "cb-points", &step("k", "points", "succeeded", json!({"points": 10})));
    settle(&s);
    applied(&s, "cb-ship", &step("k", "ship", "failed", json!({})));
    settle(&s);
    let r = saga_record(&s, "k");
    assert_eq!(r.state, State::Compensating, "{:?}", r.history.last());
    let yaml = format!("{CONFIG}{SAGA_WORKFLOW}").replace(
        "      - name: reserve\n",
        "      - name: precheck\n        requires: [ok]\n        timeout: 20m\n      - name: reserve\n",
    );
    s.deploy(baton_core::domain::config::Config::parse(&yaml).unwrap());
    let undo = |step: &str| {
        json!({"workflow": "saga", "key": "k", "step": step, "outcome": "succeeded", "compensation": true,
            "generation": 1, "attempt": 1})
    };
    applied(&s, "ack-charge", &undo("charge"));
    let r = saga_record(&s, "k");
    let outcome = |name: &str| {
        let index = s.config.workflow("saga").unwrap().step_index(name).unwrap();
        r.compensation.as_ref().unwrap().undo(index).unwrap().wait.outcome()
    };
    assert_eq!(outcome("charge"), Some(WaitOutcome::Succeeded), "charge's refund landed elsewhere");
    assert_eq!(outcome("points"), None, "points was acknowledged by charge's refund");
}

const RETRIED: &str = r#"
workflows:
  retried:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 2h
        retry: { attempts: 3, backoff: 30s }
"#;

/// A worker answering a retried step's next attempt before baton has marked its task out (a
/// clock apart from the sweeper's; a crash between the publish and the mark) gets 503 with
/// `Retry-After: 1`, nothing kept for its id; once marked, the same id is applied (found by
/// review: it was answered `ignored` for good, and the step waited to its deadline).
#[test]
fn an_answer_to_the_next_attempt_before_its_mark_is_retried_and_then_applied() {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let s = Stack::with_config(World::new(3, start, false), None, RETRIED, Default::default());
    send(&s, &event("start-r", "order.placed", "r", json!({})));
    settle(&s);
    let body = |outcome: &str, attempt: u32| {
        let mut b = json!({"workflow": "retried", "key": "r", "step": "verify", "outcome": outcome,
            "generation": 1, "attempt": attempt, "data": {}});
        if outcome == "failed" {
            b["error"] = json!("Unreachable");
        } else {
            b["data"] = json!({"verdict": "ok"});
        }
        b
    };
    let a = callback(&s, "r-1", &body("failed", 1));
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    let early = callback(&s, "r-2", &body("succeeded", 2));
    assert_eq!((early.status.as_u16(), early.retry_after), (503, Some(1)), "{}", early.body);
    let w = s.config.workflow("retried").unwrap();
    let trace = drive(s.memory.trace(&w.name, &CorrelationKey::parse("r").unwrap())).unwrap();
    assert!(trace.receipts.iter().all(|r| r.id.as_str() != "r-2"), "nothing kept for the early answer");
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(lock(&s.publisher.log).iter().any(|p| p.task.attempt == 2), "attempt 2 went out");
    let later = callback(&s, "r-2", &body("succeeded", 2));
    assert_eq!(
        (later.status.as_u16(), later.body["status"].as_str()),
        (200, Some("applied")),
        "{}",
        later.body
    );
}
