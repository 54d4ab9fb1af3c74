//! A model of Step Functions, running the very definitions `baton synth` generates.
//!
//! It interprets the subset of the Amazon States Language that `baton_core::domain::asl` emits, and panics on
//! anything else, so a change to the generator cannot drift away from the model unnoticed:
//! `Task` states on `sqs:sendMessage` and `sqs:sendMessage.waitForTaskToken` (with
//! `TimeoutSeconds`, `HeartbeatSeconds`, `ResultPath`, `Catch`), and `Fail`.
//!
//! The semantics baton relies on, as AWS documents them:
//! - one execution per name; a start with the same name and input is idempotent while the
//!   execution runs; with another input, or once it has closed, it is `ExecutionAlreadyExists`
//!   (the port then compares inputs, as the production adapter does), until the name may be
//!   reused [`NAME_REUSE_AFTER`] after the execution closed;
//! - a task token can be used once: a resume of a closed token is `TaskTimedOut`, of a token
//!   never issued `InvalidToken`;
//! - a task that outlives `TimeoutSeconds`, or goes `HeartbeatSeconds` without a heartbeat,
//!   fails with `States.Timeout`; `Catch` routes it to the report states;
//! - a stopped execution is `ABORTED` at once and runs no Catch (its token closes).
//!
//! And AWS's limits, which the emulator does not keep (docs/EMULATOR_DEVIATIONS.md):
//! - SendTaskFailure's and StopExecution's `error` at most [`MAX_ERROR_CHARS`] characters and
//!   `cause` at most [`MAX_CAUSE_CHARS`]: longer is a `ValidationException`, every time;
//! - [`MAX_PAYLOAD_BYTES`] on an execution's input, a task's output and message, and a state's
//!   output: an API call carrying more is a `ValidationException`, a state producing more fails
//!   with `States.DataLimitExceeded`;
//! - a `.$` path that selects nothing fails the state with `States.Runtime`;
//! - neither of those two is caught by `States.ALL`, only by a Catch that names it.
//!
//! Every resume the model is asked for is logged, accepted or not, with the time: the
//! simulation's checks read this log, not baton's account of itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use baton_core::domain::ids::TaskToken;
use baton_core::ports::orchestrator::{
    ExecutionInfo, ExecutionStatus, HistoryEvent, Orchestrator, OrchestratorError, StartExecution, Started,
    execution_arn,
};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::sqs::{QueueId, Sqs};
use crate::world::{Fault, World, lock};

/// Step Functions' limit on SendTaskFailure's and StopExecution's `error`, in characters.
pub const MAX_ERROR_CHARS: usize = 256;
/// Step Functions' limit on SendTaskFailure's and StopExecution's `cause`, in characters.
pub const MAX_CAUSE_CHARS: usize = 32_768;
/// Step Functions' limit on an execution's input, a state's input and output, a task's output
/// and a task's message: 256 KiB of UTF-8.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// How long after an execution closed its name may start another.
pub const NAME_REUSE_AFTER: Duration = Duration::days(90);
/// The terminal errors `States.ALL` does not match.
const NOT_IN_STATES_ALL: [&str; 2] = ["States.DataLimitExceeded", "States.Runtime"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub state: String,
    pub token: String,
    pub deadline: OffsetDateTime,
    pub heartbeat: Option<Duration>,
    pub beat_deadline: Option<OffsetDateTime>,
}

#[derive(Debug, Clone)]
pub struct Execution {
    pub arn: String,
    pub machine: String,
    /// The machine's definition when the execution started: a deploy never changes it.
    pub definition: Value,
    pub input_text: String,
    pub doc: Value,
    pub status: ExecutionStatus,
    pub wait: Option<Wait>,
    pub started_at: OffsetDateTime,
    /// When it closed (succeeded, failed or aborted).
    pub closed_at: Option<OffsetDateTime>,
    /// The error and cause it failed with.
    pub failure: Option<(String, String)>,
}

/// One resume the model was asked for.
#[derive(Debug, Clone)]
pub struct ResumeCall {
    pub token: String,
    pub at: OffsetDateTime,
    /// `success` with its output, or `failure` with its error.
    pub payload: String,
    /// Whether Step Functions took it (the token was open).
    pub accepted: bool,
    /// The SDK's own retry of a call whose answer was lost (not a new send by baton).
    pub sdk_retry: bool,
}

