//! End to end, on the emulator: what a sender is told about AWS's limits matches what happens.
//! Each limit is refused at the edge with a 4xx that names it, or accepted and made
//! to work; never answered `applied` and then stuck.
//!
//! - A failure's `error` and `cause` against SendTaskFailure's lengths.
//! - Event ids against DynamoDB's 1,024-byte sort keys.
//! - Early callbacks against what a step can ever take.
//! - Integers past 64 bits in callback data.
//! - A step that takes its inputs from domain events only.

use baton_core::domain::lifecycle::State;
use baton_core::ports::dead_letters::{DETAIL_ATTRIBUTE, REASON_ATTRIBUTE};
use baton_tests::system::{System, WAIT, eventually, start_system};
use serde_json::{Value, json};

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review order {key}", queue: risk-review }
        requires: [decision]
        timeout: 1h
      - name: payment
        requires: [payment_ref]
        accepts_events: { type: ["payment.settled"] }
        accepts_callbacks: false
        timeout: 1h
"#;

fn event(id: &str, event_type: &str, key: &str, data: Value) -> String {
    json!({"specversion": "1.0", "id": id, "source": "shop", "type": event_type, "subject": key, "data": data})
        .to_string()
}

fn cb(key: &str, step: &str, outcome: &str, extra: Value) -> Value {
    let mut body = json!({"workflow": "order-review", "key": key, "step": step, "outcome": outcome});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

async fn waiting_on(system: &System, key: &str, step: u32) {
    system
        .until("the step to wait", || async {
            system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step })
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_step_functions_would_refuse_is_refused_at_the_edge_and_the_longest_it_takes_fails_the_step()
 {
    let system = start_system(CONFIG).await;
    system.send_event(&event("placed-k-err", "order.placed", "k-err", json!({}))).await;
    waiting_on(&system, "k-err", 0).await;

    // Given an error one character past SendTaskFailure's 256
    let long = cb("k-err", "manual-review", "failed", json!({"error": "E".repeat(257), "cause": "c"}));
    let (status, answer) = system.callback("cb-err-long", &long).await;
    // Then the sender is told, naming the field and the limit, and nothing was applied
    assert_eq!((status, answer["field"].as_str()), (400, Some("error")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("256"), "{answer}");
    let cause = cb("k-err", "manual-review", "failed", json!({"error": "E", "cause": "c".repeat(32_769)}));
    let (status, answer) = system.callback("cb-cause-long", &cause).await;
    assert_eq!((status, answer["field"].as_str()), (400, Some("cause")), "{answer}");
    waiting_on(&system, "k-err", 0).await;

    // When the error is as long as Step Functions takes
    let longest = cb("k-err", "manual-review", "failed", json!({"error": "E".repeat(256), "cause": "c"}));
    let (status, answer) = system.callback("cb-err-256", &longest).await;
    // Then it is applied, reaches Step Functions, and the workflow ends failed: not stuck advancing
    assert_eq!((status, answer["status"].as_str()), (200, Some("applied")), "{answer}");
    system
        .until("the workflow to end failed", || async {
            system.record("order-review", "k-err").await.filter(|r| r.state == State::Failed)
        })
        .await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_too_long_for_a_dynamodb_key_is_dead_lettered_naming_its_limit() {
    let system = start_system(CONFIG).await;
    // 256 four-byte characters: within 256 characters, 1,024 bytes
    let id = "\u{1F600}".repeat(256);

    // (A `webhook-id` header carries visible ASCII only, one byte a character, so the callback
    // API cannot reach the byte limit; a domain event's id can.)
    // An early step event: it would be buffered under `INBOX#payment#<id>`
    system.send_event(&event(&id, "payment.settled", "k-id", json!({"payment_ref": "p"}))).await;
    eventually("the dead letter", WAIT, || async {
        (system.queue_depth("IntakeDLQ").await == 1).then_some(())
    })
    .await;
    let dead = system.drain_queue("IntakeDLQ").await;
    let attrs = dead[0].message_attributes().expect("attributes");
    let get = |k: &str| attrs.get(k).and_then(|v| v.string_value()).unwrap_or_default().to_owned();
    // Dead-lettered as an invalid event, at once, not as a store refusal a replay repeats
    assert_eq!(get(REASON_ATTRIBUTE), "invalid_field", "{}", get(DETAIL_ATTRIBUTE));
    assert!(get(DETAIL_ATTRIBUTE).contains("768"), "{}", get(DETAIL_ATTRIBUTE));
    assert!(system.record("order-review", "k-id").await.is_none());
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_callbacks_are_buffered_only_up_to_what_their_step_can_take() {
    let system = start_system(CONFIG).await;
    // Given callbacks of 60 KiB of data each, to a key that was never started
    let big = |n: u32| {
        cb(
            "k-flood",
            "manual-review",
            "in_progress",
            json!({"data": {format!("part{n}"): "x".repeat(60 * 1024)}}),
        )
    };
    let mut statuses = Vec::new();
    for n in 0..4 {
        let (status, answer) = system.callback(&format!("cb-flood-{n}"), &big(n)).await;
        statuses.push((status, answer["error"].as_str().map(str::to_owned)));
    }
    // Then two are buffered (about 120 KiB), and the rest are refused, naming the limit
    assert_eq!(
        statuses,
        [
            (202, None),
            (202, None),
            (413, Some("inputs_too_large".to_owned())),
            (413, Some("inputs_too_large".to_owned()))
        ]
    );
    // And the same callback sent again gets the answer it earned, whatever is buffered
    let (status, answer) = system.callback("cb-flood-0", &big(0)).await;
    assert_eq!((status, answer["duplicate"].as_bool()), (200, Some(true)), "{answer}");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integers_past_64_bits_are_refused_and_an_event_only_step_refuses_callbacks() {
    let system = start_system(CONFIG).await;
    system.send_event(&event("placed-k-ev", "order.placed", "k-ev", json!({}))).await;
    waiting_on(&system, "k-ev", 0).await;

    let huge = cb("k-ev", "manual-review", "succeeded", json!({}));
    let text = huge.to_string().replace(
        r#""outcome":"succeeded""#,
        r#""outcome":"succeeded","data":{"decision":123456789012345678901234567890}"#,
    );
    // Posted as text: a serde_json Value in this test would round the literal itself.
    let reply = system.callback_text("cb-huge", text).await;
    assert_eq!((reply.status, reply.body["field"].as_str()), (400, Some("data")), "{}", reply.body);

    let ok = cb("k-ev", "manual-review", "succeeded", json!({"data": {"decision": "ok"}}));
    assert_eq!(system.callback("cb-ok", &ok).await.0, 200);
    waiting_on(&system, "k-ev", 1).await;
    // A callback to the event-only step is refused; the event completes it
    let paid = cb("k-ev", "payment", "succeeded", json!({"data": {"payment_ref": "p-1"}}));
    let (status, answer) = system.callback("cb-paid", &paid).await;
    assert_eq!((status, answer["error"].as_str()), (403, Some("callbacks_refused")), "{answer}");
    system.send_event(&event("paid-k-ev", "payment.settled", "k-ev", json!({"payment_ref": "p-1"}))).await;
    system
        .until("the workflow to succeed", || async {
            system.record("order-review", "k-ev").await.filter(|r| r.state == State::Succeeded)
        })
        .await;
    system.stop().await;
}
