//! A model of Step Functions, running the very definitions `baton synth` generates.
//!
//! It interprets the subset of the Amazon States Language that `baton_core::domain::asl` emits, and panics on
//! anything else, so a change to the generator cannot drift away from the model unnoticed:
//! `Task` states on `sqs:sendMessage` and `sqs:sendMessage.waitForTaskToken` (with
//! `TimeoutSeconds`, `HeartbeatSeconds`, `ResultPath`, `Retry`, `Catch`), `Parallel` (branches of
//! those, `ResultPath: null`, `Catch`), `Pass` (no fields but `Next` or `End`) and `Fail`.
//!
//! The semantics baton relies on, as AWS documents them:
//! - one execution per name; a start with the same name and input is idempotent while the
//!   execution runs; with another input, or once it has closed, it is `ExecutionAlreadyExists`
//!   (the port then compares inputs, as the production adapter does), until the name may be
//!   reused [`NAME_REUSE_AFTER`] after the execution closed;
//! - a task token can be used once: a resume of a closed token is `TaskTimedOut`, of a token
//!   never issued `InvalidToken`;
//! - a task that outlives `TimeoutSeconds`, or goes `HeartbeatSeconds` without a heartbeat
//!   (SendTaskHeartbeat alone restarts that timer), fails with `States.Timeout`; `Catch` routes
//!   it to the report states;
//! - a Task state's own send to SQS may fail (in the schedules that say so: [`SendFaults`]), with
//!   [`SEND_FAILED_ERROR`]; a task's error goes first to its `Retry`: the first retrier whose
//!   `ErrorEquals` matches (`States.ALL`; `States.TaskFailed`, all but `States.Timeout`) runs the
//!   state again after `IntervalSeconds` (default 1) times `BackoffRate` (default 2) per retry
//!   before, up to `MaxDelaySeconds`, `JitterStrategy: FULL` drawn below that, for
//!   `MaxAttempts` (default 3; 0: never) counted per retrier from when the state was entered;
//!   only then to its `Catch`, and a state with neither fails the execution;
//! - a stopped execution is `ABORTED` at once and runs no Catch (its token closes);
//! - a `Parallel` state runs every branch on a copy of its input and ends once all have ended;
//!   a branch error no Catch inside it takes fails the whole state at once, and the other
//!   branches stop (their tokens close: a late resume is `TaskTimedOut`), before the state's own
//!   Catch sees the error.
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
use std::sync::Arc;

use baton_core::domain::ids::TaskToken;
use baton_core::ports::orchestrator::{
    ExecutionInfo, ExecutionStatus, HistoryEvent, Orchestrator, OrchestratorError, StartExecution, Started,
    execution_arn,
};
use baton_core::ports::store::limits::json_len;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::sqs::{QueueId, Sqs};
use crate::world::{Fault, Mutex, World, lock};

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
/// The error a `sqs:sendMessage` task fails with when SQS does not take the message (a 5xx,
/// a throttle), as Step Functions names a service integration's errors.
pub const SEND_FAILED_ERROR: &str = "SQS.AmazonSQSException";
const SEND_FAILED_CAUSE: &str =
    "Service Unavailable (Service: AmazonSQS; Status Code: 503; Error Code: ServiceUnavailable)";

/// Whether an `ErrorEquals` entry matches `error`: the name itself; `States.ALL` any but the
/// terminal errors; `States.TaskFailed` any but those and `States.Timeout`.
fn matches_error(entry: &Value, error: &str) -> bool {
    let terminal = NOT_IN_STATES_ALL.contains(&error);
    entry == &json!(error)
        || (entry == "States.ALL" && !terminal)
        || (entry == "States.TaskFailed" && !terminal && error != "States.Timeout")
}

