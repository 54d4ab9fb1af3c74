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

const UNTIL: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["contract.signed"] }
      key: /subject
    steps:
      - name: until-start
        timer: { until: /data/starts_at }
        timeout: 30d
      - name: activate
        requires: [ok]
        timeout: 1h
"#;

fn signed(key: &str, starts_at: &Value) -> String {
    json!({"specversion": "1.0", "id": format!("signed-{key}"), "source": "crm", "type": "contract.signed",
        "subject": key, "data": {"starts_at": starts_at}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_until_the_start_events_time_wakes_then_and_one_it_cannot_read_fails_the_run_with_its_error()
{
    let system = start_system(UNTIL).await;
    // Given a contract starting in two days, and one whose start date is a number
    let starts_at = (OffsetDateTime::now_utc() + Duration::days(2)).replace_nanosecond(0).expect("a time");
    let text = starts_at.format(&time::format_description::well_known::Rfc3339).expect("RFC 3339");
    system.send_event(&signed("k-dated", &json!(text))).await;
    system.send_event(&signed("k-undated", &json!(20_270_101))).await;

    // Then the first sleeps until exactly that time, and the second, reached, sleeps not at all
    let r = system
        .record_until("order-review", "k-dated", "sleeping", |r| r.state == State::Waiting { step: 0 })
        .await;
    assert_eq!(r.wait(0).map(|w| &w.status), Some(&WaitStatus::Sleeping { until: starts_at }), "{r:?}");
    system
        .record_until("order-review", "k-undated", "reached", |r| r.state == State::Waiting { step: 0 })
        .await;

    // When the sweeper runs a second before the first one's time
    system.sweep(starts_at - Duration::seconds(1)).await;
    // Then the first still sleeps, and the second fails, with the error and a cause naming the
    // pointer and what it found
    let r = system.record("order-review", "k-dated").await.expect("the record");
    assert_eq!(r.state, State::Waiting { step: 0 }, "not before its time");
    system.record_until("order-review", "k-undated", "failed", |r| r.state == State::Failed).await;

    // And on time, the first wakes and the run goes on
    system.sweep(starts_at).await;
    system
        .record_until("order-review", "k-dated", "waiting on activate", |r| {
            r.state == State::Waiting { step: 1 }
        })
        .await;

    let mut failures = Vec::new();
    for execution in system.executions("order-review").await {
        let history = system.history(execution.execution_arn()).await;
        failures.extend(
            history.iter().filter_map(|e| e.task_failed_event_details()).map(|d| {
                (d.error().unwrap_or_default().to_owned(), d.cause().unwrap_or_default().to_owned())
            }),
        );
    }
    // (The emulator drops SendTaskFailure's cause, docs/EMULATOR_DEVIATIONS.md; AWS keeps it in
    // the history `baton trace` shows. The cause's words are the lifecycle's tests'.)
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].0, "baton.TimerInvalid", "{failures:?}");
    system.stop().await;
}
