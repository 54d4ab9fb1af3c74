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
    /// It may succeed later: leave it for redelivery. `throttled`: AWS refused for rate or
    /// quota, which says nothing about the message: it is never dead-lettered.
    Retry { error_type: &'static str, detail: String, throttled: bool },
}

impl Verdict {
    /// The verdict for a classified error: retry what may pass, dead-letter the rest.
    pub fn from_error<E: Classified + std::error::Error>(e: &E) -> Verdict {
        let detail = error_chain(e);
        if e.retryable() {
            Verdict::Retry { error_type: e.error_type(), detail, throttled: e.throttled() }
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

/// A dead-letter queue on SQS.
#[derive(Clone, Debug)]
pub struct SqsDeadLetters {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    max_receive_count: u32,
    /// The queue the function reads (`BATON_SOURCE_QUEUE_URL`), for requeues, and how long a
    /// requeued copy stays invisible.
    source_queue_url: Option<String>,
    requeue_delay_seconds: i32,
}

impl SqsDeadLetters {
    /// The queue at `queue_url`, shared as the handlers' [`DeadLetters`]; throttled messages are
    /// requeued to the settings' source queue.
    pub fn shared(
        client: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
        settings: &crate::runtime::Settings,
    ) -> DeadLetters {
        std::sync::Arc::new(SqsDeadLetters {
            client,
            queue_url: queue_url.into(),
            max_receive_count: settings.max_receive_count,
            source_queue_url: settings.source_queue_url.clone(),
            requeue_delay_seconds: settings.requeue_delay_seconds,
        })
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

    async fn requeue(&self, message: &SqsMessage) -> Result<(), DeadLetterError> {
        let Some(url) = &self.source_queue_url else {
            return Err(DeadLetterError {
                retryable: false,
                source: "BATON_SOURCE_QUEUE_URL is not set".into(),
            });
        };
        let count = requeues(message) + 1;
        let attr = MessageAttributeValue::builder()
            .data_type("Number")
            .string_value(count.to_string())
            .build()
            .map_err(DeadLetterError::build)?;
        self.client
            .send_message()
            .queue_url(url)
            .message_body(message.body.clone().unwrap_or_default())
            .delay_seconds(self.requeue_delay_seconds.clamp(0, 900))
            .message_attributes(REQUEUES_ATTRIBUTE, attr)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| DeadLetterError { retryable: sdk_retryable(&e), source: Box::new(e) })
    }

    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }
}

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
        let last = receives.is_some_and(|n| n >= dead_letters.max_receive_count());
        // A throttle on the last receive is no reason to give up on the message: a copy goes
        // back to the queue, to be tried again once the rate allows (docs/SCALE.md). Only if
        // that copy cannot be sent is it dead-lettered, saying both.
        let mut requeue_failed = None;
        if let Verdict::Retry { error_type, detail, throttled: true } = &verdict
            && last
        {
            match dead_letters.requeue(&message).await {
                Ok(()) => {
                    warn!(message_id = %id, error_type, error = %detail, requeues = requeues(&message) + 1,
                        "throttled on every receive; sent back to its queue");
                    continue;
                }
                Err(e) => {
                    error!(message_id = %id, error_type, error = %error_chain(&e),
                        "throttled on every receive and cannot be sent back to its queue; dead-lettering it");
                    requeue_failed = Some(error_chain(&e));
                }
            }
        }
        if let Verdict::Retry { error_type, detail, .. } = &verdict
            && last
        {
            let receives = receives.unwrap_or(0);
            let detail = match &requeue_failed {
                None => format!("{error_type} on each of {receives} receives; the last: {detail}"),
                Some(e) => format!(
                    "{error_type} on each of {receives} receives, and {REQUEUE_FAILED} ({e}); the last: {detail}"
                ),
            };
            verdict = Verdict::Poison { reason: RETRIES_EXHAUSTED, detail };
        }
        match verdict {
            Verdict::Done => {}
            Verdict::Retry { error_type, detail, .. } => {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// What a handler's queue port was asked to do.
    #[derive(Default)]
    struct Recorded {
        dead: Mutex<Vec<String>>,
        requeued: Mutex<Vec<String>>,
        requeue_fails: bool,
    }

    #[async_trait::async_trait]
    impl DeadLetterQueue for Recorded {
        async fn send(&self, message: &SqsMessage, reason: &str, _: &str) -> Result<(), DeadLetterError> {
            self.dead
                .lock()
                .unwrap()
                .push(format!("{}:{reason}", message.message_id.clone().unwrap_or_default()));
            Ok(())
        }
        async fn requeue(&self, message: &SqsMessage) -> Result<(), DeadLetterError> {
            if self.requeue_fails {
                return Err(DeadLetterError { retryable: true, source: "unavailable".into() });
            }
            self.requeued.lock().unwrap().push(message.message_id.clone().unwrap_or_default());
            Ok(())
        }
        fn max_receive_count(&self) -> u32 {
            5
        }
    }

    fn message(id: &str, receives: u32) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some(id.to_owned());
        m.body = Some("{}".to_owned());
        m.attributes.insert("ApproximateReceiveCount".to_owned(), receives.to_string());
        m
    }

    async fn run(port: &Recorded, messages: Vec<SqsMessage>, throttled: bool) -> Vec<String> {
        let mut event = SqsEvent::default();
        event.records = messages;
        let verdict =
            || Verdict::Retry { error_type: "store_throttled", detail: "slow down".into(), throttled };
        let response = process_batch(event, port, |_| async { verdict() }).await;
        response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
    }

    #[tokio::test]
    async fn a_throttle_on_the_last_receive_sends_the_message_back_never_to_the_dead_letter_queue() {
        let port = Recorded::default();
        let failed = run(&port, vec![message("early", 2), message("last", 5)], true).await;
        assert_eq!(failed, ["early"], "before the last receive, SQS redelivers it as for any retry");
        assert_eq!(*port.requeued.lock().unwrap(), ["last"], "on the last, a copy goes back to the queue");
        assert!(port.dead.lock().unwrap().is_empty(), "and nothing is dead-lettered");

        let port = Recorded { requeue_fails: true, ..Recorded::default() };
        let failed = run(&port, vec![message("last", 5)], true).await;
        assert!(failed.is_empty());
        assert_eq!(
            *port.dead.lock().unwrap(),
            ["last:retries_exhausted"],
            "a copy that cannot be sent: dead-lettered with its reason, not moved there without one"
        );

        let port = Recorded::default();
        let failed = run(&port, vec![message("last", 5)], false).await;
        assert!(failed.is_empty());
        assert_eq!(
            *port.dead.lock().unwrap(),
            ["last:retries_exhausted"],
            "an outage that lasts is dead-lettered, with why"
        );
        assert!(port.requeued.lock().unwrap().is_empty());
    }
}
