//! Contract tests for `baton_aws::stepfunctions::StepFunctionsOrchestrator` against the emulator's Step Functions.
//!
//! Each test creates its own SQS queue and a real state machine (unique names) whose steps are
//! `sqs:sendMessage.waitForTaskToken` tasks, the shape baton generates: the task message carries
//! `$$.Task.Token`, and the test plays the part of `functions/progress` by reading it off the
//! queue. Then the port is driven as the use cases drive it, and what Step Functions reports is
//! checked through the port itself (`describe`, `history`).
//!
//! Waits are bounded polling loops (a status, a message), never fixed sleeps, and nothing asserts
//! on timing. Where moto (5.2.5) differs from AWS, the test asserts what moto does and says so:
//! baton must not rely on those behaviours (docs/EMULATOR_DEVIATIONS.md lists them).
//!
//! Needs the emulator: `tools/with-emulator.sh cargo test -p baton-tests --test orchestrator`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use baton_aws::stepfunctions::StepFunctionsOrchestrator;
use baton_core::domain::error::Classified;
use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
use baton_core::ports::orchestrator::{
    ExecutionInfo, ExecutionStatus, Orchestrator, OrchestratorError, StartExecution, execution_arn,
    execution_name,
};
use baton_tests::{Emulator, unique_name};
use serde_json::{Value, json};

/// How long a test waits for anything the emulator does asynchronously: generous, as a loaded
/// machine needs, since only a failing test waits this long.
const PATIENCE: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);

/// The shape of a test's state machine.
#[derive(Clone, Copy)]
struct Machine {
    /// Consecutive `waitForTaskToken` steps.
    steps: usize,
    /// Each task's `TimeoutSeconds`.
    timeout_seconds: u32,
    /// Each task's `HeartbeatSeconds`, if any.
    heartbeat_seconds: Option<u32>,
    /// A `Wait` state of this many seconds before the first task, if any.
    hold_seconds: Option<u32>,
    /// The execution's own `TimeoutSeconds`, if any.
    execution_timeout_seconds: Option<u32>,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            steps: 1,
            timeout_seconds: 60,
            heartbeat_seconds: None,
            hold_seconds: None,
            execution_timeout_seconds: None,
        }
    }
}

/// One test's own queue and state machine, and the port under test.
struct Fixture {
    orch: StepFunctionsOrchestrator,
    sfn: aws_sdk_sfn::Client,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    state_machine_arn: String,
    workflow: WorkflowName,
}

/// A task message, as `functions/progress` would receive it.
struct Task {
    token: TaskToken,
    step: String,
    input: Value,
}

impl Fixture {
    async fn new(machine: Machine) -> Result<Fixture> {
        let config = Emulator::from_env().sdk_config().await;
        let sfn = baton_aws::stepfunctions::client(&config);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue_url = sqs
            .create_queue()
            .queue_name(unique_name("orch"))
            .send()
            .await?
            .queue_url
            .context("create_queue returned no URL")?;

        let mut states = serde_json::Map::new();
        for i in 1..=machine.steps {
            let mut state = json!({
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": queue_url,
                    "MessageBody": { "token.$": "$$.Task.Token", "step": format!("Step{i}"), "input.$": "$" },
                },
                "TimeoutSeconds": machine.timeout_seconds,
            });
            if let Some(h) = machine.heartbeat_seconds {
                state["HeartbeatSeconds"] = json!(h);
            }
            if i < machine.steps {
                state["Next"] = json!(format!("Step{}", i + 1));
            } else {
                state["End"] = json!(true);
            }
            states.insert(format!("Step{i}"), state);
        }
        let mut start_at = "Step1";
        if let Some(seconds) = machine.hold_seconds {
            states.insert("Hold".to_owned(), json!({ "Type": "Wait", "Seconds": seconds, "Next": "Step1" }));
            start_at = "Hold";
        }
        let mut definition = json!({ "StartAt": start_at, "States": states });
        if let Some(seconds) = machine.execution_timeout_seconds {
            definition["TimeoutSeconds"] = json!(seconds);
        }
        let state_machine_arn = sfn
            .create_state_machine()
            .name(unique_name("baton-orch"))
            .role_arn("arn:aws:iam::123456789012:role/baton-test")
            .definition(definition.to_string())
            .send()
            .await?
            .state_machine_arn;