/// The model's state and its log.
#[derive(Debug, Default)]
pub struct Model {
    pub machines: BTreeMap<String, Value>,
    pub executions: BTreeMap<String, Execution>,
    /// Token to (execution, state); closed tokens stay, so a late resume is recognised.
    pub tokens: BTreeMap<String, (String, String, bool)>,
    pub resumes: Vec<ResumeCall>,
    pub starts: Vec<(String, OffsetDateTime)>,
    /// Every call refused for Step Functions' limits (a ValidationException): baton asked for
    /// what AWS never takes.
    pub refused: Vec<String>,
    next_token: u64,
}

/// What a resume does to the model.
enum Resume {
    Success(Value),
    Failure(String, String),
    Heartbeat,
}

impl Model {
    fn definition(&self, arn: &str) -> &Value {
        &self.executions[arn].definition
    }

    fn start(
        &mut self,
        machine: &str,
        arn: &str,
        input_text: &str,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        let doc: Value = serde_json::from_str(input_text).expect("execution input is JSON");
        self.executions.insert(
            arn.to_owned(),
            Execution {
                arn: arn.to_owned(),
                machine: machine.to_owned(),
                definition: self.machines[machine].clone(),
                input_text: input_text.to_owned(),
                doc,
                status: ExecutionStatus::Running,
                wait: None,
                started_at: now,
                closed_at: None,
                failure: None,
            },
        );
        self.starts.push((arn.to_owned(), now));
        let first = self.definition(arn)["StartAt"].as_str().expect("StartAt").to_owned();
        self.run(arn, first, now, out);
    }

    /// Runs an execution from `state` until it waits on a token or ends.
    fn run(&mut self, arn: &str, mut state: String, now: OffsetDateTime, out: &mut Vec<String>) {
        loop {
            let def = self.definition(arn)["States"][&state].clone();
            assert!(!def.is_null(), "state {state} is not in the definition");
            match def["Type"].as_str() {
                Some("Fail") => {
                    let failure = (
                        def["Error"].as_str().unwrap_or_default(),
                        def["Cause"].as_str().unwrap_or_default(),
                    );
                    self.close(arn, ExecutionStatus::Failed, Some((failure.0.into(), failure.1.into())), now);
                    return;
                }
                Some("Task") => {}
                other => panic!("the model does not know state type {other:?}"),
            }
            let resource = def["Resource"].as_str().expect("Resource");
            let token = format!("tok-{}-{}", self.next_token, arn.len());
            self.next_token += 1;
            let context = json!({"Task": {"Token": token}, "State": {"EnteredTime": now.format(&Rfc3339).expect("a time")}});
            let body = match render(&def["Parameters"]["MessageBody"], &self.executions[arn].doc, &context) {
                Ok(body) => body.to_string(),
                Err(path) => {
                    let cause = format!("The JSONPath '{path}' could not be found in the input");
                    return self.fail_state(arn, &def, ("States.Runtime".into(), cause), now, out);
                }
            };
            if body.len() > MAX_PAYLOAD_BYTES {
                let cause =
                    format!("the task's message is {} bytes; the limit is {MAX_PAYLOAD_BYTES}", body.len());
                return self.fail_state(arn, &def, ("States.DataLimitExceeded".into(), cause), now, out);
            }
            out.push(body);
            match resource {
                "arn:aws:states:::sqs:sendMessage.waitForTaskToken" => {
                    let timeout = Duration::seconds(def["TimeoutSeconds"].as_i64().expect("TimeoutSeconds"));
                    let heartbeat = def["HeartbeatSeconds"].as_i64().map(Duration::seconds);
                    self.tokens.insert(token.clone(), (arn.to_owned(), state.clone(), true));
                    self.executions.get_mut(arn).expect("execution").wait = Some(Wait {
                        state,
                        token,
                        deadline: now + timeout,
                        heartbeat,
                        beat_deadline: heartbeat.map(|h| now + h),
                    });
                    return;
                }
                "arn:aws:states:::sqs:sendMessage" => {
                    assert!(def["ResultPath"].is_null(), "report states discard their result");
                    match def["Next"].as_str() {
                        Some(next) => state = next.to_owned(),
                        None => {
                            assert_eq!(def["End"], true, "a state without Next must End");
                            self.close(arn, ExecutionStatus::Succeeded, None, now);
                            return;
                        }
                    }
                }
                other => panic!("the model does not know resource {other}"),
            }
        }
    }

