//! End to end, on the emulator: callbacks applied exactly once, early, twice or late (issue 5).
//!
//! Callbacks go over HTTP to the local API, signed as a sender signs them; events go to the
//! intake queue; the state machines really execute. Resumes are counted in the execution
//! histories (what the workflow saw); where a double send is the bug under test, also from
//! baton's own logs, because the emulator accepts a second resume of a used token silently.

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{self, Cause, IgnoreReason, Input, State};
use baton_core::ports::store::{InboxStatus, WorkflowStore};
use baton_tests::logs::{captured, resumes_sent_for_inputs};
use baton_tests::order_placed;
use baton_tests::system::{System, TEST_SECRET, WAIT, eventually, start_system, start_system_with};
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
        requires: [decision, reviewer]
        timeout: 1h
      - name: payment
        requires: [payment_ref]
        accepts_events: { type: ["payment.settled"] }
        timeout: 1h
"#;

fn cb(key: &str, step: &str, outcome: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": outcome, "data": data})
}

async fn resumes(system: &System, key: &str) -> usize {
    system.resumes("order-review", key).await
}

fn names(key: &str) -> (WorkflowName, CorrelationKey) {
    (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse(key).unwrap())
}

/// Fault injection: the record write of a callback that completes step 0 lands, then the
/// process dies before any effect (no SendTaskSuccess). Returns the record as written.
async fn crash_after_the_advancing_write(
    system: &System,
    waiting: &lifecycle::Record,
    id: &str,
) -> lifecycle::Record {
    let engine = system.engine();
    let workflow = engine.config.workflow("order-review").unwrap();
    let input = Input::StepInput {
        id: baton_core::domain::ids::EventId::parse(id).unwrap(),
        hash: "h".into(),
        source: lifecycle::Source::Callback,
        step: 0,
        outcome: lifecycle::StepOutcome::Succeeded,
        data: json!({"decision": "ok", "reviewer": "dee"}).as_object().unwrap().clone(),
        generation: None,
        attempt: None,
    };
    let d = lifecycle::decide(
        &workflow.plan(),
        (&waiting.workflow, &waiting.key),
        Some(waiting),
        &input,
        engine.now(),
    );
    assert_eq!(
        system.store.apply(d.write.as_ref().unwrap()).await.unwrap(),
        baton_core::ports::store::Applied::Written
    );
    let written = d.write.unwrap().to;
    assert_eq!(written.state, State::Advancing { step: 0 });
    written
}

async fn ledger_reasons(system: &System, key: &str) -> Vec<IgnoreReason> {
    ledger(system, key).await.into_iter().map(|(_, reason)| reason).collect()
}

