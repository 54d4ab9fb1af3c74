//! The progress use case: what Step Functions reports through the progress queue.
//!
//! Three kinds of message, all sent by the generated state machines (`asl.rs`):
//! - `step_ready`: a step parked on a task token. The record moves to `waiting{step}` with the
//!   token and the deadline; the operator task is created and published once; buffered inputs
//!   for the step are drained. A record that is already terminal gets the token failed, so the
//!   execution ends rather than waiting out its deadline.
//! - `finished`: the execution reached its end (succeeded) or a Catch (failed, timed out). The
//!   record makes its terminal transition.
//! - `undo_ready`: a compensation's wait parked on a task token, with the error that ended the
//!   run. The first one moves the record into compensation; the compensation's task is created
//!   and published once (or, for a step in the plan as skipped, its wait is resumed at once).
//! - `finished` with `compensation_ended`: Step Functions passed the last compensation, and the
//!   record ends `compensated`, `compensation_failed`, or (nothing undone) as the run ended.
//! - `branch_ended`: an optional parallel branch reports how it ended, on its way out of the
//!   group: it succeeded (no `error`), or its own Catch caught a timeout or its task's failure
//!   (`error`; the branch is recorded as not succeeded, and its group goes on without it). The
//!   execution's success is decided once every optional branch has reported.
//!
//! Duplicates and late reports are classified by the lifecycle (duplicate, or ignored with a
//! ledger entry), never dropped silently. A message that names an unknown workflow or step, or
//! is not a report at all, goes to the dead-letter queue with its reason.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};
use tracing::instrument;

use crate::domain::config::Workflow;
use crate::domain::ids::{CorrelationKey, TaskToken};
use crate::domain::lifecycle::{Finish, Input};
use crate::ports::dead_letters::DeadLetters;
use crate::ports::metrics::Metric;
use crate::use_cases::batch::{Deadline, SqsHandler, Verdict, process_batch};
use crate::use_cases::engine::Engine;

/// A report from a state machine, as the generated ASL writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Report {
    StepReady {
        workflow: String,
        key: String,
        generation: u32,
        step: u32,
        step_name: String,
        /// The config version the state machine was generated from.
        config_version: String,
        token: String,
        /// When the Task state was entered (`$$.State.EnteredTime`).
        entered_at: String,
        timeout_seconds: i64,
    },
    Finished {
        workflow: String,
        key: String,
        generation: u32,
        outcome: FinishedOutcome,
        config_version: String,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        cause: Option<String>,
        /// The error that ended the run, as its Catch caught it (`compensation_ended`).
        #[serde(default)]
        failure: Option<Failure>,
    },
    /// A compensation's wait parked on a token: as `step_ready`, with the error that ended the
    /// run.
    UndoReady {
        workflow: String,
        key: String,
        generation: u32,
        step: u32,
        step_name: String,
        config_version: String,
        token: String,
        entered_at: String,
        timeout_seconds: i64,
        failure: Failure,
    },
    BranchEnded {
        workflow: String,
        key: String,
        generation: u32,
        step: u32,
        step_name: String,
        config_version: String,
        /// The error the branch's Catch caught (`States.Timeout` when it missed its deadline);
        /// absent when the branch succeeded (Step Functions took baton's success).
        #[serde(default)]
        error: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishedOutcome {
    Succeeded,
    Failed,
    TimedOut,
    /// Step Functions passed the last compensation.
    CompensationEnded,
}

/// An error as a Catch keeps it (`ResultPath: $.error`): the emulator drops `Cause` to null, and
/// a timeout may have none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Failure {
    #[serde(rename = "Error", default)]
    pub error: Option<String>,
    #[serde(rename = "Cause", default)]
    pub cause: Option<String>,
}

/// Why a progress message cannot be used. Every case is permanent.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("not a progress report: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("unknown workflow {0:?}: the config version the report is read in does not define it")]
    UnknownWorkflow(String),
    #[error(
        "workflow {workflow} has no step {step} named {name:?} in the config version the report is read in"
    )]
    UnknownStep { workflow: String, step: u32, name: String },
    #[error("invalid field {field}: {problem}")]
    Invalid { field: &'static str, problem: String },
}

impl ReportError {
    /// Every code [`ReportError::reason`] can return.
    pub const REASON_CODES: &[&str] =
        &["malformed_report", "unknown_workflow", "unknown_step", "invalid_field"];

    /// The dead-letter reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            ReportError::Malformed(_) => "malformed_report",
            ReportError::UnknownWorkflow(_) => "unknown_workflow",
            ReportError::UnknownStep { .. } => "unknown_step",
            ReportError::Invalid { .. } => "invalid_field",
        }
    }
}