    /// The task of `arn` ends with `result`: success (output) or an error caught by `Catch`.
    fn finish_task(
        &mut self,
        arn: &str,
        result: Result<Value, (String, String)>,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        let execution = self.executions.get_mut(arn).expect("execution");
        let wait = execution.wait.take().expect("a waiting task");
        if let Some(t) = self.tokens.get_mut(&wait.token) {
            t.2 = false;
        }
        let def = self.definition(arn)["States"][&wait.state].clone();
        match result {
            Ok(output) => {
                let doc = &mut self.executions.get_mut(arn).expect("execution").doc;
                let before = doc.clone();
                set_path(doc, &def["ResultPath"], output);
                let size = doc.to_string().len();
                if size > MAX_PAYLOAD_BYTES {
                    *doc = before;
                    let cause =
                        format!("the state's output is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}");
                    return self.fail_state(arn, &def, ("States.DataLimitExceeded".into(), cause), now, out);
                }
                let next = def["Next"].as_str().expect("Next").to_owned();
                self.run(arn, next, now, out);
            }
            Err(failure) => self.fail_state(arn, &def, failure, now, out),
        }
    }

    /// The state `def` of `arn` fails with (error, cause): on to the first `Catch` that matches
    /// (`States.ALL` matches neither `States.DataLimitExceeded` nor `States.Runtime`), or the
    /// execution fails.
    fn fail_state(
        &mut self,
        arn: &str,
        def: &Value,
        (error, cause): (String, String),
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        let catches = |x: &Value| {
            x == &json!(error) || (x == "States.ALL" && !NOT_IN_STATES_ALL.contains(&error.as_str()))
        };
        let catcher = def["Catch"]
            .as_array()
            .and_then(|c| {
                c.iter().find(|c| c["ErrorEquals"].as_array().is_some_and(|e| e.iter().any(catches)))
            })
            .cloned();
        let Some(c) = catcher else {
            return self.close(arn, ExecutionStatus::Failed, Some((error, cause)), now);
        };
        let error_doc = json!({"Error": error, "Cause": cause});
        set_path(&mut self.executions.get_mut(arn).expect("execution").doc, &c["ResultPath"], error_doc);
        self.run(arn, c["Next"].as_str().expect("Next").to_owned(), now, out);
    }

    /// Closes `arn` with `status`; its open token, if any, closes with it.
    fn close(
        &mut self,
        arn: &str,
        status: ExecutionStatus,
        failure: Option<(String, String)>,
        now: OffsetDateTime,
    ) {
        let execution = self.executions.get_mut(arn).expect("execution");
        execution.status = status;
        execution.closed_at = Some(now);
        execution.failure = failure;
        if let Some(wait) = execution.wait.take()
            && let Some(t) = self.tokens.get_mut(&wait.token)
        {
            t.2 = false;
        }
    }

    fn resume(
        &mut self,
        token: &str,
        what: Resume,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) -> Result<(), &'static str> {
        let Some((arn, _, open)) = self.tokens.get(token).cloned() else { return Err("InvalidToken") };
        let running = self.executions[&arn].status == ExecutionStatus::Running;
        if !open || !running {
            return Err("TaskTimedOut");
        }
        match what {
            Resume::Success(output) => self.finish_task(&arn, Ok(output), now, out),
            Resume::Failure(error, cause) => self.finish_task(&arn, Err((error, cause)), now, out),
            Resume::Heartbeat => {
                let wait = self.executions.get_mut(&arn).and_then(|e| e.wait.as_mut()).expect("a wait");
                wait.beat_deadline = wait.heartbeat.map(|h| now + h);
            }
        }
        Ok(())
    }

    /// Times out every task past its deadline or heartbeat at `now`.
    pub fn fire_timers(&mut self, now: OffsetDateTime, out: &mut Vec<String>) -> usize {
        let due: Vec<String> = self
            .executions
            .values()
            .filter(|e| e.status == ExecutionStatus::Running)
            .filter(|e| {
                e.wait
                    .as_ref()
                    .is_some_and(|w| w.deadline <= now || w.beat_deadline.is_some_and(|b| b <= now))
            })
            .map(|e| e.arn.clone())
            .collect();
        for arn in &due {
            self.finish_task(arn, Err(("States.Timeout".into(), String::new())), now, out);
        }
        due.len()
    }

    /// The earliest deadline of a waiting task.
    pub fn next_timer(&self) -> Option<OffsetDateTime> {
        self.executions
            .values()
            .filter(|e| e.status == ExecutionStatus::Running)
            .filter_map(|e| e.wait.as_ref())
            .map(|w| w.beat_deadline.map_or(w.deadline, |b| b.min(w.deadline)))
            .min()
    }

    fn stop(
        &mut self,
        arn: &str,
        (error, cause): (&str, &str),
        now: OffsetDateTime,
    ) -> Result<(), &'static str> {
        let execution = self.executions.get(arn).ok_or("ExecutionDoesNotExist")?;
        if execution.status == ExecutionStatus::Running {
            self.close(arn, ExecutionStatus::Aborted, Some((error.into(), cause.into())), now);
        }
        Ok(())
    }

    /// What StartExecution does with the name `arn` and `input` at `now`.
    fn may_start(&self, arn: &str, input: &str, now: OffsetDateTime) -> StartAnswer {
        match self.executions.get(arn) {
            None => StartAnswer::Start,
            Some(e) if e.status == ExecutionStatus::Running && e.input_text == input => StartAnswer::Running,
            Some(e) if e.closed_at.is_some_and(|at| now >= at + NAME_REUSE_AFTER) => StartAnswer::Start,
            Some(_) => StartAnswer::AlreadyExists,
        }
    }
}

