//! Step Functions' semantics in the simulation's model (`baton_sim::sfn`) that the simulation's
//! new world leans on, each as AWS documents it, on the definitions `baton synth` generates:
//! `HeartbeatSeconds` restarted by SendTaskHeartbeat alone, and a Task state's own send to SQS
//! failing, taken by its `Retry` (`ErrorEquals`, `IntervalSeconds`, `MaxAttempts`,
//! `BackoffRate`) when it has one, by its `Catch` otherwise, and failing the execution when it
//! has neither.

use std::sync::Arc;

use baton_core::domain::asl::{ExecutionInput, PROGRESS_QUEUE_PLACEHOLDER};
use baton_core::domain::config::Config;
use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
use baton_core::ports::orchestrator::{ExecutionStatus, Orchestrator, StartExecution};
use baton_sim::sfn::{Model, SEND_FAILED_ERROR, SendFaults, SimStepFunctions};
use baton_sim::sqs::{QueueId, Sqs};
use baton_sim::world::{Mutex, World, drive, lock};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const CONFIG: &str = r#"
workflows:
  wf:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: review
        requires: [decision]
        timeout: 30m
        heartbeat: 10m
"#;

const PREFIX: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:model-";

struct Rig {
    world: Arc<World>,
    model: Arc<Mutex<Model>>,
    sqs: Arc<Mutex<Sqs>>,
    orch: SimStepFunctions,
}

/// The model running `wf`'s generated definition, changed by `edit` (a Retry added).
fn rig(edit: impl Fn(&mut Value)) -> Rig {
    let config = Config::parse(CONFIG).unwrap();
    let world = World::new(1, OffsetDateTime::from_unix_timestamp(baton_sim::EPOCH).unwrap(), false);
    let mut model = Model::default();
    let w = &config.workflows[0];
    let text = baton_core::domain::asl::render(w).replace(PROGRESS_QUEUE_PLACEHOLDER, "model-progress");
    let mut definition: Value = serde_json::from_str(&text).unwrap();
    edit(&mut definition);
    model.machines.insert(format!("{PREFIX}wf"), std::sync::Arc::new(definition));
    let model = Arc::new(Mutex::new(model));
    let sqs = Arc::new(Mutex::new(Sqs::default()));
    let orch = SimStepFunctions { world: world.clone(), model: model.clone(), sqs: sqs.clone() };
    Rig { world, model, sqs, orch }
}

fn start(rig: &Rig) {
    let input =
        serde_json::to_value(ExecutionInput { workflow: "wf".into(), key: "k".into(), generation: 1 })
            .unwrap();
    let req = StartExecution {
        state_machine_arn: format!("{PREFIX}wf"),
        workflow: WorkflowName::parse("wf").unwrap(),
        key: CorrelationKey::parse("k").unwrap(),
        generation: 1,
        input,
    };
    drive(rig.orch.start_execution(&req)).unwrap();
}

/// The kinds of the reports sent so far, taken off the progress queue, with the last token.
fn reports(rig: &Rig) -> (Vec<String>, Option<TaskToken>) {
    let mut sqs = lock(&rig.sqs);
    let mut kinds = Vec::new();
    let mut token = None;
    for m in sqs.messages(QueueId::Progress).to_vec() {
        sqs.remove(QueueId::Progress, &m.id);
        let v: Value = serde_json::from_str(&m.body).unwrap();
        let outcome = v["outcome"].as_str().map(|o| format!(" {o}")).unwrap_or_default();
        kinds.push(format!("{}{outcome}", v["kind"].as_str().unwrap()));
        if let Some(t) = v["token"].as_str() {
            token = Some(TaskToken::parse(t).unwrap());
        }
    }
    (kinds, token)
}

/// Moves the clock to `at` and fires the model's timers, as the simulation does.
fn at(rig: &Rig, at: OffsetDateTime) {
    rig.world.set_now(at);
    let mut out = Vec::new();
    lock(&rig.model).fire_timers(at, &mut out);
    let mut sqs = lock(&rig.sqs);
    for body in out {
        sqs.send(QueueId::Progress, body, Default::default(), at);
    }
}

fn status(rig: &Rig) -> (ExecutionStatus, Option<String>) {
    let model = lock(&rig.model);
    let e = model.executions.values().next().unwrap();
    (e.status.clone(), e.failure.clone().map(|f| f.0))
}

fn failing_sends(rig: &Rig, rate: f64) {
    lock(&rig.model).send_faults = SendFaults { rate, rng: baton_sim::rng::Rng::new(1), next: 0 };
}

