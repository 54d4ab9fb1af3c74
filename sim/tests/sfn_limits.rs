//! Step Functions' limits in the simulation's model (`baton_sim::sfn`), which the emulator does
//! not keep, so `tests/tests/sfn_conformance.rs` cannot compare them (docs/EMULATOR_DEVIATIONS.md):
//! each as AWS documents it, on the definitions `baton synth` generates.

use std::sync::Arc;

use baton_core::domain::asl::{ExecutionInput, PROGRESS_QUEUE_PLACEHOLDER};
use baton_core::domain::config::Config;
use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
use baton_core::ports::orchestrator::{ExecutionStatus, Orchestrator, OrchestratorError, StartExecution};
use baton_sim::sfn::{
    MAX_CAUSE_CHARS, MAX_ERROR_CHARS, MAX_PAYLOAD_BYTES, Model, NAME_REUSE_AFTER, SimStepFunctions,
};
use baton_sim::sqs::{QueueId, Sqs};
use baton_sim::world::{Mutex, World, drive, lock};
use serde_json::{Value, json};
use time::OffsetDateTime;

const CONFIG: &str = r#"
workflows:
  wf:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: review
        requires: [decision]
        timeout: 1h
"#;

const PREFIX: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:limits-";

struct Rig {
    world: Arc<World>,
    model: Arc<Mutex<Model>>,
    sqs: Arc<Mutex<Sqs>>,
    orch: SimStepFunctions,
}

fn rig() -> Rig {
    let config = Config::parse(CONFIG).unwrap();
    let world = World::new(1, OffsetDateTime::from_unix_timestamp(baton_sim::EPOCH).unwrap(), false);
    let mut model = Model::default();
    for w in &config.workflows {
        let text = baton_core::domain::asl::render(w).replace(PROGRESS_QUEUE_PLACEHOLDER, "limits-progress");
        model
            .machines
            .insert(format!("{PREFIX}{}", w.name), std::sync::Arc::new(serde_json::from_str(&text).unwrap()));
    }
    let model = Arc::new(Mutex::new(model));
    let sqs = Arc::new(Mutex::new(Sqs::default()));
    let orch = SimStepFunctions { world: world.clone(), model: model.clone(), sqs: sqs.clone() };
    Rig { world, model, sqs, orch }
}

fn start(rig: &Rig, key: &str, input: Value) -> Result<(), OrchestratorError> {
    let req = StartExecution {
        state_machine_arn: format!("{PREFIX}wf"),
        workflow: WorkflowName::parse("wf").unwrap(),
        key: CorrelationKey::parse(key).unwrap(),
        generation: 1,
        input,
    };
    drive(rig.orch.start_execution(&req)).map(drop)
}

fn input(key: &str) -> Value {
    serde_json::to_value(ExecutionInput { workflow: "wf".into(), key: key.into(), generation: 1 }).unwrap()
}

/// The reports sent so far, in order, taken off the progress queue.
fn reports(rig: &Rig) -> Vec<Value> {
    let mut sqs = lock(&rig.sqs);
    let messages = sqs.messages(QueueId::Progress).to_vec();
    messages
        .into_iter()
        .map(|m| {
            sqs.remove(QueueId::Progress, &m.id);
            serde_json::from_str(&m.body).unwrap()
        })
        .collect()
}

fn waiting(rig: &Rig, key: &str) -> TaskToken {
    start(rig, key, input(key)).unwrap();
    let report = reports(rig).pop().unwrap();
    TaskToken::parse(report["token"].as_str().unwrap()).unwrap()
}

fn status(rig: &Rig) -> Vec<(ExecutionStatus, Option<String>)> {
    lock(&rig.model).executions.values().map(|e| (e.status.clone(), e.failure.clone().map(|f| f.0))).collect()
}

fn validation(r: Result<(), OrchestratorError>) -> bool {
    matches!(r, Err(OrchestratorError::Rejected { ref code, .. }) if code == "ValidationException")
}