        Ok(Fixture {
            orch: StepFunctionsOrchestrator::new(sfn.clone()),
            sfn,
            sqs,
            queue_url,
            state_machine_arn,
            workflow: WorkflowName::parse("order-review")?,
        })
    }

    fn start_request(&self, key: &str, generation: u32, input: Value) -> Result<StartExecution> {
        Ok(StartExecution {
            state_machine_arn: self.state_machine_arn.clone(),
            workflow: self.workflow.clone(),
            key: CorrelationKey::parse(key)?,
            generation,
            input,
        })
    }

    /// Starts an execution of a fresh key and returns its ARN.
    async fn start(&self, input: Value) -> Result<String> {
        let req = self.start_request(&unique_name("key"), 1, input)?;
        Ok(self.orch.start_execution(&req).await?.execution_arn)
    }

    /// Receives (and deletes) up to ten messages, waiting at most a second.
    async fn receive(&self) -> Result<Vec<Task>> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await?;
        let mut tasks = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let body: Value = serde_json::from_str(m.body().context("message without body")?)?;
            let token = body["token"].as_str().context("task message without token")?;
            tasks.push(Task {
                token: TaskToken::parse(token)?,
                step: body["step"].as_str().unwrap_or_default().to_owned(),
                input: body["input"].clone(),
            });
            if let Some(handle) = m.receipt_handle() {
                self.sqs.delete_message().queue_url(&self.queue_url).receipt_handle(handle).send().await?;
            }
        }
        Ok(tasks)
    }

    /// The next task message, waiting at most [`PATIENCE`].
    async fn next_task(&self) -> Result<Task> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let mut tasks = self.receive().await?;
            if let Some(task) = tasks.pop() {
                ensure!(tasks.is_empty(), "expected one task message, got {}", tasks.len() + 1);
                return Ok(task);
            }
        }
        bail!("no task message within {PATIENCE:?}")
    }

    /// Polls `describe` until the execution is closed, at most [`PATIENCE`].
    async fn closed(&self, arn: &str) -> Result<ExecutionInfo> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let info = self.orch.describe(arn).await?;
            if info.status.is_closed() {
                return Ok(info);
            }
            if Instant::now() >= deadline {
                bail!("execution still {} after {PATIENCE:?}", info.status);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn executions(&self) -> Result<usize> {
        let out = self.sfn.list_executions().state_machine_arn(&self.state_machine_arn).send().await?;
        Ok(out.executions.len())
    }
}

fn is_token_gone<T: std::fmt::Debug>(result: &Result<T, OrchestratorError>) -> bool {
    matches!(result, Err(OrchestratorError::TokenGone { .. }))
}

// 1. Invariant 2: one start event, delivered twice, starts exactly one execution.
#[tokio::test]
async fn starting_twice_gives_one_execution_and_one_task_message() -> Result<()> {
    // Given a state machine and a key that needs no escaping
    let fx = Fixture::new(Machine::default()).await?;
    let req = fx.start_request("order-42", 1, json!({"order": 42, "total": 1200}))?;

    // When the same start is made twice while the execution runs
    let first = fx.orch.start_execution(&req).await?;
    let second = fx.orch.start_execution(&req).await?;

    // Then both name one execution, with the derived name
    assert_eq!(first.execution_arn, second.execution_arn);
    assert_eq!(
        Some(first.execution_arn.clone()),
        execution_arn(&fx.state_machine_arn, &execution_name(&fx.workflow, &req.key, 1))
    );
    assert!(!first.already_existed);
    // moto (like AWS) answers a repeat of a running start with success, not ExecutionAlreadyExists.
    assert!(!second.already_existed);
    assert_eq!(fx.executions().await?, 1);

    // And exactly one task message reaches the queue
    let task = fx.next_task().await?;
    assert_eq!(task.input, req.input);
    for _ in 0..3 {
        let more = fx.receive().await?;
        assert!(more.is_empty(), "a second task message arrived");
    }
    Ok(())
}