/// How often Step Functions' own sends to SQS fail (the task states' `sqs:sendMessage`),
/// drawn from a generator of their own.
#[derive(Debug, Clone)]
pub struct SendFaults {
    pub rate: f64,
    pub rng: crate::rng::Rng,
    /// How many of the next sends fail, whatever the rate (for tests that place one failure).
    pub next: u32,
}

impl Default for SendFaults {
    fn default() -> Self {
        SendFaults { rate: 0.0, rng: crate::rng::Rng::new(0), next: 0 }
    }
}

impl SendFaults {
    fn strikes(&mut self) -> bool {
        if self.next > 0 {
            self.next -= 1;
            return true;
        }
        self.rate > 0.0 && self.rng.chance(self.rate)
    }
}

/// A send of Step Functions' own that failed, and whether its state's `Retry` took it.
#[derive(Debug, Clone)]
pub struct SendFailed {
    pub arn: String,
    pub state: String,
    pub at: OffsetDateTime,
    pub retried: bool,
}

/// A Task state of a scope under its `Retry`: how often each retrier has retried it since the
/// state was entered, and when it runs again (`None`: it runs).
#[derive(Debug, Clone, Default)]
pub struct Retrying {
    pub state: String,
    pub counts: BTreeMap<usize, u32>,
    pub at: Option<OffsetDateTime>,
}

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
    pub definition: Arc<Value>,
    pub input_text: String,
    pub doc: Value,
    pub status: ExecutionStatus,
    /// The top level's wait on a task token.
    pub wait: Option<Wait>,
    /// The top level's Task state under its `Retry`.
    pub retrying: Option<Retrying>,
    /// The `Parallel` state running, with each branch's own wait.
    pub parallel: Option<ParallelRun>,
    pub started_at: OffsetDateTime,
    /// When it closed (succeeded, failed or aborted).
    pub closed_at: Option<OffsetDateTime>,
    /// The error and cause it failed with.
    pub failure: Option<(String, String)>,
}

/// A `Parallel` state running: its branches, each on its own copy of the input.
#[derive(Debug, Clone)]
pub struct ParallelRun {
    pub state: String,
    pub branches: Vec<BranchRun>,
}

#[derive(Debug, Clone)]
pub struct BranchRun {
    pub doc: Value,
    pub wait: Option<Wait>,
    pub retrying: Option<Retrying>,
    /// It reached its `End`.
    pub done: bool,
}

/// Where a state runs: the machine's top level, or branch `i` of the `Parallel` state running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Top,
    Branch(usize),
}

/// A wait that went `HeartbeatSeconds` without a heartbeat: Step Functions timed it out then.
#[derive(Debug, Clone)]
pub struct BeatMissed {
    pub arn: String,
    /// The Task state (a step's, by its name).
    pub state: String,
    /// When its heartbeat ran out.
    pub at: OffsetDateTime,
    pub heartbeat: Duration,
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
    /// Each state machine's definition, shared by the executions started on it.
    pub machines: BTreeMap<String, Arc<Value>>,
    pub executions: BTreeMap<String, Execution>,
    /// Token to (execution, state); closed tokens stay, so a late resume is recognised.
    pub tokens: BTreeMap<String, (String, String, bool)>,
    pub resumes: Vec<ResumeCall>,
    pub starts: Vec<(String, OffsetDateTime)>,
    /// Every call refused for Step Functions' limits (a ValidationException): baton asked for
    /// what AWS never takes.
    pub refused: Vec<String>,
    /// Every wait timed out by its `HeartbeatSeconds` (before its `TimeoutSeconds`).
    pub beats_missed: Vec<BeatMissed>,
    /// How often Step Functions' own sends fail.
    pub send_faults: SendFaults,
    /// Every send of Step Functions' own that failed.
    pub sends_failed: Vec<SendFailed>,
    /// The executions whose final report never reaches baton (dropped past the DLQ).
    pub lost_reports: std::collections::BTreeSet<String>,
    next_token: u64,
    /// No timer is due before this (`None`: not known): [`Model::fire_timers`], called on every
    /// resume and often between, walks every execution only once it has come (a crowd's are
    /// hundreds). Each new wait, heartbeat and retry brings it forward to its own time.
    no_timer_before: Option<OffsetDateTime>,
}