#[test]
fn an_error_or_cause_past_the_limits_is_refused_every_time_and_the_task_stays_open() {
    let rig = rig();
    let token = waiting(&rig, "k");
    let long_error = "e".repeat(MAX_ERROR_CHARS + 1);
    // Characters, not bytes: 32,768 two-byte characters are taken.
    let long_cause = "é".repeat(MAX_CAUSE_CHARS + 1);
    for _ in 0..2 {
        assert!(validation(drive(rig.orch.send_task_failure(&token, &long_error, "c"))));
        assert!(validation(drive(rig.orch.send_task_failure(&token, "e", &long_cause))));
    }
    assert_eq!(status(&rig), vec![(ExecutionStatus::Running, None)], "the task still waits");
    let at_limits =
        drive(rig.orch.send_task_failure(&token, &"e".repeat(MAX_ERROR_CHARS), &"é".repeat(MAX_CAUSE_CHARS)));
    assert!(at_limits.is_ok(), "{at_limits:?}");
    assert_eq!(reports(&rig)[0]["outcome"], "failed");
    // StopExecution keeps the same limits.
    let arn = lock(&rig.model).executions.keys().next().unwrap().clone();
    let stop = |error: &str| drive(rig.orch.stop_execution(&arn, error, "c"));
    assert!(validation(stop(&long_error)));
    assert_eq!(lock(&rig.model).refused.len(), 5, "{:?}", lock(&rig.model).refused);
}

#[test]
fn payloads_over_256_kib_are_refused_at_the_api_and_fail_a_state_past_its_catch() {
    let rig = rig();
    let mut big = input("k");
    big["padding"] = json!("x".repeat(MAX_PAYLOAD_BYTES));
    assert!(validation(start(&rig, "k", big)), "an execution input over 256 KiB");
    let token = waiting(&rig, "k");
    let output = json!({"decision": "x".repeat(MAX_PAYLOAD_BYTES)});
    assert!(validation(drive(rig.orch.send_task_success(&token, &output))), "a task output over 256 KiB");
    // Under the API's limit, but the state's output (the input and the result beside it) is
    // over it: States.DataLimitExceeded, which States.ALL does not catch. No report follows.
    let output = json!({"decision": "x".repeat(MAX_PAYLOAD_BYTES - 100)});
    let mut padded = input("k2");
    padded["padding"] = json!("y".repeat(1000));
    start(&rig, "k2", padded).unwrap();
    let token = TaskToken::parse(reports(&rig).pop().unwrap()["token"].as_str().unwrap()).unwrap();
    drive(rig.orch.send_task_success(&token, &output)).unwrap();
    assert!(reports(&rig).is_empty(), "a failure States.ALL caught would have reported");
    assert!(status(&rig).contains(&(ExecutionStatus::Failed, Some("States.DataLimitExceeded".into()))));
}

#[test]
fn a_path_that_selects_nothing_fails_the_state_with_states_runtime() {
    let rig = rig();
    start(&rig, "k", json!({"workflow": "wf", "key": "k"})).unwrap();
    assert!(reports(&rig).is_empty());
    assert_eq!(status(&rig), vec![(ExecutionStatus::Failed, Some("States.Runtime".into()))]);
}

#[test]
fn a_closed_executions_name_starts_a_new_one_only_after_90_days() {
    let rig = rig();
    let token = waiting(&rig, "k");
    drive(rig.orch.send_task_failure(&token, "e", "c")).unwrap();
    reports(&rig);
    // Same input: the closed execution (the adapter compares inputs); nothing starts.
    start(&rig, "k", input("k")).unwrap();
    assert!(matches!(
        start(&rig, "k", json!({"workflow": "wf", "key": "k", "generation": 2})),
        Err(OrchestratorError::ExecutionConflict { .. })
    ));
    assert!(reports(&rig).is_empty());
    rig.world.advance(NAME_REUSE_AFTER - time::Duration::seconds(1));
    start(&rig, "k", input("k")).unwrap();
    assert!(reports(&rig).is_empty(), "not yet");
    rig.world.advance(time::Duration::seconds(1));
    start(&rig, "k", input("k")).unwrap();
    assert_eq!(reports(&rig).len(), 1, "a new execution under the old name");
    assert_eq!(lock(&rig.model).starts.len(), 2);
}
