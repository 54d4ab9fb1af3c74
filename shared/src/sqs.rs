//! SQS batches the way Lambda hands them over: per-message verdicts, partial batch failures, and
//! dead-lettering of messages that can never succeed.
//!
//! The rule (STYLE.md §6): a message that fails for a reason that can pass (a throttle, an
//! outage) is reported in `batchItemFailures`, so SQS redelivers it after the visibility
//! timeout and, after `maxReceiveCount`, the redrive policy moves it to the dead-letter queue.
//! A message that can never succeed (unparseable, invalid) is sent to the dead-letter queue
//! straight away, with its reason in message attributes, and then acknowledged, so it does not
//! loop through retries first. If the dead-letter send itself fails, the message is reported as
//! failed: nothing is lost.

use std::future::Future;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::MessageAttributeValue;
use tracing::{error, info, warn};

use crate::error::{Classified, sdk_retryable};

/// Message attribute names on dead-lettered messages (RUNBOOK.md explains each).
pub const REASON_ATTRIBUTE: &str = "baton_reason";
pub const DETAIL_ATTRIBUTE: &str = "baton_detail";
pub const SOURCE_ATTRIBUTE: &str = "baton_source_message_id";

/// What became of one message.
#[derive(Debug)]
pub enum Verdict {
    /// Handled: delete it.
    Done,
    /// It can never succeed: dead-letter it now with this reason (a stable code) and detail.
    Poison { reason: &'static str, detail: String },
    /// It may succeed later: leave it for redelivery.
    Retry { error_type: &'static str, detail: String },
}

impl Verdict {
    /// The verdict for a classified error: retry what may pass, dead-letter the rest.
    pub fn from_error<E: Classified + std::error::Error>(e: &E) -> Verdict {
        let detail = error_chain(e);
        if e.retryable() {
            Verdict::Retry { error_type: e.error_type(), detail }
        } else {
            Verdict::Poison { reason: e.error_type(), detail }
        }
    }
}

/// An error and its causes on one line, for logs and dead-letter attributes.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Where a queue's poison messages go: a port, so that the simulation can stand in for SQS.
#[async_trait::async_trait]
pub trait DeadLetterQueue: Send + Sync {
    /// Sends the message's original body with `reason` (a stable code) and `detail` attached.
    async fn send(&self, message: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError>;

    /// The source queue's `maxReceiveCount`: after that many receives SQS's redrive policy would
    /// move a failing message here itself, without a reason.
    fn max_receive_count(&self) -> u32;
}

/// The dead-letter reason of a message that kept failing for a reason that can pass, on its last
/// receive before the redrive policy would take it (RUNBOOK.md).
pub const RETRIES_EXHAUSTED: &str = "retries_exhausted";

/// The `maxReceiveCount` template.yaml gives the work queues, when nothing else says.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 5;

/// The dead-letter queue a handler sends its poison messages to.
pub type DeadLetters = std::sync::Arc<dyn DeadLetterQueue>;

/// A dead-letter queue on SQS.
#[derive(Clone, Debug)]
pub struct SqsDeadLetters {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    max_receive_count: u32,
}

impl SqsDeadLetters {
    /// The queue at `queue_url`, shared as the handlers' [`DeadLetters`].
    pub fn shared(
        client: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
        max_receive_count: u32,
    ) -> DeadLetters {
        std::sync::Arc::new(SqsDeadLetters { client, queue_url: queue_url.into(), max_receive_count })
    }
}

#[async_trait::async_trait]
impl DeadLetterQueue for SqsDeadLetters {
    async fn send(&self, message: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError> {
        let attr = |v: &str| MessageAttributeValue::builder().data_type("String").string_value(v).build();
        // SQS attribute values are limited; the detail is for people, so cut it politely.
        let detail: String = detail.chars().take(1024).collect();
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message.body.clone().unwrap_or_default())
            .message_attributes(REASON_ATTRIBUTE, attr(reason).map_err(DeadLetterError::build)?)
            .message_attributes(DETAIL_ATTRIBUTE, attr(&detail).map_err(DeadLetterError::build)?);
        if let Some(id) = &message.message_id {
            send = send.message_attributes(SOURCE_ATTRIBUTE, attr(id).map_err(DeadLetterError::build)?);
        }
        send.send()
            .await
            .map(|_| ())
            .map_err(|e| DeadLetterError { retryable: sdk_retryable(&e), source: Box::new(e) })
    }

    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }
}

/// A dead-letter send that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot send to the dead-letter queue")]
pub struct DeadLetterError {
    pub retryable: bool,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl DeadLetterError {
    fn build(e: aws_sdk_sqs::error::BuildError) -> Self {
        DeadLetterError { retryable: false, source: Box::new(e) }
    }
}

/// A handler of SQS batches, as Lambda's event source mapping (or the local runtime) calls it.
#[async_trait::async_trait]
pub trait SqsHandler: Send + Sync {
    async fn handle(&self, event: SqsEvent) -> SqsBatchResponse;
}

/// Runs `handle` on each message of the batch, in order, and reports the failures.
pub async fn process_batch<F, Fut>(
    event: SqsEvent,
    dead_letters: &dyn DeadLetterQueue,
    handle: F,
) -> SqsBatchResponse
where
    F: Fn(SqsMessage) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let mut response = SqsBatchResponse::default();
    for message in event.records {
        let id = message.message_id.clone().unwrap_or_default();
        let mut verdict = handle(message.clone()).await;
        // On its last receive, a message failing for a reason that can pass is dead-lettered by
        // baton, with that reason, rather than moved there anonymously by the redrive policy:
        // every dead letter says why it is there.
        let receives = message.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse::<u32>().ok());
        if let Verdict::Retry { error_type, detail } = &verdict
            && receives.is_some_and(|n| n >= dead_letters.max_receive_count())
        {
            let detail =
                format!("{error_type} on each of {} receives; the last: {detail}", receives.unwrap_or(0));
            verdict = Verdict::Poison { reason: RETRIES_EXHAUSTED, detail };
        }
        match verdict {
            Verdict::Done => {}
            Verdict::Retry { error_type, detail } => {
                warn!(message_id = %id, error_type, error = %detail, "message failed; SQS will redeliver it");
                response.add_failure(id);
            }
            Verdict::Poison { reason, detail } => match dead_letters.send(&message, reason, &detail).await {
                Ok(()) => {
                    info!(message_id = %id, reason, detail = %detail, "poison message moved to the dead-letter queue");
                }
                Err(e) => {
                    error!(message_id = %id, reason, error = %error_chain(&e), retryable = e.retryable,
                        "cannot dead-letter a poison message; leaving it for redelivery");
                    response.add_failure(id);
                }
            },
        }
    }
    response
}
