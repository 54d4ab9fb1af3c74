//! Safe replay: what re-delivering a dead-lettered message or a ledgered input would do, decided
//! from the current state before anything is done, and then done only where it is safe.
//!
//! Each message is planned by asking the lifecycle what it would decide now (the same pure
//! `decide` that handlers use), without writing:
//!
//! - `safe`: the decision applies (a write), buffers the input, or is a duplicate that still
//!   owes idempotent effects (a task, an inbox drain, a start, a resume): re-delivery makes
//!   progress, and is idempotent.
//! - `noop`: already applied with nothing left owed, the record is terminal, or nothing would
//!   change.
//! - `needs-human`: the input still cannot be parsed, its payload conflicts with an earlier
//!   receipt, it belongs to another generation, its step has passed, its record is missing, or
//!   it does not fit the state: a person has to decide.
//!
//! Applying is guarded by the record version seen at planning time: if the record moved since,
//! the line is skipped and reported, never applied on a state nobody looked at.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::domain::config::Workflow;
use crate::domain::error::BoxError;
use crate::domain::ids::{CorrelationKey, WorkflowName};
use crate::domain::lifecycle::{self, IgnoreReason, Input, Outcome, RejectReason};
use crate::ports::dead_letters::{DeadLetterReader, DlqMessage};
use crate::ports::store::{LEDGER_DETAIL_KEPT, LedgerEntry, StoreError, Summarized};
use crate::use_cases::batch::Verdict;
use crate::use_cases::engine::{Engine, EngineError};
use crate::use_cases::intake::plan_event;
use crate::use_cases::progress::parse_report;

/// How a replayed message is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Classification {
    #[serde(rename = "safe")]
    Safe,
    #[serde(rename = "noop")]
    Noop,
    #[serde(rename = "needs-human")]
    NeedsHuman,
}

impl fmt::Display for Classification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Classification::Safe => "safe",
            Classification::Noop => "noop",
            Classification::NeedsHuman => "needs-human",
        })
    }
}

/// Where a replayed message comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A domain event from the intake dead-letter queue.
    Intake,
    /// A Step Functions report from the progress dead-letter queue.
    Progress,
    /// An ignored input from a record's ledger.
    Ledger,
}

/// One input a replay line would deliver, with the record version it was planned against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub workflow: String,
    pub key: String,
    /// The record's state at planning time (`None`: no record).
    pub state: Option<String>,
    /// The record's version at planning time (`None`: no record). The guard.
    pub version: Option<u64>,
    /// The config version the input's step is read in: the record's own.
    pub config_version: String,
    pub input: Input,
    pub classification: Classification,
    /// What applying it would do, in words.
    pub effect: String,
}

/// One line of a replay plan: one message, and what it would do to each record it concerns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// The message's identity: the SQS message id, or the ledger entry's input id.
    pub id: String,
    pub origin: Origin,
    pub classification: Classification,
    /// Why, in words, when there is no target to explain it (unparseable, not eligible).
    pub note: Option<String>,
    pub targets: Vec<Target>,
}

impl Line {
    fn alone(id: &str, origin: Origin, classification: Classification, note: impl Into<String>) -> Line {
        Line { id: id.to_owned(), origin, classification, note: Some(note.into()), targets: Vec::new() }
    }
}

