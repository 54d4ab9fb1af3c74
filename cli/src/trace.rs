//! `baton trace <workflow> <key>`: everything known about one workflow instance, as one timeline.
//!
//! The facts live in two places: the table (the record with its audit trail of transitions,
//! tasks, idempotency receipts, buffered inputs, ledger entries) and Step Functions (each
//! generation's execution history). An operator answering "why is order 42 stuck?" needs them
//! side by side, in time order, so this command reads both and merges them.
//!
//! Rules kept here:
//! - **Never the task token**: the record shows its fingerprint only, and execution history
//!   events carry summaries, never a state's input ([`baton_core::ports::orchestrator::HistoryEvent`]).
//! - **`--json` is a contract** (`baton.trace/v1`, docs/OPERATING.md): fields are
//!   added, never renamed or removed, without a new schema version. [`Report`] is that schema.
//! - **Building is pure**: [`build`] and [`render`] take what was read and the current time, so
//!   ordering and rendering are tested without AWS.
//! - An input that arrived before its start event leaves receipts or inbox entries without a
//!   record: that is shown, not treated as "not found". Only nothing at all is exit 1.
//! - An execution that was never started is left out, not an error.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use baton_aws::dynamodb::DynamoDbStore;
use baton_aws::stepfunctions::StepFunctionsOrchestrator;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{
    AuditEntry, Compensation, FailedAttempt, Record, Resume, Role, Source as InputSource, Wait,
};
use baton_core::ports::orchestrator::{
    ExecutionInfo, HistoryEvent, Orchestrator, OrchestratorError, execution_arn, execution_name,
};
use baton_core::ports::store::{InboxEntry, LedgerEntry, Receipt, ReceiptStatus, Task, Trace, WorkflowStore};
use serde::Serialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::ops::{StepNames, human, table_time};
use crate::target::{self, Field, StateMachines, TargetArgs};
use crate::terminal::line;
#[cfg(test)]
use crate::terminal::terminal_safe;

/// The `--json` schema's name and version.
pub const SCHEMA: &str = "baton.trace/v1";

/// `baton trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    pub workflow: String,
    /// The correlation key.
    pub key: String,
    /// Print the `baton.trace/v1` JSON document instead of a table.
    #[arg(long, conflicts_with = "html")]
    pub json: bool,
    /// Write the trace as one self-contained HTML page (a view of the `baton.trace/v1` document,
    /// which it embeds) to FILE, or print it without one.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    pub html: Option<Option<PathBuf>>,
    /// The workflow config, for step names [default: infra/workflows.yaml when present].
    #[arg(long, env = "BATON_CONFIG")]
    pub config: Option<PathBuf>,
    /// How many ledger entries (ignored inputs) to show, newest first: a number, or `all`.
    /// One sender can leave an entry per input id it sends; the older ones are counted.
    #[arg(long, value_name = "N|all", default_value = "20", value_parser = LedgerShown::parse)]
    pub ledger: LedgerShown,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// How many of a key's ledger entries a trace shows (`--ledger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerShown {
    /// The newest this many, by time; the others are counted ([`Report::ledger_omitted`]).
    Newest(usize),
    All,
}

impl LedgerShown {
    /// What a trace shows unless told: the console's pages too.
    pub const DEFAULT: LedgerShown = LedgerShown::Newest(20);

    pub fn parse(text: &str) -> Result<LedgerShown, String> {
        match text {
            "all" => Ok(LedgerShown::All),
            n => {
                n.parse().map(LedgerShown::Newest).map_err(|_| format!("{n:?}: a number of entries, or all"))
            }
        }
    }
}

/// Reads the table and Step Functions, then prints (or writes) the trace.
pub async fn run(args: TraceArgs) -> Result<()> {
    let workflow = WorkflowName::parse(args.workflow.as_str()).context("<workflow>")?;
    let key = CorrelationKey::parse(args.key.as_str()).context("<key>")?;
    let names = StepNames::load(args.config.as_deref())?;
    let target = target::resolve(&args.target, &[Field::Table, Field::StateMachines], true)?;
    let (Some(table), Some(machines)) = (target.table.clone(), target.state_machines.clone()) else {
        bail!("the table and the state machines are both needed");
    };
    let sdk = target.aws().sdk_config().await?;
    let sources = Sources {
        store: crate::ops::store(aws_sdk_dynamodb::Client::new(&sdk), &table).await?,
        sfn: StepFunctionsOrchestrator::new(baton_aws::stepfunctions::client(&sdk)),
        machines,
    };
    let report = read_showing(&sources, names, (&workflow, &key), args.ledger)
        .await
        .with_context(|| format!("at {}", target.location()))?
        .with_context(|| format!("no such workflow record: {workflow} / {key} (table {table})"))?;
    match (&args.html, args.json) {
        (Some(file), _) => {
            let page = crate::web::trace_page(&serde_json::to_value(&report)?, "");
            match file {
                Some(path) => {
                    std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                None => print!("{page}"),
            }
        }
        (None, true) => println!("{}", serde_json::to_string_pretty(&report)?),
        (None, false) => print!("{}", render(&report, OffsetDateTime::now_utc())),
    }
    Ok(())
}

/// Where a trace is read from: the table, and Step Functions for each generation's execution.
pub struct Sources {
    pub store: DynamoDbStore,
    pub sfn: StepFunctionsOrchestrator,
    pub machines: StateMachines,
}

/// Everything known about one workflow instance, read and joined; `None` when nothing at all is
/// stored for it. `names` are the checkout's; the record's own config version is used when
/// it is another. The ledger is shown as [`LedgerShown::DEFAULT`] says.
pub async fn read(
    sources: &Sources,
    names: StepNames,
    target: (&WorkflowName, &CorrelationKey),
) -> Result<Option<Report>> {
    read_showing(sources, names, target, LedgerShown::DEFAULT).await
}

/// [`read`], showing the ledger entries `ledger` says. Every entry of the key is read (its sort
/// keys are by reason and id, not by time), each at most a few KB
/// (`baton_core::ports::store::LEDGER_DETAIL_KEPT`); the older ones are only counted.
pub async fn read_showing(
    sources: &Sources,
    names: StepNames,
    (workflow, key): (&WorkflowName, &CorrelationKey),
    ledger: LedgerShown,
) -> Result<Option<Report>> {
    let store = &sources.store;
    let trace = store
        .trace(workflow, key)
        .await
        .with_context(|| format!("cannot read {workflow} / {key} from the table {}", store.table()))?;
    if is_empty(&trace) {
        return Ok(None);
    }
    let executions =
        match (&trace.record, trace.record.as_ref().map(|r| sources.machines.arn(r.workflow.as_str()))) {
            (Some(record), Some(Ok(machine))) => read_executions(&sources.sfn, &machine, record).await?,
            // The record is worth seeing even when its state machine cannot be named.
            (Some(_), Some(Err(e))) => {
                eprintln!("warning: {e}; the Step Functions history is not shown");
                Vec::new()
            }
            _ => Vec::new(),
        };
    // Step names as the record's own config version has them, which may not be the checkout's.
    let names = names.of_version(store, trace.record.as_ref().map(|r| r.config_version.as_str())).await;
    Ok(Some(build(&trace, executions, &names, (workflow, key)).showing(ledger)))
}

fn is_empty(trace: &Trace) -> bool {
    trace.record.is_none()
        && trace.tasks.is_empty()
        && trace.receipts.is_empty()
        && trace.inbox.is_empty()
        && trace.ledger.is_empty()
}

/// One generation's execution, as Step Functions reports it.
#[derive(Debug, Clone)]
pub struct Execution {
    pub generation: u32,
    pub info: ExecutionInfo,
    pub history: Vec<HistoryEvent>,
}

/// The executions of every generation of `record`, oldest first; those never started are left
/// out.
async fn read_executions(sfn: &impl Orchestrator, machine: &str, record: &Record) -> Result<Vec<Execution>> {
    let mut executions = Vec::new();
    for generation in 1..=record.generation {
        let name = execution_name(&record.workflow, &record.key, generation);
        let Some(arn) = execution_arn(machine, &name) else {
            bail!("{machine} is not a state machine ARN (arn:...:stateMachine:<name>)");
        };
        let info = match sfn.describe(&arn).await {
            Ok(info) => info,
            Err(OrchestratorError::ExecutionNotFound { .. }) => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot describe the execution {arn}")),
        };
        let history = match sfn.history(&arn).await {
            Ok(history) => history,
            Err(OrchestratorError::ExecutionNotFound { .. }) => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read the history of {arn}")),
        };
        executions.push(Execution { generation, info, history });
    }
    Ok(executions)
}

// ---- The `baton.trace/v1` document ----

/// The whole trace: the `--json` output.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub workflow: String,
    pub key: String,
    /// `null` when only inputs that arrived before the start event are stored.
    pub record: Option<RecordView>,
    /// Every entry from every source, oldest first.
    pub timeline: Vec<Entry>,
    /// Each started generation's execution, oldest first, with its whole history.
    pub executions: Vec<ExecutionView>,
    /// The state machine the workflow runs, for drawing its steps (`--html`): generated from
    /// the config version the record runs; `null` when that config is not at hand.
    pub graph: Option<Graph>,
    /// The key's ledger entries left out of `timeline`, the oldest ones (`--ledger`; 0 when
    /// every one is shown).
    pub ledger_omitted: usize,
}