/// The ledger of `key`: (input id, reason) per line.
async fn ledger(system: &System, key: &str) -> Vec<(String, IgnoreReason)> {
    let (w, k) = names(key);
    system.store.trace(&w, &k).await.unwrap().ledger.iter().map(|l| (l.input_id.clone(), l.reason)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_and_an_event_complete_both_steps_and_the_workflow_succeeds() {
    captured();
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("k-happy")).await;
    system
        .record_until("order-review", "k-happy", "waiting on review", |r| {
            r.state == State::Waiting { step: 0 }
        })
        .await;

    // Two callbacks, each supplying one of the two required inputs: one advance, after the second.
    let (status, body) = system
        .callback("cb-1", &cb("k-happy", "manual-review", "succeeded", json!({"decision": "approve"})))
        .await;
    assert_eq!(
        (status, body["status"].as_str(), body["state"].as_str()),
        (200, Some("applied"), Some("waiting{0}")),
        "{body}"
    );
    assert_eq!(resumes(&system, "k-happy").await, 0, "one input of two does not advance");
    let (status, body) = system
        .callback("cb-2", &cb("k-happy", "manual-review", "succeeded", json!({"reviewer": "ann"})))
        .await;
    assert_eq!((status, body["state"].as_str()), (200, Some("advancing{0}")), "{body}");

    let waiting = system
        .record_until("order-review", "k-happy", "waiting on payment", |r| {
            r.state == State::Waiting { step: 1 }
        })
        .await;
    assert!(waiting.waits[0].inputs.is_empty(), "inputs are per step");
    // A domain event supplies the payment step's input, as a callback would.
    let settled = json!({"specversion": "1.0", "id": "pay-1", "source": "psp", "type": "payment.settled",
        "subject": "k-happy", "data": {"payment_ref": "pay-77"}});
    system.send_event(&settled.to_string()).await;
    let done =
        system.record_until("order-review", "k-happy", "succeeded", |r| r.state == State::Succeeded).await;
    assert_eq!(resumes(&system, "k-happy").await, 2);
    let causes: Vec<Cause> = done.history.iter().map(|a| a.cause).collect();
    assert_eq!(
        causes,
        [
            Cause::Start,
            Cause::StepReady,
            Cause::Merge,
            Cause::Complete,
            Cause::StepReady,
            Cause::Complete,
            Cause::ReportSucceeded
        ]
    );
    system.execution_ended("order-review", "SUCCEEDED").await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_webhook_id_gets_the_first_answer_and_a_reused_one_gets_409() {
    captured();
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("k-dup")).await;
    system.record_until("order-review", "k-dup", "waiting", |r| r.state == State::Waiting { step: 0 }).await;
    let body = cb("k-dup", "manual-review", "succeeded", json!({"decision": "approve", "reviewer": "bob"}));
    let (first_status, first) = system.callback("cb-dup", &body).await;
    let (again_status, again) = system.callback("cb-dup", &body).await;
    assert_eq!(first_status, 200);
    assert_eq!(again_status, 200);
    assert_eq!(first["duplicate"], false);
    assert_eq!(again["duplicate"], true);
    let mut same = again.clone();
    same["duplicate"] = json!(false);
    assert_eq!(same, first, "the first answer again");

    let (status, conflict) = system
        .callback("cb-dup", &cb("k-dup", "manual-review", "succeeded", json!({"decision": "reject"})))
        .await;
    assert_eq!((status, conflict["error"].as_str()), (409, Some("idempotency_key_reused")), "{conflict}");

    system
        .record_until("order-review", "k-dup", "waiting on payment", |r| {
            r.state == State::Waiting { step: 1 }
        })
        .await;
    assert_eq!(resumes(&system, "k-dup").await, 1, "one resume");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_before_the_start_event_is_buffered_then_applied_once() {
    captured();
    let system = start_system(CONFIG).await;
    let body = cb("k-early", "manual-review", "succeeded", json!({"decision": "approve", "reviewer": "cy"}));
    let (status, answer) = system.callback("cb-early", &body).await;
    assert_eq!((status, answer["status"].as_str()), (202, Some("buffered")), "{answer}");
    let (status, again) = system.callback("cb-early", &body).await;
    assert_eq!(
        (status, again["status"].as_str(), again["duplicate"].as_bool()),
        (200, Some("buffered"), Some(true))
    );

    system.send_event(&order_placed("k-early")).await;
    let r = system
        .record_until("order-review", "k-early", "the buffered callback applied", |r| {
            r.state == State::Waiting { step: 1 }
        })
        .await;
    assert_eq!(r.history.iter().filter(|a| a.cause == Cause::Complete).count(), 1);
    assert_eq!(resumes(&system, "k-early").await, 1);
    let (w, k) = names("k-early");
    let inbox = system.store.trace(&w, &k).await.unwrap().inbox;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].status, InboxStatus::Applied);
    system.stop().await;
}