/// Plans a dead-lettered message body.
pub async fn plan_message(
    engine: &Engine,
    origin: Origin,
    id: &str,
    body: &str,
    now: OffsetDateTime,
) -> Result<Line, StoreError> {
    // A report is read in the config version it names (its execution runs that version).
    let config = match origin {
        Origin::Progress => crate::use_cases::progress::report_config(engine, body).await?,
        _ => engine.config.clone(),
    };
    // An event's step inputs as the other config versions read it, for records on them.
    let others = match origin {
        Origin::Intake => crate::use_cases::intake::other_step_inputs(&engine.config_versions().await?, body),
        _ => Vec::new(),
    };
    let inputs: Vec<(&Workflow, CorrelationKey, Input)> = match origin {
        Origin::Intake => match plan_event(&config, body) {
            Ok(plan) if plan.inputs.is_empty() && others.is_empty() => {
                return Ok(Line::alone(
                    id,
                    origin,
                    Classification::Noop,
                    "the event starts no workflow and supplies no step",
                ));
            }
            Ok(plan) => plan.inputs,
            Err(Verdict::Poison { reason, detail }) => {
                return Ok(Line::alone(
                    id,
                    origin,
                    Classification::NeedsHuman,
                    format!("still poison ({reason}): {detail}"),
                ));
            }
            Err(other) => {
                return Ok(Line::alone(id, origin, Classification::NeedsHuman, format!("{other:?}")));
            }
        },
        Origin::Progress => match parse_report(&config, body) {
            Ok(one) => vec![one],
            Err(e) => {
                return Ok(Line::alone(
                    id,
                    origin,
                    Classification::NeedsHuman,
                    format!("still poison ({}): {e}", e.reason()),
                ));
            }
        },
        Origin::Ledger => {
            return Ok(Line::alone(
                id,
                origin,
                Classification::NeedsHuman,
                "ledger entries are planned with plan_ledger",
            ));
        }
    };
    // A domain event's step input holds only for records on the version that read it so.
    let mut targets = Vec::new();
    for (workflow, key, input) in inputs {
        let exact = origin == Origin::Intake && matches!(input, Input::StepInput { .. });
        targets.extend(plan_target(engine, workflow, &key, &input, now, exact).await?);
    }
    for (definition, key, input) in &others {
        targets.extend(plan_target(engine, definition, key, input, now, true).await?);
    }
    if targets.is_empty() {
        let note = "the event supplies nothing to the records, as their config versions read it";
        return Ok(Line::alone(id, origin, Classification::Noop, note));
    }
    Ok(combine(id, origin, targets))
}

/// Plans re-delivering a ledgered input.
pub async fn plan_ledger(
    engine: &Engine,
    entry: &LedgerEntry,
    now: OffsetDateTime,
) -> Result<Line, StoreError> {
    // An input larger than the ledger keeps whole was kept as its size and hash: there is
    // nothing to re-deliver.
    if let Some(summary) = Summarized::of(entry) {
        return Ok(Line::alone(
            &entry.input_id,
            Origin::Ledger,
            Classification::NeedsHuman,
            not_kept(&summary),
        ));
    }
    // The entry's step is an index in the config version it was ledgered under; planning finds
    // it again by name in the record's own. An entry without one (a callback refused as a reuse
    // of its id) keeps the body as sent, which is no input: it is read in this engine's version
    // and planned needs-human below.
    let Some(workflow) = engine.definition(entry.workflow.as_str(), entry.config_version.as_deref()).await?
    else {
        return Ok(Line::alone(
            &entry.input_id,
            Origin::Ledger,
            Classification::NeedsHuman,
            "the workflow is no longer in the config",
        ));
    };
    let input = match serde_json::from_value::<Input>(entry.detail.clone()) {
        Ok(input @ (Input::Start { .. } | Input::StepInput { .. })) => input,
        _ => {
            return Ok(Line::alone(
                &entry.input_id,
                Origin::Ledger,
                Classification::NeedsHuman,
                "only events and callbacks can be replayed; reports come from Step Functions",
            ));
        }
    };
    let targets = plan_target(engine, &workflow, &entry.key, &input, now, false).await?;
    Ok(combine(&entry.input_id, Origin::Ledger, targets.into_iter().collect()))
}

/// Why a ledgered input kept as its size and hash cannot be replayed, and what to do instead.
fn not_kept(summary: &Summarized) -> String {
    format!(
        "cannot be re-delivered: the ledger kept only its size ({} bytes, over the {LEDGER_DETAIL_KEPT} it \
         keeps whole) and its payload hash ({}); ask its sender to send it again",
        summary.bytes,
        summary.hash.as_deref().unwrap_or("none")
    )
}

/// What the lifecycle would decide now for one input, written nowhere; `None` for an input that
/// holds only under `workflow`'s version (`exact`) when the record is on another.
async fn plan_target(
    engine: &Engine,
    workflow: &Workflow,
    key: &CorrelationKey,
    input: &Input,
    now: OffsetDateTime,
    exact: bool,
) -> Result<Option<Target>, StoreError> {
    let store = &*engine.store;
    let record = store.load(&workflow.name, key).await?;
    // Decided as the engine would: in the record's own config version.
    let (governing, input) = engine.pinned(workflow, record.as_deref(), input).await?;
    if exact && governing.config_version != workflow.config_version {
        return Ok(None);
    }
    let input = input.into_owned();
    let decision = crate::use_cases::engine::decide(
        store,
        &governing.plan(),
        (&workflow.name, key),
        record.as_deref(),
        &input,
        now,
    )
    .await?;
    let (classification, effect) = classify(record.as_deref(), &input, &decision);
    Ok(Some(Target {
        workflow: workflow.name.to_string(),
        key: key.to_string(),
        state: record.as_ref().map(|r| r.state.to_string()),
        version: record.as_ref().map(|r| r.version),
        config_version: governing.config_version.clone(),
        input,
        classification,
        effect,
    }))
}