/// The config version a report names: its execution runs that version's definition, so its
/// step is read in that version (the engine finds it again in the record's). Every report the
/// generated definitions send names one; a body without one is read in this engine's version,
/// where [`parse_report`] refuses it as malformed.
pub async fn report_config(
    engine: &Engine,
    body: &str,
) -> Result<Arc<crate::domain::config::Config>, crate::ports::store::StoreError> {
    let doc = serde_json::from_str::<serde_json::Value>(body).unwrap_or_default();
    engine.config_of(doc.get("config_version").and_then(|v| v.as_str())).await
}

/// Turns a report into the workflow it concerns, the key, and the lifecycle input.
pub fn parse_report<'c>(
    config: &'c crate::domain::config::Config,
    body: &str,
) -> Result<(&'c Workflow, CorrelationKey, Input), ReportError> {
    let report: Report = serde_json::from_str(body).map_err(ReportError::Malformed)?;
    let (workflow, key) = match &report {
        Report::StepReady { workflow, key, .. }
        | Report::Finished { workflow, key, .. }
        | Report::UndoReady { workflow, key, .. }
        | Report::BranchEnded { workflow, key, .. } => (workflow, key),
    };
    let wf = config.workflow(workflow).ok_or_else(|| ReportError::UnknownWorkflow(workflow.clone()))?;
    let key = CorrelationKey::parse(key.as_str())
        .map_err(|e| ReportError::Invalid { field: "key", problem: e.to_string() })?;
    let known_step = |step: u32, name: &str| match wf.steps.get(step as usize) {
        Some(s) if s.name.as_str() == name => Ok(()),
        _ => Err(ReportError::UnknownStep { workflow: wf.name.to_string(), step, name: name.to_owned() }),
    };
    let input = match report {
        Report::StepReady { generation, step, step_name, token, entered_at, timeout_seconds, .. } => {
            known_step(step, &step_name)?;
            let (token, deadline) = parked(token, &entered_at, timeout_seconds)?;
            Input::StepReady { generation, step, token, deadline }
        }
        Report::UndoReady {
            generation,
            step,
            step_name,
            token,
            entered_at,
            timeout_seconds,
            failure,
            ..
        } => {
            known_step(step, &step_name)?;
            if wf.steps[step as usize].compensate.is_none() {
                return Err(ReportError::Invalid {
                    field: "step",
                    problem: format!("{step_name} declares no compensate"),
                });
            }
            let (token, deadline) = parked(token, &entered_at, timeout_seconds)?;
            let (error, cause) = (failure.error.unwrap_or_default(), failure.cause.unwrap_or_default());
            Input::UndoReady { generation, step, token, deadline, error, cause }
        }
        Report::Finished { generation, outcome, error, cause, failure, .. } => {
            Input::Finished { generation, finish: finish_of(outcome, (error, cause), failure) }
        }
        Report::BranchEnded { generation, step, step_name, error, .. } => {
            known_step(step, &step_name)?;
            if !wf.steps[step as usize].optional {
                return Err(ReportError::Invalid {
                    field: "step",
                    problem: format!(
                        "{step_name} is not an optional branch; only those report their own end"
                    ),
                });
            }
            Input::BranchEnded { generation, step, error }
        }
    };
    Ok((wf, key, input))
}

/// How a `finished` report says the execution ended.
fn finish_of(
    outcome: FinishedOutcome,
    (error, cause): (Option<String>, Option<String>),
    failure: Option<Failure>,
) -> Finish {
    match outcome {
        FinishedOutcome::Succeeded => Finish::Succeeded,
        FinishedOutcome::TimedOut => Finish::TimedOut,
        FinishedOutcome::Failed => {
            Finish::Failed { error: error.unwrap_or_default(), cause: cause.unwrap_or_default() }
        }
        FinishedOutcome::CompensationEnded => {
            let failure = failure.unwrap_or_default();
            Finish::CompensationEnded {
                error: failure.error.unwrap_or_default(),
                cause: failure.cause.unwrap_or_default(),
            }
        }
    }
}

/// A parked wait's token and deadline, from its report.
fn parked(
    token: String,
    entered_at: &str,
    timeout_seconds: i64,
) -> Result<(TaskToken, OffsetDateTime), ReportError> {
    let token = TaskToken::parse(token)
        .map_err(|e| ReportError::Invalid { field: "token", problem: e.to_string() })?;
    let entered = OffsetDateTime::parse(entered_at, &Rfc3339)
        .map_err(|e| ReportError::Invalid { field: "entered_at", problem: e.to_string() })?;
    Ok((token, entered + Duration::seconds(timeout_seconds)))
}