// 2. Two different starts for one generation are a conflict, not a second execution.
#[tokio::test]
async fn a_different_input_for_the_same_name_is_a_conflict() -> Result<()> {
    // Given a running execution
    let fx = Fixture::new(Machine::default()).await?;
    let req = fx.start_request("urn:order:42", 1, json!({"order": 42}))?;
    let started = fx.orch.start_execution(&req).await?;

    // When a start with the same (workflow, key, generation) carries a different input
    let other = StartExecution { input: json!({"order": 43}), ..req.clone() };
    let err = fx.orch.start_execution(&other).await.expect_err("a different input must conflict");

    // Then it is ExecutionConflict, permanent, and names the existing execution
    match &err {
        OrchestratorError::ExecutionConflict { name, execution_arn } => {
            assert_eq!(name, &req.execution_name());
            assert_eq!(execution_arn, &started.execution_arn);
        }
        other => bail!("expected ExecutionConflict, got {other:?}"),
    }
    assert_eq!(err.error_type(), "execution_conflict");
    assert!(!err.retryable());
    assert_eq!(fx.executions().await?, 1);

    // And repeating the original start still names the original execution
    assert_eq!(fx.orch.start_execution(&req).await?.execution_arn, started.execution_arn);
    Ok(())
}

// 3. A resume succeeds once; after the execution closes its token is gone; a replayed start of
// the closed execution is recognised as the same start.
#[tokio::test]
async fn success_resumes_and_the_used_token_is_gone_after_close() -> Result<()> {
    // Given an execution waiting on its task
    let fx = Fixture::new(Machine::default()).await?;
    let req = fx.start_request("acme/orders/7", 1, json!({"order": 7}))?;
    let arn = fx.orch.start_execution(&req).await?.execution_arn;
    let task = fx.next_task().await?;
    assert_eq!(task.step, "Step1");

    // When it is resumed with an output
    let output = json!({"decision": "approve", "by": "ops@example.com"});
    fx.orch.send_task_success(&task.token, &output).await?;

    // Then the execution succeeds with exactly that output
    let info = fx.closed(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Succeeded);
    assert_eq!(info.output, Some(output.clone()));
    assert_eq!(info.input, Some(req.input.clone()));
    assert!(info.stop_date.is_some_and(|stop| stop >= info.start_date));

    // And every further use of the token is TokenGone, permanent
    let again = fx.orch.send_task_success(&task.token, &output).await;
    assert!(is_token_gone(&again), "{again:?}");
    let err = again.expect_err("checked above");
    assert_eq!((err.error_type(), err.retryable()), ("token_gone", false));
    let beat = fx.orch.send_task_heartbeat(&task.token).await;
    assert!(is_token_gone(&beat), "{beat:?}");
    // moto deviation: SendTaskFailure on the token of a closed execution is accepted silently
    // (moto looks the token up in every execution, closed ones too). AWS answers InvalidToken or
    // TaskTimedOut, which is TokenGone. Either way nothing changes.
    let fail = fx.orch.send_task_failure(&task.token, "Late", "after close").await;
    assert!(fail.is_ok() || is_token_gone(&fail), "{fail:?}");
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Succeeded);

    // And a replay of the start after the close is the same start (AWS and moto both say
    // ExecutionAlreadyExists here; the port compares inputs)
    let replay = fx.orch.start_execution(&req).await?;
    assert_eq!(replay.execution_arn, arn);
    assert!(replay.already_existed);
    // While a different input for the closed execution still conflicts
    let other = StartExecution { input: json!({"order": 8}), ..req.clone() };
    let conflict = fx.orch.start_execution(&other).await;
    assert!(matches!(conflict, Err(OrchestratorError::ExecutionConflict { .. })), "{conflict:?}");
    assert_eq!(fx.executions().await?, 1);
    Ok(())
}

// 3b. Documents a moto deviation: a second resume of a used token, while the execution still
// runs (waiting on its next step), is accepted silently. AWS answers TaskTimedOut. baton must not
// rely on either answer: the record's conditional write is what makes a resume happen once.
#[tokio::test]
async fn moto_accepts_a_second_resume_while_the_execution_runs() -> Result<()> {
    // Given a two-step execution whose first step has been resumed
    let fx = Fixture::new(Machine { steps: 2, ..Machine::default() }).await?;
    let arn = fx.start(json!({"order": 1})).await?;
    let first = fx.next_task().await?;
    assert_eq!(first.step, "Step1");
    fx.orch.send_task_success(&first.token, &json!({"n": 1})).await?;
    let second = fx.next_task().await?;
    assert_eq!(second.step, "Step2");

    // When the first step's token is resumed again while the execution waits on step 2
    let again = fx.orch.send_task_success(&first.token, &json!({"n": 2})).await;

    // Then moto accepts it (deviation: AWS says TaskTimedOut, which the port maps to TokenGone)
    assert!(again.is_ok(), "moto's behaviour changed; update docs/EMULATOR_DEVIATIONS.md: {again:?}");
    // And it has no effect: the execution still waits on step 2, and no new task appears
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Running);
    assert!(fx.receive().await?.is_empty());
    fx.orch.send_task_success(&second.token, &json!({"n": 3})).await?;
    let info = fx.closed(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Succeeded);
    assert_eq!(info.output, Some(json!({"n": 3})));
    Ok(())
}

