//! The four functions' real binaries, run as Lambda runs them, against the emulator.
//!
//! Each function crate has a test (`functions/*/tests/lambda.rs`) that hands its own binary
//! (`CARGO_BIN_EXE_...`, built by that same `cargo test`) to one of the scenarios here. The
//! binary runs under a Lambda Runtime API on loopback ([`lambda_harness`]) with the environment
//! template.yaml gives the function on a stack provisioned on the emulator, plus Lambda's own
//! variables. The scenarios check what the binary answered through the Runtime API, its effects
//! on the emulator, and its stdout (JSON logs and EMF lines, as CloudWatch Logs would get them).
//!
//! The stack's own handlers for intake and progress are paused: the binary under test does
//! that work, and the steps before it are driven with the in-process use cases, which the other
//! end-to-end tests cover.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use baton_core::domain::lifecycle::State;
use baton_core::domain::webhook::Secrets;
use lambda_harness::{Function, Invocation, Outcome};
use serde_json::{Value, json};

use crate::system::{System, TEST_SECRET, start_system_with};
use crate::{Emulator, unique_name};

/// How long a binary may take to start, and to answer one invocation, on a loaded machine.
const READY: Duration = Duration::from_secs(90);
const ANSWER: Duration = Duration::from_secs(90);
const WAIT: Duration = Duration::from_secs(90);

/// A stack for the config the binaries embed, with the intake and progress handlers paused.
pub async fn deployed() -> System {
    start_system_with(baton_aws::wiring::EMBEDDED_CONFIG, &["IntakeFunction", "ProgressFunction"]).await
}

/// The environment of `logical_id` on `system`'s stack: the template's variables, resolved, and
/// credentials and an endpoint for the emulator. The access key id names the function and its
/// stack, so the emulator records the binary's calls for the policy contract as it does the
/// in-process functions' (tools/emulator.py, `--record-calls`).
pub fn environment(system: &System, logical_id: &str) -> BTreeMap<String, String> {
    let mut env = system
        .baton
        .provisioned
        .function_env
        .get(logical_id)
        .unwrap_or_else(|| panic!("template.yaml has no function {logical_id}"))
        .clone();
    env.extend([
        ("AWS_ENDPOINT_URL".to_owned(), Emulator::from_env().endpoint),
        (
            "AWS_ACCESS_KEY_ID".to_owned(),
            format!("baton.{logical_id}.{}", system.baton.provisioned.stack_name),
        ),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "testing".to_owned()),
        ("AWS_SESSION_TOKEN".to_owned(), "testing".to_owned()),
    ]);
    env
}

/// Starts `binary` as the function `logical_id` and waits until it asks for its first event.
pub async fn start(binary: &str, logical_id: &str, env: &BTreeMap<String, String>) -> Function {
    let mut function = Function::spawn(logical_id, Path::new(binary), env)
        .await
        .unwrap_or_else(|e| panic!("{logical_id}: {e}"));
    if let Err(e) = function.ready(READY).await {
        panic!("{logical_id} did not start: {e}");
    }
    function
}

async fn invoke(function: &Function, event: &Value) -> Invocation {
    function.invoke(event, ANSWER).await.unwrap_or_else(|e| panic!("{e}; stderr: {:?}", function.stderr()))
}

fn response(invocation: &Invocation) -> &Value {
    match &invocation.outcome {
        Outcome::Response(body) => body,
        Outcome::Error(report) => panic!("the function reported an error: {report:?}"),
    }
}

/// Every stdout line is JSON (a log line or an EMF document): CloudWatch Logs gets structured
/// lines only. Returns them, parsed.
pub fn assert_json_stdout(function: &Function) -> Vec<Value> {
    function
        .stdout()
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
        })
        .collect()
}

/// Waits up to [`WAIT`] for a JSON stdout line of `function` that `wanted` accepts, and returns
/// it; panics with every line seen if none comes.
pub async fn logged(function: &Function, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let parse = |line: &str| serde_json::from_str::<Value>(line).ok();
    match function.stdout_line(WAIT, |line| parse(line).is_some_and(|v| wanted(&v))).await {
        Some(line) => parse(&line).expect("JSON"),
        None => panic!("no stdout line for {what} within {WAIT:?}; the lines: {:#?}", function.stdout()),
    }
}

/// Waits for the log event `message` (`fields.message`) on `function`'s stdout.
pub async fn log_event(function: &Function, message: &str) -> Value {
    logged(function, message, |l| l["fields"]["message"] == message).await
}