/// The classification of one decision, and its effect in words.
pub fn classify(
    record: Option<&lifecycle::Record>,
    input: &Input,
    decision: &lifecycle::Decision,
) -> (Classification, String) {
    use Classification::*;
    let record_missing = record.is_none() && !matches!(input, Input::Start { .. } | Input::StepInput { .. });
    if record_missing {
        return (NeedsHuman, "the record is missing".into());
    }
    match decision.outcome {
        Outcome::Applied => match &decision.write {
            Some(w) => (
                Safe,
                format!(
                    "{} -> {} ({}){}",
                    w.from.map_or("absent".to_owned(), |s| s.to_string()),
                    w.to.state,
                    w.cause.as_str(),
                    effects_in_words(decision)
                ),
            ),
            None => (Safe, format!("no state change{}", effects_in_words(decision))),
        },
        Outcome::Buffered => (Safe, "buffered until its step waits".into()),
        // A duplicate may still owe idempotent effects: a step_ready whose first delivery died
        // after its write owes the task and the inbox drain (found by the simulation, seed
        // 84493). Removing it as noop would strand them; delivering it again re-runs them.
        Outcome::Duplicate if decision.effects.is_empty() => (Noop, "already applied".into()),
        Outcome::Duplicate => (Safe, format!("already applied{}", effects_in_words(decision))),
        Outcome::Ignored(IgnoreReason::Terminal) => {
            (Noop, format!("the record is terminal ({})", state_of(record)))
        }
        Outcome::Ignored(
            reason @ (IgnoreReason::AlreadyRunning
            | IgnoreReason::RestartNotAllowed
            | IgnoreReason::RefusedWhileRunning
            | IgnoreReason::NothingOwed),
        ) => (Noop, format!("would be ignored: {}", reason.as_str())),
        // That attempt failed: only the running one can complete the step.
        Outcome::Ignored(IgnoreReason::EarlierAttempt) => (
            Noop,
            format!("its attempt failed before; the step runs a later one (record {})", state_of(record)),
        ),
        // The branch was closed when its group failed: nothing can ever apply it.
        Outcome::Ignored(IgnoreReason::GroupFailed) => {
            (Noop, format!("its branch was closed when its group failed (record {})", state_of(record)))
        }
        Outcome::Ignored(IgnoreReason::StepAlreadyPassed | IgnoreReason::StepAlreadyAdvanced) => {
            (NeedsHuman, format!("the step has already passed (record {})", state_of(record)))
        }
        Outcome::Ignored(IgnoreReason::StaleGeneration) => (
            NeedsHuman,
            format!("another generation (record is generation {})", record.map_or(0, |r| r.generation)),
        ),
        Outcome::Ignored(reason) => {
            (NeedsHuman, format!("does not fit the record's state: {}", reason.as_str()))
        }
        Outcome::Rejected(RejectReason::IdempotencyKeyReused) => {
            (NeedsHuman, "its payload conflicts with an earlier input with the same id".into())
        }
        Outcome::Rejected(reason) => (NeedsHuman, format!("rejected: {}", reason.as_str())),
    }
}

fn state_of(record: Option<&lifecycle::Record>) -> String {
    record.map_or("absent".into(), |r| r.state.to_string())
}