// 3c. Documents a moto deviation: a heartbeat for a task without HeartbeatSeconds is refused as
// an invalid token (moto keeps no heartbeat clock for it). AWS accepts it. baton treats the
// answer as a gone token (logged, nothing owed), so locally an `in_progress` callback for a step
// without `heartbeat` logs "token gone" while the step still waits.
#[tokio::test]
async fn moto_refuses_a_heartbeat_for_a_task_without_heartbeat_seconds() -> Result<()> {
    // Given an execution waiting on a task that has no HeartbeatSeconds
    let fx = Fixture::new(Machine::default()).await?;
    let arn = fx.start(json!({"order": 1})).await?;
    let task = fx.next_task().await?;

    // When it is sent a heartbeat
    let beat = fx.orch.send_task_heartbeat(&task.token).await;

    // Then moto refuses it as a gone token (deviation: AWS accepts it), and the task still waits
    assert!(is_token_gone(&beat), "moto's behaviour changed; update docs/EMULATOR_DEVIATIONS.md: {beat:?}");
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Running);
    fx.orch.send_task_success(&task.token, &json!({"n": 1})).await?;
    assert_eq!(fx.closed(&arn).await?.status, ExecutionStatus::Succeeded);
    Ok(())
}

// 4. A failure report fails the execution with the caller's error.
#[tokio::test]
async fn failure_fails_the_execution_with_that_error() -> Result<()> {
    // Given an execution waiting on its task
    let fx = Fixture::new(Machine::default()).await?;
    let arn = fx.start(json!({"order": 9})).await?;
    let task = fx.next_task().await?;

    // When the task is failed
    fx.orch.send_task_failure(&task.token, "Baton.StepFailed", "the reviewer rejected the order").await?;

    // Then the execution fails with that error
    let info = fx.closed(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Failed);
    assert_eq!(info.error.as_deref(), Some("Baton.StepFailed"));
    // moto deviation: SendTaskFailure drops `cause` (AWS keeps it). Accept either, but nothing else.
    assert!(
        matches!(info.cause.as_deref(), None | Some("") | Some("the reviewer rejected the order")),
        "{:?}",
        info.cause
    );
    assert_eq!(info.output, None);
    Ok(())
}

// 5. Heartbeats keep a task alive past HeartbeatSeconds; when they stop, the task times out.
#[tokio::test]
async fn heartbeats_keep_a_task_alive_until_they_stop() -> Result<()> {
    // Given a task with HeartbeatSeconds 10 and a much longer TimeoutSeconds, whose message has
    // been received (10 s: each beat has seconds to spare on a loaded machine)
    let fx =
        Fixture::new(Machine { timeout_seconds: 300, heartbeat_seconds: Some(10), ..Machine::default() })
            .await?;
    let arn = fx.start(json!({"order": 5})).await?;
    let task = fx.next_task().await?;

    // The first heartbeat may still race moto registering the token just after it sent the
    // message (docs/EMULATOR_DEVIATIONS.md): retry InvalidToken while the execution runs, for a bounded time.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match fx.orch.send_task_heartbeat(&task.token).await {
            Ok(()) => break,
            Err(OrchestratorError::TokenGone { .. }) if tokio::time::Instant::now() < deadline => {
                assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Running);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }

    // When heartbeats follow every ~2 s for ~14 s, longer than HeartbeatSeconds
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        fx.orch.send_task_heartbeat(&task.token).await?;
    }

    // Then the execution is still running
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Running);

    // When the heartbeats stop
    let info = fx.closed(&arn).await?;

    // Then the task times out, and with no Catch the execution fails with States.Timeout
    assert_eq!(info.status, ExecutionStatus::Failed, "{info:?}");
    assert_eq!(info.error.as_deref(), Some("States.Timeout"));
    // And the token is gone for heartbeats and resumes alike
    let beat = fx.orch.send_task_heartbeat(&task.token).await;
    assert!(is_token_gone(&beat), "{beat:?}");
    let resume = fx.orch.send_task_success(&task.token, &json!({})).await;
    assert!(is_token_gone(&resume), "{resume:?}");
    Ok(())
}

