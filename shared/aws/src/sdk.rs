//! The AWS SDK as every baton process uses it: one configuration (retries, timeouts) for the
//! functions, `baton local`, the tests and the CLI, and how an SDK failure is classified
//! (throttled, retryable) for [`Classified`](baton_core::domain::error::Classified).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// How many times the SDK tries one call (the first try included): the SDK's standard mode
/// default, written down so the functions, `baton local`, the tests and the CLI share it.
pub const SDK_MAX_ATTEMPTS: u32 = 3;
/// How long one attempt may take to connect (the SDK's default).
pub const SDK_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(3100);
/// How long one attempt may take in all. A call that hangs is cut off and retried rather than
/// holding the invocation until Lambda's own timeout (30 s) kills it mid-batch.
pub const SDK_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long one call may take across its attempts and their backoff: under the function's
/// 30-second timeout, so a failing dependency ends as a classified error, not a killed process.
pub const SDK_OPERATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

// The first message of a batch is never cut off by one slow call: the SDK gives up on a call
// (a classified error, a verdict) before the batch's deadline reserve is reached.
const _: () = assert!(
    SDK_OPERATION_TIMEOUT.as_millis() + baton_core::limits::DEADLINE_RESERVE.as_millis()
        <= baton_core::limits::FUNCTION_TIMEOUT.as_millis()
);
// Every message taken gets at least one whole SDK attempt before its cut-off.
const _: () = assert!(
    SDK_ATTEMPT_TIMEOUT.as_millis()
        <= baton_core::limits::FUNCTION_TIMEOUT.as_millis()
            - baton_core::limits::DEADLINE_RESERVE.as_millis()
);

/// The SDK configuration every AWS client of baton starts from: the SDK's standard retry mode
/// (throttles, 5xx, timeouts and dropped connections retried with jittered backoff) and explicit
/// timeouts. The deployed functions, `baton local`, the tests and the operator CLI all load it,
/// so what the tests exercise is what production does after a slow or failed answer.
pub fn sdk_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(SDK_MAX_ATTEMPTS))
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(SDK_CONNECT_TIMEOUT)
                .operation_attempt_timeout(SDK_ATTEMPT_TIMEOUT)
                .operation_timeout(SDK_OPERATION_TIMEOUT)
                .build(),
        )
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
