//! The SQS adapters: the dead-letter queue ([`SqsDeadLetters`]) and the task queues, one per
//! team ([`SqsTaskPublisher`]).

use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::MessageAttributeValue;
use baton_core::domain::error::BoxError;
use baton_core::ports::dead_letters::{
    DETAIL_ATTRIBUTE, DeadLetterError, DeadLetterQueue, DeadLetterReader, DeadLetters, DlqMessage,
    REASON_ATTRIBUTE, REQUEUES_ATTRIBUTE, SOURCE_ATTRIBUTE, requeues,
};

use async_trait::async_trait;
use baton_core::ports::outbound::{PublishError, TaskPublisher, task_event};
use baton_core::ports::store::Task;

use crate::sdk::{sdk_retryable, sdk_throttled};

fn build_error(e: aws_sdk_sqs::error::BuildError) -> DeadLetterError {
    DeadLetterError { retryable: false, source: Box::new(e) }
}

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
    /// The queue at `queue_url`, shared as the handlers' [`DeadLetters`]. A message on its
    /// `max_receive_count`th receive that is still throttled is requeued to `source_queue_url`
    /// (the queue the function reads), invisible for `requeue_delay_seconds`.
    pub fn shared(
        client: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
        max_receive_count: u32,
        source_queue_url: Option<String>,
        requeue_delay_seconds: i32,
    ) -> DeadLetters {
        std::sync::Arc::new(SqsDeadLetters {
            client,
            queue_url: queue_url.into(),
            max_receive_count,
            source_queue_url,
            requeue_delay_seconds,
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
            .message_attributes(REASON_ATTRIBUTE, attr(reason).map_err(build_error)?)
            .message_attributes(DETAIL_ATTRIBUTE, attr(&detail).map_err(build_error)?);
        if let Some(id) = &message.message_id {
            send = send.message_attributes(SOURCE_ATTRIBUTE, attr(id).map_err(build_error)?);
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
            .map_err(build_error)?;
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

/// Publishes each task to its team's queue: the URL prefix (`BATON_TASK_QUEUE_URL_PREFIX`)
/// followed by the task's `queue`, so that a team's worker reads its own tasks and no other's.
pub struct SqsTaskPublisher {
    client: aws_sdk_sqs::Client,
    url_prefix: String,
}

impl SqsTaskPublisher {
    /// `url_prefix`: a queue URL up to the queue name (`https://sqs.../<account>/<stack>_tasks-`).
    pub fn new(client: aws_sdk_sqs::Client, url_prefix: impl Into<String>) -> Self {
        SqsTaskPublisher { client, url_prefix: url_prefix.into() }
    }

    /// The URL of the queue `task` goes to.
    pub fn queue_url(&self, task: &Task) -> String {
        format!("{}{}", self.url_prefix, task.queue)
    }
}

#[async_trait]
impl TaskPublisher for SqsTaskPublisher {
    async fn publish(&self, task: &Task) -> Result<(), PublishError> {
        if self.url_prefix.is_empty() {
            let missing = "BATON_TASK_QUEUE_URL_PREFIX is not set: this function cannot publish tasks";
            return Err(PublishError::new(false, missing.into()));
        }
        self.client
            .send_message()
            .queue_url(self.queue_url(task))
            .message_body(task_event(task).to_string())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| PublishError::throttled(sdk_retryable(&e), sdk_throttled(&e), Box::new(e)))
    }
}

/// A dead-letter queue on SQS as a replay reads it.
pub struct SqsDeadLetterReader {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDeadLetterReader {
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        SqsDeadLetterReader { client, queue_url: queue_url.into() }
    }
}

#[async_trait]
impl DeadLetterReader for SqsDeadLetterReader {
    async fn read(&self, max: usize, hold_seconds: i32) -> Result<Vec<DlqMessage>, BoxError> {
        let mut all = Vec::new();
        while all.len() < max {
            let out = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(hold_seconds)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .map_err(aws_sdk_sqs::Error::from)?;
            let batch = out.messages.unwrap_or_default();
            if batch.is_empty() {
                break;
            }
            for m in batch {
                let reason = m
                    .message_attributes()
                    .and_then(|a| a.get(REASON_ATTRIBUTE))
                    .and_then(|v| v.string_value().map(str::to_owned));
                all.push(DlqMessage {
                    id: m.message_id.unwrap_or_default(),
                    receipt_handle: m.receipt_handle.unwrap_or_default(),
                    body: m.body.unwrap_or_default(),
                    reason,
                });
            }
        }
        Ok(all)
    }

    async fn release(&self, messages: &[&DlqMessage]) -> Result<(), BoxError> {
        for m in messages {
            self.client
                .change_message_visibility()
                .queue_url(&self.queue_url)
                .receipt_handle(&m.receipt_handle)
                .visibility_timeout(0)
                .send()
                .await
                .map_err(aws_sdk_sqs::Error::from)?;
        }
        Ok(())
    }

    async fn delete(&self, message: &DlqMessage) -> Result<(), BoxError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(&message.receipt_handle)
            .send()
            .await
            .map_err(aws_sdk_sqs::Error::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::send_message::SendMessageError;
    use aws_sdk_sqs::types::error::KmsThrottled;
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::client::result::SdkError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use baton_core::domain::error::Classified;

    use super::*;
    use baton_core::use_cases::batch::Verdict;

    /// SendMessage refused because KMS throttled an encrypted queue's data key (found by review):
    /// SQS's own code for it, `KMS.ThrottlingException`, HTTP 400.
    #[test]
    fn sqs_kms_throttling_is_a_throttle_and_never_poisons_the_message() {
        let meta = ErrorMetadata::builder().code("KMS.ThrottlingException").message("Rate exceeded").build();
        let err = SendMessageError::KmsThrottled(
            KmsThrottled::builder().message("Rate exceeded").meta(meta).build(),
        );
        let e: SdkError<SendMessageError, HttpResponse> = SdkError::service_error(
            err,
            HttpResponse::new(StatusCode::try_from(400).unwrap(), SdkBody::from("")),
        );
        let publish = PublishError::throttled(sdk_retryable(&e), sdk_throttled(&e), Box::new(e));
        assert_eq!(publish.error_type(), "outbound_throttled");
        assert!(matches!(Verdict::from_error(&publish), Verdict::Retry { throttled: true, .. }));
    }
}
