//! End to end, on the emulator: a step with `retry` runs a failed attempt again, inside the
//! same task-token wait, once its backoff has passed.
//!
//! - it fails twice and then succeeds: three tasks, each with its own id and attempt number;
//! - it fails on every attempt: the workflow ends `failed`;
//! - a failure marked not retryable fails it at once;
//! - a late callback for attempt 1 that arrives during attempt 2 is ignored and ledgered;
//! - a parallel branch that fails once retries on its own while its sibling goes on.

use baton_core::domain::lifecycle::{IgnoreReason, Record, State, Wait};
use baton_tests::order_placed;
use baton_tests::system::{System, start_system};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review {key}", queue: reviews }
        requires: [decision]
        timeout: 1h
        retry: { attempts: 3, backoff: 2s }
      - name: payment
        requires: [payment_ref]
        timeout: 1h
"#;

fn review(key: &str, outcome: &str, attempt: Option<u32>) -> Value {
    let mut body = json!({"workflow": "order-review", "key": key, "step": "manual-review", "outcome": outcome,
        "data": {"decision": "approve"}});
    if outcome == "failed" {
        body["error"] = json!("ReviewerUnavailable");
        body["cause"] = json!("the reviewer's system timed out");
    }
    if let Some(n) = attempt {
        body["attempt"] = json!(n);
    }
    body
}

/// The review task of each attempt, in the order they went out: (task id, attempt, previous
/// error).
async fn review_tasks(system: &System, expected: usize) -> Vec<(String, u64, Value)> {
    let tasks = system.published_tasks(expected).await;
    tasks
        .iter()
        .map(|t| {
            let d = &t["data"];
            (
                d["task_id"].as_str().unwrap_or_default().to_owned(),
                d["attempt"].as_u64().unwrap_or(0),
                d["previous_error"].clone(),
            )
        })
        .collect()
}

/// Fails the running attempt, then has the sweeper open the next one once its backoff passed.
async fn fail_attempt(system: &System, key: &str, n: u32) {
    let answer =
        system.answered(&format!("{key}-fail-{n}"), review(key, "failed", Some(n)), (200, "applied")).await;
    assert_eq!(answer["state"], "waiting{0}", "attempt {n} failed, another is due: {answer}");
    let r = system.record("order-review", key).await.unwrap();
    let due = r.step_wait().and_then(Wait::task_due).expect("the next attempt is due");
    // Before its backoff: nothing goes out.
    system.sweep(due - Duration::milliseconds(500)).await;
    let r = system.record("order-review", key).await.unwrap();
    assert_eq!(r.step_wait().and_then(Wait::task_due), Some(due));
    system.sweep(due.max(OffsetDateTime::now_utc())).await;
    system
        .record_until("order-review", key, "the next attempt opened", |r| {
            r.step_wait().is_some_and(|w| w.attempt() == n + 1 && w.task_due().is_none())
        })
        .await;
}

/// Starts the workflow for `key` and waits for its review step.
async fn waiting_on_review(system: &System, key: &str) {
    system.send_event(&order_placed(key)).await;
    system
        .record_until("order-review", key, "waiting on review", |r| r.state == State::Waiting { step: 0 })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_twice_and_then_succeeds_moves_on() {
    let system = start_system(CONFIG).await;
    let key = "k-twice";
    waiting_on_review(&system, key).await;
    fail_attempt(&system, key, 1).await;
    fail_attempt(&system, key, 2).await;
    system.answered("k-twice-ok", review(key, "succeeded", Some(3)), (200, "applied")).await;
    let r = system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 1 })
        .await;
    assert!(r.waits[0].failed.is_empty(), "the next step starts on its first attempt");
    let tasks = review_tasks(&system, 3).await;
    let base = "order-review/k-twice/g1/manual-review";
    assert_eq!(
        tasks.iter().map(|(id, n, _)| (id.as_str(), *n)).collect::<Vec<_>>(),
        [(base, 1), (&*format!("{base}/a2"), 2), (&*format!("{base}/a3"), 3)]
    );
    assert_eq!(tasks[1].2, json!("ReviewerUnavailable: the reviewer's system timed out"));
    // One execution, one wait: Step Functions saw no retry at all.
    assert_eq!(system.resumes("order-review", key).await, 1);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_on_every_attempt_fails_the_workflow() {
    let system = start_system(CONFIG).await;
    let key = "k-never";
    waiting_on_review(&system, key).await;
    fail_attempt(&system, key, 1).await;
    fail_attempt(&system, key, 2).await;
    let last = system.answered("k-never-fail-3", review(key, "failed", Some(3)), (200, "applied")).await;
    assert_eq!(last["state"], "advancing{0}", "{last}");
    let r = system.record_until("order-review", key, "failed", |r| r.state.is_terminal()).await;
    assert_eq!((r.state, r.waits[0].failed.len()), (State::Failed, 2));
    assert_eq!(review_tasks(&system, 3).await.len(), 3, "one task per attempt, no more");
    system.execution_ended("order-review", "FAILED").await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_marked_not_retryable_fails_the_step_at_once() {
    let system = start_system(CONFIG).await;
    let key = "k-final";
    waiting_on_review(&system, key).await;
    let mut body = review(key, "failed", None);
    body["retryable"] = json!(false);
    system.answered("k-final-fail", body, (200, "applied")).await;
    let r = system.record_until("order-review", key, "failed", |r| r.state.is_terminal()).await;
    assert_eq!((r.state, r.waits[0].failed.len(), r.waits[0].task_due()), (State::Failed, 0, None));
    // A sweep long after publishes nothing more.
    system.sweep(OffsetDateTime::now_utc() + Duration::minutes(5)).await;
    assert_eq!(review_tasks(&system, 1).await.len(), 1);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_callback_for_attempt_one_during_attempt_two_is_ignored_and_ledgered() {
    let system = start_system(CONFIG).await;
    let key = "k-late";
    waiting_on_review(&system, key).await;
    fail_attempt(&system, key, 1).await;
    // Attempt 1's worker answers late, as if it had succeeded after all.
    let late = system.answered("k-late-ok-1", review(key, "succeeded", Some(1)), (200, "ignored")).await;
    assert_eq!(late["reason"], "earlier_attempt", "{late}");
    let r = system.record("order-review", key).await.unwrap();
    assert_eq!(
        (r.state, r.waits[0].attempt(), r.waits[0].inputs.is_empty()),
        (State::Waiting { step: 0 }, 2, true)
    );
    let ledger = system.ledger("order-review", key).await;
    assert!(ledger.contains(&("k-late-ok-1".to_owned(), IgnoreReason::EarlierAttempt)), "{ledger:?}");
    // Attempt 2's own answer completes the step.
    system.answered("k-late-ok-2", review(key, "succeeded", Some(2)), (200, "applied")).await;
    system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 1 })
        .await;
    system.stop().await;
}

