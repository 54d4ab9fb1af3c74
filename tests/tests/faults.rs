//! What a sender is told when AWS fails in the middle of a callback, on the emulator with its
//! fault switch (`tools/emulator.py`): every answer is true, and a retry gets the answer the
//! first attempt earned (issue 10).
//!
//! Each fault rule matches this test's own key, so tests sharing the emulator are untouched.

use baton_core::domain::lifecycle::{self, State};
use baton_tests::logs::{captured, resumes_sent_for_inputs};
use baton_tests::system::{System, WAIT, eventually, start_system};
use baton_tests::{Emulator, approval, order_placed};
use serde_json::{Value, json};

const CONFIG: &str = baton_tests::ORDER_REVIEW;

/// The callback that completes the first step; `decision` carries the key, so a fault rule can
/// match this callback's SendTaskSuccess by its output.
fn review(key: &str) -> Value {
    approval(key, &format!("approve-{key}"))
}

async fn waiting(system: &System, key: &str, step: u32) -> lifecycle::Record {
    system
        .until(&format!("{key} waiting{{{step}}}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step })
        })
        .await
}

/// The record write lands, then every attempt of SendTaskSuccess fails. The input is applied
/// and its resume is owed, so the sender is told `applied`, not "nothing was applied"; its retry
/// gets that answer again; the sweeper delivers the owed resume once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_fails_after_the_write_is_answered_applied_and_delivered_by_the_sweeper() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = "k-owed";
    system.send_event(&order_placed(key)).await;
    waiting(&system, key, 0).await;

    let rule = emulator
        .inject(json!({"operation": "AWSStepFunctions.SendTaskSuccess", "match": [format!("approve-{key}")],
            "times": baton_aws::sdk::SDK_MAX_ATTEMPTS, "status": 500, "code": "InternalServerError"}))
        .await;
    let first = system.callback_once("cb-owed", &review(key)).await;
    assert_eq!(
        emulator.fault_hits(rule).await,
        u64::from(baton_aws::sdk::SDK_MAX_ATTEMPTS),
        "every attempt failed"
    );
    assert_eq!(
        (
            first.status,
            first.body["status"].as_str(),
            first.body["state"].as_str(),
            first.body["duplicate"].as_bool()
        ),
        (200, Some("applied"), Some("advancing{0}"), Some(false)),
        "the write landed, so the answer says applied: {}",
        first.body
    );
    let record = system.record("order-review", key).await.expect("the record");
    assert_eq!(record.state, State::Advancing { step: 0 }, "the resume is owed");
    assert_eq!(system.resumes("order-review", key).await, 0);

    let again = system.callback_once("cb-owed", &review(key)).await;
    let mut same = again.body.clone();
    same["duplicate"] = json!(false);
    assert_eq!((again.status, again.body["duplicate"].as_bool()), (200, Some(true)), "{}", again.body);
    assert_eq!(same, first.body, "the retry gets the first answer");

    let report = system
        .sweep(record.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1))
        .await;
    assert_eq!(report.repaired, 1, "{report:?}");
    waiting(&system, key, 1).await;
    assert_eq!(system.resumes("order-review", key).await, 1, "exactly one resume");
    system.stop().await;
}

/// The record write lands but its answer is lost (a 500 after the write); the SDK's retry finds
/// the condition failed against that very write. It counts as written: the sender is told
/// `applied` (not a duplicate), and the resume goes out at once, not a grace period later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_write_whose_answer_is_lost_counts_as_written_and_resumes_at_once() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = "k-lost";
    system.send_event(&order_placed(key)).await;
    waiting(&system, key, 0).await;

    let rule = emulator
        .inject(json!({"operation": "DynamoDB_20120810.PutItem", "match": [key, r#"{"S":"advancing"}"#],
            "times": 1, "when": "after", "status": 500, "code": "InternalServerError"}))
        .await;
    let answer = system.callback_once("cb-lost", &review(key)).await;
    assert_eq!(emulator.fault_hits(rule).await, 1, "the advancing write's answer was lost once");
    assert_eq!(
        (answer.status, answer.body["status"].as_str(), answer.body["duplicate"].as_bool()),
        (200, Some("applied"), Some(false)),
        "{}",
        answer.body
    );
    // No sweeper here: the resume must have gone out with the callback itself.
    eventually("the next step waiting", WAIT, || async {
        system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step: 1 })
    })
    .await;
    assert_eq!(resumes_sent_for_inputs(key), 1, "the callback sent the resume");
    assert_eq!(system.resumes("order-review", key).await, 1);
    system.stop().await;
}

