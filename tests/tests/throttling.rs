//! AWS throttling baton, on the emulator with its throttling switch (`tools/emulator.py`,
//! `"throttle": true`: the error each service throttles with, as AWS sends it): nothing is lost
//! and nothing is dead-lettered. Each rule matches this test's own keys.

use std::time::Duration;

use baton_core::domain::lifecycle::State;
use baton_tests::logs::captured;
use baton_tests::system::{System, start_system, start_system_env};
use baton_tests::{Emulator, approval, order_placed};
use serde_json::json;

const CONFIG: &str = baton_tests::ORDER_REVIEW;

async fn state_is(system: &System, key: &str, state: State) {
    system
        .until(&format!("{key} {state}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == state).map(|_| ())
        })
        .await;
}

/// The bodies in this stack's dead-letter queue `queue`.
async fn dead_letters(system: &System, queue: &str) -> Vec<String> {
    system.drain_queue(queue).await.into_iter().filter_map(|m| m.body).collect()
}

/// Step Functions throttles the next `times` resumes (SendTaskSuccess) whose request carries
/// `matching`. Returns the rule, to count its hits.
async fn throttle_resumes(emulator: &Emulator, matching: &str, times: u32) -> u64 {
    emulator
        .inject(
            json!({"operation": "AWSStepFunctions.SendTaskSuccess", "match": [matching], "throttle": true,
            "times": times}),
        )
        .await
}

/// Step Functions refuses every start of this execution for a while, over the account's quota of
/// open executions (`ExecutionLimitExceeded`): each receive retries the start with the SDK's
/// jittered backoff, as a throttle, then fails; on the last receive a copy goes back to the
/// intake queue instead of the dead-letter queue; once the quota allows, the workflow starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_over_quota_on_every_receive_goes_back_to_its_queue_and_starts_later() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system_env(CONFIG, &[("BATON_REQUEUE_DELAY_SECONDS", "1")]).await;
    let key = baton_tests::unique_name("quota");
    let receives = u64::from(baton_core::ports::dead_letters::DEFAULT_MAX_RECEIVE_COUNT);
    let refusals = receives * u64::from(baton_aws::sdk::SDK_MAX_ATTEMPTS);
    let rule = emulator
        .inject(json!({"operation": "AWSStepFunctions.StartExecution", "match": [key], "throttle": true,
            "code": "ExecutionLimitExceeded", "message": "Execution limit exceeded", "times": refusals}))
        .await;
    system.send_event(&order_placed(&key)).await;
    state_is(&system, &key, State::Waiting { step: 0 }).await;
    assert_eq!(
        emulator.fault_hits(rule).await,
        refusals,
        "refused on every attempt of each of the message's receives: the SDK retried it as a throttle"
    );
    let requeued = baton_tests::logs::captured()
        .lines()
        .into_iter()
        .filter(|l| l["fields"]["message"] == "throttled on every receive; sent back to its queue")
        .filter(|l| l["fields"]["error_type"] == "stepfunctions_throttled")
        .count();
    assert!(requeued >= 1, "the requeue is logged, with the throttle's error type");
    assert_eq!(system.executions("order-review").await.iter().filter(|e| e.name().contains(&key)).count(), 1);
    assert_eq!(dead_letters(&system, "IntakeDLQ").await, Vec::<String>::new(), "nothing dead-lettered");
    system.stop().await;
}

/// A start refused over the open executions quota on all but the last of the SDK's attempts is
/// carried by the SDK's own backoff (baton's Step Functions client retries
/// `ExecutionLimitExceeded` as a throttle): the first delivery starts the workflow, and no effect
/// failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_over_quota_is_retried_by_the_sdk_before_the_queue() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = baton_tests::unique_name("quota-sdk");
    let attempts = baton_aws::sdk::SDK_MAX_ATTEMPTS;
    let rule = emulator
        .inject(json!({"operation": "AWSStepFunctions.StartExecution", "match": [key], "throttle": true,
            "code": "ExecutionLimitExceeded", "message": "Execution limit exceeded", "times": attempts - 1}))
        .await;
    system.send_event(&order_placed(&key)).await;
    state_is(&system, &key, State::Waiting { step: 0 }).await;
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts - 1), "refused, then retried by the SDK");
    let failed = baton_tests::logs::lines_about(&key, "an effect failed");
    assert!(failed.is_empty(), "the SDK's retries carried it, not a redelivery: {failed:?}");
    system.stop().await;
}

/// DynamoDB throttles half of the record writes of a burst of workflows, as a hot partition
/// does (`ProvisionedThroughputExceededException`) and as the account's request limit does
/// (`RequestLimitExceeded`): the SDK's backoff and SQS's redelivery carry every one through,
/// none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_with_half_its_record_writes_throttled_starts_every_workflow_once() {
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let prefix = baton_tests::unique_name("burst");
    let hot = emulator
        .inject(
            json!({"operation": "DynamoDB_20120810.PutItem", "match": [format!("{prefix}-hot"), "RECORD"],
            "throttle": true, "share": 0.5}),
        )
        .await;
    let limited = emulator
        .inject(
            json!({"operation": "DynamoDB_20120810.PutItem", "match": [format!("{prefix}-limit"), "RECORD"],
            "throttle": true, "share": 0.5, "code": "com.amazonaws.dynamodb.v20120810#RequestLimitExceeded",
            "message": "Throughput exceeds the current throughput limit for your account."}),
        )
        .await;
    let keys: Vec<String> =
        (0..8).map(|i| format!("{prefix}-{}-{i}", if i % 2 == 0 { "hot" } else { "limit" })).collect();
    for key in &keys {
        system.send_event(&order_placed(key)).await;
    }
    for key in &keys {
        state_is(&system, key, State::Waiting { step: 0 }).await;
    }
    assert!(emulator.fault_hits(hot).await > 0, "the writes were throttled");
    assert!(emulator.fault_hits(limited).await > 0, "the writes were over the account's limit");
    let started = system.executions("order-review").await;
    for key in &keys {
        assert_eq!(
            started.iter().filter(|e| e.name().contains(key.as_str())).count(),
            1,
            "{key} started once"
        );
    }
    assert_eq!(dead_letters(&system, "IntakeDLQ").await, Vec::<String>::new(), "nothing dead-lettered");
    system.stop().await;
}

