//! Where a queue's poison messages go: the dead-letter port every SQS-driven handler sends its
//! poison messages to, with the attributes that say why. The SQS adapter is
//! `baton_aws::sqs::SqsDeadLetters`; the simulation has its own.

use aws_lambda_events::event::sqs::SqsMessage;

use crate::domain::error::BoxError;

/// Message attribute names on dead-lettered messages (RUNBOOK.md explains each).
pub const REASON_ATTRIBUTE: &str = "baton_reason";
pub const DETAIL_ATTRIBUTE: &str = "baton_detail";
pub const SOURCE_ATTRIBUTE: &str = "baton_source_message_id";
/// Where a queue's poison messages go: a port, so that the simulation can stand in for SQS.
#[async_trait::async_trait]
pub trait DeadLetterQueue: Send + Sync {
    /// Sends the message's original body with `reason` (a stable code) and `detail` attached.
    async fn send(&self, message: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError>;

    /// Sends the message's original body back to its source queue, visible after a delay: for a
    /// message throttled on every receive, which SQS's redrive policy would otherwise move to
    /// the dead-letter queue. The copy starts its receive count again.
    async fn requeue(&self, message: &SqsMessage) -> Result<(), DeadLetterError>;

    /// The source queue's `maxReceiveCount`: after that many receives SQS's redrive policy would
    /// move a failing message here itself, without a reason.
    fn max_receive_count(&self) -> u32;
}

/// How long a throttled message waits before its requeued copy is received, by default
/// (`BATON_REQUEUE_DELAY_SECONDS`; SQS allows up to 900).
pub const REQUEUE_DELAY_SECONDS: i32 = 60;

/// How the detail of a throttled message dead-lettered because its requeue failed says so.
pub const REQUEUE_FAILED: &str = "it could not be sent back to its queue";

/// The message attribute counting how often a message was requeued after throttling.
pub const REQUEUES_ATTRIBUTE: &str = "baton_requeues";

/// The dead-letter reason of a message that kept failing for a reason that can pass, on its last
/// receive before the redrive policy would take it (RUNBOOK.md).
pub const RETRIES_EXHAUSTED: &str = "retries_exhausted";

/// The `maxReceiveCount` template.yaml gives the work queues, when nothing else says.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 5;

/// The dead-letter queue a handler sends its poison messages to.
pub type DeadLetters = std::sync::Arc<dyn DeadLetterQueue>;

/// How often `message` was requeued after throttling before this receive.
pub fn requeues(message: &SqsMessage) -> u32 {
    message
        .message_attributes
        .get(REQUEUES_ATTRIBUTE)
        .and_then(|a| a.string_value.as_deref())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A dead-letter send that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot send to the dead-letter queue")]
pub struct DeadLetterError {
    pub retryable: bool,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// A message read from a dead-letter queue.
#[derive(Debug, Clone)]
pub struct DlqMessage {
    pub id: String,
    pub receipt_handle: String,
    pub body: String,
    /// `baton_reason`, when baton dead-lettered it itself.
    pub reason: Option<String>,
}

/// A dead-letter queue as a replay reads it: a port, so that planning and applying a replay
/// (`use_cases::replay`) do not depend on SQS. The SQS adapter is `baton_aws::sqs::SqsDeadLetterReader`.
#[async_trait::async_trait]
pub trait DeadLetterReader: Send + Sync {
    /// Every message (up to `max`), each kept invisible for `hold_seconds`, so that a plan sees
    /// each once. [`DeadLetterReader::release`] makes the ones not acted on visible again.
    async fn read(&self, max: usize, hold_seconds: i32) -> Result<Vec<DlqMessage>, BoxError>;
    /// Makes messages visible again at once (the ones a plan looked at but did not act on).
    async fn release(&self, messages: &[&DlqMessage]) -> Result<(), BoxError>;
    /// Removes a message that was applied.
    async fn delete(&self, message: &DlqMessage) -> Result<(), BoxError>;
}