/// The lost wake-up race: a callback and the step_ready that makes its step wait land at the
/// same moment, 50 times. Each time there is exactly one resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_callback_racing_step_ready_resumes_exactly_once_in_each_of_50_rounds() {
    captured();
    let system = start_system_with(CONFIG, &["ProgressFunction"]).await;
    let progress = system.baton.handlers.get("ProgressFunction").expect("progress").clone();
    let progress_url = system.queue_url("ProgressQueue");
    for round in 0..50 {
        let key = format!("k-race-{round}");
        system.send_event(&order_placed(&key)).await;
        // Take this round's step_ready off the progress queue by hand.
        let message = eventually("the step_ready message", WAIT, || async {
            let out = system
                .sqs
                .receive_message()
                .queue_url(&progress_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .unwrap();
            let mut found = None;
            for m in out.messages.unwrap_or_default() {
                let body: Value = serde_json::from_str(m.body().unwrap_or("{}")).unwrap_or_default();
                system
                    .sqs
                    .delete_message()
                    .queue_url(&progress_url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
                if body["key"] == key.as_str() && body["kind"] == "step_ready" && body["step"] == 0 {
                    found = Some(m);
                }
            }
            found
        })
        .await;
        let event = baton_local::mapping::to_event(&[message], "arn:aws:sqs:us-east-1:123456789012:progress");
        let body = cb(&key, "manual-review", "succeeded", json!({"decision": "ok", "reviewer": "race"}));
        let id = format!("cb-{key}");
        let (ready, (status, answer)) =
            tokio::join!(system.deliver(&*progress, event), system.callback(&id, &body));
        assert!(ready.batch_item_failures.is_empty(), "round {round}: {ready:?}");
        assert!(status == 200 || status == 202, "round {round}: {status} {answer}");
        let r = system
            .record_until("order-review", &key, "advanced", |r| r.state == State::Advancing { step: 0 })
            .await;
        assert_eq!(r.history.iter().filter(|a| a.cause == Cause::Complete).count(), 1, "round {round}");
        system
            .until(&format!("round {round}: one resume"), || async {
                (resumes(&system, &key).await == 1).then_some(())
            })
            .await;
    }
    // Nothing more arrives late: every round still has exactly one resume, and neither side of
    // the handshake sent a second one (the sweeper may have re-sent one whose first send failed).
    tokio::time::sleep(Duration::from_secs(1)).await;
    for round in 0..50 {
        let key = format!("k-race-{round}");
        assert_eq!(resumes(&system, &key).await, 1, "round {round}");
        assert!(resumes_sent_for_inputs(&key) <= 1, "round {round}: both sides of the handshake resumed");
    }
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_callbacks_after_the_end_or_a_timeout_are_ignored_and_ledgered() {
    captured();
    let quick = CONFIG.replacen("timeout: 1h", "timeout: 1s", 1);
    let system = start_system(&quick).await;
    system.send_event(&order_placed("k-late")).await;
    system.record_until("order-review", "k-late", "timed out", |r| r.state == State::TimedOut).await;
    let (status, body) = system
        .callback("cb-late", &cb("k-late", "manual-review", "succeeded", json!({"decision": "x"})))
        .await;
    assert_eq!(
        (status, body["status"].as_str(), body["reason"].as_str()),
        (200, Some("ignored"), Some("terminal")),
        "{body}"
    );
    // (A step_ready redelivered after the one-second timeout is ledgered `terminal` too.)
    let late: Vec<_> =
        ledger(&system, "k-late").await.into_iter().filter(|(id, _)| id == "cb-late").collect();
    assert_eq!(late, [("cb-late".to_owned(), IgnoreReason::Terminal)]);
    assert_eq!(resumes(&system, "k-late").await, 0);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_outcome_ends_the_workflow_failed() {
    captured();
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("k-fail")).await;
    system.record_until("order-review", "k-fail", "waiting", |r| r.state == State::Waiting { step: 0 }).await;
    let failed = json!({"workflow": "order-review", "key": "k-fail", "step": "manual-review", "outcome": "failed",
        "error": "Rejected", "cause": "fraud suspected"});
    let (status, body) = system.callback("cb-fail", &failed).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("advancing{0}")), "{body}");
    let r = system.record_until("order-review", "k-fail", "failed", |r| r.state == State::Failed).await;
    assert_eq!(r.history.last().unwrap().cause, Cause::ReportFailed);
    system.execution_ended("order-review", "FAILED").await;
    // After the end, the same step's callback is ledgered, not applied.
    let (status, late) =
        system.callback("cb-after", &cb("k-fail", "manual-review", "succeeded", json!({}))).await;
    assert_eq!((status, late["reason"].as_str()), (200, Some("terminal")), "{late}");
    system.stop().await;
}

