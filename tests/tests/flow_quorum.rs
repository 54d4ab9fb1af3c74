//! End to end, on the emulator: a step whose `requires` asks for two approvals of three
//! completes once the second distinct approver answers; an approver answering twice counts
//! once, a withdrawal (null) not at all, and an approval after the step advanced is ignored and
//! ledgered. An any-of step completes on the first of its list.

use baton_core::domain::lifecycle::{IgnoreReason, State};
use baton_tests::order_placed;
use baton_tests::system::start_system;
use serde_json::{Value, json};

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: approval
        task: { title: "Approve {key}", queue: approvers }
        requires: { at_least: 2, of: [legal, finance, ops] }
        timeout: 1h
      - name: payment
        requires: { any_of: [payment_ref, voucher] }
        timeout: 1h
"#;

fn answer(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": "succeeded", "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvals_of_three_complete_the_step_once() {
    let system = start_system(CONFIG).await;
    let key = "k-quorum";
    system.send_event(&order_placed(key)).await;
    system
        .record_until("order-review", key, "waiting on approval", |r| r.state == State::Waiting { step: 0 })
        .await;
    for (id, data) in [
        ("legal-1", json!({"legal": "approve"})),
        ("legal-2", json!({"legal": "approve, again"})),
        ("finance-withdrawn", json!({"finance": null})),
    ] {
        let a = system.answered(id, answer(key, "approval", data), (200, "applied")).await;
        assert_eq!(a["state"], "waiting{0}", "one approval so far, after {id}: {a}");
    }
    let a =
        system.answered("ops-1", answer(key, "approval", json!({"ops": "approve"})), (200, "applied")).await;
    assert_eq!(a["state"], "advancing{0}", "{a}");
    system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 1 })
        .await;
    let late = system
        .answered("finance-1", answer(key, "approval", json!({"finance": "approve"})), (200, "ignored"))
        .await;
    assert_eq!(late["reason"], "step_already_passed", "{late}");
    let ledger = system.ledger("order-review", key).await;
    assert!(ledger.contains(&("finance-1".to_owned(), IgnoreReason::StepAlreadyPassed)), "{ledger:?}");
    // Any of: the voucher alone completes the payment step, and the workflow.
    system.answered("voucher-1", answer(key, "payment", json!({"voucher": "V-1"})), (200, "applied")).await;
    system.record_until("order-review", key, "succeeded", |r| r.state == State::Succeeded).await;
    assert_eq!(system.resumes("order-review", key).await, 2, "one resume per step");
    system.stop().await;
}