// 6. A step that misses its deadline surfaces as States.Timeout (invariant 7).
#[tokio::test]
async fn a_task_timeout_surfaces_as_states_timeout() -> Result<()> {
    // Given a task with TimeoutSeconds 1 that nobody resumes
    let fx = Fixture::new(Machine { timeout_seconds: 1, ..Machine::default() }).await?;
    let arn = fx.start(json!({"order": 6})).await?;
    let task = fx.next_task().await?;

    // When its deadline passes
    let info = fx.closed(&arn).await?;

    // Then the execution has failed with States.Timeout (a task timeout without a Catch fails the
    // execution; TIMED_OUT is for the execution's own TimeoutSeconds)
    assert_eq!(info.status, ExecutionStatus::Failed, "{info:?}");
    assert_eq!(info.error.as_deref(), Some("States.Timeout"));
    // And a late resume is TokenGone (AWS: TaskTimedOut; moto: InvalidToken)
    let late = fx.orch.send_task_success(&task.token, &json!({"decision": "late"})).await;
    match &late {
        Err(OrchestratorError::TokenGone { code, .. }) => {
            assert!(["TaskTimedOut", "InvalidToken"].contains(code), "{code}")
        }
        other => bail!("expected TokenGone, got {other:?}"),
    }
    // And the history shows the timeout
    let history = fx.orch.history(&arn).await?;
    assert!(history.iter().any(|e| e.event_type == "TaskTimedOut"), "{history:#?}");
    Ok(())
}

// 6b. The execution's own deadline is a different status: TIMED_OUT.
#[tokio::test]
async fn an_execution_timeout_surfaces_as_timed_out() -> Result<()> {
    // Given a state machine whose own TimeoutSeconds is 5, waiting on a task with a longer one
    let fx = Fixture::new(Machine { execution_timeout_seconds: Some(5), ..Machine::default() }).await?;
    let arn = fx.start(json!({"order": 60})).await?;
    let task = fx.next_task().await?;

    // When the execution's deadline passes
    let info = fx.closed(&arn).await?;

    // Then it is TIMED_OUT, and its token is gone
    assert_eq!(info.status, ExecutionStatus::TimedOut, "{info:?}");
    // moto deviation: a TIMED_OUT execution has no stop date and no error (AWS sets the stop date
    // and States.Timeout). Accept either.
    assert!(matches!(info.error.as_deref(), None | Some("States.Timeout")), "{info:?}");
    let late = fx.orch.send_task_success(&task.token, &json!({})).await;
    assert!(is_token_gone(&late), "{late:?}");
    Ok(())
}