/// order-review with a parallel group after the review: `fraud-check` has two attempts and a
/// two-second backoff, `credit-check` one attempt.
const GROUP_CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 1h
      - parallel:
          name: checks
          branches:
            - name: fraud-check
              task: { title: "Fraud check {key}", queue: fraud }
              requires: [fraud_score]
              timeout: 1h
              retry: { attempts: 2, backoff: 2s }
            - name: credit-check
              task: { title: "Credit check {key}", queue: credit }
              requires: [credit_ok]
              timeout: 1h
      - name: payment
        requires: [payment_ref]
        timeout: 1h
"#;

fn fraud(key: &str, outcome: &str, attempt: u32) -> Value {
    let mut body = json!({"workflow": "order-review", "key": key, "step": "fraud-check", "outcome": outcome,
        "data": {"fraud_score": 3}, "attempt": attempt});
    if outcome == "failed" {
        body["error"] = json!("ScorerDown");
        body["cause"] = json!("the fraud scorer did not answer");
    }
    body
}

fn fraud_branch(r: &Record) -> &Wait {
    r.wait(1).expect("the fraud-check branch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_branch_that_fails_once_retries_on_its_own_while_its_sibling_goes_on() {
    let system = start_system(GROUP_CONFIG).await;
    let key = "k-branch";
    waiting_on_review(&system, key).await;
    let review = json!({"workflow": "order-review", "key": key, "step": "manual-review", "outcome": "succeeded",
        "data": {"decision": "approve"}});
    system.answered("k-branch-review", review, (200, "applied")).await;
    system
        .record_until("order-review", key, "every branch reached", |r| {
            r.state == State::Waiting { step: 1 } && r.branches().all(|b| b.token.is_some())
        })
        .await;

    // Fraud's first attempt fails: the branch waits out its backoff; the group still waits.
    let answer = system.answered("k-branch-fraud-1", fraud(key, "failed", 1), (200, "applied")).await;
    assert_eq!(answer["state"], "waiting{1}", "{answer}");
    let r = system.record("order-review", key).await.unwrap();
    let (attempt, due) = (fraud_branch(&r).attempt(), fraud_branch(&r).task_due());
    assert_eq!((fraud_branch(&r).is_open(), attempt), (true, 2));
    let due = due.expect("the branch's next attempt is due");
    // Its sibling completes meanwhile.
    let credit = json!({"workflow": "order-review", "key": key, "step": "credit-check", "outcome": "succeeded",
        "data": {"credit_ok": true}});
    system.answered("k-branch-credit", credit, (200, "applied")).await;
    // Not before its backoff; then the sweeper publishes the branch's second task.
    system.sweep(due - Duration::milliseconds(500)).await;
    assert_eq!(fraud_branch(&system.record("order-review", key).await.unwrap()).task_due(), Some(due));
    system.sweep(due.max(OffsetDateTime::now_utc())).await;
    system
        .record_until("order-review", key, "fraud's second attempt opened", |r| {
            fraud_branch(r).task_due().is_none()
        })
        .await;

    // Attempt 1's worker answers late: ignored. Attempt 2's own answer completes the group.
    let late = system.answered("k-branch-fraud-late", fraud(key, "succeeded", 1), (200, "ignored")).await;
    assert_eq!(late["reason"], "earlier_attempt", "{late}");
    system.answered("k-branch-fraud-2", fraud(key, "succeeded", 2), (200, "applied")).await;
    let r = system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 3 })
        .await;
    assert!(r.branches().next().is_none() && r.waits[0].failed.is_empty(), "payment starts afresh: {r:?}");

    let mut tasks = review_tasks(&system, 3).await;
    tasks.sort_by(|a, b| a.0.cmp(&b.0));
    let base = "order-review/k-branch/g1";
    assert_eq!(
        tasks.iter().map(|(id, n, _)| (id.as_str(), *n)).collect::<Vec<_>>(),
        [
            (&*format!("{base}/credit-check"), 1),
            (&*format!("{base}/fraud-check"), 1),
            (&*format!("{base}/fraud-check/a2"), 2)
        ]
    );
    assert_eq!(tasks[2].2, json!("ScorerDown: the fraud scorer did not answer"));
    // Step Functions saw one resume per branch and one for the review: no retry of its own.
    assert_eq!(system.resumes("order-review", key).await, 3);
    system.stop().await;
}
