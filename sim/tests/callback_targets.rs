//! Callbacks are kept apart by what they answer: a step, or its compensation. Task ids (a
//! worker's `webhook-id`) are predictable, so a sender that may call back one step could take
//! another step's task ids; its callbacks must never make the other step's worker be refused.

mod common;

use baton_core::domain::lifecycle::State;
use common::*;
use serde_json::json;

/// A sender of `manual-review` answers it under `payment`'s task id before payment's worker
/// calls back with that id. Payment's worker is applied, not refused `idempotency_key_reused`
/// (found by review: receipts were kept per (workflow, key, webhook-id) only).
#[test]
fn another_steps_callback_under_this_steps_task_id_never_refuses_its_worker() {
    let s = stack();
    waiting_on_review(&s, "k");
    let payments_task = "review/k/g1/payment";
    let a = callback(&s, payments_task, &review("k", json!({"decision": "ok"})));
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{}", a.body);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    let b = callback(&s, payments_task, &payment("k", json!({"payment_ref": "p-1"})));
    assert_eq!(
        (b.status.as_u16(), b.body["status"].as_str()),
        (200, Some("applied")),
        "payment's worker was refused: {}",
        b.body
    );
    // Each callback again gets its own first answer.
    let again = callback(&s, payments_task, &review("k", json!({"decision": "ok"})));
    assert_eq!(
        (again.status.as_u16(), again.body["duplicate"].as_bool()),
        (200, Some(true)),
        "{}",
        again.body
    );
    assert_eq!(again.body["step"], "manual-review");
}
