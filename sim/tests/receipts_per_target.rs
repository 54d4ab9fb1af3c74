//! Attack tests of receipts kept per target (workflow, key, step name, compensation or not,
//! `webhook-id`): one id used for a step's callback and for its compensation's
//! acknowledgement is two callbacks, each answered as it earned, including a callback buffered
//! early and a retry that takes over a receipt its first attempt left pending. Driven through
//! the real callback use case over the simulated world.

mod common;

use baton_core::domain::lifecycle::{Record, State, WaitOutcome};
use baton_core::use_cases::callback::Answer;
use baton_sim::world::{Fault, World, drive};
use baton_sim::{EPOCH, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const PAIR: &str = r#"
workflows:
  pair:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: charge
        requires: [charge_ref]
        timeout: 20m
        compensate: { task: { title: "Refund {key}", queue: billing }, timeout: 15m }
      - name: ship
        requires: [tracking]
        timeout: 20m
"#;

fn pair(seed: u64) -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(World::new(seed, start, false), None, PAIR, Default::default())
}

fn load(s: &Stack) -> Record {
    s.record("pair", "k").expect("the record")
}

fn step(step: &str, outcome: &str, data: Value) -> Value {
    let mut b = json!({"workflow": "pair", "key": "k", "step": step, "outcome": outcome, "data": data});
    if outcome == "failed" {
        b["error"] = json!("NoCarrier");
        b["cause"] = json!("no carrier today");
    }
    b
}

fn refund(outcome: &str) -> Value {
    json!({"workflow": "pair", "key": "k", "step": "charge", "outcome": outcome, "compensation": true,
        "generation": 1, "attempt": 1})
}

fn says(a: &Answer) -> (u16, Option<&str>, Option<&str>) {
    (a.status.as_u16(), a.body["status"].as_str().or(a.body["error"].as_str()), a.body["state"].as_str())
}

/// Invariant 8 (a retry with the same id gets the answer the first attempt earned): charge's
/// callback `same` lands, but the answer to its record write is lost (503, `maybe_applied`),
/// and its receipt stays pending. Ordering: the sweeper delivers charge's owed resume, ship
/// fails, charge's compensation is acknowledged by its worker under the same `same` (another
/// target, another receipt), and then charge's sender retries past the receipt's lease. Its
/// retry must be told what its own first attempt did (`applied`, charge completed:
/// `advancing{0}`), not the state the acknowledgement's transition produced.
#[test]
fn a_callback_retried_after_its_compensations_acknowledgement_under_its_id_gets_its_own_answer() {
    let s = pair(53);
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    s.world.script("ddb.PutItem(record)", Fault::After);
    let first = callback(&s, "same", &step("charge", "succeeded", json!({"charge_ref": "c-1"})));
    assert_eq!(
        (first.status.as_u16(), first.body["maybe_applied"].as_bool()),
        (503, Some(true)),
        "{}",
        first.body
    );
    assert_eq!(load(&s).state, State::Advancing { step: 0 }, "the write landed");
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    assert_eq!(load(&s).state, State::Waiting { step: 1 });
    assert_eq!(says(&callback(&s, "ship-1", &step("ship", "failed", json!({})))).1, Some("applied"));
    settle(&s);
    assert_eq!(load(&s).state, State::Compensating);
    let ack = callback(&s, "same", &refund("succeeded"));
    assert_eq!(says(&ack), (200, Some("applied"), Some("compensating")), "{}", ack.body);
    let retry = callback(&s, "same", &step("charge", "succeeded", json!({"charge_ref": "c-1"})));
    assert_eq!(
        says(&retry),
        (200, Some("applied"), Some("advancing{0}")),
        "charge's retry was answered from the acknowledgement's transition: {}",
        retry.body
    );
}

/// Invariant 6 and 9 (held): an early callback for ship, buffered under `x`, and charge's
/// compensation acknowledged under the same `x`, are two inputs: the buffered one fails ship
/// when it waits, the acknowledgement undoes charge; each repeat is answered as it first was.
#[test]
fn held_an_early_buffered_callback_and_an_acknowledgement_with_one_id_are_two_inputs() {
    let s = pair(59);
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    let early = callback(&s, "x", &step("ship", "failed", json!({})));
    assert_eq!(says(&early), (202, Some("buffered"), None), "{}", early.body);
    let charge = callback(&s, "c-1", &step("charge", "succeeded", json!({"charge_ref": "c-1"})));
    assert_eq!(says(&charge).1, Some("applied"));
    settle(&s);
    assert_eq!(
        load(&s).state,
        State::Compensating,
        "ship's buffered failure was drained: {:?}",
        load(&s).history
    );
    let ack = callback(&s, "x", &refund("succeeded"));
    assert_eq!(says(&ack), (200, Some("applied"), Some("compensating")), "{}", ack.body);
    let again = callback(&s, "x", &step("ship", "failed", json!({})));
    assert_eq!(
        (again.status.as_u16(), again.body["status"].as_str()),
        (200, Some("buffered")),
        "{}",
        again.body
    );
    assert_eq!(again.body["duplicate"].as_bool(), Some(true));
    let ack_again = callback(&s, "x", &refund("succeeded"));
    assert_eq!(says(&ack_again), (200, Some("applied"), Some("compensating")), "{}", ack_again.body);
    settle(&s);
    let r = load(&s);
    assert_eq!(r.state, State::Compensated, "{:?}", r.history.last());
    let undo = r.compensation.as_ref().and_then(|c| c.undo(0));
    assert_eq!(undo.and_then(|u| u.wait.outcome()), Some(WaitOutcome::Succeeded), "acknowledged");
}