impl Report {
    /// The report with only the ledger entries `shown` keeps: the newest, by time.
    pub fn showing(mut self, shown: LedgerShown) -> Report {
        let LedgerShown::Newest(n) = shown else { return self };
        let ignored = self.timeline.iter().filter(|e| matches!(e.what, What::Ignored { .. })).count();
        let mut older = ignored.saturating_sub(n);
        self.ledger_omitted += older;
        // The timeline is oldest first: the first `older` ledger entries go.
        self.timeline.retain(|e| {
            let drop = older > 0 && matches!(e.what, What::Ignored { .. });
            older -= usize::from(drop);
            !drop
        });
        self
    }
}

/// A state machine's states, in the order Step Functions' console draws them: from `start_at`
/// along `next`, then the states only errors lead to.
#[derive(Debug, Serialize)]
pub struct Graph {
    pub start_at: String,
    pub states: Vec<GraphState>,
}

/// One state of a [`Graph`].
#[derive(Debug, Serialize)]
pub struct GraphState {
    pub name: String,
    /// Step Functions' state type: `Task`, `Fail`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The step's index, for a step's state (it waits for its task token); for a parallel
    /// group's, its first branch's.
    pub step: Option<u32>,
    /// A parallel group's branches, each a graph of its own, side by side.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<Graph>,
    pub next: Option<String>,
    /// Where errors go: `{"errors": ["States.Timeout"], "next": "Report timed out"}`.
    pub catches: Vec<Catch>,
    pub end: bool,
}

/// One `Catch` of a state.
#[derive(Debug, Serialize)]
pub struct Catch {
    pub errors: Vec<String>,
    pub next: String,
}

impl Graph {
    /// The graph of an ASL `definition` as `baton synth` generates it.
    pub fn of(definition: &Value) -> Graph {
        let start_at = definition["StartAt"].as_str().unwrap_or_default().to_owned();
        let empty = Map::new();
        let states = definition["States"].as_object().unwrap_or(&empty);
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let mut order: Vec<&str> = Vec::new();
        let mut at = Some(start_at.as_str());
        while let Some(name) = at.filter(|n| states.contains_key(*n) && !order.contains(n)) {
            order.push(name);
            at = states[name]["Next"].as_str();
        }
        order.extend(states.keys().map(String::as_str).filter(|n| !order.contains(n)).collect::<Vec<_>>());
        let states = order
            .into_iter()
            .map(|name| {
                let state = &states[name];
                let catches = state["Catch"].as_array().map(Vec::as_slice).unwrap_or_default();
                let branches: Vec<Graph> =
                    state["Branches"].as_array().into_iter().flatten().map(Graph::of).collect();
                let step =
                    state["Parameters"]["MessageBody"]["step"].as_u64().and_then(|s| u32::try_from(s).ok());
                GraphState {
                    name: name.to_owned(),
                    kind: text(&state["Type"]).unwrap_or_default(),
                    step: step.or_else(|| branches.iter().filter_map(Graph::first_step).min()),
                    branches,
                    next: text(&state["Next"]),
                    catches: catches
                        .iter()
                        .map(|c| Catch {
                            errors: c["ErrorEquals"]
                                .as_array()
                                .map(|e| e.iter().filter_map(text).collect())
                                .unwrap_or_default(),
                            next: text(&c["Next"]).unwrap_or_default(),
                        })
                        .collect(),
                    end: state["End"].as_bool().unwrap_or(false) || state["Type"] == "Fail",
                }
            })
            .collect();
        Graph { start_at, states }
    }

    /// The step its start state waits on.
    fn first_step(&self) -> Option<u32> {
        self.states.iter().find(|s| s.name == self.start_at)?.step
    }
}

/// The record as it stands.
#[derive(Debug, Serialize)]
pub struct RecordView {
    /// `pending`, `waiting{0}`, `advancing{1}`, `succeeded`, ...: the notation of the callback
    /// API's `state` and of transitions.
    pub state: String,
    pub terminal: bool,
    /// The current step's index (waiting and advancing), else `null`.
    pub step: Option<u32>,
    /// Its name, when the config was available.
    pub step_name: Option<String>,
    pub generation: u32,
    pub version: u64,
    /// The config version this generation runs.
    pub config_version: String,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub deadline: Option<OffsetDateTime>,
    /// A short hash of the task token; the token itself is never shown.
    pub token_fingerprint: Option<String>,
    /// Inputs gathered for the current step.
    pub inputs: Map<String, Value>,
    /// The ids of the inputs applied to the current step, in order.
    pub applied_inputs: Vec<String>,
    /// The resume Step Functions is owed while advancing: `success`, `failure` or `null`.
    pub owed: Option<&'static str>,
    /// Ids of the start events seen, oldest first (bounded).
    pub start_events: Vec<String>,
    /// At a parallel group (and in a record that ended at one): each branch, side by side.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<BranchView>,
    /// The optional branches of this generation that did not succeed, by name: a workflow that
    /// finishes with any ends `degraded`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
    /// The optional branches whose success Step Functions itself reported, by name. The
    /// execution's success waits until each optional branch is here or in `missed`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub confirmed: Vec<String>,
    /// A step with `retry`: its failed attempts, oldest first (error, cause, the input that
    /// failed it, when).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<FailedAttempt>,
    /// The attempt running (or, during a backoff, next to run).
    pub attempt: u32,
    /// When the next attempt's task goes out, during a backoff.
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// A timer step, while it sleeps: when the sweeper wakes it.
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub wakes_at: Option<OffsetDateTime>,
    /// A step with `remind` or `escalate`: how many of its reminders and escalation levels are
    /// behind it (in the order of their times: sent, or a reminder passed over by a late
    /// sweep), and when the next is due.
    pub notices: u32,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub next_notice_at: Option<OffsetDateTime>,
    /// Who the step's task was given to, and when: its queue when the step began to wait, then
    /// each reminder and escalation level behind it (`null` without a task, or without the
    /// config to name its queues).
    pub asked: Option<crate::ops::Asked>,
    /// The compensation phase, once it began: why, when, and each step of its plan (`null`
    /// before).
    pub compensation: Option<CompensationView>,
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub created_at: OffsetDateTime,
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub updated_at: OffsetDateTime,
}

/// A record's compensation: what ended the run, and each step of the plan, last position first.
#[derive(Debug, Serialize)]
pub struct CompensationView {
    /// `failed`, `timed_out` or `cancelled`.
    pub trigger: &'static str,
    /// The run's error (a failure), or the cancel's reason.
    pub detail: Option<String>,
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub began_at: OffsetDateTime,
    pub steps: Vec<UndoView>,
}

/// One step of a compensation plan.
#[derive(Debug, Serialize)]
pub struct UndoView {
    pub step: u32,
    pub name: Option<String>,
    /// `acknowledged`, `failed`, `timed_out`, `skipped`, `waiting` (its task out) or `pending`.
    pub state: &'static str,
    /// Why a skipped step is not compensated: `not_completed`, `no_compensate_declared`.
    pub skip_reason: Option<&'static str>,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub deadline: Option<OffsetDateTime>,
    /// Its failed attempts, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<FailedAttempt>,
    /// The attempt running, or the last.
    pub attempt: u32,
}