// 7. Stop aborts a running execution; stopping again, or stopping a finished one, is Ok. The
// execution is held in a Wait state here, because moto defers a stop of an execution parked on a
// task token (see the next tests).
#[tokio::test]
async fn stop_aborts_and_is_idempotent() -> Result<()> {
    // Given a running execution
    let fx = Fixture::new(Machine { hold_seconds: Some(60), ..Machine::default() }).await?;
    let arn = fx.start(json!({"order": 70})).await?;
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Running);

    // When it is stopped
    fx.orch.stop_execution(&arn, "Baton.Cancelled", "cancelled by an operator").await?;

    // Then it is ABORTED
    let info = fx.closed(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Aborted);
    // moto deviation: StopExecution drops error and cause (AWS keeps them). Accept either.
    assert!(matches!(info.error.as_deref(), None | Some("") | Some("Baton.Cancelled")), "{info:?}");
    // And stopping again is Ok and changes nothing
    fx.orch.stop_execution(&arn, "Baton.Cancelled", "again").await?;
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Aborted);
    // The history ends ExecutionAborted. It is written after the status: moto's execution
    // thread appends the event as it unwinds, which on a loaded machine is after describe
    // already says ABORTED; a client reading the history right after the stop waits for it.
    let what = "the history to end ExecutionAborted";
    baton_tests::system::eventually(what, baton_tests::system::WAIT, || async {
        let history = fx.orch.history(&arn).await.expect("the history");
        (history.last().map(|e| e.event_type.as_str()) == Some("ExecutionAborted")).then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn stopping_a_finished_execution_is_ok_and_changes_nothing() -> Result<()> {
    // Given an execution that succeeded
    let fx = Fixture::new(Machine::default()).await?;
    let arn = fx.start(json!({"order": 71})).await?;
    let task = fx.next_task().await?;
    fx.orch.send_task_success(&task.token, &json!({"ok": true})).await?;
    assert_eq!(fx.closed(&arn).await?.status, ExecutionStatus::Succeeded);

    // When it is stopped through the port, Then that is Ok and it stays SUCCEEDED
    fx.orch.stop_execution(&arn, "Baton.Cancelled", "too late").await?;
    let info = fx.orch.describe(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Succeeded);
    assert_eq!(info.output, Some(json!({"ok": true})));

    // moto: a raw StopExecution (which the port does not send for a closed execution) is also
    // accepted and leaves the status alone.
    let raw = fx.sfn.stop_execution().execution_arn(&arn).send().await;
    assert!(raw.is_ok(), "moto's behaviour changed; update docs/EMULATOR_DEVIATIONS.md: {raw:?}");
    assert_eq!(fx.orch.describe(&arn).await?.status, ExecutionStatus::Succeeded);
    Ok(())
}

// 7b. Documents a moto deviation: StopExecution of an execution parked on a task token is
// accepted, but the execution stays RUNNING until the task's wait ends. A resume (which moto also
// accepts) then ends it ABORTED. AWS aborts at once and the token is dead from then on. baton must
// not expect a stopped execution to read ABORTED at once on the emulator.
#[tokio::test]
async fn moto_defers_a_stop_of_an_execution_waiting_on_a_token_until_a_resume() -> Result<()> {
    // Given an execution parked on its task token
    let fx = Fixture::new(Machine::default()).await?;
    let arn = fx.start(json!({"order": 72})).await?;
    let task = fx.next_task().await?;

    // When it is stopped
    fx.orch.stop_execution(&arn, "Baton.Cancelled", "cancelled").await?;

    // Then moto still reports it RUNNING (TimeoutSeconds is 60, so this is not a race)
    let info = fx.orch.describe(&arn).await?;
    assert_eq!(
        info.status,
        ExecutionStatus::Running,
        "moto's behaviour changed; update docs/EMULATOR_DEVIATIONS.md"
    );
    // And a resume of its token is accepted, and only then does it end ABORTED
    let resume = fx.orch.send_task_success(&task.token, &json!({"late": true})).await;
    assert!(resume.is_ok(), "moto's behaviour changed; update docs/EMULATOR_DEVIATIONS.md: {resume:?}");
    let info = fx.closed(&arn).await?;
    assert_eq!(info.status, ExecutionStatus::Aborted);
    assert_eq!(info.output, None);
    Ok(())
}

// 7c. Documents the worse half of the same moto deviation: when no resume comes, the deferred
// stop is lost, and the task's timeout ends the execution FAILED with States.Timeout. On AWS it
// would be ABORTED. A local `baton cancel` of a waiting step therefore shows as a timeout.
#[tokio::test]
async fn moto_loses_a_stop_of_an_execution_waiting_on_a_token_to_its_timeout() -> Result<()> {
    // Given an execution parked on a task with TimeoutSeconds 1
    let fx = Fixture::new(Machine { timeout_seconds: 1, ..Machine::default() }).await?;
    let arn = fx.start(json!({"order": 73})).await?;
    fx.next_task().await?;

    // When it is stopped and nobody resumes it
    fx.orch.stop_execution(&arn, "Baton.Cancelled", "cancelled").await?;
    let info = fx.closed(&arn).await?;

    // Then moto ends it as a task timeout, not ABORTED
    assert!(
        info.status == ExecutionStatus::Failed && info.error.as_deref() == Some("States.Timeout"),
        "moto's behaviour changed (AWS would say ABORTED); update docs/EMULATOR_DEVIATIONS.md: {info:?}"
    );
    Ok(())
}

// 8. The history of a finished execution is complete and in order, without the token.
#[tokio::test]
async fn history_of_a_finished_execution_is_ordered() -> Result<()> {
    // Given an execution that ran its task to success
    let fx = Fixture::new(Machine::default()).await?;
    let arn = fx.start(json!({"order": 8})).await?;
    let task = fx.next_task().await?;
    fx.orch.send_task_success(&task.token, &json!({"decision": "approve"})).await?;
    fx.closed(&arn).await?;

    // When its history is read
    let history = fx.orch.history(&arn).await?;

    // Then it is non-empty, ordered by id, and runs from start to success
    ensure!(!history.is_empty(), "empty history");
    assert!(history.windows(2).all(|w| w[0].id < w[1].id), "{history:#?}");
    assert!(history.windows(2).all(|w| w[0].timestamp <= w[1].timestamp), "{history:#?}");
    let types: Vec<&str> = history.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types.first(), Some(&"ExecutionStarted"), "{types:?}");
    assert_eq!(types.last(), Some(&"ExecutionSucceeded"), "{types:?}");
    for expected in ["TaskStateEntered", "TaskScheduled", "TaskStarted", "TaskSubmitted", "TaskSucceeded"] {
        assert!(types.contains(&expected), "{expected} missing from {types:?}");
    }
    let scheduled = history.iter().find(|e| e.event_type == "TaskScheduled").context("checked above")?;
    assert_eq!(scheduled.detail, "sqs:sendMessage.waitForTaskToken");
    let entered = history.iter().find(|e| e.event_type == "TaskStateEntered").context("checked above")?;
    assert_eq!(entered.detail, "Step1");
    // And no detail carries the task token
    for e in &history {
        assert!(!e.detail.contains(task.token.expose()), "event {} leaks the token", e.id);
    }
    println!("moto history: {types:?}");
    Ok(())
}

// Named errors for what does not exist.
#[tokio::test]
async fn missing_state_machines_and_executions_are_named_errors() -> Result<()> {
    let fx = Fixture::new(Machine::default()).await?;

    // A start against a state machine that does not exist
    let missing_sm = format!("{}-gone", fx.state_machine_arn);
    let req = StartExecution { state_machine_arn: missing_sm, ..fx.start_request("k", 1, json!({}))? };
    let err = fx.orch.start_execution(&req).await.expect_err("no such state machine");
    assert!(matches!(err, OrchestratorError::StateMachineNotFound { .. }), "{err:?}");
    assert_eq!((err.error_type(), err.retryable()), ("state_machine_not_found", false));

    // An execution that does not exist, for describe, history and stop
    let name = execution_name(&fx.workflow, &CorrelationKey::parse("never-started")?, 1);
    let arn = execution_arn(&fx.state_machine_arn, &name).context("valid state machine ARN")?;
    let describe = fx.orch.describe(&arn).await;
    assert!(matches!(describe, Err(OrchestratorError::ExecutionNotFound { .. })), "{describe:?}");
    let history = fx.orch.history(&arn).await;
    assert!(matches!(history, Err(OrchestratorError::ExecutionNotFound { .. })), "{history:?}");
    let stop = fx.orch.stop_execution(&arn, "E", "c").await;
    assert!(matches!(stop, Err(OrchestratorError::ExecutionNotFound { .. })), "{stop:?}");

    // A token Step Functions never issued
    let bogus = TaskToken::parse("AAAAKgAAAAIAAAAAAAAAAnot-a-real-token")?;
    let resume = fx.orch.send_task_success(&bogus, &json!({})).await;
    assert!(is_token_gone(&resume), "{resume:?}");
    // One as long as the API takes (2,048 characters): the SDK sends it, and the answer is the
    // service's, for all three resumes.
    let longest = TaskToken::parse(baton_tests::lifecycle_fixtures::aws_length_token(9))?;
    assert_eq!(longest.expose().len(), TaskToken::MAX_LEN);
    let resume = fx.orch.send_task_success(&longest, &json!({})).await;
    assert!(is_token_gone(&resume), "{resume:?}");
    let resume = fx.orch.send_task_failure(&longest, "E", "c").await;
    assert!(is_token_gone(&resume), "{resume:?}");
    let resume = fx.orch.send_task_heartbeat(&longest).await;
    assert!(is_token_gone(&resume), "{resume:?}");
    Ok(())
}
