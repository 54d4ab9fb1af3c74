//! End to end, on the emulator: a parallel group's branches wait side by side, each on its own
//! token and deadline, in the real generated `Parallel` state.
//!
//! - every branch succeeds: the group completes once, and the workflow goes on;
//! - a required branch fails: its open siblings are closed, the workflow fails, and a sibling's
//!   late callback is answered `ignored` (`group_failed`) and ledgered;
//! - an optional branch times out: the group goes on without it, and the workflow ends
//!   `degraded`;
//! - a callback for a branch before its group opens is buffered, and applied once it does.

use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{IgnoreReason, Record, State, WaitOutcome};
use baton_core::ports::store::WorkflowStore;
use baton_tests::order_placed;
use baton_tests::system::{System, start_system};
use serde_json::{Value, json};

/// [`CONFIG`] with the optional branch's deadline at 4 s, for the test that lets it pass. The
/// others give it an hour: at 4 s a loaded machine could let it pass before they answer it (seen
/// with the test binaries running side by side on 2 cores).
fn config_with_a_short_optional_branch() -> String {
    let short = CONFIG.replacen(
        "timeout: 1h\n              optional: true",
        "timeout: 4s\n              optional: true",
        1,
    );
    assert_ne!(short, CONFIG, "CONFIG has the optional branch this replaces");
    short
}

const CONFIG: &str = r#"
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
            - name: credit-check
              task: { title: "Credit check {key}", queue: credit }
              requires: [credit_ok]
              timeout: 1h
            - name: address-check
              requires: [address_ok]
              timeout: 1h
              optional: true
      - name: payment
        requires: [payment_ref]
        timeout: 1h
"#;

fn cb(key: &str, step: &str, outcome: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": outcome, "data": data})
}

/// Sends the callback and checks it was applied (200 `applied`); returns the answer.
async fn applied(system: &System, id: &str, body: Value) -> Value {
    system.answered(id, body, (200, "applied")).await
}

fn branch(r: &Record, step: u32) -> (Option<WaitOutcome>, bool) {
    let b = r.wait(step).expect("the branch");
    (b.outcome(), b.token.is_some())
}