fn compensation_view(c: &Compensation, workflow: &str, names: &StepNames) -> CompensationView {
    use baton_core::domain::lifecycle::Trigger;
    CompensationView {
        trigger: c.trigger.as_str(),
        detail: match &c.trigger {
            Trigger::Failed { error, .. } => Some(error.clone()),
            Trigger::Cancelled { reason } => Some(reason.clone()),
            Trigger::TimedOut => None,
        },
        began_at: c.began_at,
        steps: c
            .undos
            .iter()
            .map(|u| UndoView {
                step: u.step(),
                name: names.name(workflow, u.step()),
                state: u.state(),
                skip_reason: u.skip.map(|s| s.as_str()),
                deadline: u.wait.deadline,
                failed_attempts: u.wait.failed.clone(),
                attempt: u.wait.attempt(),
            })
            .collect(),
    }
}

/// One branch of the parallel group a record is at.
#[derive(Debug, Serialize)]
pub struct BranchView {
    pub step: u32,
    pub name: Option<String>,
    /// `not_reached` (its `step_ready` is on its way), `waiting`, or its outcome: `succeeded`,
    /// `failed`, `timed_out`, `closed`.
    pub state: &'static str,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub deadline: Option<OffsetDateTime>,
    pub token_fingerprint: Option<String>,
    pub inputs: Map<String, Value>,
    /// The resume its token is still owed: `success`, `failure` or `null`.
    pub owed: Option<&'static str>,
    /// A branch with `retry`: its failed attempts, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<FailedAttempt>,
    /// The attempt running (or, during a backoff, next to run).
    pub attempt: u32,
    /// When the next attempt's task goes out, during a backoff.
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub next_attempt_at: Option<OffsetDateTime>,
}

fn branch_view(b: &Wait, workflow: &str, names: &StepNames) -> BranchView {
    BranchView {
        step: b.step,
        name: names.name(workflow, b.step),
        state: match (b.outcome(), &b.token) {
            (Some(outcome), _) => outcome.name(Role::Branch),
            (None, Some(_)) => "waiting",
            (None, None) => "not_reached",
        },
        deadline: b.deadline,
        token_fingerprint: b.token.as_ref().map(|t| t.fingerprint()),
        inputs: Map::clone(&b.inputs),
        owed: b.owed().map(owed_word),
        failed_attempts: b.failed.clone(),
        attempt: b.attempt(),
        next_attempt_at: b.task_due(),
    }
}

fn owed_word(o: &Resume) -> &'static str {
    match o {
        Resume::Success { .. } => "success",
        Resume::Failure { .. } => "failure",
    }
}

/// Where a timeline entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Record,
    Task,
    Receipt,
    Inbox,
    Ledger,
    Execution,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Record => "record",
            Source::Task => "task",
            Source::Receipt => "receipt",
            Source::Inbox => "inbox",
            Source::Ledger => "ledger",
            Source::Execution => "execution",
        }
    }
}

/// One line of the timeline: `{"at", "source", "kind", ...fields of the kind}`.
#[derive(Debug, Serialize)]
pub struct Entry {
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub at: OffsetDateTime,
    pub source: Source,
    #[serde(flatten)]
    pub what: What,
}

/// What happened, by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// A state change of the record (source `record`).
    Transition {
        generation: u32,
        /// `null` when the record was created.
        from: Option<String>,
        to: String,
        cause: &'static str,
        cause_id: Option<String>,
        version: u64,
    },
    /// The operator task for a step was created (source `task`).
    TaskCreated {
        generation: u32,
        step: u32,
        step_name: String,
        task_id: String,
        title: String,
        queue: String,
        published: bool,
        /// The attempt it is for (a retried step's later attempts have tasks of their own).
        attempt: u32,
        /// `step`, or `compensation` for a task that undoes the step.
        task_kind: &'static str,
    },
    /// An input's idempotency receipt was written (source `receipt`).
    Receipt {
        input_id: String,
        /// `pending` (the effect may not have happened) or `done`.
        status: &'static str,
        http_status: Option<u64>,
        /// The answer's `status`: `applied`, `buffered` or `ignored`.
        answer_status: Option<String>,
        /// The whole answer the sender got.
        answer: Option<Value>,
        /// How many times the same input came again and got that answer, and when last.
        repeats: u32,
        #[serde(serialize_with = "crate::ops::ser_opt_time")]
        last_repeat_at: Option<OffsetDateTime>,
    },
    /// An input arrived before its step waited and was buffered (source `inbox`).
    Buffered {
        input_id: String,
        step: u32,
        step_name: Option<String>,
        /// `buffered`, `applied`, `expired` or `ignored`.
        status: &'static str,
        #[serde(serialize_with = "crate::ops::ser_time")]
        expires_at: OffsetDateTime,
    },
    /// An input was ignored, with its reason (source `ledger`).
    Ignored {
        input_id: String,
        reason: &'static str,
        generation: Option<u32>,
        /// The record's state at the time.
        state: Option<String>,
        /// The input, or a summary of it.
        detail: Value,
    },
    /// An event of an execution's history (source `execution`).
    ExecutionEvent { generation: u32, event_id: i64, event_type: String, detail: String },
}

/// One execution.
#[derive(Debug, Serialize)]
pub struct ExecutionView {
    pub generation: u32,
    pub arn: String,
    /// Step Functions' status: `RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED`, ...
    pub status: String,
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub started_at: OffsetDateTime,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub stopped_at: Option<OffsetDateTime>,
    pub error: Option<String>,
    pub cause: Option<String>,
    pub history: Vec<HistoryView>,
}

/// One history event.
#[derive(Debug, Serialize)]
pub struct HistoryView {
    pub id: i64,
    #[serde(serialize_with = "crate::ops::ser_time")]
    pub at: OffsetDateTime,
    pub event_type: String,
    pub detail: String,
}

/// Merges what was read into one report. Entries are sorted by time; entries with the same
/// time keep the order they were added in (the record's transitions first, in version order;
/// each history in event order).
pub fn build(
    trace: &Trace,
    executions: Vec<Execution>,
    names: &StepNames,
    (workflow, key): (&WorkflowName, &CorrelationKey),
) -> Report {
    let mut timeline = Vec::new();
    if let Some(record) = &trace.record {
        timeline.extend(record.history.iter().map(transition));
    }
    timeline.extend(trace.tasks.iter().map(task));
    timeline.extend(trace.receipts.iter().map(receipt));
    timeline.extend(trace.inbox.iter().map(buffered));
    timeline.extend(trace.ledger.iter().map(ignored));
    for execution in &executions {
        timeline.extend(execution.history.iter().map(|event| Entry {
            at: event.timestamp,
            source: Source::Execution,
            what: What::ExecutionEvent {
                generation: execution.generation,
                event_id: event.id,
                event_type: event.event_type.clone(),
                detail: event.detail.clone(),
            },
        }));
    }
    timeline.sort_by_key(|e| e.at);

    Report {
        schema: SCHEMA,
        workflow: workflow.to_string(),
        key: key.to_string(),
        record: trace.record.as_ref().map(|r| record_view(r, names)),
        timeline,
        executions: executions.into_iter().map(execution_view).collect(),
        graph: names.definition(workflow.as_str()).map(|d| Graph::of(&d)),
        ledger_omitted: 0,
    }
}