/// Fault injection: the callback's `advancing` write lands, then the process dies before
/// SendTaskSuccess. The sweeper finds the owed resume and sends it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_advancing_write_and_the_resume_is_repaired_by_the_sweeper() {
    captured();
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("k-crash")).await;
    let waiting = system
        .record_until("order-review", "k-crash", "waiting", |r| r.state == State::Waiting { step: 0 })
        .await;

    // The write half of a callback, then "crash": no effects carried out.
    let written = crash_after_the_advancing_write(&system, &waiting, "cb-crash").await;
    assert_eq!(resumes(&system, "k-crash").await, 0);

    // Too early: a resume in flight is not re-sent.
    let early = system
        .sweep(written.updated_at + baton_core::limits::RESEND_RESUME_AFTER - time::Duration::seconds(1))
        .await;
    assert_eq!(early.repaired, 0);
    let later = written.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1);
    let report = system.sweep(later).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    system
        .record_until("order-review", "k-crash", "the next step waiting", |r| {
            r.state == State::Waiting { step: 1 }
        })
        .await;
    assert_eq!(resumes(&system, "k-crash").await, 1, "exactly one resume");
    // Sweeping again finds nothing owed.
    assert_eq!(system.sweep(later + time::Duration::minutes(5)).await.repaired, 0);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_callback_whose_step_never_waits_expires_into_the_ledger() {
    captured();
    let system = start_system(CONFIG).await;
    let (status, _) = system
        .callback("cb-orphan", &cb("k-orphan", "manual-review", "succeeded", json!({"decision": "x"})))
        .await;
    assert_eq!(status, 202);
    let engine = system.engine();
    assert_eq!(system.sweep(engine.now()).await.expired, 0, "not yet expired");
    // Expiry: the step's timeout (1h) plus the margin.
    let after = engine.now() + time::Duration::hours(2) + time::Duration::minutes(1);
    assert_eq!(system.sweep(after).await.expired, 1);
    assert_eq!(ledger_reasons(&system, "k-orphan").await, [IgnoreReason::BufferExpired]);
    assert_eq!(system.sweep(after).await.expired, 0, "once");
    system.stop().await;
}