fn effects_in_words(decision: &lifecycle::Decision) -> String {
    let words: Vec<&str> = decision
        .effects
        .iter()
        .filter_map(|e| match e {
            lifecycle::Effect::StartExecution { .. } => Some("start the execution"),
            lifecycle::Effect::CreateTask { .. } => Some("create the task"),
            lifecycle::Effect::OpenAttempt { wait, .. } if wait.compensation => {
                Some("create the compensation task")
            }
            lifecycle::Effect::OpenAttempt { .. } => Some("create the next attempt's task"),
            lifecycle::Effect::Resume { resume: lifecycle::Resume::Success { .. }, .. } => {
                Some("resume the step")
            }
            lifecycle::Effect::Resume { .. } => Some("fail the step"),
            lifecycle::Effect::SendTaskHeartbeat { .. } => Some("heartbeat"),
            lifecycle::Effect::StopExecution { .. } => Some("stop the execution"),
            lifecycle::Effect::DrainInbox { .. } => Some("drain the inbox"),
            _ => None,
        })
        .collect();
    if words.is_empty() { String::new() } else { format!(", then {}", words.join(", ")) }
}

/// A message's classification is its worst target's: one needs-human target makes the whole
/// message need a person; otherwise any safe target makes it safe.
fn combine(id: &str, origin: Origin, targets: Vec<Target>) -> Line {
    let classification = if targets.iter().any(|t| t.classification == Classification::NeedsHuman) {
        Classification::NeedsHuman
    } else if targets.iter().any(|t| t.classification == Classification::Safe) {
        Classification::Safe
    } else {
        Classification::Noop
    };
    Line { id: id.to_owned(), origin, classification, note: None, targets }
}

/// What applying a line did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Applied {
    /// Delivered; each target's outcome.
    Applied { outcomes: Vec<String> },
    /// Not delivered: the record moved since planning.
    Skipped { reason: String },
    /// Not delivered: not classified safe.
    NotSafe,
}

/// Applies a `safe` line, each target guarded by the version seen at planning time.
pub async fn apply_line(engine: &Engine, line: &Line, now: OffsetDateTime) -> Result<Applied, EngineError> {
    if line.classification != Classification::Safe {
        return Ok(Applied::NotSafe);
    }
    deliver(engine, line, now).await
}

/// Removes a `noop` dead letter's input the way a delivery would have ended it: delivered,
/// guarded, it changes nothing but leaves its ledger entry (an ignored start, a late input),
/// so the input keeps a trace an operator can find once it leaves the DLQ (found by the
/// simulation, seed 31565). A duplicate writes nothing: its first delivery is its trace.
pub async fn settle_noop(engine: &Engine, line: &Line, now: OffsetDateTime) -> Result<Applied, EngineError> {
    if line.classification != Classification::Noop {
        return Ok(Applied::NotSafe);
    }
    deliver(engine, line, now).await
}

/// Delivers every target of a line, each guarded by the version seen at planning time.
async fn deliver(engine: &Engine, line: &Line, now: OffsetDateTime) -> Result<Applied, EngineError> {
    // Check every guard before delivering anything: a message is applied whole or not at all.
    for t in &line.targets {
        let (w, k) = names(t)?;
        let current = engine.store.load(&w, &k).await?.map(|r| r.version);
        if current != t.version {
            return Ok(Applied::Skipped {
                reason: format!(
                    "{}/{} moved since planning: version {} then, {} now",
                    t.workflow,
                    t.key,
                    t.version.map_or("none".into(), |v| v.to_string()),
                    current.map_or("none".into(), |v| v.to_string())
                ),
            });
        }
    }
    let mut outcomes = Vec::new();
    for t in &line.targets {
        let (_, k) = names(t)?;
        let Some(workflow) = engine.definition(&t.workflow, Some(&t.config_version)).await? else {
            continue;
        };
        let submitted = engine.submit(&workflow, &k, &t.input, now).await?;
        outcomes.push(format!("{}/{}: {:?}", t.workflow, t.key, submitted.outcome()));
    }
    Ok(Applied::Applied { outcomes })
}

fn names(t: &Target) -> Result<(WorkflowName, CorrelationKey), EngineError> {
    let corrupt = |e: crate::domain::ids::IdError| {
        EngineError::Store(StoreError::Corrupt {
            pk: t.workflow.clone(),
            sk: t.key.clone(),
            problem: e.to_string(),
        })
    };
    Ok((
        WorkflowName::parse(t.workflow.as_str()).map_err(corrupt)?,
        CorrelationKey::parse(t.key.as_str()).map_err(corrupt)?,
    ))
}

