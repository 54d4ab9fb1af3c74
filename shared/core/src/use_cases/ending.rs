//! Ending a record whose execution is gone (`baton end`, and the simulation's operator): how the
//! execution stands, the two inputs that strand the record (unless it is) and end it, and what
//! they would do, decided as the apply will decide them.
//!
//! The lifecycle rules are in `domain/lifecycle/stranded.rs`; this is the I/O around them: the
//! execution's status read from Step Functions, and the two conditional writes.

use crate::domain::config::Workflow;
use crate::domain::lifecycle::{self, Input, Kind, NOT_FOUND, Outcome, Record};
use crate::ports::orchestrator::OrchestratorError;
use crate::use_cases::engine::{Engine, EngineError};

/// How Step Functions says a record's execution stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionEnd {
    /// `RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED`, ... or [`NOT_FOUND`].
    pub status: String,
    /// The error it ended with, if it failed.
    pub error: Option<String>,
}

impl ExecutionEnd {
    /// The execution of `record`'s generation, as Step Functions describes it.
    pub async fn of(
        engine: &Engine,
        workflow: &Workflow,
        record: &Record,
    ) -> Result<ExecutionEnd, OrchestratorError> {
        let arn = engine.execution_arn(workflow, &record.key, record.generation);
        match engine.orchestrator.describe(&arn).await {
            Ok(info) => Ok(ExecutionEnd { status: info.status.as_str().to_owned(), error: info.error }),
            Err(OrchestratorError::ExecutionNotFound { .. }) => {
                Ok(ExecutionEnd { status: NOT_FOUND.to_owned(), error: None })
            }
            Err(e) => Err(e),
        }
    }

    /// The input that strands `record` for this end.
    pub fn gone(&self, record: &Record) -> Input {
        Input::ExecutionGone {
            generation: record.generation,
            status: self.status.clone(),
            error: self.error.clone(),
        }
    }

    /// The input that ends the stranded `record` for this end, for `reason`.
    pub fn end(&self, record: &Record, reason: &str) -> Input {
        Input::End {
            generation: record.generation,
            status: self.status.clone(),
            error: self.error.clone(),
            reason: reason.to_owned(),
        }
    }

    /// The record as the two writes would leave it, decided as the apply will decide them
    /// (`None`: the lifecycle refuses to strand or end it).
    pub fn ended(&self, workflow: &Workflow, record: &Record, reason: &str) -> Option<Record> {
        let plan = workflow.plan();
        let names = (&workflow.name, &record.key);
        let now = record.updated_at;
        let stranded = match record.state.kind() {
            Kind::Stranded => Some(record.clone()),
            _ => lifecycle::decide(&plan, names, Some(record), &self.gone(record), now).write.map(|w| w.to),
        }?;
        lifecycle::decide(&plan, names, Some(&stranded), &self.end(record, reason), now).write.map(|w| w.to)
    }
}

/// Why a record was not ended.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The lifecycle refused a write (the record changed, or its execution is not gone).
    #[error("the record was not {what} ({outcome:?}); plan again")]
    Refused { what: &'static str, outcome: Outcome },
}

/// Strands `record` (unless it is) and ends it as `execution` ended: two conditional writes.
pub async fn end(
    engine: &Engine,
    workflow: &Workflow,
    record: &Record,
    execution: &ExecutionEnd,
    reason: &str,
) -> Result<(), EndError> {
    let now = engine.now();
    if record.state.kind() != Kind::Stranded {
        let outcome = engine.submit(workflow, &record.key, &execution.gone(record), now).await?.outcome();
        if !matches!(outcome, Outcome::Applied | Outcome::Duplicate) {
            return Err(EndError::Refused { what: "stranded", outcome });
        }
    }
    match engine.submit(workflow, &record.key, &execution.end(record, reason), now).await?.outcome() {
        Outcome::Applied => Ok(()),
        outcome => Err(EndError::Refused { what: "ended", outcome }),
    }
}