/// An early `in_progress` callback whose step began waiting while the drain could not read the
/// inbox (every attempt failed, and the report is not redelivered before the buffer expires).
/// The sweeper finds the step waiting: it drains the input (the data merged, the heartbeat
/// sent) instead of ledgering it expired. This is also the evidence, for the policy contract,
/// that the sweeper's role needs the inbox Query and SendTaskHeartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_buffer_whose_step_waits_is_drained_by_the_sweeper_not_expired() {
    captured();
    let emulator = baton_tests::Emulator::from_env();
    // The review has a heartbeat, so the emulator takes one (it refuses a heartbeat for a task
    // without HeartbeatSeconds).
    let config = CONFIG.replacen("timeout: 1h", "timeout: 1h\n        heartbeat: 30m", 1);
    let system = start_system_with(&config, &["ProgressFunction"]).await;
    let progress = system.baton.handlers.get("ProgressFunction").expect("progress").clone();
    let key = "k-stranded";
    system.send_event(&order_placed(key)).await;
    system.record_until("order-review", key, "pending", |r| r.state == State::Pending).await;
    let beat = cb(key, "manual-review", "in_progress", json!({"reviewer": "ann"}));
    let (status, body) = system.callback("cb-stranded-beat", &beat).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("buffered")), "{body}");

    let url = system.queue_url("ProgressQueue");
    let ready = eventually("step_ready", WAIT, || async {
        let out = system.sqs.receive_message().queue_url(&url).wait_time_seconds(1).send().await.unwrap();
        out.messages.filter(|m| !m.is_empty())
    })
    .await;
    let attempts = baton_aws::sdk::SDK_MAX_ATTEMPTS;
    let rule = emulator
        .inject(json!({"operation": "DynamoDB_20120810.Query", "match": [key, "INBOX#"],
            "times": attempts, "status": 500, "code": "InternalServerError"}))
        .await;
    let handled = progress.handle(baton_local::mapping::to_event(&ready, "arn:aws:sqs:us-east-1:1:p")).await;
    assert_eq!(handled.batch_item_failures.len(), 1, "the drain failed: {handled:?}");
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts));
    let waiting = system.record("order-review", key).await.expect("the record");
    assert_eq!(waiting.state, State::Waiting { step: 0 }, "the step waits, its inbox undrained");
    assert!(waiting.waits[0].inputs.is_empty(), "{:?}", waiting.waits);

    // Past the buffer's expiry (the step's timeout, 1h, plus the margin).
    let after = system.engine().now() + time::Duration::hours(2) + time::Duration::minutes(1);
    assert_eq!(system.sweep(after).await.expired, 0, "drained, not expired");
    let (w, k) = names(key);
    let inbox = system.store.inbox(&w, &k, "manual-review").await.unwrap();
    assert_eq!(inbox.iter().map(|e| e.status).collect::<Vec<_>>(), [InboxStatus::Applied]);
    let record = system.record("order-review", key).await.expect("the record");
    assert_eq!(record.waits[0].inputs.get("reviewer"), Some(&json!("ann")), "the data merged");
    assert_eq!(record.state, State::Waiting { step: 0 });
    assert!(ledger_reasons(&system, key).await.is_empty(), "nothing ledgered");
    let beats = baton_tests::logs::lines_about(key, "resume delivered");
    assert!(beats.iter().any(|l| l["fields"]["resume"] == "heartbeat"), "the heartbeat went out: {beats:?}");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_documented_errors() {
    captured();
    let system = start_system(CONFIG).await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let secrets = baton_core::domain::webhook::Secrets::parse(TEST_SECRET).unwrap();
    let signed = |id: &str, ts: i64, body: &str| {
        vec![
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", secrets.sign(id, ts, body.as_bytes())),
        ]
    };
    let good = cb("k-err", "manual-review", "succeeded", json!({})).to_string();

    // 401: bad signature, stale timestamp, missing headers.
    let mut forged = signed("e1", now, &good);
    forged[2].1 = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into();
    let (s, b) = system.post(&forged, good.clone().into_bytes()).await;
    assert_eq!((s, b["error"].as_str()), (401, Some("invalid_signature")));
    let (s, b) = system.post(&signed("e2", now - 600, &good), good.clone().into_bytes()).await;
    assert_eq!((s, b["error"].as_str()), (401, Some("stale_timestamp")));
    let (s, b) = system.post(&[], good.clone().into_bytes()).await;
    assert_eq!((s, b["error"].as_str()), (401, Some("missing_signature_header")));
    // 400 naming the field.
    let bad =
        json!({"workflow": "order-review", "key": "k-err", "step": "manual-review", "outcome": "maybe"})
            .to_string();
    let (s, b) = system.post(&signed("e3", now, &bad), bad.into_bytes()).await;
    assert_eq!(
        (s, b["error"].as_str(), b["field"].as_str()),
        (400, Some("invalid_body"), Some("outcome")),
        "{b}"
    );
    // 404: unknown workflow or step.
    let (s, b) = system
        .callback("e4", &json!({"workflow": "nope", "key": "k", "step": "s", "outcome": "succeeded"}))
        .await;
    assert_eq!((s, b["error"].as_str()), (404, Some("unknown_workflow")));
    let (s, b) = system.callback("e5", &cb("k-err", "no-such-step", "succeeded", json!({}))).await;
    assert_eq!((s, b["error"].as_str()), (404, Some("unknown_step")));
    // 413: over the limit.
    let huge = cb(
        "k-err",
        "manual-review",
        "succeeded",
        json!({"blob": "x".repeat(baton_core::use_cases::callback::MAX_BODY_BYTES)}),
    )
    .to_string();
    let (s, b) = system.post(&signed("e6", now, &huge), huge.into_bytes()).await;
    assert_eq!((s, b["error"].as_str()), (413, Some("body_too_large")));
    // None of them left a trace.
    let (w, k) = names("k-err");
    let trace = system.store.trace(&w, &k).await.unwrap();
    assert!(trace.receipts.is_empty() && trace.inbox.is_empty() && trace.record.is_none(), "{trace:?}");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intake_redelivery_of_a_step_event_is_a_duplicate_not_a_second_input() {
    captured();
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("k-ev")).await;
    system.record_until("order-review", "k-ev", "waiting", |r| r.state == State::Waiting { step: 0 }).await;
    let (status, body) = system
        .callback(
            "cb-ev",
            &cb("k-ev", "manual-review", "succeeded", json!({"decision": "y", "reviewer": "z"})),
        )
        .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    system
        .record_until("order-review", "k-ev", "payment waiting", |r| r.state == State::Waiting { step: 1 })
        .await;
    let settled = json!({"specversion": "1.0", "id": "pay-ev", "source": "psp", "type": "payment.settled",
        "subject": "k-ev", "data": {"payment_ref": "p-1"}})
    .to_string();
    let intake = system.baton.handlers.get("IntakeFunction").unwrap().clone();
    let event = |n: u32| {
        let mut e = SqsEvent::default();
        let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
        m.message_id = Some(format!("m-{n}"));
        m.body = Some(settled.clone());
        e.records.push(m);
        e
    };
    let (a, b) = tokio::join!(system.deliver(&*intake, event(1)), system.deliver(&*intake, event(2)));
    assert!(a.batch_item_failures.is_empty() && b.batch_item_failures.is_empty());
    system.record_until("order-review", "k-ev", "succeeded", |r| r.state == State::Succeeded).await;
    assert_eq!(resumes(&system, "k-ev").await, 2, "one per step");
    system.stop().await;
}