/// A callback whose record DynamoDB throttles past the SDK's retries gets 503 with
/// `Retry-After`, and its retry is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_callback_gets_503_with_retry_after_and_its_retry_is_applied() {
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = baton_tests::unique_name("cb-throttle");
    system.send_event(&order_placed(&key)).await;
    state_is(&system, &key, State::Waiting { step: 0 }).await;
    let attempts = baton_aws::sdk::SDK_MAX_ATTEMPTS;
    let rule = emulator
        .inject(json!({"operation": "DynamoDB_20120810.Query", "match": [format!("WF#order-review#{key}"), r#"{"S":"RECORD"}"#],
            "throttle": true, "times": attempts}))
        .await;
    let review = approval(&key, "approve");
    let first = system.callback_once("cb-throttled", &review).await;
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts), "the SDK retried, with backoff");
    assert_eq!(first.status, 503, "{}", first.body);
    assert!(first.retry_after.is_some_and(|s| s >= 1), "with Retry-After: {:?}", first.retry_after);
    tokio::time::sleep(Duration::from_secs(first.retry_after.unwrap_or(1))).await;
    let (status, again) = system.callback("cb-throttled", &review).await;
    assert_eq!((status, again["status"].as_str()), (200, Some("applied")), "{again}");
    state_is(&system, &key, State::Waiting { step: 1 }).await;
    system.stop().await;
}

/// Step Functions throttles the resumes (`ThrottlingException`, its SendTask* token bucket: the
/// limit that binds first, docs/SCALE.md). A resume throttled on all but its last attempt is
/// carried by the SDK's backoff; an event whose resume is throttled on every attempt comes back
/// through its queue; a callback's resume throttled on every attempt is owed by the record (the
/// write landed, so the sender is told `applied`) and the sweeper delivers it. Nothing is lost,
/// nothing dead-lettered, and each step is resumed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_resumes_are_retried_then_owed_and_every_step_is_resumed_once() {
    captured();
    let emulator = Emulator::from_env();
    let config = CONFIG.replace(
        "requires: [payment_ref]\n",
        "requires: [payment_ref]\n        accepts_events: { type: [\"payment.settled\"] }\n",
    );
    let system = start_system(&config).await;
    let key = baton_tests::unique_name("resume-throttle");
    let attempts = baton_aws::sdk::SDK_MAX_ATTEMPTS;
    system.send_event(&order_placed(&key)).await;
    state_is(&system, &key, State::Waiting { step: 0 }).await;

    // Throttled on all but the last attempt: the SDK carries it.
    let decision = format!("approve-{key}");
    let rule = throttle_resumes(&emulator, &decision, attempts - 1).await;
    let review = approval(&key, &decision);
    let (status, body) = system.callback("cb-resume-throttled", &review).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts - 1), "the SDK retried the throttle");
    state_is(&system, &key, State::Waiting { step: 1 }).await;

    // The payment event's resume, throttled on every attempt of its first delivery.
    let payment = format!("pay-{key}");
    let rule = throttle_resumes(&emulator, &payment, attempts).await;
    let settled = json!({"specversion": "1.0", "id": format!("settled-{key}"), "source": "bank",
        "type": "payment.settled", "subject": key, "data": {"payment_ref": payment}})
    .to_string();
    system.send_event(&settled).await;
    state_is(&system, &key, State::Succeeded).await;
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts), "throttled on every attempt once");
    assert_eq!(system.resumes("order-review", &key).await, 2, "one resume per step");

    // Another order's review whose resume is throttled on every attempt: the write landed, so the
    // sender is told `applied`; the record owes the resume, and the sweeper delivers it, once.
    let other = baton_tests::unique_name("resume-owed");
    system.send_event(&order_placed(&other)).await;
    state_is(&system, &other, State::Waiting { step: 0 }).await;
    let decision = format!("approve-{other}");
    let rule = throttle_resumes(&emulator, &decision, attempts).await;
    let review = approval(&other, &decision);
    let first = system.callback_once("cb-resume-owed", &review).await;
    assert_eq!(
        (first.status, first.body["status"].as_str(), first.body["state"].as_str()),
        (200, Some("applied"), Some("advancing{0}")),
        "{}",
        first.body
    );
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts), "every attempt throttled");
    let owed = system.record("order-review", &other).await.expect("the record");
    assert_eq!(owed.state, State::Advancing { step: 0 }, "the resume is owed");
    let report = system
        .sweep(owed.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1))
        .await;
    assert_eq!(report.repaired, 1, "{report:?}");
    state_is(&system, &other, State::Waiting { step: 1 }).await;
    assert_eq!(system.resumes("order-review", &other).await, 1, "resumed once");
    assert_eq!(dead_letters(&system, "IntakeDLQ").await, Vec::<String>::new(), "nothing dead-lettered");
    assert_eq!(dead_letters(&system, "ProgressDLQ").await, Vec::<String>::new(), "nothing dead-lettered");
    system.stop().await;
}
