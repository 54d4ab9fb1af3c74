//! Publishing operator tasks: a CloudEvent `baton.task.created` on the outbound queue.
//!
//! A ticketing system (or a person's tool) consumes the queue. The event id is the task id,
//! stable for (workflow, key, generation, step): baton publishes each task once, and should a
//! crash fall between the publish and the record of it, the redelivery carries the same id, so a
//! consumer that dedupes by id sees one task.

use async_trait::async_trait;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::error::{Classified, sdk_retryable, sdk_throttled};
use crate::store::Task;

/// The CloudEvents `type` of a published task.
pub const TASK_CREATED: &str = "baton.task.created";

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
        "type": TASK_CREATED,
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
        },
    })
}

/// Publishes to an SQS queue.
pub struct SqsTaskPublisher {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsTaskPublisher {
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        SqsTaskPublisher { client, queue_url: queue_url.into() }
    }
}

#[async_trait]
impl TaskPublisher for SqsTaskPublisher {
    async fn publish(&self, task: &Task) -> Result<(), PublishError> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(task_event(task).to_string())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| PublishError {
                retryable: sdk_retryable(&e),
                throttled: sdk_throttled(&e),
                source: Box::new(e),
            })
    }
}

/// The outbound queue refused or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish the task to the outbound queue")]
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

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::send_message::SendMessageError;
    use aws_sdk_sqs::types::error::KmsThrottled;
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::client::result::SdkError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;
    use crate::sqs::Verdict;

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
        let publish =
            PublishError { retryable: sdk_retryable(&e), throttled: sdk_throttled(&e), source: Box::new(e) };
        assert_eq!(publish.error_type(), "outbound_throttled");
        assert!(matches!(Verdict::from_error(&publish), Verdict::Retry { throttled: true, .. }));
    }
}