#[async_trait::async_trait]
impl SqsHandler for Progress {
    /// Handles one SQS batch; the response lists only the messages to redeliver.
    async fn handle_within(&self, event: SqsEvent, deadline: &dyn Deadline) -> SqsBatchResponse {
        process_batch(event, &*self.dead_letters, deadline, |m| self.message(m)).await
    }
}

/// The progress handler, as Lambda calls it.
pub struct Progress {
    engine: Arc<Engine>,
    dead_letters: DeadLetters,
}

impl Progress {
    pub fn new(engine: Arc<Engine>, dead_letters: DeadLetters) -> Self {
        Progress { engine, dead_letters }
    }

    #[instrument(skip_all, fields(message_id = message.message_id.as_deref().unwrap_or("")))]
    async fn message(&self, message: SqsMessage) -> Verdict {
        let now = self.engine.now();
        let body = message.body.as_deref().unwrap_or_default();
        let config = match report_config(&self.engine, body).await {
            Ok(config) => config,
            Err(e) => return Verdict::from_error(&e),
        };
        let (workflow, key, input) = match parse_report(&config, body) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.engine.metrics.count(Metric::PoisonMessages, None, now);
                return Verdict::Poison { reason: e.reason(), detail: e.to_string() };
            }
        };
        match self.engine.submit(workflow, &key, &input, now).await {
            Ok(_) => Verdict::Done,
            Err(e) => Verdict::from_error(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::config::Config;

    fn config() -> Config {
        Config::parse(include_str!("../../../../infra/workflows.yaml")).unwrap()
    }

    #[test]
    fn a_step_ready_report_becomes_a_step_ready_input_with_its_deadline() {
        let body = r#"{"kind":"step_ready","workflow":"order-review","key":"order-1","generation":1,"step":0,
            "step_name":"manual-review","config_version":"v1","token":"AAAA","entered_at":"2026-11-29T10:00:00.123+00:00","timeout_seconds":60}"#;
        let config = config();
        let (wf, key, input) = parse_report(&config, body).unwrap();
        assert_eq!((wf.name.as_str(), key.as_str()), ("order-review", "order-1"));
        let Input::StepReady { deadline, step, generation, .. } = input else { panic!("{input:?}") };
        assert_eq!((step, generation), (0, 1));
        assert_eq!(deadline, time::macros::datetime!(2026-11-29 10:01:00.123 UTC));
    }

    #[test]
    fn a_failed_report_keeps_error_and_cause_and_tolerates_null_cause() {
        let body = r#"{"kind":"finished","workflow":"order-review","key":"order-1","generation":2,
            "config_version":"v1","outcome":"failed","error":"Rejected","cause":null}"#;
        let config = config();
        let (_, _, input) = parse_report(&config, body).unwrap();
        assert_eq!(
            input,
            Input::Finished {
                generation: 2,
                finish: Finish::Failed { error: "Rejected".into(), cause: String::new() }
            }
        );
    }

    #[test]
    fn reports_that_cannot_be_used_name_their_problem() {
        let config = config();
        let cases = [
            ("not json", "malformed_report"),
            // Every report the generated definitions send names its config version.
            (
                r#"{"kind":"step_ready","workflow":"order-review","key":"k","generation":1,"step":0,"step_name":"manual-review","token":"t","entered_at":"2026-11-29T10:00:00Z","timeout_seconds":1}"#,
                "malformed_report",
            ),
            (
                r#"{"kind":"finished","workflow":"order-review","key":"k","generation":1,"outcome":"succeeded"}"#,
                "malformed_report",
            ),
            (
                r#"{"kind":"finished","workflow":"nope","key":"k","generation":1,"config_version":"v1","outcome":"succeeded"}"#,
                "unknown_workflow",
            ),
            (
                r#"{"kind":"step_ready","workflow":"order-review","key":"k","generation":1,"step":0,"step_name":"renamed","config_version":"v1","token":"t","entered_at":"2026-11-29T10:00:00Z","timeout_seconds":1}"#,
                "unknown_step",
            ),
            (
                r#"{"kind":"step_ready","workflow":"order-review","key":"k","generation":1,"step":0,"step_name":"manual-review","config_version":"v1","token":"t","entered_at":"yesterday","timeout_seconds":1}"#,
                "invalid_field",
            ),
            (
                r#"{"kind":"finished","workflow":"order-review","key":"bad key","generation":1,"config_version":"v1","outcome":"succeeded"}"#,
                "invalid_field",
            ),
        ];
        for (body, reason) in cases {
            let err = parse_report(&config, body).unwrap_err();
            assert_eq!(err.reason(), reason, "{body}: {err}");
        }
    }
}