/// The EMF documents among `lines`: the metric names they declare.
pub fn emf_metrics(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.pointer("/_aws/CloudWatchMetrics/0/Metrics"))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|m| m["Name"].as_str().map(str::to_owned))
        .collect()
}

fn placed(key: &str) -> String {
    json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "shop", "type": "order.placed",
           "subject": key, "data": {"order_id": key, "total": 1250}})
    .to_string()
}

/// At least `expected` messages from `queue` (received, so hidden for a minute), as Lambda's
/// event source mapping would hand them to the function: one SQS event.
async fn sqs_event(system: &System, queue: &str, expected: usize) -> Value {
    let arn = system.baton.provisioned.queues.get(queue).expect("the queue").arn.clone();
    let mut messages = Vec::new();
    let start = std::time::Instant::now();
    while messages.len() < expected {
        assert!(start.elapsed() < WAIT, "timed out waiting for {expected} message(s) on {queue}");
        messages.extend(system.drain_queue(queue).await);
    }
    serde_json::to_value(baton_local::mapping::to_event(&messages, &arn)).expect("an SQS event")
}

/// intake's binary, handed a batch of a start event and a poison message: the start is applied
/// (a record, an execution), the poison message goes to the intake DLQ with its reason and is
/// acknowledged, so no item of the batch is reported failed. Then, started without `BATON_TABLE`,
/// it reports the missing variable to `/init/error` and exits.
pub async fn intake_scenario(binary: &str) {
    let system = deployed().await;
    let env = environment(&system, "IntakeFunction");
    let key = unique_name("bin");
    system.send_event(&placed(&key)).await;
    system.send_event("{\"specversion\": ").await;
    let event = sqs_event(&system, "IntakeQueue", 2).await;

    let function = start(binary, "IntakeFunction", &env).await;
    let answer = invoke(&function, &event).await;
    assert_eq!(response(&answer), &json!({"batchItemFailures": []}), "stderr: {:?}", function.stderr());

    let dead = system.drain_queue("IntakeDLQ").await;
    assert_eq!(dead.len(), 1, "the poison message, once: {dead:?}");
    assert_eq!(dead[0].body(), Some("{\"specversion\": "), "its original body");
    let reason = dead[0]
        .message_attributes()
        .and_then(|a| a.get(baton_core::ports::dead_letters::REASON_ATTRIBUTE))
        .and_then(|a| a.string_value())
        .map(str::to_owned);
    assert_eq!(reason.as_deref(), Some("not_json"), "the dead-letter reason");

    let record =
        system.until("the started record", || async { system.record("order-review", &key).await }).await;
    assert!(!record.state.is_terminal(), "started: {:?}", record.state);
    let executions = system.executions("order-review").await;
    assert_eq!(executions.len(), 1, "one execution started: {executions:?}");

    for metric in ["WorkflowsStarted", "PoisonMessages"] {
        logged(&function, &format!("an EMF line for {metric}"), |l| {
            emf_metrics(std::slice::from_ref(l)).iter().any(|m| m == metric)
        })
        .await;
    }
    let poison = log_event(&function, "poison message moved to the dead-letter queue").await;
    assert_eq!(poison["fields"]["reason"], "not_json", "{poison}");
    assert_json_stdout(&function);
    function.stop().await;

    // A function started without a variable it needs reports it to /init/error and exits.
    let mut incomplete = env.clone();
    incomplete.remove("BATON_TABLE");
    let mut broken = Function::spawn("IntakeFunction", Path::new(binary), &incomplete).await.expect("spawns");
    let (status, report) = broken.exit(READY).await;
    assert!(status.is_some_and(|s| !s.success()), "init fails: {status:?}");
    let report = report.expect("a report to /init/error");
    assert_eq!(report.error_type_header.as_deref(), Some("Runtime.InitError"));
    assert_eq!(report.error_type(), "setting_missing");
    assert!(report.error_message().contains("BATON_TABLE"), "names the variable: {report:?}");
    assert!(broken.api.first_next().is_none(), "never asked for an event");
    system.stop().await;
}

/// A started workflow whose first step's `step_ready` message is on the progress queue, the
/// start applied by the in-process intake.
async fn started(system: &System, key: &str) {
    system.send_event(&placed(key)).await;
    let intake = system.baton.handlers.get("IntakeFunction").expect("intake").clone();
    let event: aws_lambda_events::event::sqs::SqsEvent =
        serde_json::from_value(sqs_event(system, "IntakeQueue", 1).await).expect("an SQS event");
    let answer = system.deliver(intake.as_ref(), event).await;
    assert!(answer.batch_item_failures.is_empty(), "the start applies: {answer:?}");
}