/// An owed resume whose execution ended meanwhile (the step timed out while the resume was
/// owed): the sweeper's re-send finds the token gone and classifies it, without error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_token_is_gone_is_classified_not_failed() {
    captured();
    let quick = CONFIG.replacen("timeout: 1h", "timeout: 2s", 1);
    // Progress is paused after the step waits, so the timeout report is not processed.
    let system = start_system_with(&quick, &["ProgressFunction"]).await;
    let progress = system.baton.handlers.get("ProgressFunction").unwrap().clone();
    system.send_event(&order_placed("k-gone")).await;
    let url = system.queue_url("ProgressQueue");
    let ready = eventually("step_ready", WAIT, || async {
        let out = system.sqs.receive_message().queue_url(&url).wait_time_seconds(1).send().await.unwrap();
        out.messages.filter(|m| !m.is_empty())
    })
    .await;
    let handled =
        system.deliver(&*progress, baton_local::mapping::to_event(&ready, "arn:aws:sqs:us-east-1:1:p")).await;
    assert!(handled.batch_item_failures.is_empty(), "{handled:?}");
    let waiting = system
        .record_until("order-review", "k-gone", "waiting", |r| r.state == State::Waiting { step: 0 })
        .await;

    // The advancing write lands; the process "crashes" before the resume; the step times out.
    let written = crash_after_the_advancing_write(&system, &waiting, "cb-gone").await;
    eventually("the execution timed out", WAIT, || async {
        system.executions("order-review").await.into_iter().find(|e| e.status().as_str() == "FAILED")
    })
    .await;

    let later = written.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1);
    let report = system.sweep(later).await;
    assert_eq!(report.repaired, 1);
    let gone = baton_tests::logs::lines_about("k-gone", "token gone");
    assert!(!gone.is_empty(), "the re-sent resume found the token gone");
    assert!(gone.iter().all(|l| l["fields"]["classified"] == "execution_ended"), "{gone:?}");
    assert_eq!(resumes(&system, "k-gone").await, 0);
    system.stop().await;
}