fn record_view(r: &Record, names: &StepNames) -> RecordView {
    let step_names = |steps: &[u32]| -> Vec<String> {
        steps
            .iter()
            .map(|&s| names.name(r.workflow.as_str(), s).unwrap_or_else(|| format!("step {s}")))
            .collect()
    };
    let step = r.state.step();
    let at_step = r.step_wait();
    RecordView {
        state: r.state.to_string(),
        terminal: r.state.is_terminal(),
        step,
        step_name: step.and_then(|s| names.position_name(r.workflow.as_str(), s)),
        generation: r.generation,
        version: r.version,
        config_version: r.config_version.clone(),
        deadline: at_step.and_then(|w| w.deadline),
        token_fingerprint: at_step.and_then(|w| w.token.as_ref()).map(|t| t.fingerprint()),
        inputs: at_step.map(|w| Map::clone(&w.inputs)).unwrap_or_default(),
        applied_inputs: r
            .applied
            .iter()
            .filter(|a| Some(a.step) == r.state.step() && a.generation == r.generation)
            .filter(|_| r.state.step().is_some())
            .map(|a| a.id.to_string())
            .collect(),
        owed: at_step.and_then(Wait::owed).map(owed_word),
        start_events: r.start_events.iter().map(ToString::to_string).collect(),
        branches: r.branches().map(|b| branch_view(b, r.workflow.as_str(), names)).collect(),
        missed: step_names(&r.missed),
        confirmed: step_names(&r.confirmed),
        failed_attempts: at_step.map(|w| w.failed.clone()).unwrap_or_default(),
        attempt: at_step.map_or(1, Wait::attempt),
        next_attempt_at: at_step.and_then(Wait::task_due),
        wakes_at: at_step.and_then(Wait::wakes_at),
        notices: at_step.map_or(0, |w| w.notified),
        next_notice_at: at_step.and_then(|w| w.notice_at),
        asked: at_step.and_then(|w| names.asked(r.workflow.as_str(), w)),
        compensation: r.compensation.as_ref().map(|c| compensation_view(c, r.workflow.as_str(), names)),
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

fn transition(a: &AuditEntry) -> Entry {
    Entry {
        at: a.at,
        source: Source::Record,
        what: What::Transition {
            generation: a.generation,
            from: a.from.as_deref().map(str::to_owned),
            to: a.to.to_string(),
            cause: a.cause.as_str(),
            cause_id: a.cause_id.as_deref().map(str::to_owned),
            version: a.version,
        },
    }
}

fn task(t: &Task) -> Entry {
    Entry {
        at: t.created_at,
        source: Source::Task,
        what: What::TaskCreated {
            generation: t.generation,
            step: t.step,
            step_name: t.step_name.clone(),
            task_id: t.id.clone(),
            title: t.title.clone(),
            queue: t.queue.clone(),
            published: t.published,
            attempt: t.attempt,
            task_kind: t.kind.as_str(),
        },
    }
}

fn receipt(r: &Receipt) -> Entry {
    let answer = r.answer.as_ref();
    Entry {
        at: r.created_at,
        source: Source::Receipt,
        what: What::Receipt {
            input_id: r.id.to_string(),
            status: match r.status {
                ReceiptStatus::Pending => "pending",
                ReceiptStatus::Done => "done",
            },
            http_status: answer.and_then(|a| a["http_status"].as_u64()),
            answer_status: answer.and_then(|a| a["body"]["status"].as_str()).map(str::to_owned),
            answer: answer.map(|a| a.get("body").cloned().unwrap_or_else(|| a.clone())),
            repeats: r.repeats,
            last_repeat_at: r.last_repeat_at,
        },
    }
}

fn buffered(e: &InboxEntry) -> Entry {
    Entry {
        at: e.arrived_at,
        source: Source::Inbox,
        what: What::Buffered {
            input_id: e.id.to_string(),
            step: e.step,
            // The entry names its step (the inbox is kept by name, across config versions).
            step_name: Some(e.step_name.clone()),
            status: e.status.as_str(),
            expires_at: e.expires_at,
        },
    }
}

fn ignored(l: &LedgerEntry) -> Entry {
    Entry {
        at: l.at,
        source: Source::Ledger,
        what: What::Ignored {
            input_id: l.input_id.clone(),
            reason: l.reason.as_str(),
            generation: l.generation,
            state: l.state.clone(),
            detail: l.detail.clone(),
        },
    }
}

fn execution_view(e: Execution) -> ExecutionView {
    ExecutionView {
        generation: e.generation,
        arn: e.info.execution_arn,
        status: e.info.status.to_string(),
        started_at: e.info.start_date,
        stopped_at: e.info.stop_date,
        error: e.info.error,
        cause: e.info.cause,
        history: e
            .history
            .into_iter()
            .map(|h| HistoryView { id: h.id, at: h.timestamp, event_type: h.event_type, detail: h.detail })
            .collect(),
    }
}

// ---- The table ----

/// The human form: a summary of the record, one line per timeline entry, then the executions.
pub fn render(report: &Report, now: OffsetDateTime) -> String {
    let mut out = String::new();
    line(&mut out, &format!("{} / {}", report.workflow, report.key));
    match &report.record {
        Some(r) => {
            let step = r.step_name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
            line(
                &mut out,
                &format!(
                    "  state     {}{step}, generation {}, version {}, config {}",
                    r.state, r.generation, r.version, r.config_version
                ),
            );
            if let Some(deadline) = r.deadline {
                let when = if deadline <= now {
                    format!("overdue by {}", human(now - deadline))
                } else {
                    format!("in {}", human(deadline - now))
                };
                line(&mut out, &format!("  deadline  {} ({when})", table_time(deadline)));
            }
            render_timed(&mut out, r, now);
            if let Some(fingerprint) = &r.token_fingerprint {
                line(&mut out, &format!("  token     {fingerprint}"));
            }
            if !r.inputs.is_empty() {
                line(&mut out, &format!("  inputs    {}", Value::Object(r.inputs.clone())));
            }
            if let Some(owed) = r.owed {
                line(&mut out, &format!("  owed      a {owed} resume to Step Functions"));
            }
            render_attempts(&mut out, r, now);
            render_branches(&mut out, r, now);
            render_compensation(&mut out, r);
        }
        None => {
            line(&mut out, "  no record: only inputs that arrived before the start event");
        }
    }
    out.push('\n');
    render_timeline(&mut out, report);
    if !report.executions.is_empty() {
        out.push('\n');
        line(&mut out, "EXECUTIONS");
        for e in &report.executions {
            let ended = e.stopped_at.map(|t| format!(", stopped {}", table_time(t))).unwrap_or_default();
            line(
                &mut out,
                &format!(
                    "  g{}  {}  started {}{ended}  {}",
                    e.generation,
                    e.status,
                    table_time(e.started_at),
                    e.arn
                ),
            );
            if let Some(error) = &e.error {
                line(&mut out, &format!("      {error}: {}", e.cause.as_deref().unwrap_or("")));
            }
        }
    }
    out
}

/// The timeline, one line per entry; first, the count of the ledger entries left out (the
/// oldest: [`Report::showing`]).
fn render_timeline(out: &mut String, report: &Report) {
    line(out, &format!("{:<24}  {:<9}  WHAT", "TIME", "SOURCE"));
    if report.ledger_omitted > 0 {
        line(
            out,
            &format!(
                "{:<24}  {:<9}  and {} older ignored input(s), not shown: baton trace {} {} --ledger all",
                "...",
                Source::Ledger.as_str(),
                report.ledger_omitted,
                report.workflow,
                report.key
            ),
        );
    }
    for entry in &report.timeline {
        line(
            out,
            &format!("{:<24}  {:<9}  {}", table_time(entry.at), entry.source.as_str(), describe(&entry.what)),
        );
    }
}

/// What the step waits on the clock for: a timer's wake, and its reminders and escalation levels
/// (how many are behind it, and when the next is due).
fn render_timed(out: &mut String, r: &RecordView, now: OffsetDateTime) {
    if let Some(at) = r.wakes_at {
        let when = if at <= now {
            format!("due {} ago", human(now - at))
        } else {
            format!("in {}", human(at - now))
        };
        line(out, &format!("  timer     wakes {} ({when})", table_time(at)));
    }
    if r.notices > 0 || r.next_notice_at.is_some() {
        let next = r.next_notice_at.map_or("none left".to_owned(), |at| format!("next {}", table_time(at)));
        line(out, &format!("  notices   {} behind (reminders and escalation levels), {next}", r.notices));
    }
    // Who was asked when: the task on its queue, then each reminder and level behind it.
    if let Some(asked) = r.asked.as_ref().filter(|a| !a.again.is_empty()) {
        let first = (asked.since, asked.queue.as_str(), "the task".to_owned());
        let again = asked.again.iter().map(|n| (n.at, n.queue.as_str(), n.what()));
        let rows: Vec<_> = std::iter::once(first).chain(again).collect();
        let width = rows.iter().map(|(_, queue, _)| queue.len()).max().unwrap_or(0);
        for (i, (at, queue, what)) in rows.iter().enumerate() {
            let label = if i == 0 { "asked" } else { "" };
            line(out, &format!("  {label:<8}  {}  {queue:<width$}  {what}", table_time(*at)));
        }
    }
}

/// A retried step's attempts, one line each: the failed ones with their error, then the one
/// running or due.
fn render_attempts(out: &mut String, r: &RecordView, now: OffsetDateTime) {
    let running = r.state.starts_with("waiting");
    for (i, text) in
        attempt_lines(&r.failed_attempts, (r.attempt, r.next_attempt_at), running, now).enumerate()
    {
        let label = if i == 0 { "  attempts  " } else { "            " };
        line(out, &format!("{label}{text}"));
    }
}

/// The attempts of a retried step or branch (none with no failed attempt): each failed one
/// with its error, then `attempt`, running (`running`: the step or branch still waits) or due
/// at `next`.
fn attempt_lines<'a>(
    failed: &'a [FailedAttempt],
    (attempt, next): (u32, Option<OffsetDateTime>),
    running: bool,
    now: OffsetDateTime,
) -> impl Iterator<Item = String> + 'a {
    let failed_lines = failed.iter().map(|a| {
        let cause = if a.cause.is_empty() { String::new() } else { format!(" ({})", a.cause) };
        let source = match a.source {
            InputSource::Callback => "callback",
            InputSource::Event => "event",
        };
        format!("{} failed {}{} {} by {source} {}", a.attempt, a.error, cause, table_time(a.at), a.input)
    });
    let next = match next {
        Some(due) if due > now => {
            format!("due {} (in {}, after its backoff)", table_time(due), human(due - now))
        }
        Some(due) => format!("due since {} (the sweeper publishes its task)", table_time(due)),
        None if running => "running".to_owned(),
        None => "the last".to_owned(),
    };
    let last = (!failed.is_empty()).then(|| format!("{attempt} {next}"));
    failed_lines.chain(last)
}