/// Every attempt of the record write fails after reaching the table: baton cannot know whether
/// it landed. The 503 says so (`maybe_applied`), never "nothing was applied"; the retry with the
/// same webhook-id finds the input applied and answers `applied`, as the first attempt earned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_unknown_outcome_gets_a_503_that_says_so_and_the_retry_answers_applied() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = "k-unknown";
    system.send_event(&order_placed(key)).await;
    waiting(&system, key, 0).await;

    let rule = emulator
        .inject(json!({"operation": "DynamoDB_20120810.PutItem", "match": [key, r#"{"S":"advancing"}"#],
            "times": baton_aws::sdk::SDK_MAX_ATTEMPTS, "when": "after", "status": 500, "code": "InternalServerError"}))
        .await;
    let first = system.callback_once("cb-unknown", &review(key)).await;
    assert_eq!(emulator.fault_hits(rule).await, u64::from(baton_aws::sdk::SDK_MAX_ATTEMPTS));
    assert_eq!(
        (first.status, first.body["error"].as_str(), first.body["maybe_applied"].as_bool()),
        (503, Some("unavailable"), Some(true)),
        "{}",
        first.body
    );
    assert!(first.retry_after.is_some(), "a 503 carries Retry-After");
    assert!(!first.body["message"].as_str().unwrap_or("").contains("nothing was applied"), "{}", first.body);
    let record = system.record("order-review", key).await.expect("the record");
    assert_eq!(record.state, State::Advancing { step: 0 }, "in fact the first attempt's write landed");

    let (status, retry) = system.callback("cb-unknown", &review(key)).await;
    assert_eq!(
        (status, retry["status"].as_str(), retry["state"].as_str()),
        (200, Some("applied"), Some("advancing{0}")),
        "the retry answers as the first attempt earned: {retry}"
    );
    waiting(&system, key, 1).await;
    assert_eq!(system.resumes("order-review", key).await, 1, "exactly one resume");
    system.stop().await;
}

/// A failure before anything is written: the 503 says nothing was applied, and that is true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_before_any_write_gets_a_503_that_says_nothing_was_applied() {
    captured();
    let emulator = Emulator::from_env();
    let system = start_system(CONFIG).await;
    let key = "k-nothing";
    system.send_event(&order_placed(key)).await;
    let before = waiting(&system, key, 0).await;

    // The record's load (a consistent Query of this key's record and the item after it) fails on
    // every attempt.
    let rule = emulator
        .inject(json!({"operation": "DynamoDB_20120810.Query", "match": [format!("WF#order-review#{key}"), r#"{"S":"RECORD"}"#],
            "times": baton_aws::sdk::SDK_MAX_ATTEMPTS, "status": 400, "code": "ThrottlingException"}))
        .await;
    let first = system.callback_once("cb-nothing", &review(key)).await;
    assert_eq!(emulator.fault_hits(rule).await, u64::from(baton_aws::sdk::SDK_MAX_ATTEMPTS));
    assert_eq!((first.status, first.body["maybe_applied"].as_bool()), (503, Some(false)), "{}", first.body);
    assert!(first.body["message"].as_str().unwrap_or("").contains("nothing was applied"), "{}", first.body);
    assert_eq!(system.record("order-review", key).await, Some(before), "and indeed nothing changed");

    let (status, retry) = system.callback("cb-nothing", &review(key)).await;
    assert_eq!(
        (status, retry["status"].as_str(), retry["duplicate"].as_bool()),
        (200, Some("applied"), Some(false)),
        "{retry}"
    );
    waiting(&system, key, 1).await;
    system.stop().await;
}
