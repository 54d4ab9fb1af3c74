//! The way out for a record whose execution is gone, on the emulator: the execution is stopped
//! outside baton (as from the console) and ends without its report; the sweeper, once the record
//! is long past its deadline, finds the execution closed and strands the record (and counts it);
//! `baton end` plans, then ends it as its execution ended. A record whose execution runs is
//! refused: that is `baton cancel`'s. `baton end`'s plan says truly what stays undone, whether
//! the sweeper stranded the record first or not, and it never ends a record whose execution has
//! not started yet (the sweeper owes its start).
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p baton-cli`.

use baton_core::domain::lifecycle::{Kind, State};
use baton_core::limits::STRANDED_AFTER;
use baton_core::ports::metrics::Metric;
use baton_tests::{Emulator, SAGA};
use serde_json::{Value, json};
use time::Duration;

mod common;
use common::{placed, stack, stack_with};

const WF: &str = "order-review";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_whose_execution_was_stopped_outside_baton_is_stranded_then_ended_with_a_plan() {
    let stack = stack().await;
    stack.system.send_event(&placed("gone-1")).await;
    stack.state_is("gone-1", State::Waiting { step: 0 }).await;
    stack.stop_outside_baton("gone-1").await;
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

fn step(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": WF, "key": key, "step": step, "outcome": "succeeded", "data": data})
}

fn undone(plan: &Value) -> Vec<String> {
    plan["stays_undone"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["step"].as_str().map(str::to_owned))
        .collect()
}

/// Invariant 6 (nothing is lost: what stays undone is said) through `baton end`'s plan: a saga
/// whose reserve-stock and payment completed (both declare `compensate`) has its execution
/// stopped outside baton while shipping waits. Ordering: the plan while the record still
/// waits, then the sweeper strands it (past STRANDED_AFTER), then the plan again, as the
/// operator alerted by StrandedRecordsAlarm runs it. Both plans must name reserve-stock and
/// payment as staying undone: nothing will compensate them now.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_end_plan_of_a_stranded_saga_names_the_completed_steps_that_stay_undone() {
    let stack = stack_with(SAGA).await;
    let key = "undone-1";
    stack.system.send_event(&placed(key)).await;
    stack.state_is(key, State::Waiting { step: 0 }).await;
    stack
        .system
        .answered(&format!("{key}-hold"), step(key, "reserve-stock", json!({"hold": "h"})), (200, "applied"))
        .await;
    stack.state_is(key, State::Waiting { step: 1 }).await;
    stack
        .system
        .answered(&format!("{key}-paid"), step(key, "payment", json!({"payment_ref": "p"})), (200, "applied"))
        .await;
    stack.state_is(key, State::Waiting { step: 2 }).await;
    stack.stop_outside_baton(key).await;
    let live = stack.baton(&["end", WF, key, "--json"]).await.json();
    assert_eq!(undone(&live), ["payment", "reserve-stock"], "{live}");
    let record = stack.system.record(WF, key).await.unwrap();
    let report = stack
        .system
        .sweep(record.step_wait().and_then(|w| w.deadline).unwrap() + STRANDED_AFTER + Duration::minutes(15))
        .await;
    assert_eq!(report.stranded, 1, "{report:?}");
    let stranded = stack.baton(&["end", WF, key, "--json"]).await.json();
    assert_eq!(
        undone(&stranded),
        ["payment", "reserve-stock"],
        "once the sweeper stranded the record, the plan says nothing stays undone: {stranded}"
    );
    stack.system.stop().await;
}

/// Invariant 2 (one start event starts exactly one execution): a record whose StartExecution
/// keeps failing (Step Functions unavailable) is pending, and its execution is not found; the
/// sweeper owes its start, and never strands it (sweeper.rs `strand`). Ordering: the start
/// fails, the operator runs `baton end` on the pending record. It must be refused, as for a
/// running execution, not planned to end `failed` with no execution ever run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn baton_end_refuses_a_pending_record_whose_execution_has_not_started() {
    let emulator = Emulator::from_env();
    let stack = stack_with(SAGA).await;
    let key = baton_tests::unique_name("unstarted");
    let rule = emulator
        .inject(json!({"operation": "AWSStepFunctions.StartExecution", "match": [key], "status": 500,
            "code": "ServiceUnavailable", "message": "injected: Step Functions unavailable"}))
        .await;
    stack.system.send_event(&placed(&key)).await;
    stack.state_is(&key, State::Pending).await;
    let plan = stack.baton(&["end", WF, &key]).await;
    emulator.retire(rule).await;
    let refused = plan.code() != Some(0);
    assert!(
        refused,
        "a pending record whose start the sweeper owes was planned to end:\n{}{}",
        plan.stdout(),
        plan.stderr()
    );
    stack.system.stop().await;
}

/// Invariant 6 (every record can be ended; nothing is left for ever) across a deploy: records
/// finish on the config version they started on, so a record of a workflow a later config
/// removed is still swept, and stranded, on its own version. Ordering: a saga's execution is
/// stopped outside baton, the operator's config moves on to a version without the workflow
/// (renamed), the sweeper strands the record, and the operator runs `baton end` on it as
/// StrandedRecordsAlarm's entry says. The plan must be made on the record's own version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn baton_end_ends_a_stranded_record_of_a_workflow_a_later_config_removed() {
    let stack = stack_with(SAGA).await;
    let key = "removed-1";
    stack.system.send_event(&placed(key)).await;
    stack.state_is(key, State::Waiting { step: 0 }).await;
    stack.stop_outside_baton(key).await;
    let record = stack.system.record(WF, key).await.unwrap();
    let report = stack
        .system
        .sweep(record.step_wait().and_then(|w| w.deadline).unwrap() + STRANDED_AFTER + Duration::minutes(15))
        .await;
    assert_eq!(report.stranded, 1, "{report:?}");
    std::fs::write(stack.path("workflows.yaml"), SAGA.replace("  order-review:", "  order-intake:"))
        .expect("the next config");
    let plan = stack.baton(&["end", WF, key, "--json"]).await;
    assert_eq!(
        plan.code(),
        Some(0),
        "the stranded record of a workflow the current config removed cannot be planned:\n{}{}",
        plan.stdout(),
        plan.stderr()
    );
    assert_eq!(plan.json()["ends"].as_str(), Some("cancelled"), "{}", plan.stdout());
    stack.system.stop().await;
}