/// What a resume does to the model.
enum Resume {
    Success(Value),
    Failure(String, String),
    Heartbeat,
}

impl Model {
    /// `arn`'s definition, shared: what is read from it is borrowed from this, not the model,
    /// which the caller changes meanwhile.
    fn definition(&self, arn: &str) -> Arc<Value> {
        self.executions[arn].definition.clone()
    }

    /// The state `state` of `scope` in `arn`'s definition `def` (`null` if it has none).
    fn state<'d>(&self, def: &'d Value, arn: &str, scope: Scope, state: &str) -> &'d Value {
        let states = match (scope, &self.executions[arn].parallel) {
            (Scope::Top, _) => &def["States"],
            (Scope::Branch(i), Some(p)) => &def["States"][&p.state]["Branches"][i]["States"],
            (Scope::Branch(_), None) => panic!("a branch scope without a running Parallel state"),
        };
        &states[state]
    }

    fn doc_mut(&mut self, arn: &str, scope: Scope) -> &mut Value {
        let e = self.executions.get_mut(arn).expect("execution");
        match scope {
            Scope::Top => &mut e.doc,
            Scope::Branch(i) => &mut e.parallel.as_mut().expect("a Parallel state").branches[i].doc,
        }
    }

    fn wait_mut(&mut self, arn: &str, scope: Scope) -> Option<&mut Option<Wait>> {
        let e = self.executions.get_mut(arn)?;
        match scope {
            Scope::Top => Some(&mut e.wait),
            Scope::Branch(i) => Some(&mut e.parallel.as_mut()?.branches.get_mut(i)?.wait),
        }
    }

    /// `scope` enters the Task state `state`: one entered anew counts its retries from nothing.
    fn entered(&mut self, arn: &str, scope: Scope, state: &str) {
        if let Some(slot) = self.retrying_mut(arn, scope)
            && slot.as_ref().is_some_and(|r| r.state != state)
        {
            *slot = None;
        }
    }

    fn retrying_mut(&mut self, arn: &str, scope: Scope) -> Option<&mut Option<Retrying>> {
        let e = self.executions.get_mut(arn)?;
        match scope {
            Scope::Top => Some(&mut e.retrying),
            Scope::Branch(i) => Some(&mut e.parallel.as_mut()?.branches.get_mut(i)?.retrying),
        }
    }

    /// The Task state `state` (`def`) of `scope` failed with `error`: if a retrier of its `Retry`
    /// matches it and has attempts left, the state runs again after the retrier's interval
    /// (`IntervalSeconds`, default 1, times `BackoffRate`, default 2, per retry before; at most
    /// `MaxDelaySeconds`; `JitterStrategy: FULL` draws from zero to that), each retrier counting
    /// its own (`MaxAttempts`, default 3; 0: never). Returns whether it will.
    fn retry(
        &mut self,
        arn: &str,
        scope: Scope,
        (state, def): (&str, &Value),
        error: &str,
        now: OffsetDateTime,
    ) -> bool {
        let Some(retriers) = def["Retry"].as_array() else { return false };
        let Some((index, retrier)) = retriers.iter().enumerate().find(|(_, r)| {
            r["ErrorEquals"].as_array().is_some_and(|e| e.iter().any(|x| matches_error(x, error)))
        }) else {
            return false;
        };
        for field in retrier.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            assert!(
                [
                    "ErrorEquals",
                    "IntervalSeconds",
                    "MaxAttempts",
                    "BackoffRate",
                    "MaxDelaySeconds",
                    "JitterStrategy",
                    "Comment"
                ]
                .contains(&field.as_str()),
                "the model does not know the retrier field {field}"
            );
        }
        let max = retrier["MaxAttempts"].as_u64().unwrap_or(3);
        let interval = retrier["IntervalSeconds"].as_f64().unwrap_or(1.0);
        let rate = retrier["BackoffRate"].as_f64().unwrap_or(2.0);
        let slot = self.retrying_mut(arn, scope).expect("a scope");
        let retrying = slot.get_or_insert_with(Retrying::default);
        if retrying.state != state {
            *retrying = Retrying { state: state.to_owned(), ..Retrying::default() };
        }
        let count = retrying.counts.entry(index).or_insert(0);
        if u64::from(*count) >= max {
            return false;
        }
        *count += 1;
        let mut delay = interval * rate.powi(i32::try_from(*count - 1).unwrap_or(i32::MAX));
        if let Some(cap) = retrier["MaxDelaySeconds"].as_f64() {
            delay = delay.min(cap);
        }
        if retrier["JitterStrategy"] == "FULL" {
            delay *= self.send_faults.rng.below(1001) as f64 / 1000.0;
        }
        let at = now + Duration::seconds_f64(delay);
        if let Some(r) = self.retrying_mut(arn, scope).and_then(Option::as_mut) {
            r.at = Some(at);
            self.timer_at(at);
        }
        true
    }

    /// Every wait of an execution: its top-level one and those of a running Parallel's branches.
    fn waits(e: &Execution) -> impl Iterator<Item = (Scope, &Wait)> {
        let top = e.wait.iter().map(|w| (Scope::Top, w));
        let branches = e.parallel.iter().flat_map(|p| {
            p.branches.iter().enumerate().filter_map(|(i, b)| b.wait.as_ref().map(|w| (Scope::Branch(i), w)))
        });
        top.chain(branches)
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
                definition: Arc::clone(&self.machines[machine]),
                input_text: input_text.to_owned(),
                doc,
                status: ExecutionStatus::Running,
                wait: None,
                retrying: None,
                parallel: None,
                started_at: now,
                closed_at: None,
                failure: None,
            },
        );
        self.starts.push((arn.to_owned(), now));
        let first = self.definition(arn)["StartAt"].as_str().expect("StartAt").to_owned();
        self.run(arn, Scope::Top, first, now, out);
    }

    /// Runs `scope` of an execution from `state` until it waits on a token or ends.
    #[expect(clippy::too_many_lines, reason = "one arm per state type the generated definitions use")]
    fn run(
        &mut self,
        arn: &str,
        scope: Scope,
        mut state: String,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        loop {
            if self.executions[arn].status != ExecutionStatus::Running {
                return;
            }
            let definition = self.definition(arn);
            let def = self.state(&definition, arn, scope, &state);
            assert!(!def.is_null(), "state {state} is not in the definition");
            match def["Type"].as_str() {
                Some("Fail") => {
                    let text = |field: &str| def[field].as_str().unwrap_or_default().to_owned();
                    let failure = (text("Error"), text("Cause"));
                    if scope != Scope::Top {
                        // A branch's Fail fails its Parallel state (an optional branch's
                        // `baton.Cancelled`, so that a cancel with --compensate fails the group).
                        return self.fail_state(arn, scope, &json!({}), failure, now, out);
                    }
                    return self.close(arn, ExecutionStatus::Failed, Some(failure), now);
                }
                // A compensation wait's catch inside a group's compensations: the branch ends.
                Some("Pass") => match def["Next"].as_str() {
                    Some(next) => {
                        state = next.to_owned();
                        continue;
                    }
                    None => return self.end_scope(arn, scope, now, out),
                },
                Some("Parallel") => return self.open_parallel(arn, scope, &state, def, now, out),
                Some("Task") => {}
                other => panic!("the model does not know state type {other:?}"),
            }
            self.entered(arn, scope, &state);
            let resource = def["Resource"].as_str().expect("Resource");
            let token = format!("tok-{}-{}", self.next_token, arn.len());
            self.next_token += 1;
            let context = json!({"Task": {"Token": token}, "State": {"EnteredTime": now.format(&Rfc3339).expect("a time")}});
            let body = match render(&def["Parameters"]["MessageBody"], self.doc_mut(arn, scope), &context) {
                Ok(body) => serde_json::to_string(&body).expect("a value's JSON"),
                Err(path) => {
                    let cause = format!("The JSONPath '{path}' could not be found in the input");
                    return self.fail_state(arn, scope, def, ("States.Runtime".into(), cause), now, out);
                }
            };
            if body.len() > MAX_PAYLOAD_BYTES {
                let cause =
                    format!("the task's message is {} bytes; the limit is {MAX_PAYLOAD_BYTES}", body.len());
                return self.fail_state(
                    arn,
                    scope,
                    def,
                    ("States.DataLimitExceeded".into(), cause),
                    now,
                    out,
                );
            }
            if !self.send(arn, scope, (&state, def), body, now, out) {
                return;
            }
            match resource {
                "arn:aws:states:::sqs:sendMessage.waitForTaskToken" => {
                    return self.park(arn, scope, state, def, token, now);
                }
                "arn:aws:states:::sqs:sendMessage" => {
                    assert!(def["ResultPath"].is_null(), "report states discard their result");
                    match def["Next"].as_str() {
                        Some(next) => state = next.to_owned(),
                        None => {
                            assert_eq!(def["End"], true, "a state without Next must End");
                            return self.end_scope(arn, scope, now, out);
                        }
                    }
                }
                other => panic!("the model does not know resource {other}"),
            }
        }
    }

    /// The Task state `state` (`def`) of `scope` sends `body` to SQS. Step Functions' own
    /// SendMessage fails now and then, as any call to SQS may: then the state's `Retry` runs it
    /// again later, or its `Catch` (or the execution's failure) takes over, and this is false.
    /// A final report of an execution whose report is lost goes out, and is lost past the DLQ.
    fn send(
        &mut self,
        arn: &str,
        scope: Scope,
        (state, def): (&str, &Value),
        body: String,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) -> bool {
        if self.send_faults.strikes() {
            let failure = (SEND_FAILED_ERROR.to_owned(), SEND_FAILED_CAUSE.to_owned());
            let retried = self.retry(arn, scope, (state, def), &failure.0, now);
            self.sends_failed.push(SendFailed {
                arn: arn.to_owned(),
                state: state.to_owned(),
                at: now,
                retried,
            });
            if !retried {
                self.fail_state(arn, scope, def, failure, now, out);
            }
            return false;
        }
        let lost = self.lost_reports.contains(arn) && def["Parameters"]["MessageBody"]["kind"] == "finished";
        if !lost {
            out.push(body);
        }
        true
    }

    /// `scope` of `arn` waits on `token` in `state`, until its deadline (or heartbeat) passes.
    fn park(
        &mut self,
        arn: &str,
        scope: Scope,
        state: String,
        def: &Value,
        token: String,
        now: OffsetDateTime,
    ) {
        let timeout = Duration::seconds(def["TimeoutSeconds"].as_i64().expect("TimeoutSeconds"));
        let heartbeat = def["HeartbeatSeconds"].as_i64().map(Duration::seconds);
        self.tokens.insert(token.clone(), (arn.to_owned(), state.clone(), true));
        let wait = Wait {
            state,
            token,
            deadline: now + timeout,
            heartbeat,
            beat_deadline: heartbeat.map(|h| now + h),
        };
        self.timer_at(wait.beat_deadline.map_or(wait.deadline, |b| b.min(wait.deadline)));
        *self.wait_mut(arn, scope).expect("a scope") = Some(wait);
    }

    /// A timer now runs to `at`: [`Model::fire_timers`] looks again by then.
    fn timer_at(&mut self, at: OffsetDateTime) {
        self.no_timer_before = Some(self.no_timer_before.map_or(at, |t| t.min(at)));
    }

    /// A `Parallel` state: every branch starts on a copy of the input; the state ends when all
    /// of them have ended, and fails (stopping the others) as soon as one fails.
    fn open_parallel(
        &mut self,
        arn: &str,
        scope: Scope,
        state: &str,
        def: &Value,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        assert_eq!(scope, Scope::Top, "the generated definitions do not nest Parallel states");
        assert!(def["ResultPath"].is_null(), "a group discards its branches' outputs");
        let branches = def["Branches"].as_array().expect("Branches");
        let doc = self.executions[arn].doc.clone();
        self.executions.get_mut(arn).expect("execution").parallel = Some(ParallelRun {
            state: state.to_owned(),
            branches: branches
                .iter()
                .map(|_| BranchRun { doc: doc.clone(), wait: None, retrying: None, done: false })
                .collect(),
        });
        for (i, branch) in branches.iter().enumerate() {
            let start = branch["StartAt"].as_str().expect("StartAt").to_owned();
            self.run(arn, Scope::Branch(i), start, now, out);
            // A branch that failed has failed the whole state.
            if self.executions[arn].parallel.as_ref().is_none_or(|p| p.state != state) {
                return;
            }
        }
    }

    /// `scope` reached an `End`: the execution succeeds, or the branch is done (and, with the
    /// last one, its Parallel state moves on).
    fn end_scope(&mut self, arn: &str, scope: Scope, now: OffsetDateTime, out: &mut Vec<String>) {
        let Scope::Branch(i) = scope else {
            return self.close(arn, ExecutionStatus::Succeeded, None, now);
        };
        let parallel =
            self.executions.get_mut(arn).and_then(|e| e.parallel.as_mut()).expect("a Parallel state");
        parallel.branches[i].done = true;
        if parallel.branches.iter().all(|b| b.done) {
            let state = parallel.state.clone();
            self.executions.get_mut(arn).expect("execution").parallel = None;
            let next = self.definition(arn)["States"][&state]["Next"].as_str().expect("Next").to_owned();
            self.run(arn, Scope::Top, next, now, out);
        }
    }

    /// The task of `scope` in `arn` ends with `result`: success (output) or an error caught by
    /// `Catch`. Nothing when it no longer waits (its Parallel state failed meanwhile).
    fn finish_task(
        &mut self,
        arn: &str,
        scope: Scope,
        result: Result<Value, (String, String)>,
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        let Some(wait) = self.wait_mut(arn, scope).and_then(Option::take) else { return };
        if let Some(t) = self.tokens.get_mut(&wait.token) {
            t.2 = false;
        }
        let definition = self.definition(arn);
        let def = self.state(&definition, arn, scope, &wait.state);
        match result {
            Ok(output) => {
                let doc = self.doc_mut(arn, scope);
                let before = doc.clone();
                set_path(doc, &def["ResultPath"], output);
                let size = json_len(doc).expect("a JSON value serialises");
                if size > MAX_PAYLOAD_BYTES {
                    *doc = before;
                    let cause =
                        format!("the state's output is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}");
                    return self.fail_state(
                        arn,
                        scope,
                        def,
                        ("States.DataLimitExceeded".into(), cause),
                        now,
                        out,
                    );
                }
                match def["Next"].as_str() {
                    Some(next) => self.run(arn, scope, next.to_owned(), now, out),
                    None => {
                        assert_eq!(def["End"], true, "a state without Next must End");
                        self.end_scope(arn, scope, now, out);
                    }
                }
            }
            Err(failure) => {
                if !self.retry(arn, scope, (&wait.state, def), &failure.0, now) {
                    self.fail_state(arn, scope, def, failure, now, out);
                }
            }
        }
    }

    /// The state `def` of `scope` fails with (error, cause): on to the first `Catch` that
    /// matches (`States.ALL` matches neither `States.DataLimitExceeded` nor `States.Runtime`);
    /// else a branch fails its Parallel state (whose other branches stop, their tokens closed),
    /// and the top level fails the execution.
    fn fail_state(
        &mut self,
        arn: &str,
        scope: Scope,
        def: &Value,
        (error, cause): (String, String),
        now: OffsetDateTime,
        out: &mut Vec<String>,
    ) {
        let catches = |x: &Value| matches_error(x, &error);
        let catcher = def["Catch"]
            .as_array()
            .and_then(|c| {
                c.iter().find(|c| c["ErrorEquals"].as_array().is_some_and(|e| e.iter().any(catches)))
            })
            .cloned();
        let Some(c) = catcher else {
            return match scope {
                Scope::Top => self.close(arn, ExecutionStatus::Failed, Some((error, cause)), now),
                Scope::Branch(_) => {
                    let parallel =
                        self.executions.get_mut(arn).and_then(|e| e.parallel.take()).expect("a Parallel");
                    self.close_tokens(parallel.branches.iter().filter_map(|b| b.wait.as_ref()));
                    let definition = self.definition(arn);
                    let def = &definition["States"][&parallel.state];
                    assert!(def["Retry"].is_null(), "the model does not know Retry on a Parallel state");
                    self.fail_state(arn, Scope::Top, def, (error, cause), now, out);
                }
            };
        };
        let error_doc = json!({"Error": error, "Cause": cause});
        set_path(self.doc_mut(arn, scope), &c["ResultPath"], error_doc);
        self.run(arn, scope, c["Next"].as_str().expect("Next").to_owned(), now, out);
    }

    fn close_tokens<'w>(&mut self, waits: impl Iterator<Item = &'w Wait>) {
        let tokens: Vec<String> = waits.map(|w| w.token.clone()).collect();
        for token in tokens {
            if let Some(t) = self.tokens.get_mut(&token) {
                t.2 = false;
            }
        }
    }

    /// Closes `arn` with `status`; its open tokens, if any, close with it.
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
        let waits: Vec<Wait> = Self::waits(execution).map(|(_, w)| w.clone()).collect();
        execution.wait = None;
        execution.retrying = None;
        execution.parallel = None;
        self.close_tokens(waits.iter());
    }

    /// The scope of `arn` whose wait holds `token`.
    fn scope_of(&self, arn: &str, token: &str) -> Option<Scope> {
        Self::waits(&self.executions[arn]).find(|(_, w)| w.token == token).map(|(s, _)| s)
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
        let scope = self.scope_of(&arn, token);
        let (true, true, Some(scope)) = (open, running, scope) else { return Err("TaskTimedOut") };
        match what {
            Resume::Success(output) => self.finish_task(&arn, scope, Ok(output), now, out),
            Resume::Failure(error, cause) => self.finish_task(&arn, scope, Err((error, cause)), now, out),
            Resume::Heartbeat => {
                let wait = self.wait_mut(&arn, scope).and_then(Option::as_mut).expect("a wait");
                wait.beat_deadline = wait.heartbeat.map(|h| now + h);
                if let Some(beat) = wait.beat_deadline {
                    self.timer_at(beat);
                }
            }
        }
        Ok(())
    }

    /// Times out every task past its deadline or heartbeat at `now`.
    pub fn fire_timers(&mut self, now: OffsetDateTime, out: &mut Vec<String>) -> usize {
        if self.no_timer_before.is_some_and(|t| now < t) {
            return 0;
        }
        let fired = self.fire_timers_due(now, out);
        // Until the next timer, nothing is due (none: far off, until a wait or retry begins).
        let far = time::Date::MAX.midnight().assume_utc();
        self.no_timer_before = Some(self.next_timer().unwrap_or(far));
        fired
    }

    /// [`Model::fire_timers`], walking every execution.
    fn fire_timers_due(&mut self, now: OffsetDateTime, out: &mut Vec<String>) -> usize {
        let due: Vec<(String, Scope, Wait)> = self
            .executions
            .values()
            .filter(|e| e.status == ExecutionStatus::Running)
            .flat_map(|e| {
                Self::waits(e)
                    .filter(|(_, w)| w.deadline <= now || w.beat_deadline.is_some_and(|b| b <= now))
                    .map(|(scope, w)| (e.arn.clone(), scope, w.clone()))
            })
            .collect();
        let mut fired = 0;
        for (arn, scope, state) in self.retries_due(now) {
            if let Some(r) = self.retrying_mut(&arn, scope).and_then(Option::as_mut) {
                r.at = None;
            }
            self.run(&arn, scope, state, now, out);
            fired += 1;
        }
        for (arn, scope, wait) in &due {
            // A sibling's timeout may have failed the Parallel state and closed this wait.
            if self.executions[arn].status == ExecutionStatus::Running
                && self.scope_of(arn, &wait.token) == Some(*scope)
            {
                if let Some(beat) = wait.beat_deadline.filter(|b| *b < wait.deadline && *b <= now) {
                    let heartbeat = wait.heartbeat.unwrap_or_default();
                    let missed =
                        BeatMissed { arn: arn.clone(), state: wait.state.clone(), at: beat, heartbeat };
                    self.beats_missed.push(missed);
                }
                self.finish_task(arn, *scope, Err(("States.Timeout".into(), String::new())), now, out);
                fired += 1;
            }
        }
        fired
    }

    /// The Task states whose retry interval has passed at `now`: (execution, scope, state).
    fn retries_due(&self, now: OffsetDateTime) -> Vec<(String, Scope, String)> {
        let mut due = Vec::new();
        for e in self.executions.values().filter(|e| e.status == ExecutionStatus::Running) {
            let branches = e.parallel.iter().flat_map(|p| p.branches.iter().enumerate());
            let scopes = std::iter::once((Scope::Top, &e.retrying))
                .chain(branches.map(|(i, b)| (Scope::Branch(i), &b.retrying)));
            for (scope, r) in scopes {
                if let Some(r) = r.as_ref().filter(|r| r.at.is_some_and(|at| at <= now)) {
                    due.push((e.arn.clone(), scope, r.state.clone()));
                }
            }
        }
        due
    }

    /// The earliest deadline of a waiting task, or of a state's retry interval.
    pub fn next_timer(&self) -> Option<OffsetDateTime> {
        self.executions
            .values()
            .filter(|e| e.status == ExecutionStatus::Running)
            .flat_map(|e| {
                let waits =
                    Self::waits(e).map(|(_, w)| w.beat_deadline.map_or(w.deadline, |b| b.min(w.deadline)));
                let branches = e.parallel.iter().flat_map(|p| p.branches.iter().map(|b| &b.retrying));
                let retries = std::iter::once(&e.retrying).chain(branches).filter_map(|r| r.as_ref()?.at);
                waits.chain(retries)
            })
            .min()
    }

    /// StopExecution: the execution is aborted at once, its tokens closed, no Catch run.
    pub fn stop(
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
fn payload_fits(what: &str, len: usize) -> Result<(), String> {
    if len > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "1 validation error detected: Value at '{what}' failed to satisfy constraint: Member must have length less than or equal to {MAX_PAYLOAD_BYTES} ({len} bytes)"
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
    dotted.split('.').try_fold(doc, |v, part| v.get(part)).cloned()
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
            Resume::Success(output) => payload_fits("output", json_len(output).unwrap_or(usize::MAX)).err(),
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
        // Step Functions times a wait out at its deadline, whoever looks: the timers due by now
        // fire before the resume is looked at (a resume after a clock jump was taken, though its
        // wait had timed out during the jump).
        let result = {
            let mut model = lock(&self.model);
            model.fire_timers(now, &mut out);
            model.resume(token.expose(), what, now, &mut out)
        };
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
        payload_fits("input", input.len()).map_err(|m| {
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
