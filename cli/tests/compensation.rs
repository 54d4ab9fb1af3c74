//! Compensation end to end, on the emulator: the real state machine's compensation chain, the
//! real callback API, and the real `baton` binary for `compensate plan` and `cancel
//! --compensate`.
//!
//! - a failure after two completed steps: two compensations, in reverse, acknowledged (one of
//!   them twice, and one acknowledgement early), and the workflow ends `compensated`;
//! - a compensation that fails every attempt: `compensation_failed`, and its alarm's metric;
//! - `cancel --compensate` in mid-flight, and a second cancel refused.
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p baton-cli`.

use baton_core::domain::lifecycle::State;
use baton_core::ports::metrics::Metric;
use baton_core::ports::outbound::COMPENSATION_REQUESTED;
use serde_json::{Value, json};

mod common;
use baton_tests::SAGA;
use common::{Stack, placed, stack_with};

const WF: &str = "order-review";

fn step(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": WF, "key": key, "step": step, "outcome": "succeeded", "data": data})
}

fn ack(key: &str, step: &str, outcome: &str, attempt: u32) -> Value {
    let mut body = json!({"workflow": WF, "key": key, "step": step, "outcome": outcome, "compensation": true,
        "generation": 1, "attempt": attempt});
    if outcome == "failed" {
        body["error"] = json!("BankDown");
        body["cause"] = json!("the bank did not answer");
    }
    body
}

async fn state_is(stack: &Stack, key: &str, state: State) {
    stack.system.record_until(WF, key, &format!("{key} in {state}"), |r| r.state == state).await;
}

/// Starts `key` and completes reserve-stock and payment: the record waits on shipping.
async fn at_shipping(stack: &Stack, key: &str) {
    stack.system.send_event(&placed(key)).await;
    state_is(stack, key, State::Waiting { step: 0 }).await;
    stack
        .system
        .answered(
            &format!("{key}-hold"),
            step(key, "reserve-stock", json!({"hold": "h-1"})),
            (200, "applied"),
        )
        .await;
    state_is(stack, key, State::Waiting { step: 1 }).await;
    let paid = step(key, "payment", json!({"payment_ref": "pay-1"}));
    stack.system.answered(&format!("{key}-paid"), paid, (200, "applied")).await;
    state_is(stack, key, State::Waiting { step: 2 }).await;
}

/// The compensation tasks published so far, with at least `expected` of them: (task id, attempt).
async fn compensation_tasks(stack: &Stack, expected: usize) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    while found.len() < expected {
        let tasks = stack.system.published_tasks(1).await;
        found.extend(tasks.iter().filter(|t| t["type"] == COMPENSATION_REQUESTED).map(|t| {
            (
                t["data"]["task_id"].as_str().unwrap_or_default().to_owned(),
                t["data"]["attempt"].as_u64().unwrap_or(0),
            )
        }));
    }
    found
}

async fn plan(stack: &Stack, key: &str) -> (Value, String) {
    let doc = stack.baton(&["compensate", "plan", WF, key, "--json"]).await.json();
    let text = stack.baton(&["compensate", "plan", WF, key]).await.ok();
    println!("{text}");
    (doc, text)
}

/// (name, state) of each step in the plan document.
fn states(doc: &Value) -> Vec<(String, String)> {
    doc["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (s["name"].as_str().unwrap_or_default().into(), s["state"].as_str().unwrap_or_default().into())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_two_completed_steps_undoes_both_in_reverse_and_ends_compensated() {
    let stack = stack_with(SAGA).await;
    let key = "k-undo";
    at_shipping(&stack, key).await;
    // Before anything runs: what a failure now would undo.
    let (before, _) = plan(&stack, key).await;
    assert_eq!(before["phase"], "not_begun");
    assert_eq!(
        states(&before),
        pairs(&[("payment", "would_run"), ("reserve-stock", "would_run"), ("shipping", "not_in_plan")])
    );
    assert_eq!(before["steps"][0]["compensation"]["title"], "Refund payment for k-undo");

    let failed = json!({"workflow": WF, "key": key, "step": "shipping", "outcome": "failed", "error": "NoCarrier",
        "cause": "no carrier takes the parcel"});
    stack.system.answered("k-undo-ship", failed, (200, "applied")).await;
    // The chain reaches payment's compensation first; reserve-stock's acknowledgement before
    // its own wait is early: ignored, and its compensation still runs later.
    state_is(&stack, key, State::Compensating).await;
    let first = compensation_tasks(&stack, 1).await;
    assert_eq!(first, [(format!("{WF}/{key}/g1/payment/undo"), 1)]);
    let early =
        stack.system.answered("k-undo-early", ack(key, "reserve-stock", "succeeded", 1), (200, "ignored"));
    assert_eq!(early.await["reason"], "out_of_order");
    let (during, _) = plan(&stack, key).await;
    assert_eq!(during["phase"], "compensating");
    assert_eq!(during["trigger"]["detail"]["error"], "NoCarrier");
    assert_eq!(states(&during)[..2], pairs(&[("payment", "waiting"), ("reserve-stock", "pending")]));

    let refund = ack(key, "payment", "succeeded", 1);
    let applied = stack.system.answered("k-undo-refund", refund.clone(), (200, "applied")).await;
    assert_eq!(applied["duplicate"], false);
    let again = stack.system.answered("k-undo-refund", refund, (200, "applied")).await;
    assert_eq!(again["duplicate"], true, "the same webhook-id gets the first answer: {again}");

    let second = compensation_tasks(&stack, 1).await;
    assert_eq!(second, [(format!("{WF}/{key}/g1/reserve-stock/undo"), 1)], "in reverse: reserve-stock last");
    stack
        .system
        .answered("k-undo-release", ack(key, "reserve-stock", "succeeded", 1), (200, "applied"))
        .await;
    state_is(&stack, key, State::Compensated).await;
    stack.system.execution_ended(WF, "FAILED").await;

    let (after, text) = plan(&stack, key).await;
    assert_eq!(after["phase"], "ended");
    assert_eq!(
        states(&after),
        pairs(&[("payment", "acknowledged"), ("reserve-stock", "acknowledged"), ("shipping", "not_in_plan")])
    );
    assert!(text.contains("state compensated"), "{text}");
    // The trace shows the phase: why it began, and each step of the plan.
    let trace = stack.baton(&["trace", WF, key]).await.ok();
    println!("{trace}");
    assert!(
        trace.contains("compensation began") && trace.contains("after the run failed (NoCarrier)"),
        "{trace}"
    );
    assert!(trace.lines().any(|l| l.contains("undo payment") && l.contains("acknowledged")), "{trace}");
    assert!(trace.contains("compensation task created for payment"), "{trace}");
    assert_eq!(stack.system.metrics.count(Metric::WorkflowsCompensated, Some(WF)), 1);
    stack.system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_that_fails_every_attempt_ends_compensation_failed_and_counts_for_its_alarm() {
    let stack = stack_with(SAGA).await;
    let key = "k-stuck";
    at_shipping(&stack, key).await;
    let failed =
        json!({"workflow": WF, "key": key, "step": "shipping", "outcome": "failed", "error": "NoCarrier"});
    stack.system.answered("k-stuck-ship", failed, (200, "applied")).await;
    assert_eq!(compensation_tasks(&stack, 1).await, [(format!("{WF}/{key}/g1/payment/undo"), 1)]);
    stack.system.answered("k-stuck-r1", ack(key, "payment", "failed", 1), (200, "applied")).await;
    // Attempt 2 is due at once: the sweeper publishes it, under its own id.
    stack.system.sweep(time::OffsetDateTime::now_utc()).await;
    assert_eq!(compensation_tasks(&stack, 1).await, [(format!("{WF}/{key}/g1/payment/undo/a2"), 2)]);
    stack.system.answered("k-stuck-r2", ack(key, "payment", "failed", 2), (200, "applied")).await;
    // The chain goes on to reserve-stock all the same.
    assert_eq!(compensation_tasks(&stack, 1).await, [(format!("{WF}/{key}/g1/reserve-stock/undo"), 1)]);
    stack
        .system
        .answered("k-stuck-release", ack(key, "reserve-stock", "succeeded", 1), (200, "applied"))
        .await;
    state_is(&stack, key, State::CompensationFailed).await;
    let (after, text) = plan(&stack, key).await;
    assert_eq!(states(&after)[..2], pairs(&[("payment", "failed"), ("reserve-stock", "acknowledged")]));
    assert_eq!(after["steps"][0]["attempts_used"], 2);
    assert!(text.contains("attempt 2 failed: BankDown"), "{text}");
    assert_eq!(stack.system.metrics.count(Metric::WorkflowsCompensationFailed, Some(WF)), 1);
    stack.system.stop().await;
}

/// A worker that acknowledges a compensation task the moment it has it, before baton has marked
/// the task out (here the publish's answer is lost each time, so no mark is written): 503
/// `task_not_out` with a one-second Retry-After, and nothing kept for the webhook-id. Once the
/// task is marked, the same request is applied at once, not answered `in_progress` for the 30
/// seconds a kept receipt would be held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_before_its_task_is_marked_out_is_answered_503_and_its_retry_a_second_later_applied()
 {
    let emulator = baton_tests::Emulator::from_env();
    let stack = stack_with(SAGA).await;
    let key = "k-fast";
    at_shipping(&stack, key).await;
    let lost = emulator
        .inject(
            json!({"operation": "AmazonSQS.SendMessage", "match": [format!("{WF}/{key}/g1/payment/undo")],
            "when": "after", "status": 500, "code": "InternalError"}),
        )
        .await;
    let failed =
        json!({"workflow": WF, "key": key, "step": "shipping", "outcome": "failed", "error": "NoCarrier"});
    stack.system.answered("k-fast-ship", failed, (200, "applied")).await;
    // The task is out (on the queue), its mark is not.
    assert_eq!(compensation_tasks(&stack, 1).await[0], (format!("{WF}/{key}/g1/payment/undo"), 1));
    let early = stack.system.callback_once("k-fast-refund", &ack(key, "payment", "succeeded", 1)).await;
    assert_eq!((early.status, early.body["error"].as_str()), (503, Some("unavailable")), "{}", early.body);
    assert_eq!(early.body["maybe_applied"], false, "{}", early.body);
    assert!(early.body["message"].as_str().is_some_and(|m| m.contains("not marked out")), "{}", early.body);
    assert_eq!(early.retry_after, Some(1), "the mark follows the publish within milliseconds");
    // The sweeper publishes the task again, and this time marks it.
    emulator.retire(lost).await;
    stack.system.sweep(time::OffsetDateTime::now_utc()).await;
    stack
        .system
        .record_until(WF, key, "payment's compensation task marked out", |r| {
            let out = |u: &baton_core::domain::lifecycle::Undo| u.waits() && u.wait.task_due().is_none();
            r.compensation.as_ref().is_some_and(|c| c.undos.iter().any(|u| u.step() == 1 && out(u)))
        })
        .await;
    let retried = stack.system.callback_once("k-fast-refund", &ack(key, "payment", "succeeded", 1)).await;
    assert_eq!(
        (retried.status, retried.body["status"].as_str(), retried.body["duplicate"].as_bool()),
        (200, Some("applied"), Some(false)),
        "{}",
        retried.body
    );
    stack.system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_compensate_in_mid_flight_undoes_what_completed_and_a_second_cancel_is_refused() {
    let stack = stack_with(SAGA).await;
    let key = "k-cancel";
    stack.system.send_event(&placed(key)).await;
    state_is(&stack, key, State::Waiting { step: 0 }).await;
    stack
        .system
        .answered("k-cancel-hold", step(key, "reserve-stock", json!({"hold": "h-9"})), (200, "applied"))
        .await;
    state_is(&stack, key, State::Waiting { step: 1 }).await;

    let out = stack.baton(&["cancel", WF, key, "--reason", "customer withdrew", "--compensate"]).await.ok();
    assert!(out.contains("compensating what completed"), "{out}");
    let refused = stack.baton(&["cancel", WF, key, "--reason", "again"]).await;
    assert_eq!(refused.code(), Some(1), "{}", refused.stdout());
    assert!(refused.stderr().contains("is compensating"), "{}", refused.stderr());

    // Payment never completed: only reserve-stock's compensation goes out.
    assert_eq!(compensation_tasks(&stack, 1).await, [(format!("{WF}/{key}/g1/reserve-stock/undo"), 1)]);
    let (during, _) = plan(&stack, key).await;
    assert_eq!(during["trigger"]["kind"], "cancelled");
    stack
        .system
        .answered("k-cancel-release", ack(key, "reserve-stock", "succeeded", 1), (200, "applied"))
        .await;
    state_is(&stack, key, State::Compensated).await;
    let (after, _) = plan(&stack, key).await;
    assert_eq!(
        states(&after),
        pairs(&[("payment", "skipped"), ("reserve-stock", "acknowledged"), ("shipping", "not_in_plan")])
    );
    stack.system.stop().await;
}