#[test]
fn a_heartbeat_restarts_the_heartbeat_timer_and_nothing_else_does() {
    let rig = rig(|_| {});
    let t0 = rig.world.now();
    start(&rig);
    let (_, token) = reports(&rig);
    let token = token.unwrap();
    // A heartbeat at minute 7: the wait now times out at minute 17, not 10.
    rig.world.set_now(t0 + Duration::minutes(7));
    drive(rig.orch.send_task_heartbeat(&token)).unwrap();
    at(&rig, t0 + Duration::minutes(16));
    assert_eq!(status(&rig).0, ExecutionStatus::Running);
    at(&rig, t0 + Duration::minutes(17));
    assert_eq!(reports(&rig).0, vec!["finished timed_out"]);
    let missed = lock(&rig.model).beats_missed.clone();
    assert_eq!(missed.iter().map(|m| m.at).collect::<Vec<_>>(), vec![t0 + Duration::minutes(17)]);
}

#[test]
fn a_wait_without_heartbeats_times_out_a_heartbeat_after_it_was_entered() {
    let rig = rig(|_| {});
    let t0 = rig.world.now();
    start(&rig);
    at(&rig, t0 + Duration::minutes(10) - Duration::seconds(1));
    assert_eq!(status(&rig).0, ExecutionStatus::Running);
    at(&rig, t0 + Duration::minutes(10));
    assert_eq!(reports(&rig).0, vec!["step_ready", "finished timed_out"]);
}

#[test]
fn a_failed_step_ready_send_without_retry_goes_to_the_catch_and_a_failed_report_fails_the_execution() {
    // Given the definition without the Retry `baton synth` puts on its sends
    let rig = rig(|d| {
        for state in d["States"].as_object_mut().unwrap().values_mut() {
            state.as_object_mut().unwrap().remove("Retry");
        }
    });
    failing_sends(&rig, 1.0);
    start(&rig);
    // step_ready's send fails: its Catch (States.ALL) takes it to `Report failed`, whose send
    // fails too; it has no Catch: the execution fails with no report at all.
    assert_eq!(reports(&rig).0, Vec::<String>::new());
    assert_eq!(status(&rig), (ExecutionStatus::Failed, Some(SEND_FAILED_ERROR.to_owned())));
    let failed = lock(&rig.model).sends_failed.clone();
    let states: Vec<(&str, bool)> = failed.iter().map(|f| (f.state.as_str(), f.retried)).collect();
    assert_eq!(states, vec![("review", false), ("Report failed", false)]);
}

#[test]
fn a_retry_sends_again_after_its_interval_times_its_backoff_rate_up_to_its_max_attempts() {
    // Given a Retry on the step's wait state: 2 s, then 6 s, at most 2 retries.
    let rig = rig(|d| {
        d["States"]["review"]["Retry"] = json!([
            {"ErrorEquals": ["States.Timeout"], "MaxAttempts": 0},
            {"ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": 2, "MaxAttempts": 2, "BackoffRate": 3.0}
        ]);
        d["States"]["Report failed"].as_object_mut().unwrap().remove("Retry");
    });
    let t0 = rig.world.now();
    failing_sends(&rig, 1.0);
    start(&rig);
    assert_eq!(status(&rig).0, ExecutionStatus::Running, "the first failure is retried");
    assert_eq!(lock(&rig.model).next_timer(), Some(t0 + Duration::seconds(2)));
    at(&rig, t0 + Duration::seconds(2));
    assert_eq!(lock(&rig.model).next_timer(), Some(t0 + Duration::seconds(8)));
    // The third failure finds the retrier spent: the Catch takes it to `Report failed`.
    at(&rig, t0 + Duration::seconds(8));
    let failed = lock(&rig.model).sends_failed.clone();
    let sends: Vec<(&str, bool)> = failed.iter().map(|f| (f.state.as_str(), f.retried)).collect();
    assert_eq!(sends, vec![("review", true), ("review", true), ("review", false), ("Report failed", false)]);
}

#[test]
fn a_retried_send_that_goes_through_parks_the_wait_on_a_new_token() {
    let rig = rig(|d| {
        d["States"]["review"]["Retry"] = json!([{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1}]);
    });
    let t0 = rig.world.now();
    failing_sends(&rig, 1.0);
    start(&rig);
    failing_sends(&rig, 0.0);
    at(&rig, t0 + Duration::seconds(1));
    let (kinds, token) = reports(&rig);
    assert_eq!(kinds, vec!["step_ready"]);
    assert_eq!(status(&rig).0, ExecutionStatus::Running);
    // Its deadline counts from when the state was entered again.
    drive(rig.orch.send_task_success(&token.unwrap(), &json!({"decision": "ok"}))).unwrap();
    assert_eq!(reports(&rig).0, vec!["finished succeeded"]);
}
