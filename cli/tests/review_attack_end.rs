//! Attack tests of `baton end` (cli/src/end.rs) on the emulator, with the real binary: its plan
//! must say truly what stays undone, whether the sweeper stranded the record first or not, and
//! it must never end a record whose execution has not started yet (the sweeper owes its
//! start).
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p baton-cli`.

use baton_core::domain::lifecycle::State;
use baton_core::limits::STRANDED_AFTER;
use baton_tests::{Emulator, SAGA};
use serde_json::{Value, json};
use time::Duration;

mod common;
use common::{Stack, placed, stack_with};

const WF: &str = "order-review";

fn step(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": WF, "key": key, "step": step, "outcome": "succeeded", "data": data})
}

async fn state_is(stack: &Stack, key: &str, state: State) {
    stack.system.record_until(WF, key, &format!("{key} in {state}"), |r| r.state == state).await;
}

/// Stops `key`'s execution as the console would (see cli/tests/stranded.rs: the emulator defers
/// a stop while the execution is parked on a token, until the wait ends).
async fn stop_outside_baton(stack: &Stack, key: &str) {
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
    state_is(&stack, key, State::Waiting { step: 0 }).await;
    stack
        .system
        .answered(&format!("{key}-hold"), step(key, "reserve-stock", json!({"hold": "h"})), (200, "applied"))
        .await;
    state_is(&stack, key, State::Waiting { step: 1 }).await;
    stack
        .system
        .answered(&format!("{key}-paid"), step(key, "payment", json!({"payment_ref": "p"})), (200, "applied"))
        .await;
    state_is(&stack, key, State::Waiting { step: 2 }).await;
    stop_outside_baton(&stack, key).await;
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
    state_is(&stack, &key, State::Pending).await;
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
    state_is(&stack, key, State::Waiting { step: 0 }).await;
    stop_outside_baton(&stack, key).await;
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