/// StartExecution's answer to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartAnswer {
    /// A new execution starts (the name is free, or free again).
    Start,
    /// The running execution of that name and input: its ARN again.
    Running,
    /// `ExecutionAlreadyExists`.
    AlreadyExists,
}

/// `error` and `cause` as SendTaskFailure and StopExecution take them, or the
/// `ValidationException` AWS gives.
fn error_and_cause_fit(error: &str, cause: &str) -> Result<(), String> {
    let (e, c) = (error.chars().count(), cause.chars().count());
    if e > MAX_ERROR_CHARS {
        return Err(format!(
            "1 validation error detected: Value at 'error' failed to satisfy constraint: Member must have length less than or equal to {MAX_ERROR_CHARS} ({e})"
        ));
    }
    if c > MAX_CAUSE_CHARS {
        return Err(format!(
            "1 validation error detected: Value at 'cause' failed to satisfy constraint: Member must have length less than or equal to {MAX_CAUSE_CHARS} ({c})"
        ));
    }
    Ok(())
}

/// A payload (`what`: `input`, `output`) as the API takes it, or its `ValidationException`.
fn payload_fits(what: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "1 validation error detected: Value at '{what}' failed to satisfy constraint: Member must have length less than or equal to {MAX_PAYLOAD_BYTES} ({} bytes)",
            text.len()
        ));
    }
    Ok(())
}

fn validation(op: &'static str, message: String) -> OrchestratorError {
    OrchestratorError::Rejected {
        op,
        code: "ValidationException".into(),
        message: message.clone(),
        source: message.into(),
    }
}

/// A `Parameters.MessageBody` with every `"key.$"` path resolved against the input (`$`) and
/// the context object (`$$`); the first path that selects nothing is the error.
fn render(template: &Value, doc: &Value, context: &Value) -> Result<Value, String> {
    let Value::Object(fields) = template else { return Ok(template.clone()) };
    let mut out = serde_json::Map::new();
    for (key, value) in fields {
        match key.strip_suffix(".$") {
            Some(name) => {
                let path = value.as_str().expect("a path");
                let resolved = if let Some(rest) = path.strip_prefix("$$.") {
                    lookup(context, rest)
                } else if let Some(rest) = path.strip_prefix("$.") {
                    lookup(doc, rest)
                } else {
                    panic!("the model does not know path {path}")
                };
                out.insert(name.to_owned(), resolved.ok_or_else(|| path.to_owned())?);
            }
            None => {
                out.insert(key.clone(), render(value, doc, context)?);
            }
        }
    }
    Ok(Value::Object(out))
}

/// The value at a dotted path; `None` when a field on the way is missing (a `null` is a value).
fn lookup(doc: &Value, dotted: &str) -> Option<Value> {
    dotted.split('.').try_fold(doc.clone(), |v, part| v.get(part).cloned())
}

fn set_path(doc: &mut Value, path: &Value, value: Value) {
    match path.as_str() {
        None => {}
        Some("$") => *doc = value,
        Some(p) => {
            let name =
                p.strip_prefix("$.").unwrap_or_else(|| panic!("the model does not know ResultPath {p}"));
            assert!(!name.contains('.'), "the model sets top-level ResultPaths only: {p}");
            doc[name] = value;
        }
    }
}

