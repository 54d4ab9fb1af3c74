//! The way out for a record whose execution is gone, on the emulator: the execution is stopped
//! outside baton (as from the console) and ends without its report; the sweeper, once the record
//! is long past its deadline, finds the execution closed and strands the record (and counts it);
//! `baton end` plans, then ends it as its execution ended. A record whose execution runs is
//! refused: that is `baton cancel`'s.
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p baton-cli`.

use baton_core::domain::lifecycle::{Kind, State};
use baton_core::limits::STRANDED_AFTER;
use baton_core::ports::metrics::Metric;
use serde_json::json;
use time::Duration;

mod common;
use common::{placed, stack};

const WF: &str = "order-review";

/// Stops `key`'s execution as the console would. The emulator defers a stop while the
/// execution is parked on a token, until the wait ends: the parked token is resumed too, and the
/// execution then ends ABORTED, with no report (docs/EMULATOR_DEVIATIONS.md).
async fn stop_outside_baton(stack: &common::Stack, key: &str) {
    let engine = stack.system.engine();
    let record = stack.system.record(WF, key).await.expect("the record");
    let workflow = engine.config.workflow(WF).unwrap();
    let arn = engine.execution_arn(workflow, &record.key, record.generation);
    engine.orchestrator.stop_execution(&arn, "Console", "stopped by hand").await.expect("the stop");
    if let Some(token) = record.step_wait().and_then(|w| w.token.as_ref()) {
        let _ = engine.orchestrator.send_task_success(token, &json!({})).await;
    }
    stack.system.execution_ended(WF, "ABORTED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_whose_execution_was_stopped_outside_baton_is_stranded_then_ended_with_a_plan() {
    let stack = stack().await;
    stack.system.send_event(&placed("gone-1")).await;
    stack.state_is("gone-1", State::Waiting { step: 0 }).await;
    stop_outside_baton(&stack, "gone-1").await;
    let record = stack.system.record(WF, "gone-1").await.unwrap();
    assert_eq!(record.state, State::Waiting { step: 0 }, "no report came: the record still waits");

    // Before STRANDED_AFTER past its deadline, the sweeper leaves it; after, it strands it.
    let deadline = record.step_wait().and_then(|w| w.deadline).expect("a deadline");
    let early = stack.system.sweep(deadline + Duration::minutes(5)).await;
    assert_eq!(early.stranded, 0);
    let later = stack.system.sweep(deadline + STRANDED_AFTER + Duration::minutes(15)).await;
    assert_eq!(later.stranded, 1, "{later:?}");
    let stranded = stack.system.record(WF, "gone-1").await.unwrap();
    assert_eq!(stranded.state.kind(), Kind::Stranded);
    assert_eq!(stack.system.metrics.count(Metric::RecordsStranded, Some(WF)), 1, "RecordsStranded counted");
    let again = stack.system.sweep(deadline + STRANDED_AFTER + Duration::minutes(20)).await;
    assert_eq!((again.stranded, again.nothing_owed), (0, 0), "a stranded record is listed no more");
    let status = stack.baton(&["status", "--json"]).await.json();
    assert_eq!(status["counts"]["stranded"], 1, "{status}");

    // The plan: what it becomes, and the apply command with its version guard.
    let plan = stack.baton(&["end", WF, "gone-1", "--json"]).await.json();
    assert_eq!(
        (plan["execution_status"].as_str(), plan["ends"].as_str()),
        (Some("ABORTED"), Some("cancelled")),
        "{plan}"
    );
    let version = plan["version"].as_u64().unwrap();
    let text = stack.baton(&["end", WF, "gone-1"]).await.ok();
    assert!(text.contains(&format!("--apply --expect-version {version}")), "{text}");
    assert_eq!(
        stack.system.record(WF, "gone-1").await.unwrap().state.kind(),
        Kind::Stranded,
        "a plan writes nothing"
    );
    let stale =
        stack.baton(&["end", WF, "gone-1", "--apply", "--expect-version", &(version - 1).to_string()]).await;
    assert_ne!(stale.code(), Some(0));
    assert!(stale.stderr().contains("changed since the plan"), "{}", stale.stderr());
    let applied =
        stack.baton(&["end", WF, "gone-1", "--apply", "--expect-version", &version.to_string()]).await.ok();
    assert!(applied.contains("ended order-review gone-1: cancelled"), "{applied}");
    let ended = stack.system.record(WF, "gone-1").await.unwrap();
    assert_eq!(ended.state, State::Cancelled);
    assert_eq!(ended.history.last().map(|a| a.cause.as_str()), Some("end"));
    stack.system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_whose_execution_runs_is_never_ended_so() {
    let stack = stack().await;
    stack.system.send_event(&placed("alive-1")).await;
    stack.state_is("alive-1", State::Waiting { step: 0 }).await;
    let refused = stack.baton(&["end", WF, "alive-1"]).await;
    assert_ne!(refused.code(), Some(0));
    assert!(
        refused.stderr().contains("running") && refused.stderr().contains("baton cancel"),
        "{}",
        refused.stderr()
    );
    let record = stack.system.record(WF, "alive-1").await.unwrap();
    // Nor does the sweeper strand it, however late it looks.
    let report = stack
        .system
        .sweep(record.step_wait().and_then(|w| w.deadline).unwrap() + STRANDED_AFTER + Duration::hours(1))
        .await;
    assert_eq!(report.stranded, 0);
    assert_eq!(stack.system.record(WF, "alive-1").await.unwrap().state, State::Waiting { step: 0 });
    stack.system.stop().await;
}