/// The workflow started and its review approved: the group opens.
async fn at_group(system: &System, key: &str) -> Record {
    system.send_event(&order_placed(key)).await;
    system
        .record_until("order-review", key, "waiting on review", |r| r.state == State::Waiting { step: 0 })
        .await;
    applied(
        system,
        &format!("{key}-review"),
        cb(key, "manual-review", "succeeded", json!({"decision": "ok"})),
    )
    .await;
    system
        .record_until("order-review", key, "every branch reached", |r| {
            r.state == State::Waiting { step: 1 } && r.branches().all(|b| b.token.is_some())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_branch_succeeds_and_the_workflow_moves_on_once() {
    let system = start_system(CONFIG).await;
    let key = "k-all";
    at_group(&system, key).await;
    // Each branch's task is published once; the review step has none.
    let tasks = system.published_tasks(2).await;
    let mut steps: Vec<&str> = tasks.iter().filter_map(|t| t["data"]["step"].as_str()).collect();
    steps.sort_unstable();
    assert_eq!(steps, ["credit-check", "fraud-check"], "{tasks:#?}");

    let answer =
        applied(&system, "k-all-fraud", cb(key, "fraud-check", "succeeded", json!({"fraud_score": 2}))).await;
    assert_eq!(answer["state"], "waiting{1}", "the group waits for its other branches: {answer}");
    let r = system.record("order-review", key).await.unwrap();
    // A branch's input moves no sibling.
    assert_eq!(
        (branch(&r, 1).0, branch(&r, 2).0, branch(&r, 3).0),
        (Some(WaitOutcome::Succeeded), None, None)
    );
    applied(&system, "k-all-address", cb(key, "address-check", "succeeded", json!({"address_ok": true})))
        .await;
    applied(&system, "k-all-credit", cb(key, "credit-check", "succeeded", json!({"credit_ok": true}))).await;
    system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 4 })
        .await;
    applied(&system, "k-all-pay", cb(key, "payment", "succeeded", json!({"payment_ref": "p-1"}))).await;
    let r = system.record_until("order-review", key, "succeeded", |r| r.state.is_terminal()).await;
    // The optional branch's own report confirmed that Step Functions took its success.
    assert_eq!((r.state, r.missed.clone(), r.confirmed.clone()), (State::Succeeded, vec![], vec![3]));
    system.execution_ended("order-review", "SUCCEEDED").await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_branch_that_fails_closes_its_siblings_and_a_late_sibling_callback_is_ignored() {
    let system = start_system(CONFIG).await;
    let key = "k-fail";
    at_group(&system, key).await;
    applied(&system, "k-fail-address", cb(key, "address-check", "succeeded", json!({"address_ok": true})))
        .await;
    let failed = json!({"workflow": "order-review", "key": key, "step": "fraud-check", "outcome": "failed",
        "error": "FraudSuspected", "cause": "score 97"});
    system.answered("k-fail-fraud", failed, (200, "applied")).await;
    let r = system.record_until("order-review", key, "failed", |r| r.state == State::Failed).await;
    assert_eq!(
        (branch(&r, 1).0, branch(&r, 2).0, branch(&r, 3).0),
        (Some(WaitOutcome::Failed), Some(WaitOutcome::Closed), Some(WaitOutcome::Succeeded))
    );
    system.execution_ended("order-review", "FAILED").await;

    // The credit team answers late: told the truth, nothing applied, kept in the ledger.
    let answer = system
        .answered(
            "k-fail-credit",
            cb(key, "credit-check", "succeeded", json!({"credit_ok": true})),
            (200, "ignored"),
        )
        .await;
    assert_eq!(answer["reason"], "group_failed", "{answer}");
    let after = system.record("order-review", key).await.unwrap();
    assert_eq!((after.version, branch(&after, 2).0), (r.version, Some(WaitOutcome::Closed)));
    let (w, k) = (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse(key).unwrap());
    let ledger = system.store.trace(&w, &k).await.unwrap().ledger;
    assert!(
        ledger.iter().any(|l| l.input_id == "k-fail-credit" && l.reason == IgnoreReason::GroupFailed),
        "{ledger:?}"
    );
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optional_branch_that_times_out_leaves_the_workflow_degraded() {
    let system = start_system(&config_with_a_short_optional_branch()).await;
    let key = "k-degraded";
    at_group(&system, key).await;
    applied(&system, "k-deg-fraud", cb(key, "fraud-check", "succeeded", json!({"fraud_score": 2}))).await;
    applied(&system, "k-deg-credit", cb(key, "credit-check", "succeeded", json!({"credit_ok": true}))).await;
    // The address check never answers: its own deadline (4 s) passes, its catch reports it, and
    // the group goes on without it.
    let r = system
        .record_until("order-review", key, "the optional branch timed out", |r| {
            r.state == State::Waiting { step: 4 }
        })
        .await;
    assert_eq!(r.missed, [3]);
    applied(&system, "k-deg-pay", cb(key, "payment", "succeeded", json!({"payment_ref": "p-2"}))).await;
    let r = system.record_until("order-review", key, "degraded", |r| r.state.is_terminal()).await;
    assert_eq!((r.state, r.missed.clone()), (State::Degraded, vec![3]));
    // Step Functions' view: the execution succeeded; the record says what it lacked.
    system.execution_ended("order-review", "SUCCEEDED").await;
    let late = system
        .answered(
            "k-deg-address",
            cb(key, "address-check", "succeeded", json!({"address_ok": true})),
            (200, "ignored"),
        )
        .await;
    assert_eq!(late["reason"], "terminal", "{late}");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_for_a_branch_before_its_group_opens_is_buffered_then_applied() {
    let system = start_system(CONFIG).await;
    let key = "k-early";
    system.send_event(&order_placed(key)).await;
    system
        .record_until("order-review", key, "waiting on review", |r| r.state == State::Waiting { step: 0 })
        .await;
    system
        .answered(
            "k-early-credit",
            cb(key, "credit-check", "succeeded", json!({"credit_ok": true})),
            (202, "buffered"),
        )
        .await;
    applied(&system, "k-early-review", cb(key, "manual-review", "succeeded", json!({"decision": "ok"})))
        .await;
    let r = system
        .record_until("order-review", key, "the early callback applied to its branch", |r| {
            r.state == State::Waiting { step: 1 } && r.wait(2).is_some_and(|b| b.outcome().is_some())
        })
        .await;
    assert_eq!(branch(&r, 2), (Some(WaitOutcome::Succeeded), true));
    assert_eq!((branch(&r, 1).0, branch(&r, 3).0), (None, None));
    // Sent again, it is the same callback.
    let (status, again) = system
        .callback("k-early-credit", &cb(key, "credit-check", "succeeded", json!({"credit_ok": true})))
        .await;
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)), "{again}");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_resume_lost_in_a_crash_is_sent_again_by_the_sweeper_while_its_group_waits() {
    use baton_core::domain::lifecycle::{self, Input, Source, StepOutcome};
    let system = start_system(CONFIG).await;
    let key = "k-crash";
    let waiting = at_group(&system, key).await;
    // The fraud check's callback is decided and its record write lands; the process dies
    // before the resume (no SendTaskSuccess).
    let engine = system.engine();
    let workflow = engine.config.workflow("order-review").unwrap();
    let input = Input::StepInput {
        id: baton_core::domain::ids::EventId::parse("k-crash-fraud").unwrap(),
        hash: "h".into(),
        source: Source::Callback,
        step: 1,
        outcome: StepOutcome::Succeeded,
        data: json!({"fraud_score": 1}).as_object().unwrap().clone(),
        generation: None,
        attempt: None,
    };
    let d = lifecycle::decide(
        &workflow.plan(),
        (&waiting.workflow, &waiting.key),
        Some(&waiting),
        &input,
        engine.now(),
    );
    assert_eq!(
        system.store.apply(d.write.as_ref().unwrap()).await.unwrap(),
        baton_core::ports::store::Applied::Written
    );
    let r = system.record("order-review", key).await.unwrap();
    assert!(r.waits[0].owed().is_some(), "the resume is owed: {:?}", r.waits[0]);

    // The sweeper, past the grace, sends it and marks it delivered; the group still waits.
    let report = system.sweep(time::OffsetDateTime::now_utc() + time::Duration::seconds(45)).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    let r = system.record("order-review", key).await.unwrap();
    assert_eq!((r.state, r.waits[0].owed().is_none()), (State::Waiting { step: 1 }, true), "{:?}", r.waits);
    // Step Functions took it: once the others answer, the execution reaches payment.
    applied(&system, "k-crash-credit", cb(key, "credit-check", "succeeded", json!({"credit_ok": true})))
        .await;
    applied(&system, "k-crash-address", cb(key, "address-check", "succeeded", json!({"address_ok": true})))
        .await;
    system
        .record_until("order-review", key, "waiting on payment", |r| r.state == State::Waiting { step: 4 })
        .await;
    system.stop().await;
}