/// A parallel group's branches, one line each: name, state, deadline, inputs, owed resume.
fn render_branches(out: &mut String, r: &RecordView, now: OffsetDateTime) {
    let name_of = |b: &BranchView| b.name.clone().unwrap_or_else(|| format!("step {}", b.step));
    // The names and states as wide as the widest of the group's (a long branch name never
    // pushes into the state).
    let w_name = r.branches.iter().map(|b| name_of(b).chars().count()).max().unwrap_or(0);
    let w_state = r.branches.iter().map(|b| b.state.chars().count()).max().unwrap_or(0);
    for (i, b) in r.branches.iter().enumerate() {
        let label = if i == 0 { "  branches  " } else { "            " };
        let name = name_of(b);
        let mut text = format!("{label}{name:<w_name$}  {:<w_state$}", b.state);
        if let Some(deadline) = b.deadline.filter(|_| b.state == "waiting") {
            let when = if deadline <= now {
                format!("overdue by {}", human(now - deadline))
            } else {
                format!("in {}", human(deadline - now))
            };
            text.push_str(&format!(" deadline {} ({when})", table_time(deadline)));
        }
        if !b.inputs.is_empty() {
            text.push_str(&format!(" inputs {}", Value::Object(b.inputs.clone())));
        }
        if let Some(owed) = b.owed {
            text.push_str(&format!(" owed a {owed} resume"));
        }
        line(out, &text);
        let waits = b.state == "waiting";
        for attempt in attempt_lines(&b.failed_attempts, (b.attempt, b.next_attempt_at), waits, now) {
            line(out, &format!("              attempt {attempt}"));
        }
    }
    if !r.missed.is_empty() {
        line(out, &format!("  missed    {} (optional; the workflow ends degraded)", r.missed.join(", ")));
    }
    if !r.confirmed.is_empty() {
        line(
            out,
            &format!(
                "  confirmed {} (optional; Step Functions reported its success)",
                r.confirmed.join(", ")
            ),
        );
    }
}

/// The compensation phase: why it began, then each step of its plan, last position first.
fn render_compensation(out: &mut String, r: &RecordView) {
    let Some(c) = &r.compensation else { return };
    let detail = c.detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default();
    line(
        out,
        &format!("  compensation began {} after the run {}{detail}", table_time(c.began_at), c.trigger),
    );
    let name_of = |u: &UndoView| u.name.clone().unwrap_or_else(|| format!("step {}", u.step));
    let w_name = c.steps.iter().map(|u| name_of(u).chars().count()).max().unwrap_or(0);
    for u in &c.steps {
        let name = name_of(u);
        let why = u.skip_reason.map(|s| format!(" ({s})")).unwrap_or_default();
        let attempts =
            if u.failed_attempts.is_empty() { String::new() } else { format!(", attempt {}", u.attempt) };
        line(out, &format!("              undo {name:<w_name$}  {}{why}{attempts}", u.state));
        for a in &u.failed_attempts {
            line(
                out,
                &format!("                attempt {} failed {} {}", a.attempt, a.error, table_time(a.at)),
            );
        }
    }
}