/// `in_progress` callbacks are heartbeats: they keep a step with `heartbeat` alive well past its
/// heartbeat period, and merge their partial data; the final callback completes the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_callbacks_keep_a_step_with_a_heartbeat_alive_and_merge_their_data() {
    captured();
    const HEARTBEAT: u64 = 30;
    const BEATS: u64 = 6;
    let config = CONFIG.replacen("timeout: 1h", &format!("timeout: 1h\n        heartbeat: {HEARTBEAT}s"), 1);
    let system = start_system(&config).await;
    system.send_event(&order_placed("k-beat")).await;
    system.record_until("order-review", "k-beat", "waiting", |r| r.state == State::Waiting { step: 0 }).await;

    // A heartbeat every six seconds, for more than the heartbeat period: without them the step
    // would have timed out after thirty. Each beat has over twenty seconds to spare, a retried
    // 503 included, on a loaded machine.
    let started = std::time::Instant::now();
    for beat in 0..BEATS {
        tokio::time::sleep(Duration::from_secs(if beat == 0 { 2 } else { 6 })).await;
        let (status, body) = system
            .callback(
                &format!("cb-beat-{beat}"),
                &cb("k-beat", "manual-review", "in_progress", json!({"progress": beat})),
            )
            .await;
        assert_eq!((status, body["state"].as_str()), (200, Some("waiting{0}")), "beat {beat}: {body}");
    }
    assert!(
        started.elapsed() > Duration::from_secs(HEARTBEAT),
        "the beats spanned more than the heartbeat period"
    );
    let alive = system.record("order-review", "k-beat").await.unwrap();
    assert_eq!(alive.state, State::Waiting { step: 0 }, "kept alive by the heartbeats");
    assert_eq!(alive.waits[0].inputs["progress"], BEATS - 1, "partial data merged, the latest winning");
    assert_eq!(system.executions("order-review").await[0].status().as_str(), "RUNNING");
    let beats = baton_tests::logs::lines_about("k-beat", "resume delivered");
    assert_eq!(
        beats.iter().filter(|l| l["fields"]["resume"] == "heartbeat").count() as u64,
        BEATS,
        "one heartbeat per callback"
    );

    let (status, body) = system
        .callback(
            "cb-beat-done",
            &cb("k-beat", "manual-review", "succeeded", json!({"decision": "ok", "reviewer": "eve"})),
        )
        .await;
    assert_eq!((status, body["state"].as_str()), (200, Some("advancing{0}")), "{body}");
    system
        .record_until("order-review", "k-beat", "payment waiting", |r| r.state == State::Waiting { step: 1 })
        .await;
    system.stop().await;
}

/// A callback that completes a step whose execution has already timed out (its report not yet
/// processed): the input is applied to the record, the resume finds the token gone, and the
/// callback function classifies why from the execution's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_whose_token_is_gone_is_applied_and_the_gone_token_classified() {
    captured();
    let quick = CONFIG.replacen("timeout: 1h", "timeout: 2s", 1);
    let system = start_system_with(&quick, &["ProgressFunction"]).await;
    let progress = system.baton.handlers.get("ProgressFunction").unwrap().clone();
    system.send_event(&order_placed("k-late-cb")).await;
    let url = system.queue_url("ProgressQueue");
    let ready = eventually("step_ready", WAIT, || async {
        let out = system.sqs.receive_message().queue_url(&url).wait_time_seconds(1).send().await.unwrap();
        out.messages.filter(|m| !m.is_empty())
    })
    .await;
    let handled =
        system.deliver(&*progress, baton_local::mapping::to_event(&ready, "arn:aws:sqs:us-east-1:1:p")).await;
    assert!(handled.batch_item_failures.is_empty(), "{handled:?}");
    eventually("the execution timed out", WAIT, || async {
        system.executions("order-review").await.into_iter().find(|e| e.status().as_str() == "FAILED")
    })
    .await;

    let (status, body) = system
        .callback(
            "cb-late-cb",
            &cb("k-late-cb", "manual-review", "succeeded", json!({"decision": "ok", "reviewer": "x"})),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str(), body["state"].as_str()),
        (200, Some("applied"), Some("advancing{0}")),
        "{body}"
    );
    let gone = baton_tests::logs::lines_about("k-late-cb", "token gone");
    assert!(!gone.is_empty(), "the resume found the token gone");
    assert!(gone.iter().all(|l| l["fields"]["classified"] == "execution_ended"), "{gone:?}");
    assert_eq!(resumes(&system, "k-late-cb").await, 0);
    system.stop().await;
}
