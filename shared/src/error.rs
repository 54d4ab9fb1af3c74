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
}

/// Is this SDK failure worth retrying: a timeout, a dispatch failure, a throttle or a 5xx?
pub fn sdk_retryable<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
        SdkError::ResponseError(r) => r.raw().status().as_u16() >= 500,
        SdkError::ServiceError(s) => {
            let throttled = matches!(
                s.err().code(),
                Some(
                    "ThrottlingException"
                        | "ProvisionedThroughputExceededException"
                        | "RequestLimitExceeded"
                        | "InternalServerError"
                        | "ServiceUnavailable"
                        | "Throttling"
                        | "TooManyRequestsException"
                )
            );
            throttled || s.raw().status().as_u16() >= 500
        }
        _ => false,
    }
}