/// The WHAT column.
fn describe(what: &What) -> String {
    match what {
        What::Transition { generation, from, to, cause, cause_id, version } => {
            let from = from.as_deref().unwrap_or("(new)");
            let id = cause_id.as_ref().map(|i| format!(" [{i}]")).unwrap_or_default();
            format!("{from} -> {to}  {cause}{id}  g{generation} v{version}")
        }
        What::TaskCreated { generation, step_name, task_id, queue, published, task_kind, .. } => {
            let published = if *published { "published" } else { "NOT published" };
            let what = if *task_kind == "compensation" { "compensation task" } else { "task" };
            format!(
                "{what} created for {step_name} (g{generation}) on queue {queue}, {published}  [{task_id}]"
            )
        }
        What::Receipt { input_id, status, http_status, answer_status, answer, repeats, last_repeat_at } => {
            let mut text = format!("input {input_id}: {status}");
            if let Some(code) = http_status {
                let _ = write!(text, ", HTTP {code}");
            }
            if let Some(answer_status) = answer_status {
                let _ = write!(text, " {answer_status}");
            }
            if let Some(reason) = answer.as_ref().and_then(|a| a["reason"].as_str()) {
                let _ = write!(text, " ({reason})");
            }
            if answer.as_ref().and_then(|a| a["duplicate"].as_bool()) == Some(true) {
                text.push_str(" (duplicate)");
            }
            if let Some(last) = last_repeat_at {
                let times = if *repeats == 1 { "once" } else { &format!("{repeats} times") };
                let _ = write!(text, "; sent again {times}, last at {}", crate::ops::rfc3339(*last));
            }
            text
        }
        What::Buffered { input_id, step, step_name, status, expires_at } => {
            let step = step_name.clone().unwrap_or_else(|| format!("step {step}"));
            format!(
                "input {input_id} buffered for {step}: now {status} (expires {})",
                table_time(*expires_at)
            )
        }
        What::Ignored { input_id, reason, state, detail, .. } => {
            let state = state.as_ref().map(|s| format!(" in state {s}")).unwrap_or_default();
            let kept = match detail[baton_core::ports::store::SUMMARIZED]["bytes"].as_u64() {
                Some(bytes) => format!(" (kept as its size, {bytes} bytes, and its hash)"),
                None => String::new(),
            };
            format!("input {input_id} ignored: {reason}{state}{kept}")
        }
        What::ExecutionEvent { generation, event_id, event_type, detail } => {
            let detail = if detail.is_empty() { String::new() } else { format!("  {detail}") };
            format!("g{generation} #{event_id} {event_type}{detail}")
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_core::domain::config::Config;
    use baton_core::domain::ids::{EventId, TaskToken};
    use baton_core::domain::lifecycle::{Cause, IgnoreReason, Role, State, Wait, WaitOutcome, WaitStatus};
    use baton_core::ports::orchestrator::ExecutionStatus;
    use baton_core::ports::store::{InboxStatus, TaskKind};
    use serde_json::json;
    use time::Duration;

    use super::*;
    use crate::ops::rfc3339;

    fn t(seconds: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + Duration::days(20_000) + Duration::seconds(seconds)
    }

    fn names() -> (WorkflowName, CorrelationKey) {
        (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("k1").unwrap())
    }

    fn audit(
        at: i64,
        from: Option<&str>,
        to: &str,
        cause: Cause,
        id: Option<&str>,
        version: u64,
    ) -> AuditEntry {
        AuditEntry {
            at: t(at),
            generation: 1,
            from: from.map(Into::into),
            to: to.into(),
            cause,
            cause_id: id.map(Into::into),
            version,
        }
    }

    /// A record waiting on step 1, with a transition history and one of each other item.
    #[expect(clippy::too_many_lines, reason = "a fixture holding one of each item a trace shows")]
    fn trace() -> Trace {
        let (w, k) = names();
        let record = Record {
            workflow: w.clone(),
            key: k.clone(),
            generation: 1,
            state: State::Waiting { step: 1 },
            version: 4,
            waits: vec![Wait::reached(
                1,
                Role::Step,
                &TaskToken::parse("AAAA-secret-task-token-BBBB").unwrap(),
                t(3600),
            )],
            applied: Vec::new(),
            start_events: vec![EventId::parse("evt-1").unwrap()],
            history: vec![
                audit(0, None, "pending", Cause::Start, Some("evt-1"), 1),
                audit(2, Some("pending"), "waiting{0}", Cause::StepReady, None, 2),
                audit(10, Some("waiting{0}"), "advancing{0}", Cause::Complete, Some("cb-1"), 3),
                // Same instant as the one before: the audit order must survive the sort.
                audit(10, Some("advancing{0}"), "waiting{1}", Cause::StepReady, None, 4),
            ],
            created_at: t(0),
            updated_at: t(10),
            write_id: None,
            config_version: "vfd00d5526fd9".into(),
            missed: Vec::new(),
            confirmed: Vec::new(),
            succeeded: Vec::new(),
            compensation: None,
            untils: Vec::new(),
        };
        Trace {
            record: Some(record),
            tasks: vec![Task {
                workflow: w.clone(),
                key: k.clone(),
                generation: 1,
                step: 0,
                step_name: "manual-review".into(),
                id: "order-review/k1/g1/manual-review".into(),
                title: "Review order k1".into(),
                queue: "risk-review".into(),
                created_at: t(3),
                published: true,
                attempt: 1,
                previous_error: None,
                kind: TaskKind::Step,
                notice: 0,
            }],
            receipts: vec![Receipt {
                workflow: w.clone(),
                key: k.clone(),
                target: "review".into(),
                id: EventId::parse("cb-1").unwrap(),
                hash: "h".into(),
                status: ReceiptStatus::Done,
                answer: Some(
                    json!({"http_status": 200, "body": {"status": "applied", "state": "advancing{0}", "duplicate": false}}),
                ),
                created_at: t(9),
                expires_at: t(99_999),
                repeats: 2,
                last_repeat_at: Some(t(12)),
                lease: None,
            }],
            inbox: vec![InboxEntry {
                workflow: w.clone(),
                key: k.clone(),
                step: 1,
                step_name: "payment".into(),
                config_version: "vfd00d5526fd9".into(),
                id: EventId::parse("cb-early").unwrap(),
                generation: 1,
                arrived_at: t(1),
                input: json!({}),
                status: InboxStatus::Buffered,
                expires_at: t(7200),
                expiry_hold: None,
                drain_target: None,
                drained_at: None,
                callback_key: false,
            }],
            ledger: vec![LedgerEntry {
                workflow: w,
                key: k,
                input_id: "evt-2".into(),
                reason: IgnoreReason::AlreadyRunning,
                generation: Some(1),
                state: Some("waiting{0}".into()),
                detail: json!({"kind": "start"}),
                config_version: Some("vfd00d5526fd9".into()),
                at: t(5),
                expires_at: t(99_999),
            }],
        }
    }

    fn execution() -> Execution {
        let event = |id: i64, at: i64, event_type: &str, detail: &str| HistoryEvent {
            id,
            timestamp: t(at),
            event_type: event_type.into(),
            detail: detail.into(),
        };
        Execution {
            generation: 1,
            info: ExecutionInfo {
                execution_arn: "arn:aws:states:us-east-1:1:execution:sm:order-review-k1-g1".into(),
                status: ExecutionStatus::Running,
                start_date: t(1),
                stop_date: None,
                input: None,
                output: None,
                error: None,
                cause: None,
            },
            history: vec![
                event(1, 1, "ExecutionStarted", ""),
                event(2, 1, "TaskStateEntered", "manual-review"),
                event(3, 11, "TaskStateEntered", "payment"),
            ],
        }
    }

    fn config_names() -> StepNames {
        StepNames::from_config(
            baton_core::domain::config::Config::parse(
                "workflows:\n  order-review:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
                 - { name: manual-review, requires: [d], timeout: 1h }\n      \
                 - { name: payment, requires: [p], timeout: 1h }\n",
            )
            .unwrap(),
        )
    }

    fn report() -> Report {
        let (w, k) = names();
        build(&trace(), vec![execution()], &config_names(), (&w, &k))
    }

    /// Found by review: every ignored input had its line, whole, so one sender could grow a
    /// key's trace by an entry per id (32 of them took it from 15 KB to 1 MB). A trace shows the
    /// newest 20 ledger entries, counts the older ones and says how to see them; `--ledger all`
    /// shows every one; the other sources are all kept. An entry the ledger kept as its size and
    /// hash says so.
    #[test]
    fn a_trace_shows_the_newest_ledger_entries_and_counts_the_older_ones() {
        let mut trace = trace();
        let first = trace.ledger[0].clone();
        for i in 0..32 {
            let detail = if i == 31 {
                json!({"kind": "step_input", "hash": "ab12", "summarized": {"bytes": 40_000, "kept_whole_up_to": 4096}})
            } else {
                json!({"kind": "step_input", "data": {"blob": "x".repeat(100)}})
            };
            trace.ledger.push(LedgerEntry {
                input_id: format!("cb-flood-{i:02}"),
                reason: IgnoreReason::Terminal,
                detail,
                at: t(100 + i),
                ..first.clone()
            });
        }
        let (w, k) = names();
        let all = build(&trace, vec![execution()], &config_names(), (&w, &k));
        let ledger =
            |r: &Report| r.timeline.iter().filter(|e| matches!(e.what, What::Ignored { .. })).count();
        let others = |r: &Report| r.timeline.len() - ledger(r);
        assert_eq!(ledger(&all), 33);
        let shown = build(&trace, vec![execution()], &config_names(), (&w, &k)).showing(LedgerShown::DEFAULT);
        assert_eq!((ledger(&shown), shown.ledger_omitted, others(&shown)), (20, 13, others(&all)));
        let ids: Vec<&str> = shown
            .timeline
            .iter()
            .filter_map(|e| match &e.what {
                What::Ignored { input_id, .. } => Some(input_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!((ids[0], ids[19]), ("cb-flood-12", "cb-flood-31"), "the newest, in time order");
        let text = render(&shown, t(0));
        assert!(
            text.contains("ledger     and 13 older ignored input(s), not shown: baton trace order-review k1 --ledger all"),
            "{text}"
        );
        assert!(!text.contains("cb-flood-11") && text.contains("cb-flood-12"), "{text}");
        assert!(text.contains("input cb-flood-31 ignored: terminal in state waiting{0} (kept as its size, 40000 bytes, and its hash)"), "{text}");
        assert_eq!(serde_json::to_value(&shown).unwrap()["ledger_omitted"], 13, "the JSON says so too");
        let everything =
            build(&trace, vec![execution()], &config_names(), (&w, &k)).showing(LedgerShown::All);
        assert_eq!((ledger(&everything), everything.ledger_omitted), (33, 0));
        assert_eq!(LedgerShown::parse("all"), Ok(LedgerShown::All));
        assert_eq!(LedgerShown::parse("5"), Ok(LedgerShown::Newest(5)));
        assert!(LedgerShown::parse("some").is_err());
    }

    #[test]
    fn the_timeline_is_in_time_order_and_ties_keep_their_source_order() {
        let report = report();
        let order: Vec<(i64, &str)> = report
            .timeline
            .iter()
            .map(|e| {
                let label = match &e.what {
                    What::Transition { cause, .. } => cause,
                    What::TaskCreated { .. } => "task",
                    What::Receipt { .. } => "receipt",
                    What::Buffered { .. } => "inbox",
                    What::Ignored { .. } => "ledger",
                    What::ExecutionEvent { event_type, .. } => event_type.as_str(),
                };
                ((e.at - t(0)).whole_seconds(), label)
            })
            .collect();
        assert_eq!(
            order,
            [
                (0, "start"),
                (1, "inbox"),
                (1, "ExecutionStarted"),
                (1, "TaskStateEntered"),
                (2, "step_ready"),
                (3, "task"),
                (5, "ledger"),
                (9, "receipt"),
                (10, "complete"),
                (10, "step_ready"),
                (11, "TaskStateEntered"),
            ]
        );
    }

    #[test]
    fn the_json_document_has_the_v1_shape_and_never_the_token() {
        let json = serde_json::to_value(report()).unwrap();
        assert_eq!(json["schema"], "baton.trace/v1");
        assert_eq!((json["workflow"].as_str(), json["key"].as_str()), (Some("order-review"), Some("k1")));
        let record = &json["record"];
        assert_eq!(record["state"], "waiting{1}");
        assert_eq!((record["step"].as_u64(), record["step_name"].as_str()), (Some(1), Some("payment")));
        assert_eq!(record["deadline"], rfc3339(t(3600)));
        assert!(record["token_fingerprint"].as_str().unwrap().starts_with("tok-"));
        assert_eq!(
            json["timeline"][0],
            json!({"at": rfc3339(t(0)), "source": "record", "kind": "transition", "generation": 1,
                   "from": null, "to": "pending", "cause": "start", "cause_id": "evt-1", "version": 1})
        );
        let receipt = json["timeline"].as_array().unwrap().iter().find(|e| e["source"] == "receipt").unwrap();
        assert_eq!(
            (receipt["kind"].as_str(), receipt["http_status"].as_u64(), receipt["answer_status"].as_str()),
            (Some("receipt"), Some(200), Some("applied"))
        );
        assert_eq!(
            (receipt["repeats"].as_u64(), &receipt["last_repeat_at"]),
            (Some(2), &json!(rfc3339(t(12))))
        );
        let inbox = json["timeline"].as_array().unwrap().iter().find(|e| e["source"] == "inbox").unwrap();
        assert_eq!(
            (inbox["kind"].as_str(), inbox["step_name"].as_str()),
            (Some("buffered"), Some("payment"))
        );
        assert_eq!(json["executions"][0]["status"], "RUNNING");
        assert_eq!(json["executions"][0]["history"][1]["event_type"], "TaskStateEntered");
        assert!(!json.to_string().contains("secret-task-token"));
        let graph = &json["graph"];
        assert_eq!(graph["start_at"], "manual-review");
        let names: Vec<&str> =
            graph["states"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "manual-review",
                "payment",
                "Report succeeded",
                "Report timed out",
                "Report failed",
                "Timed out",
                "Failed"
            ],
            "the path first, then what errors lead to"
        );
        assert_eq!(
            graph["states"][1],
            json!({"name": "payment", "type": "Task", "step": 1, "next": "Report succeeded", "end": false,
                   "catches": [{"errors": ["States.Timeout"], "next": "Report timed out"},
                               {"errors": ["States.ALL"], "next": "Report failed"}]})
        );
        assert_eq!(
            (graph["states"][6]["type"].as_str(), graph["states"][6]["end"].as_bool()),
            (Some("Fail"), Some(true))
        );
    }

    #[test]
    fn the_table_has_one_line_per_entry_with_time_source_and_what() {
        let text = render(&report(), t(60));
        assert!(
            text.starts_with(
                "order-review / k1\n  state     waiting{1} (payment), generation 1, version 4, config vfd00d5526fd9\n"
            )
        );
        assert!(text.contains("  deadline  ") && text.contains("(in 59m 0s)"), "{text}");
        assert!(!text.contains("secret-task-token"), "{text}");
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("TIME"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 11, "{text}");
        assert_eq!(
            lines[0],
            format!("{}  record     (new) -> pending  start [evt-1]  g1 v1", table_time(t(0)))
        );
        assert!(lines[8].ends_with("waiting{0} -> advancing{0}  complete [cb-1]  g1 v3"), "{}", lines[8]);
        assert!(
            lines[7].contains(&format!(
                "receipt    input cb-1: done, HTTP 200 applied; sent again 2 times, last at {}",
                rfc3339(t(12))
            )),
            "{}",
            lines[7]
        );
        assert!(
            lines[1].contains("inbox      input cb-early buffered for payment: now buffered"),
            "{}",
            lines[1]
        );
        assert!(lines[6].contains("ledger     input evt-2 ignored: already_running in state waiting{0}"));
        assert!(text.contains("EXECUTIONS\n  g1  RUNNING  started "), "{text}");
    }

    #[test]
    fn inputs_before_the_start_event_are_shown_without_a_record() {
        let (w, k) = names();
        let mut early = trace();
        early.record = None;
        early.tasks.clear();
        let report = build(&early, Vec::new(), &StepNames::default(), (&w, &k));
        assert!(report.record.is_none());
        assert_eq!(report.timeline.len(), 3);
        let text = render(&report, t(0));
        assert!(text.contains("no record: only inputs that arrived before the start event"), "{text}");
        assert!(text.contains("buffered for payment"), "an inbox entry names its step: {text}");
        assert!(!is_empty(&early));
        assert!(is_empty(&Trace::default()));
    }

    /// A callback's `error` and `cause` are the sender's: they reach the execution (and its
    /// history) as sent.
    #[test]
    fn control_characters_from_senders_are_shown_escaped_and_the_json_keeps_them_exact() {
        let (w, k) = names();
        let mut execution = execution();
        execution.info.status = ExecutionStatus::Failed;
        execution.info.error = Some("Rejected\u{1b}]0;owned\u{7}".into());
        execution.info.cause =
            Some("fine\n2026-01-01 00:00:00  record     forged\u{1b}[2J\u{9b}31m\u{7f}\u{202e}".into());
        execution.history.push(HistoryEvent {
            id: 4,
            timestamp: t(12),
            event_type: "TaskFailed".into(),
            detail: "error \u{1b}[31mred\r".into(),
        });
        let report = build(&trace(), vec![execution], &config_names(), (&w, &k));
        let text = render(&report, t(60));
        let bad = |c: char| c.is_control() && c != '\n' || ('\u{202a}'..='\u{202e}').contains(&c);
        assert!(!text.chars().any(bad), "{text:?}");
        assert!(
            !text.contains("\nfine\n2026") && !text.lines().any(|l| l.starts_with("2026-01-01")),
            "{text}"
        );
        assert!(text.contains("Rejected\\x1b]0;owned\\x07: fine\\n2026-01-01"), "{text}");
        assert!(text.contains("forged\\x1b[2J\\x9b31m\\x7f\\u{202e}"), "{text}");
        assert!(text.contains("error \\x1b[31mred\\r"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["executions"][0]["error"], "Rejected\u{1b}]0;owned\u{7}", "--json stays exact");
        assert_eq!(terminal_safe("order-1 ok"), "order-1 ok");
    }

    fn failed_attempt_one() -> FailedAttempt {
        FailedAttempt {
            attempt: 1,
            error: "ReviewerUnavailable".into(),
            cause: "timed out".into(),
            input: baton_core::domain::ids::EventId::parse("cb-1").unwrap(),
            source: InputSource::Callback,
            at: t(10),
        }
    }

    #[test]
    fn a_timer_step_shows_when_it_wakes() {
        let mut trace = trace();
        let record = trace.record.as_mut().unwrap();
        record.waits[0].status = WaitStatus::Sleeping { until: t(600) };
        let (w, k) = names();
        let report = build(&trace, vec![], &StepNames::default(), (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["record"]["wakes_at"], rfc3339(t(600)));
        let text = render(&report, t(60));
        assert!(text.contains("  timer     wakes ") && text.contains("(in 9m 0s)"), "{text}");
    }

    #[test]
    fn a_reminded_step_shows_how_many_notices_are_behind_it_and_the_next() {
        let mut trace = trace();
        let record = trace.record.as_mut().unwrap();
        (record.waits[0].notified, record.waits[0].notice_at) = (2, Some(t(7200)));
        let (w, k) = names();
        let report = build(&trace, vec![], &StepNames::default(), (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            (json["record"]["notices"].as_u64(), &json["record"]["next_notice_at"]),
            (Some(2), &json!(rfc3339(t(7200))))
        );
        let text = render(&report, t(60));
        assert!(text.contains("  notices   2 behind (reminders and escalation levels), next "), "{text}");
    }

    #[test]
    fn a_reminded_and_escalated_step_shows_who_was_asked_when() {
        let config = Config::parse(
            "workflows:\n  order-review:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
             - { name: intake, requires: [a], timeout: 1h }\n      \
             - name: review\n        requires: [d]\n        timeout: 1h\n        \
             task: { title: Review, queue: review }\n        \
             remind: { after: 10m, every: 10m, times: 2 }\n        \
             escalate: [{ after: 15m, queue: leads }]\n",
        )
        .unwrap();
        let mut trace = trace();
        let record = trace.record.as_mut().unwrap();
        // The step began at t(0) (its deadline, t(3600), less its hour): reminder 1 at 10m,
        // level 1 at 15m, reminder 2 at 20m; the first two are behind it.
        (record.waits[0].notified, record.waits[0].notice_at) = (2, Some(t(1200)));
        let (w, k) = names();
        let report = build(&trace, vec![], &StepNames::from_config(config), (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        let asked = &json["record"]["asked"];
        assert_eq!(
            (asked["queue"].as_str(), asked["since"].as_str()),
            (Some("review"), Some(&*rfc3339(t(0))))
        );
        assert_eq!((asked["reminders"].as_u64(), asked["level"].as_u64()), (Some(1), Some(1)));
        assert_eq!(
            asked["again"],
            json!([
                {"at": rfc3339(t(600)), "queue": "review", "reminder": 1},
                {"at": rfc3339(t(900)), "queue": "leads", "level": 1},
            ])
        );
        let text = render(&report, t(1000));
        let rows = format!(
            "  asked     {}  review  the task\n            {}  review  reminder 1\n            {}  leads   level 1\n",
            table_time(t(0)),
            table_time(t(600)),
            table_time(t(900))
        );
        assert!(text.contains(&rows), "{text}");
    }

    #[test]
    fn a_retried_step_shows_each_failed_attempt_and_the_one_running_or_due() {
        let mut trace = trace();
        let record = trace.record.as_mut().unwrap();
        record.state = State::Waiting { step: 0 };
        record.waits[0].step = 0;
        record.waits[0].failed = vec![failed_attempt_one()];
        record.waits[0].status = WaitStatus::TaskDue { at: t(610) };
        let (w, k) = names();
        let report = build(&trace, vec![], &StepNames::default(), (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            (json["record"]["attempt"].as_u64(), json["record"]["failed_attempts"][0]["error"].as_str()),
            (Some(2), Some("ReviewerUnavailable"))
        );
        let text = render(&report, t(60));
        assert!(text.contains("  attempts  1 failed ReviewerUnavailable (timed out) "), "{text}");
        assert!(text.contains(" by callback cb-1\n"), "{text}");
        assert!(
            text.contains("            2 due ") && text.contains("(in 9m 10s, after its backoff)"),
            "{text}"
        );
        let record = trace.record.as_mut().unwrap();
        record.waits[0].status = WaitStatus::Open;
        let text = render(&build(&trace, vec![], &StepNames::default(), (&w, &k)), t(700));
        assert!(text.contains("            2 running\n"), "{text}");
    }

    /// A trace of order-review at its group `checks`: fraud-check succeeded, the optional
    /// address-check timed out (missed), credit-check waits.
    fn group_trace() -> (Trace, StepNames, baton_core::domain::config::Config) {
        let config = baton_core::domain::config::Config::parse(
            "workflows:\n  order-review:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
             - parallel:\n          name: checks\n          branches:\n            \
             - { name: fraud-check, requires: [s], timeout: 1h }\n            \
             - { name: address-check, requires: [a], timeout: 1h, optional: true }\n            \
             - { name: credit-check, requires: [c], timeout: 1h }\n      \
             - { name: payment, requires: [p], timeout: 1h }\n",
        )
        .unwrap();
        let step_names = StepNames::from_config(config.clone());
        let mut trace = trace();
        let record = trace.record.as_mut().unwrap();
        record.state = State::Waiting { step: 0 };
        let branch = |step: u32, token: &str, outcome: Option<WaitOutcome>| {
            let mut wait = Wait::reached(step, Role::Branch, &TaskToken::parse(token).unwrap(), t(3600));
            if let Some(outcome) = outcome {
                wait.status = WaitStatus::Ended { outcome };
            }
            if outcome == Some(WaitOutcome::Succeeded) {
                wait.inputs = std::sync::Arc::new(json!({"s": 1}).as_object().unwrap().clone());
            }
            wait
        };
        record.waits = vec![
            branch(0, "tok-a", Some(WaitOutcome::Succeeded)),
            branch(1, "tok-b", Some(WaitOutcome::TimedOut)),
            branch(2, "tok-c", None),
        ];
        record.missed = vec![1];
        (trace, step_names, config)
    }

    #[test]
    fn a_retried_branch_shows_each_attempt_under_it() {
        let (mut trace, step_names, _) = group_trace();
        // The waiting branch: its first attempt failed, its second is due.
        let record = trace.record.as_mut().unwrap();
        record.waits[2].failed = vec![failed_attempt_one()];
        record.waits[2].status = WaitStatus::TaskDue { at: t(610) };
        let (w, k) = names();
        let report = build(&trace, vec![], &step_names, (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        let credit = &json["record"]["branches"][2];
        assert_eq!(
            (credit["attempt"].as_u64(), credit["failed_attempts"][0]["error"].as_str()),
            (Some(2), Some("ReviewerUnavailable"))
        );
        assert_eq!(json["record"]["failed_attempts"], Value::Null, "the record's own are a step's");
        let text = render(&report, t(60));
        assert!(text.contains("              attempt 1 failed ReviewerUnavailable (timed out) "), "{text}");
        assert!(text.contains("              attempt 2 due "), "{text}");
    }

    #[test]
    fn a_parallel_group_shows_each_branch_with_its_state_deadline_inputs_and_what_is_missed() {
        let (mut trace, step_names, config) = group_trace();
        let definition = baton_core::domain::asl::definition(&config.workflows[0]);
        let (w, k) = names();
        let report = build(&trace, vec![], &step_names, (&w, &k));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["record"]["step_name"], "checks", "a record at a group is at the group");
        let states: Vec<(&str, &str)> = json["record"]["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["name"].as_str().unwrap(), b["state"].as_str().unwrap()))
            .collect();
        assert_eq!(
            states,
            [("fraud-check", "succeeded"), ("address-check", "timed_out"), ("credit-check", "waiting")]
        );
        assert_eq!(json["record"]["missed"], json!(["address-check"]));
        assert!(!json.to_string().contains("tok-c"), "tokens are never shown");
        let text = render(&report, t(60));
        assert!(text.contains("  branches  fraud-check    succeeded inputs {\"s\":1}"), "{text}");
        assert!(text.contains("            credit-check   waiting   deadline"), "{text}");
        assert!(!text.contains("attempt"), "no attempt without retry: {text}");
        assert!(text.contains("  missed    address-check (optional; the workflow ends degraded)"), "{text}");
        // The graph draws the group as one state with its branches side by side.
        let graph = Graph::of(&definition);
        let group = graph.states.iter().find(|s| s.name == "checks").unwrap();
        assert_eq!((group.kind.as_str(), group.step, group.branches.len()), ("Parallel", Some(0), 3));
        assert_eq!(group.branches[2].start_at, "credit-check");
        // An optional branch whose success Step Functions reported is named apart.
        let record = trace.record.as_mut().unwrap();
        record.waits[1].status = WaitStatus::Ended { outcome: WaitOutcome::Succeeded };
        (record.missed, record.confirmed) = (vec![], vec![1]);
        let report = build(&trace, vec![], &step_names, (&w, &k));
        assert_eq!(serde_json::to_value(&report).unwrap()["record"]["confirmed"], json!(["address-check"]));
        let text = render(&report, t(60));
        assert!(
            text.contains("  confirmed address-check (optional; Step Functions reported its success)"),
            "{text}"
        );
    }
}