/// Step Functions as the engine sees it: the [`Orchestrator`] port over the model, with a point
/// and faults at every call. Reports go to the progress queue.
pub struct SimStepFunctions {
    pub world: Arc<World>,
    pub model: Arc<Mutex<Model>>,
    pub sqs: Arc<Mutex<Sqs>>,
}

impl SimStepFunctions {
    fn deliver(&self, out: Vec<String>) {
        let now = self.world.now();
        let mut sqs = lock(&self.sqs);
        for body in out {
            sqs.send(QueueId::Progress, body, BTreeMap::new(), now);
        }
    }

    fn unavailable(op: &'static str) -> OrchestratorError {
        OrchestratorError::Unavailable { op, source: "injected: Step Functions unavailable".into() }
    }

    /// The error a fault before the effect gives: throttled, or unavailable.
    fn refused(op: &'static str, fault: Fault) -> Option<OrchestratorError> {
        match fault {
            Fault::Before => Some(Self::unavailable(op)),
            Fault::Throttled => {
                Some(OrchestratorError::Throttled { op, source: "injected: ThrottlingException".into() })
            }
            _ => None,
        }
    }

    async fn resume(
        &self,
        op: &'static str,
        token: &TaskToken,
        what: Resume,
        payload: String,
    ) -> Result<(), OrchestratorError> {
        self.world.point(op).await;
        let fault = self.world.fault(op);
        if let Some(e) = Self::refused(op, fault) {
            return Err(e);
        }
        let now = self.world.now();
        let heartbeat = matches!(what, Resume::Heartbeat);
        let refused = match &what {
            Resume::Failure(error, cause) => error_and_cause_fit(error, cause).err(),
            Resume::Success(output) => payload_fits("output", &output.to_string()).err(),
            Resume::Heartbeat => None,
        };
        if let Some(message) = refused {
            lock(&self.world.counts).add("sfn_limit_refused");
            lock(&self.model).refused.push(format!("{op}: {message}"));
            // Refused by the API before it looked at the token: AWS gives the same answer to
            // every retry.
            self.world.note(|| format!("  {op} {} {payload} -> ValidationException", token.expose()));
            let call = ResumeCall {
                token: token.expose().to_owned(),
                at: now,
                payload,
                accepted: false,
                sdk_retry: false,
            };
            lock(&self.model).resumes.push(call);
            return Err(validation(op, message));
        }
        let mut out = Vec::new();
        let result = lock(&self.model).resume(token.expose(), what, now, &mut out);
        self.world.note(|| format!("  {op} {} {payload} -> {result:?}", token.expose()));
        if !heartbeat {
            let call = ResumeCall {
                token: token.expose().to_owned(),
                at: now,
                payload: payload.clone(),
                accepted: result.is_ok(),
                sdk_retry: false,
            };
            lock(&self.model).resumes.push(call);
        }
        self.deliver(out);
        let gone = |code: &'static str| OrchestratorError::TokenGone {
            op,
            fingerprint: token.fingerprint(),
            code,
            source: code.into(),
        };
        match (fault, result) {
            (Fault::After, _) => Err(Self::unavailable(op)),
            // The SDK retried after the lost answer: the token is used now.
            (Fault::Retried, _) => {
                if !heartbeat {
                    let call = ResumeCall {
                        token: token.expose().to_owned(),
                        at: now,
                        payload,
                        accepted: false,
                        sdk_retry: true,
                    };
                    lock(&self.model).resumes.push(call);
                }
                if heartbeat { Ok(()) } else { Err(gone("TaskTimedOut")) }
            }
            (_, Ok(())) => Ok(()),
            (_, Err(code)) => Err(gone(code)),
        }
    }
}