/// Plans every message currently in a DLQ, and releases them again.
pub async fn plan_dlq(
    engine: &Engine,
    dlq: &dyn DeadLetterReader,
    origin: Origin,
    now: OffsetDateTime,
) -> Result<Vec<Line>, ReplayError> {
    let messages = dlq.read(1000, 60).await.map_err(ReplayError::Queue)?;
    let mut lines = Vec::new();
    for m in &messages {
        let mut line = plan_message(engine, origin, &m.id, &m.body, now).await?;
        if line.note.is_none() && line.classification == Classification::NeedsHuman {
            line.note = m.reason.as_ref().map(|r| format!("dead-lettered as {r}"));
        }
        lines.push(line);
    }
    dlq.release(&messages.iter().collect::<Vec<_>>()).await.map_err(ReplayError::Queue)?;
    Ok(lines)
}

/// What an apply run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub applied: usize,
    pub noop_removed: usize,
    pub skipped: usize,
    pub needs_human: usize,
}

impl Summary {
    /// Counts one line's result: applied (a safe line delivered), noop removed (a noop message
    /// dropped from its DLQ), skipped (the record moved, or the message is gone), or left for a
    /// person.
    fn count(&mut self, result: &Applied, classification: Classification) {
        match (result, classification) {
            (Applied::Applied { .. }, Classification::Safe) => self.applied += 1,
            (Applied::Applied { .. }, _) => self.noop_removed += 1,
            (Applied::Skipped { .. }, _) => self.skipped += 1,
            (Applied::NotSafe, Classification::NeedsHuman) => self.needs_human += 1,
            (Applied::NotSafe, _) => {}
        }
    }
}

/// One line's result in an apply run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Done {
    pub id: String,
    pub classification: Classification,
    pub result: Applied,
    /// Whether the message was removed from the DLQ.
    pub removed: bool,
}

/// Applies a plan to a DLQ: `safe` lines are delivered (guarded) and removed once applied;
/// `noop` lines are removed once their ledger trace is written (guarded the same way);
/// `needs-human` and skipped lines stay, visible again.
pub async fn apply_dlq(
    engine: &Engine,
    dlq: &dyn DeadLetterReader,
    plan: &[Line],
    now: OffsetDateTime,
    mut progress: impl FnMut(&Done),
) -> Result<(Vec<Done>, Summary), ReplayError> {
    let messages = dlq.read(1000, 300).await.map_err(ReplayError::Queue)?;
    let mut untouched: Vec<&DlqMessage> = messages.iter().collect();
    let mut done = Vec::new();
    let mut summary = Summary::default();
    for line in plan {
        let Some(pos) = untouched.iter().position(|m| m.id == line.id) else {
            let d = Done {
                id: line.id.clone(),
                classification: line.classification,
                result: Applied::Skipped { reason: "no longer in the dead-letter queue".into() },
                removed: false,
            };
            summary.count(&d.result, d.classification);
            progress(&d);
            done.push(d);
            continue;
        };
        let result = match line.classification {
            Classification::Safe => apply_line(engine, line, now).await?,
            Classification::Noop => settle_noop(engine, line, now).await?,
            Classification::NeedsHuman => Applied::NotSafe,
        };
        let remove = matches!(result, Applied::Applied { .. });
        summary.count(&result, line.classification);
        if remove {
            let m = untouched.remove(pos);
            dlq.delete(m).await.map_err(ReplayError::Queue)?;
        }
        let d = Done { id: line.id.clone(), classification: line.classification, result, removed: remove };
        progress(&d);
        done.push(d);
    }
    dlq.release(&untouched).await.map_err(ReplayError::Queue)?;
    Ok((done, summary))
}

/// Applies planned ledger lines: each `safe` one is re-delivered (guarded); the ledger entries
/// stay as history.
pub async fn apply_ledger(
    engine: &Engine,
    plan: &[Line],
    now: OffsetDateTime,
    mut progress: impl FnMut(&Done),
) -> Result<(Vec<Done>, Summary), ReplayError> {
    let mut done = Vec::new();
    let mut summary = Summary::default();
    for line in plan {
        let result = apply_line(engine, line, now).await?;
        summary.count(&result, line.classification);
        let d = Done { id: line.id.clone(), classification: line.classification, result, removed: false };
        progress(&d);
        done.push(d);
    }
    Ok((done, summary))
}

/// Why a replay run stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the dead-letter queue could not be read or changed")]
    Queue(#[source] BoxError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}