/// progress's binary, handed the first step's `step_ready`: the record waits on the step, and
/// the step's operator task is published on its team's task queue.
pub async fn progress_scenario(binary: &str) {
    let system = deployed().await;
    let key = unique_name("bin");
    started(&system, &key).await;
    let event = sqs_event(&system, "ProgressQueue", 1).await;

    let function = start(binary, "ProgressFunction", &environment(&system, "ProgressFunction")).await;
    let answer = invoke(&function, &event).await;
    assert_eq!(response(&answer), &json!({"batchItemFailures": []}), "stderr: {:?}", function.stderr());

    let record = system.record("order-review", &key).await.expect("the record");
    assert_eq!(record.state, State::Waiting { step: 0 });
    let tasks = system.published_tasks(1).await;
    assert_eq!(tasks.len(), 1, "one task: {tasks:#?}");
    assert_eq!(tasks[0]["type"], "baton.task.created");
    assert_eq!(tasks[0]["id"], format!("order-review/{key}/g1/manual-review"));
    log_event(&function, "task created and published").await;

    // The same step_ready again, as SQS redelivers it: a duplicate, counted, no second task.
    let again = invoke(&function, &event).await;
    assert_eq!(response(&again), &json!({"batchItemFailures": []}), "stderr: {:?}", function.stderr());
    logged(&function, "an EMF line for DuplicateInputs", |l| {
        emf_metrics(std::slice::from_ref(l)).iter().any(|m| m == "DuplicateInputs")
    })
    .await;
    // Counted visible or not: the task received above may be visible again by now.
    let queue = system.task_queue("risk-review");
    assert_eq!(system.queue_depth(&queue).await, 1, "the task is not published again");
    assert_json_stdout(&function);
    function.stop().await;
    system.stop().await;
}

/// Sends one signed callback to the function, as a sender would: a 503 is sent again with the
/// same `webhook-id` after its `Retry-After`, a few times. Returns the proxy response's status
/// and its body, parsed.
async fn signed_callback(function: &Function, id: &str, body: &Value) -> (u64, Value) {
    let secrets = Secrets::parse(TEST_SECRET).expect("the test secret");
    let text = body.to_string();
    for _ in 0..5 {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", now.to_string()),
            ("webhook-signature", secrets.sign(id, now, text.as_bytes())),
        ];
        let (status, body, retry_after) =
            proxy_response(&invoke(function, &lambda_harness::http_api_event(&headers, &text)).await);
        if status != 503 {
            return (status, body);
        }
        let error = body["error"].as_str();
        assert!(matches!(error, Some("unavailable" | "in_progress")), "a 503 says why: {body}");
        tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1).min(30))).await;
    }
    panic!("callback {id} still answered 503 after 5 tries");
}

/// A proxy response's status, JSON body and `Retry-After` (seconds).
fn proxy_response(invocation: &Invocation) -> (u64, Value, Option<u64>) {
    let answer = response(invocation);
    let status = answer["statusCode"].as_u64().unwrap_or_else(|| panic!("a proxy response: {answer}"));
    let body = answer["body"].as_str().unwrap_or_else(|| panic!("a body: {answer}"));
    let retry_after = answer["headers"]["retry-after"].as_str().and_then(|v| v.parse().ok());
    let content_type = answer["headers"]["content-type"].as_str().unwrap_or_default();
    assert!(content_type.starts_with("application/json"), "a JSON answer: {answer}");
    (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("a JSON body ({e}): {body}")), retry_after)
}

