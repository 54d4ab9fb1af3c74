//! The error taxonomy every adapter and use case shares.
//!
//! Each module has its own `thiserror` enum; this trait is what they have in common. A caller
//! needs two answers about any failure: may it simply try again (`retryable`), and what stable
//! name does it go by in logs, metrics, Lambda's `Diagnostic` and RUNBOOK.md (`error_type`).
//! `error_type` strings are a public contract: operators alarm and search on them. Add new
//! ones, never rename them.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// A classified failure.
pub trait Classified {
    /// A stable snake_case name, e.g. `dynamodb_unavailable`.
    fn error_type(&self) -> &'static str;
    /// Would the same call, retried later unchanged, possibly succeed?
    fn retryable(&self) -> bool;
    /// Was it AWS refusing for rate or quota (a throttle)? Such a failure passes with time and
    /// says nothing about the input: it is never dead-lettered (docs/SCALE.md). Implies
    /// `retryable`.
    fn throttled(&self) -> bool {
        false
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

/// The error codes AWS throttles with, across the services baton calls.
pub const THROTTLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "KmsThrottlingException",
    // SQS on a queue encrypted with KMS (SendMessageError::KmsThrottled).
    "KMS.ThrottlingException",
];

/// Is this SDK failure a throttle: one of [`THROTTLE_CODES`], or HTTP 429?
pub fn sdk_throttled<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::ServiceError(s) => {
            s.err().code().is_some_and(|c| THROTTLE_CODES.contains(&c)) || s.raw().status().as_u16() == 429
        }
        SdkError::ResponseError(r) => r.raw().status().as_u16() == 429,
        _ => false,
    }
}

/// Is this SDK failure worth retrying: a timeout, a dispatch failure, a throttle or a 5xx?
pub fn sdk_retryable<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
        SdkError::ResponseError(r) => r.raw().status().as_u16() >= 500 || sdk_throttled(err),
        SdkError::ServiceError(s) => {
            let unavailable = matches!(s.err().code(), Some("InternalServerError" | "ServiceUnavailable"));
            sdk_throttled(err) || unavailable || s.raw().status().as_u16() >= 500
        }
        _ => false,
    }
}
