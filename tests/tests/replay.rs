//! Safe replay and cancel, on the emulator (issue 7): a dead-letter queue with a mix of
//! messages is planned from the current state, and only the safe ones are applied, once.

use baton_aws::sqs::SqsDeadLetterReader;
use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{IgnoreReason, Input, State};
use baton_core::use_cases::replay::{self, Applied, Classification, Origin};
use baton_tests::logs::captured;
use baton_tests::system::{System, WAIT, eventually, start_system};
use serde_json::json;

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        accepts_events: { type: ["review.done"] }
        timeout: 1h
      - name: payment
        requires: [payment_ref]
        accepts_events: { type: ["payment.settled"] }
        timeout: 1h
"#;

fn event(id: &str, kind: &str, key: &str, data: serde_json::Value) -> String {
    json!({"specversion": "1.0", "id": id, "source": "test", "type": kind, "subject": key, "data": data})
        .to_string()
}

async fn wait_state(system: &System, key: &str, want: State) {
    system
        .until(&format!("{key} {want}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == want)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn a_mixed_dlq_is_classified_and_only_the_safe_message_is_applied_once() {
    captured();
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    // Records: k-wait waits on its first step; k-moved has moved on to payment; k-done ended.
    for key in ["k-wait", "k-moved", "k-done"] {
        system.send_event(&event(&format!("placed-{key}"), "order.placed", key, json!({}))).await;
        wait_state(&system, key, State::Waiting { step: 0 }).await;
    }
    system.send_event(&event("review-moved", "review.done", "k-moved", json!({"decision": "ok"}))).await;
    wait_state(&system, "k-moved", State::Waiting { step: 1 }).await;
    let done_key = CorrelationKey::parse("k-done").unwrap();
    let wf = engine.config.workflow("order-review").unwrap();
    engine.submit(wf, &done_key, &Input::Cancel { reason: "test".into() }, engine.now()).await.unwrap();
    wait_state(&system, "k-done", State::Cancelled).await;

    // The dead-letter queue: a poison message fixed by hand (a corrected event), one still
    // poison, a duplicate of an applied start event, an input for a terminal record, and an
    // input for a step the record has already left.
    system.to_intake_dlq(&event("fixed-1", "order.placed", "k-new", json!({}))).await;
    system.to_intake_dlq("{ still not json").await;
    system.to_intake_dlq(&event("placed-k-wait", "order.placed", "k-wait", json!({}))).await;
    system.to_intake_dlq(&event("pay-done", "payment.settled", "k-done", json!({"payment_ref": "p"}))).await;
    system.to_intake_dlq(&event("review-late", "review.done", "k-moved", json!({"decision": "again"}))).await;

    let url = system.queue_url("IntakeDLQ");
    let plan = replay::plan_dlq(
        &engine,
        &SqsDeadLetterReader::new(system.sqs.clone(), &url),
        Origin::Intake,
        engine.now(),
    )
    .await
    .unwrap();
    assert_eq!(plan.len(), 5, "{plan:#?}");
    let class_of = |needle: &str| {
        plan.iter()
            .find(|l| {
                l.targets.iter().any(|t| input_id(&t.input) == needle)
                    || (needle == "poison" && l.targets.is_empty())
            })
            .map(|l| l.classification)
            .unwrap_or_else(|| panic!("no line for {needle}"))
    };
    assert_eq!(class_of("fixed-1"), Classification::Safe);
    assert_eq!(class_of("poison"), Classification::NeedsHuman);
    assert_eq!(class_of("placed-k-wait"), Classification::Noop);
    assert_eq!(class_of("pay-done"), Classification::Noop);
    assert_eq!(class_of("review-late"), Classification::NeedsHuman);
    let safe = plan.iter().find(|l| l.classification == Classification::Safe).unwrap();
    assert_eq!(safe.targets[0].version, None, "planned against: no record yet");
    assert!(safe.targets[0].effect.contains("absent -> pending"), "{}", safe.targets[0].effect);
    assert_eq!(system.queue_depth("IntakeDLQ").await, 5, "a dry run removes nothing");

    let (done, summary) = replay::apply_dlq(
        &engine,
        &SqsDeadLetterReader::new(system.sqs.clone(), &url),
        &plan,
        engine.now(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (summary.applied, summary.noop_removed, summary.needs_human, summary.skipped),
        (1, 2, 2, 0),
        "{done:#?}"
    );
    wait_state(&system, "k-new", State::Waiting { step: 0 }).await;
    assert_eq!(system.queue_depth("IntakeDLQ").await, 2, "only the needs-human messages stay");

    // Exactly once: planning again, the applied message is gone and replaying the same event
    // (were it still there) would be a no-op.
    let again = replay::plan_dlq(
        &engine,
        &SqsDeadLetterReader::new(system.sqs.clone(), &url),
        Origin::Intake,
        engine.now(),
    )
    .await
    .unwrap();
    assert!(again.iter().all(|l| l.classification == Classification::NeedsHuman), "{again:#?}");
    let replayed = replay::plan_message(
        &engine,
        Origin::Intake,
        "x",
        &event("fixed-1", "order.placed", "k-new", json!({})),
        engine.now(),
    )
    .await
    .unwrap();
    assert_eq!(replayed.classification, Classification::Noop);
    assert_eq!(
        system.executions("order-review").await.iter().filter(|e| e.name().contains("k-new")).count(),
        1
    );
    system.stop().await;
}

fn input_id(input: &Input) -> String {
    input.id().map(ToString::to_string).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_whose_record_moved_between_plan_and_apply_is_skipped() {
    captured();
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    system.send_event(&event("placed-k-race", "order.placed", "k-race", json!({}))).await;
    wait_state(&system, "k-race", State::Waiting { step: 0 }).await;
    system
        .to_intake_dlq(&event("review-race", "review.done", "k-race", json!({"decision": "from the dlq"})))
        .await;
    let url = system.queue_url("IntakeDLQ");
    let plan = replay::plan_dlq(
        &engine,
        &SqsDeadLetterReader::new(system.sqs.clone(), &url),
        Origin::Intake,
        engine.now(),
    )
    .await
    .unwrap();
    assert_eq!(plan[0].classification, Classification::Safe);

    // Meanwhile the record moves: the step is answered through the normal path.
    system.send_event(&event("review-live", "review.done", "k-race", json!({"decision": "live"}))).await;
    wait_state(&system, "k-race", State::Waiting { step: 1 }).await;

    let (done, summary) = replay::apply_dlq(
        &engine,
        &SqsDeadLetterReader::new(system.sqs.clone(), &url),
        &plan,
        engine.now(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(summary.skipped, 1, "{done:#?}");
    assert!(
        matches!(&done[0].result, Applied::Skipped { reason } if reason.contains("moved since planning")),
        "{done:#?}"
    );
    assert!(!done[0].removed);
    assert_eq!(system.queue_depth("IntakeDLQ").await, 1, "a skipped message stays in the DLQ");
    assert_eq!(system.resumes("order-review", "k-race").await, 1, "the skipped line resumed nothing");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_a_step_waits_stops_the_execution_and_a_later_callback_is_ledgered() {
    captured();
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    system.send_event(&event("placed-k-cancel", "order.placed", "k-cancel", json!({}))).await;
    wait_state(&system, "k-cancel", State::Waiting { step: 0 }).await;

    let wf = engine.config.workflow("order-review").unwrap();
    let key = CorrelationKey::parse("k-cancel").unwrap();
    let cancelled = engine
        .submit(wf, &key, &Input::Cancel { reason: "customer withdrew".into() }, engine.now())
        .await
        .unwrap();
    assert_eq!(cancelled.record().unwrap().state, State::Cancelled);
    let execution = eventually("the execution stopped", WAIT, || async {
        system
            .executions("order-review")
            .await
            .into_iter()
            .find(|e| e.name().contains("k-cancel") && e.status().as_str() != "RUNNING")
    })
    .await;
    assert!(["ABORTED", "FAILED"].contains(&execution.status().as_str()), "{:?}", execution.status());

    let (status, body) = system
        .callback(
            "cb-after-cancel",
            &json!({"workflow": "order-review", "key": "k-cancel", "step": "manual-review", "outcome": "succeeded", "data": {"decision": "too late"}}),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str(), body["reason"].as_str()),
        (200, Some("ignored"), Some("terminal"))
    );
    let trace = engine.store.trace(&wf.name, &key).await.unwrap();
    assert!(
        trace.ledger.iter().any(|l| l.reason == IgnoreReason::Terminal && l.input_id == "cb-after-cancel"),
        "{:?}",
        trace.ledger
    );
    assert_eq!(
        trace.record.unwrap().state,
        State::Cancelled,
        "still cancelled after the execution's own report"
    );
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_entries_replay_as_noop_when_terminal_and_safe_when_their_step_now_waits() {
    captured();
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    // A callback for a record that has ended: ledgered `terminal`; replaying it is a no-op.
    system.send_event(&event("placed-k-led", "order.placed", "k-led", json!({}))).await;
    wait_state(&system, "k-led", State::Waiting { step: 0 }).await;
    let wf = engine.config.workflow("order-review").unwrap();
    let key = CorrelationKey::parse("k-led").unwrap();
    engine.submit(wf, &key, &Input::Cancel { reason: "test".into() }, engine.now()).await.unwrap();
    let (status, body) = system
        .callback(
            "cb-led",
            &json!({"workflow": "order-review", "key": "k-led", "step": "manual-review", "outcome": "succeeded", "data": {"decision": "x"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let trace = engine.store.trace(&wf.name, &key).await.unwrap();
    let entry = trace.ledger.iter().find(|l| l.reason == IgnoreReason::Terminal).expect("the ledger entry");
    let line = replay::plan_ledger(&engine, entry, engine.now()).await.unwrap();
    assert_eq!(line.classification, Classification::Noop, "{line:#?}");
    assert!(line.targets[0].effect.contains("terminal"), "{line:#?}");

    // An early callback whose buffer expired, replayed once its step waits: safe, applied once.
    let (status, body) = system
        .callback(
            "cb-exp",
            &json!({"workflow": "order-review", "key": "k-exp", "step": "manual-review", "outcome": "succeeded", "data": {"decision": "ok"}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(system.sweep(engine.now() + time::Duration::hours(3)).await.expired, 1);
    system.send_event(&event("placed-k-exp", "order.placed", "k-exp", json!({}))).await;
    wait_state(&system, "k-exp", State::Waiting { step: 0 }).await;
    let key = CorrelationKey::parse("k-exp").unwrap();
    let trace = engine.store.trace(&wf.name, &key).await.unwrap();
    let expired =
        trace.ledger.iter().find(|l| l.reason == IgnoreReason::BufferExpired).expect("buffer_expired");
    let line = replay::plan_ledger(&engine, expired, engine.now()).await.unwrap();
    assert_eq!(line.classification, Classification::Safe, "{line:#?}");
    let applied = replay::apply_line(&engine, &line, engine.now()).await.unwrap();
    assert!(matches!(applied, Applied::Applied { .. }), "{applied:?}");
    wait_state(&system, "k-exp", State::Waiting { step: 1 }).await;
    assert_eq!(system.resumes("order-review", "k-exp").await, 1);
    let again = replay::plan_ledger(&engine, expired, engine.now()).await.unwrap();
    // Replayed again, it is the input the record already took: a noop that owes nothing.
    assert_eq!(again.classification, Classification::Noop, "{again:#?}");
    assert_eq!(again.targets[0].effect, "already applied", "{again:#?}");
    system.stop().await;
}
