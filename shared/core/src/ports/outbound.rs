//! Publishing operator tasks: a CloudEvent `baton.task.created` on the task queue of the task's
//! `queue`, its team's own.
//!
//! A team's worker (a ticketing system, or a person's tool) consumes its queue. The event id is the task id,
//! stable for (workflow, key, generation, step): baton publishes each task once, and should a
//! crash fall between the publish and the record of it, the redelivery carries the same id, so a
//! consumer that dedupes by id sees one task.

use async_trait::async_trait;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::domain::error::Classified;
use crate::ports::store::{Task, TaskKind};

/// The CloudEvents `type` of a published task.
pub const TASK_CREATED: &str = "baton.task.created";
/// The CloudEvents `type` of a published compensation task: undo a step that completed.
pub const COMPENSATION_REQUESTED: &str = "baton.compensation.requested";
/// The CloudEvents `type` of a reminder of a task still waiting: its `data.reminds` names the
/// task, `data.reminder` counts from 1.
pub const TASK_REMINDER: &str = "baton.task.reminder";
/// The CloudEvents `type` of a task given to an escalation level's queue while it still waits:
/// its `data.escalates` names the task, `data.level` counts from 1.
pub const TASK_ESCALATED: &str = "baton.task.escalated";

/// Where operator tasks go.
#[async_trait]
pub trait TaskPublisher: Send + Sync {
    async fn publish(&self, task: &Task) -> Result<(), PublishError>;
}

/// The task as a CloudEvent 1.0 (structured JSON).
pub fn task_event(task: &Task) -> Value {
    json!({
        "specversion": "1.0",
        "id": task.id,
        "source": "baton",
        "type": match task.kind {
            TaskKind::Step => TASK_CREATED,
            TaskKind::Compensation => COMPENSATION_REQUESTED,
            TaskKind::Reminder => TASK_REMINDER,
            TaskKind::Escalation => TASK_ESCALATED,
        },
        "subject": task.key.as_str(),
        "time": task.created_at.format(&Rfc3339).unwrap_or_default(),
        "datacontenttype": "application/json",
        "data": {
            "task_id": task.id,
            "workflow": task.workflow.as_str(),
            "key": task.key.as_str(),
            "generation": task.generation,
            "step": task.step_name,
            "title": task.title,
            "queue": task.queue,
            "attempt": task.attempt,
            "previous_error": task.previous_error,
            "compensation": task.kind == TaskKind::Compensation,
            // A reminder names the task it reminds of, and its count.
            "reminds": (task.kind == TaskKind::Reminder)
                .then(|| task.id.strip_suffix(&format!("/r{}", task.notice)).unwrap_or(&task.id)),
            "reminder": (task.kind == TaskKind::Reminder).then_some(task.notice),
            // An escalation names the task it gives on, and its level.
            "escalates": (task.kind == TaskKind::Escalation)
                .then(|| task.id.strip_suffix(&format!("/e{}", task.notice)).unwrap_or(&task.id)),
            "level": (task.kind == TaskKind::Escalation).then_some(task.notice),
        },
    })
}

/// The task's queue refused or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish the task to its queue")]
pub struct PublishError {
    retryable: bool,
    throttled: bool,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl PublishError {
    /// A failed publish, for another [`TaskPublisher`] than SQS (the simulation's).
    pub fn new(retryable: bool, source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        PublishError { retryable, throttled: false, source }
    }

    /// A failed publish the queue refused for rate or quota when `throttled` (never poison).
    pub fn throttled(
        retryable: bool,
        throttled: bool,
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> Self {
        PublishError { retryable, throttled, source }
    }
}

impl Classified for PublishError {
    fn error_type(&self) -> &'static str {
        match (self.throttled, self.retryable) {
            (true, _) => "outbound_throttled",
            (false, true) => "outbound_unavailable",
            (false, false) => "outbound_rejected",
        }
    }

    fn retryable(&self) -> bool {
        self.retryable
    }

    fn throttled(&self) -> bool {
        self.throttled
    }
}

impl PublishError {
    pub const ERROR_TYPES: &[&str] = &["outbound_throttled", "outbound_unavailable", "outbound_rejected"];
}
