//! End to end, on the emulator: a timer step holds the workflow for its time, by the sweeper's
//! clock, and never takes an input; an input for the step after it waits in the inbox and is
//! applied once the timer wakes. A cancel during a timer ends the run, and a later sweep wakes
//! nothing.

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{Input, State, WaitOutcome, WaitStatus};
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
      - name: approve
        requires: [ok]
        timeout: 1h
      - name: cool-off
        timer: { after: 24h }
      - name: pay
        requires: [paid]
        timeout: 1h
        # An input sent during the cooling-off is kept across it.
        buffer_ttl: 2d
"#;

fn answer(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": "succeeded", "data": data})
}

/// Starts a payout for `key`, approves it, and waits until the record sleeps at the timer:
/// returns when the timer wakes.
async fn sleeping(system: &System, key: &str) -> OffsetDateTime {
    system.send_event(&order_placed(key)).await;
    system
        .record_until("order-review", key, "waiting on approve", |r| r.state == State::Waiting { step: 0 })
        .await;
    system
        .answered(&format!("ok-{key}"), answer(key, "approve", json!({"ok": true})), (200, "applied"))
        .await;
    let r = system
        .record_until("order-review", key, "sleeping at cool-off", |r| r.state == State::Waiting { step: 1 })
        .await;
    let wait = r.wait(1).expect("the timer's wait");
    let WaitStatus::Sleeping { until } = wait.status else { panic!("the timer sleeps: {wait:?}") };
    // 24 hours from when Step Functions entered the step, which is a moment ago.
    let from_now = until - OffsetDateTime::now_utc();
    assert!(from_now > Duration::hours(23) && from_now <= Duration::hours(24), "{until}");
    until
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_holds_the_workflow_for_its_time_and_then_it_goes_on() {
    let system = start_system(CONFIG).await;
    let key = "k-cool";
    let until = sleeping(&system, key).await;

    // Nobody can end the timer early: the callback function refuses it.
    let (status, refused) = system.callback("early-end", &answer(key, "cool-off", json!({}))).await;
    assert_eq!((status, refused["error"].as_str()), (403, Some("callbacks_refused")), "{refused}");
    assert!(refused["message"].as_str().unwrap_or_default().contains("is a timer"), "{refused}");
    // The payment confirmed meanwhile waits in the inbox.
    let (status, early) = system.callback("paid-1", &answer(key, "pay", json!({"paid": true}))).await;
    assert_eq!((status, early["status"].as_str()), (202, Some("buffered")), "{early}");

    // A sweep a second before its time wakes nothing.
    system.sweep(until - Duration::seconds(1)).await;
    let r = system.record("order-review", key).await.expect("the record");
    assert_eq!(r.state, State::Waiting { step: 1 }, "still sleeping");

    // On time, the sweeper wakes it: the workflow goes on, the buffered payment is applied, and
    // the run succeeds, one resume per step.
    let report = system.sweep(until).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    system.record_until("order-review", key, "succeeded", |r| r.state == State::Succeeded).await;
    assert_eq!(system.resumes("order-review", key).await, 3, "one resume per step, the timer's once");
    system.execution_ended("order-review", "SUCCEEDED").await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_timer_ends_the_run_and_no_sweep_wakes_it() {
    let system = start_system(CONFIG).await;
    let key = "k-cancel";
    let until = sleeping(&system, key).await;
    let engine = system.engine();
    let wf = engine.config.workflow("order-review").expect("the workflow");
    let k = CorrelationKey::parse(key).expect("a key");
    let done =
        engine.submit(wf, &k, &Input::Cancel { reason: "customer withdrew".into() }, engine.now()).await;
    assert_eq!(done.expect("the cancel").record().map(|r| r.state), Some(State::Cancelled));
    system
        .until("the execution ended", || async {
            let executions = system.executions("order-review").await;
            executions.first().filter(|e| e.status().as_str() != "RUNNING").map(|_| ())
        })
        .await;
    let report = system.sweep(until).await;
    assert_eq!(report.repaired, 0, "{report:?}");
    let r = system.record("order-review", key).await.expect("the record");
    assert_eq!(r.state, State::Cancelled);
    let timer = r.wait(1).expect("the timer's wait");
    assert_eq!(timer.outcome(), Some(WaitOutcome::Closed), "closed by the cancel, never woken: {timer:?}");
    system.stop().await;
}