#[async_trait::async_trait]
impl Orchestrator for SimStepFunctions {
    async fn start_execution(&self, req: &StartExecution) -> Result<Started, OrchestratorError> {
        const OP: &str = "sfn.StartExecution";
        self.world.point(OP).await;
        let fault = self.world.fault(OP);
        if let Some(e) = Self::refused(OP, fault) {
            return Err(e);
        }
        let name = req.execution_name();
        let arn = execution_arn(&req.state_machine_arn, &name).expect("a valid state machine ARN");
        let input = serde_json::to_string(&req.input).expect("JSON");
        payload_fits("input", &input).map_err(|m| {
            lock(&self.world.counts).add("sfn_limit_refused");
            lock(&self.model).refused.push(format!("{OP}: {m}"));
            validation(OP, m)
        })?;
        let mut out = Vec::new();
        let result = {
            let mut model = lock(&self.model);
            if !model.machines.contains_key(&req.state_machine_arn) {
                return Err(OrchestratorError::StateMachineNotFound {
                    op: OP,
                    state_machine_arn: req.state_machine_arn.clone(),
                    source: "no such state machine".into(),
                });
            }
            match model.may_start(&arn, &input, self.world.now()) {
                StartAnswer::Running => Ok(Started { execution_arn: arn.clone(), already_existed: true }),
                // ExecutionAlreadyExists: the production adapter describes the execution and
                // compares inputs (`StepFunctionsOrchestrator::existing_matches`).
                StartAnswer::AlreadyExists if model.executions[&arn].input_text == input => {
                    Ok(Started { execution_arn: arn.clone(), already_existed: true })
                }
                StartAnswer::AlreadyExists => {
                    Err(OrchestratorError::ExecutionConflict { name, execution_arn: arn.clone() })
                }
                StartAnswer::Start => {
                    model.start(&req.state_machine_arn, &arn, &input, self.world.now(), &mut out);
                    Ok(Started { execution_arn: arn.clone(), already_existed: false })
                }
            }
        };
        self.deliver(out);
        match fault {
            Fault::After => Err(Self::unavailable(OP)),
            // The SDK's retry finds the execution it just started: idempotent.
            Fault::Retried => result.map(|s| Started { already_existed: true, ..s }),
            _ => result,
        }
    }

    async fn send_task_success(&self, token: &TaskToken, output: &Value) -> Result<(), OrchestratorError> {
        self.resume(
            "sfn.SendTaskSuccess",
            token,
            Resume::Success(output.clone()),
            format!("success {output}"),
        )
        .await
    }

    async fn send_task_failure(
        &self,
        token: &TaskToken,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError> {
        let what = Resume::Failure(error.to_owned(), cause.to_owned());
        self.resume("sfn.SendTaskFailure", token, what, format!("failure {error}")).await
    }

    async fn send_task_heartbeat(&self, token: &TaskToken) -> Result<(), OrchestratorError> {
        self.resume("sfn.SendTaskHeartbeat", token, Resume::Heartbeat, String::new()).await
    }

    async fn describe(&self, execution_arn: &str) -> Result<ExecutionInfo, OrchestratorError> {
        const OP: &str = "sfn.DescribeExecution";
        self.world.point(OP).await;
        if let Some(e) = Self::refused(OP, self.world.fault(OP)) {
            return Err(e);
        }
        let model = lock(&self.model);
        let e = model.executions.get(execution_arn).ok_or_else(|| OrchestratorError::ExecutionNotFound {
            op: OP,
            execution_arn: execution_arn.to_owned(),
            source: "no such execution".into(),
        })?;
        Ok(ExecutionInfo {
            execution_arn: e.arn.clone(),
            status: e.status.clone(),
            start_date: e.started_at,
            stop_date: e.closed_at,
            input: Some(e.doc.clone()),
            output: None,
            error: e.failure.as_ref().map(|f| f.0.clone()),
            cause: e.failure.as_ref().map(|f| f.1.clone()),
        })
    }

    async fn history(&self, _execution_arn: &str) -> Result<Vec<HistoryEvent>, OrchestratorError> {
        Ok(Vec::new())
    }

    async fn stop_execution(
        &self,
        execution_arn: &str,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError> {
        const OP: &str = "sfn.StopExecution";
        self.world.point(OP).await;
        let fault = self.world.fault(OP);
        if let Some(e) = Self::refused(OP, fault) {
            return Err(e);
        }
        error_and_cause_fit(error, cause).map_err(|m| {
            lock(&self.world.counts).add("sfn_limit_refused");
            lock(&self.model).refused.push(format!("{OP}: {m}"));
            validation(OP, m)
        })?;
        let result = lock(&self.model).stop(execution_arn, (error, cause), self.world.now());
        match (fault, result) {
            (Fault::After, _) => Err(Self::unavailable(OP)),
            (_, Ok(())) => Ok(()),
            (_, Err(_)) => Err(OrchestratorError::ExecutionNotFound {
                op: OP,
                execution_arn: execution_arn.to_owned(),
                source: "no such execution".into(),
            }),
        }
    }
}