/// callback's binary behind a simulated HTTP API: a signed callback for a waiting step is
/// applied (200, the record's state), and one with a bad signature gets 401 with a JSON error.
pub async fn callback_scenario(binary: &str) {
    let system = deployed().await;
    let key = unique_name("bin");
    started(&system, &key).await;
    let progress = system.baton.handlers.get("ProgressFunction").expect("progress").clone();
    let arn = system.baton.provisioned.queues.get("ProgressQueue").expect("the queue").arn.clone();
    let mut ready = Vec::new();
    let began = std::time::Instant::now();
    while ready.is_empty() {
        assert!(began.elapsed() < WAIT, "timed out waiting for step_ready on ProgressQueue");
        ready = system.drain_queue("ProgressQueue").await;
    }
    let answer = system.deliver(progress.as_ref(), baton_local::mapping::to_event(&ready, &arn)).await;
    assert!(answer.batch_item_failures.is_empty(), "step_ready applies: {answer:?}");

    let function = start(binary, "CallbackFunction", &environment(&system, "CallbackFunction")).await;
    let callback = json!({"workflow": "order-review", "key": key, "step": "manual-review", "outcome": "succeeded",
                          "data": {"decision": "approve"}});
    let id = unique_name("cb");
    let (status, body) = signed_callback(&function, &id, &callback).await;
    assert_eq!(
        (status, body["status"].as_str(), body["state"].as_str()),
        (200, Some("applied"), Some("advancing{0}")),
        "{body}"
    );
    // Its effects on the emulator: the record advanced with the input, and the execution was
    // resumed once (progress is paused, so the record stays advancing).
    let record = system.record("order-review", &key).await.expect("the record");
    assert_eq!(record.state, State::Advancing { step: 0 });
    assert_eq!(record.wait(0).expect("the step's wait").inputs["decision"], "approve");
    system
        .until("the execution resumed", || async {
            (system.resumes("order-review", &key).await == 1).then_some(())
        })
        .await;

    // A callback for a key nothing has started yet: buffered (202), counted.
    let early = json!({"workflow": "order-review", "key": unique_name("early"), "step": "manual-review",
                       "outcome": "succeeded", "data": {"decision": "approve"}});
    let (status, body) = signed_callback(&function, &unique_name("cb"), &early).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("buffered")), "{body}");
    logged(&function, "an EMF line for InputsBuffered", |l| {
        emf_metrics(std::slice::from_ref(l)).iter().any(|m| m == "InputsBuffered")
    })
    .await;

    let text = callback.to_string();
    let forged = [
        ("content-type", "application/json".to_owned()),
        ("webhook-id", unique_name("cb")),
        ("webhook-timestamp", time::OffsetDateTime::now_utc().unix_timestamp().to_string()),
        ("webhook-signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()),
    ];
    let (status, body, _) =
        proxy_response(&invoke(&function, &lambda_harness::http_api_event(&forged, &text)).await);
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_signature")), "{body}");
    let refused = logged(&function, "the refused callback's log line", |l| {
        l["fields"]["message"].as_str().is_some_and(|m| m.starts_with("callback refused"))
    })
    .await;
    assert_eq!(refused["fields"]["reason"], "invalid_signature", "{refused}");
    assert_json_stdout(&function);
    function.stop().await;
    system.stop().await;
}

/// sweeper's binary, handed the scheduled event EventBridge sends: it finds a record left
/// pending by a crash before StartExecution, past its grace period, starts its execution, and
/// answers with what it repaired.
pub async fn sweeper_scenario(binary: &str) {
    let system = deployed().await;
    let engine = system.engine();
    let workflow = engine.config.workflow("order-review").expect("the workflow");
    let key = baton_core::domain::ids::CorrelationKey::parse(unique_name("bin")).expect("a key");
    let crash = baton_core::domain::lifecycle::Input::start(
        baton_core::domain::ids::EventId::parse("evt-crash").expect("an id"),
    );
    let crashed_at = engine.now() - baton_core::limits::RESTART_PENDING_AFTER - time::Duration::minutes(1);
    let decision = baton_core::domain::lifecycle::decide(
        &workflow.plan(),
        (&workflow.name, &key),
        None,
        &crash,
        crashed_at,
    );
    let write = decision.write.expect("a create");
    let applied = baton_core::ports::store::WorkflowStore::apply(&system.store, &write)
        .await
        .expect("the pending write");
    assert_eq!(applied, baton_core::ports::store::Applied::Written);
    assert!(system.executions("order-review").await.is_empty(), "crashed before StartExecution");

    let function = start(binary, "SweeperFunction", &environment(&system, "SweeperFunction")).await;
    let scheduled = json!({
        "version": "0", "id": unique_name("sched"), "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-12-01T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/baton-sweeper"], "detail": {}
    });
    let answer = invoke(&function, &scheduled).await;
    let report = response(&answer);
    assert_eq!((report["repaired"].as_u64(), report["expired"].as_u64()), (Some(1), Some(0)), "{report}");
    log_event(&function, "sweep done").await;
    assert_eq!(system.executions("order-review").await.len(), 1, "the owed start, made once");
    assert_json_stdout(&function);
    function.stop().await;

    // A warm-up that cannot reach AWS does not fail init: the function still asks for events,
    // and says why it started cold.
    let mut unreachable = environment(&system, "SweeperFunction");
    unreachable.insert("AWS_ENDPOINT_URL".into(), "http://127.0.0.1:9".into());
    let function = start(binary, "SweeperFunction", &unreachable).await;
    logged(&function, "the failed warm-up", |l| {
        l["level"] == "WARN"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("warm-up") || m.contains("cannot register"))
    })
    .await;
    log_event(&function, "init done").await;
    function.stop().await;
    system.stop().await;
}
