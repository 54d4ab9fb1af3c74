//! [`Orchestrator`] over AWS Step Functions (`aws_sdk_sfn`).
//!
//! This adapter translates, it does not decide: each call is one Step Functions request (two for
//! a repeated start and for a stop), and each SDK failure is mapped once, here, onto
//! [`OrchestratorError`] using the SDK's typed error enums. What is left over is classified by
//! [`sdk_throttled`] and [`sdk_retryable`]: throttles are `Throttled`, 5xx and timeouts
//! `Unavailable` (both retry), anything else is `Rejected` (do not). The SDK error is kept as the
//! `#[source]`, never flattened to a string.
//!
//! Two behaviours here exist because of how Step Functions answers:
//! - `StartExecution` says `ExecutionAlreadyExists` both when the input differs and when an
//!   execution of that name has closed (even with the same input). Only the input tells a replay
//!   from a conflict, so the existing execution is described and the inputs are compared as JSON
//!   values (key order and spacing do not matter).
//! - What `StopExecution` does to an execution that has already closed is not something baton
//!   should depend on, so the execution is described first and a closed one is left alone:
//!   "already closed" is an explicit, logged outcome. If it closes between the two calls, the
//!   stop's refusal is checked against a second describe.
//!
//! On the emulator (moto 5.2.5) a stop of an execution parked on a task token stays `RUNNING`
//! until the task's wait ends, and ends as a task timeout if no resume comes; the contract tests
//! in `tests/tests/orchestrator.rs` record this and the other deviations.

use aws_sdk_sfn::Client;
use aws_sdk_sfn::error::SdkError;
use aws_sdk_sfn::operation::describe_execution::{DescribeExecutionError, DescribeExecutionOutput};
use aws_sdk_sfn::operation::get_execution_history::GetExecutionHistoryError;
use aws_sdk_sfn::operation::send_task_failure::SendTaskFailureError;
use aws_sdk_sfn::operation::send_task_heartbeat::SendTaskHeartbeatError;
use aws_sdk_sfn::operation::send_task_success::SendTaskSuccessError;
use aws_sdk_sfn::operation::start_execution::StartExecutionError;
use aws_sdk_sfn::operation::stop_execution::StopExecutionError;
use aws_sdk_sfn::types;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use time::OffsetDateTime;

use crate::sdk::{sdk_retryable, sdk_throttled};
use baton_core::domain::ids::TaskToken;
use baton_core::ports::orchestrator::{
    ExecutionInfo, ExecutionStatus, HistoryEvent, Orchestrator, OrchestratorError, StartExecution, Started,
    execution_arn,
};

/// Longest `cause` kept in a [`HistoryEvent::detail`].
const MAX_DETAIL_CAUSE: usize = 200;

/// The Step Functions client baton calls with: the SDK's configuration (its standard retries,
/// [`crate::sdk::sdk_loader`]), and `ExecutionLimitExceeded` retried as a throttle. The SDK
/// retries the service's `ThrottlingException` with jittered backoff on its own, but not a start
/// refused over the account's quota of open executions, which clears as executions close: that
/// one gets the same bounded, jittered retries before it surfaces (as
/// [`OrchestratorError::Throttled`], which brings the message back through its queue).
pub fn client(sdk: &aws_config::SdkConfig) -> Client {
    let config = aws_sdk_sfn::config::Builder::from(sdk).retry_classifier(OverQuotaIsAThrottle).build();
    Client::from_conf(config)
}

/// Classifies `StartExecution`'s `ExecutionLimitExceeded` as a throttling error ([`client`]).
#[derive(Debug)]
struct OverQuotaIsAThrottle;

impl aws_smithy_runtime_api::client::retries::classifiers::ClassifyRetry for OverQuotaIsAThrottle {
    fn classify_retry(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::InterceptorContext,
    ) -> aws_smithy_runtime_api::client::retries::classifiers::RetryAction {
        use aws_smithy_runtime_api::client::orchestrator::OrchestratorError as Failure;
        use aws_smithy_runtime_api::client::retries::classifiers::RetryAction;
        let over_quota = matches!(ctx.output_or_error(), Some(Err(e)) if Failure::as_operation_error(e)
            .and_then(|e| e.downcast_ref::<StartExecutionError>())
            .is_some_and(|e| matches!(e, StartExecutionError::ExecutionLimitExceeded(_))));
        if over_quota { RetryAction::throttling_error() } else { RetryAction::NoActionIndicated }
    }

    fn name(&self) -> &'static str {
        "ExecutionLimitExceeded is a throttle"
    }
}

/// Step Functions, through one SDK client built once at start-up.
#[derive(Debug, Clone)]
pub struct StepFunctionsOrchestrator {
    client: Client,
}

impl StepFunctionsOrchestrator {
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Compares the input of the existing execution `arn` with the one we tried to start it with.
    async fn existing_matches(
        &self,
        req: &StartExecution,
        name: String,
        arn: String,
    ) -> Result<Started, OrchestratorError> {
        let existing = self.describe(&arn).await?;
        if existing.input.as_ref() == Some(&req.input) {
            tracing::info!(
                execution_arn = %arn,
                status = %existing.status,
                "execution already exists with this input: a repeated start"
            );
            Ok(Started { execution_arn: arn, already_existed: true })
        } else {
            tracing::warn!(
                execution_arn = %arn,
                status = %existing.status,
                "execution already exists with a different input: two different starts for one generation"
            );
            Err(OrchestratorError::ExecutionConflict { name, execution_arn: arn })
        }
    }
}

/// The execution an operation named does not exist.
fn not_found<E: std::error::Error + Send + Sync + 'static>(
    op: &'static str,
    execution_arn: &str,
    err: E,
) -> OrchestratorError {
    OrchestratorError::ExecutionNotFound {
        op,
        execution_arn: execution_arn.to_owned(),
        source: Box::new(err),
    }
}

#[async_trait::async_trait]
impl Orchestrator for StepFunctionsOrchestrator {
    #[tracing::instrument(skip_all, fields(
        workflow = %req.workflow, key = %req.key, generation = req.generation,
        execution = tracing::field::Empty,
    ))]
    async fn start_execution(&self, req: &StartExecution) -> Result<Started, OrchestratorError> {
        const OP: &str = "start_execution";
        let name = req.execution_name();
        tracing::Span::current().record("execution", name.as_str());
        let input = serde_json::to_string(&req.input).map_err(|e| OrchestratorError::Rejected {
            op: OP,
            code: "InvalidExecutionInput".to_owned(),
            message: "the input cannot be serialized as JSON".to_owned(),
            source: Box::new(e),
        })?;
        let result = self
            .client
            .start_execution()
            .state_machine_arn(&req.state_machine_arn)
            .name(&name)
            .input(input)
            .send()
            .await;
        let err = match result {
            Ok(out) => {
                return Ok(Started { execution_arn: out.execution_arn, already_existed: false });
            }
            Err(err) => err,
        };
        match err.as_service_error() {
            Some(StartExecutionError::ExecutionAlreadyExists(_)) => {
                match execution_arn(&req.state_machine_arn, &name) {
                    Some(arn) => self.existing_matches(req, name, arn).await,
                    // Unreachable in practice: Step Functions would have refused the ARN first.
                    None => Err(other(OP, err)),
                }
            }
            Some(StartExecutionError::StateMachineDoesNotExist(_))
            | Some(StartExecutionError::StateMachineDeleting(_)) => {
                Err(OrchestratorError::StateMachineNotFound {
                    op: OP,
                    state_machine_arn: req.state_machine_arn.clone(),
                    source: Box::new(err),
                })
            }
            // The account's limit on open executions: it clears as executions close.
            Some(StartExecutionError::ExecutionLimitExceeded(_)) => {
                Err(OrchestratorError::Throttled { op: OP, source: Box::new(err) })
            }
            _ => Err(other(OP, err)),
        }
    }

    #[tracing::instrument(skip_all, fields(token = %token.fingerprint()))]
    async fn send_task_success(
        &self,
        token: &TaskToken,
        output: &serde_json::Value,
    ) -> Result<(), OrchestratorError> {
        const OP: &str = "send_task_success";
        let output = serde_json::to_string(output).map_err(|e| OrchestratorError::Rejected {
            op: OP,
            code: "InvalidOutput".to_owned(),
            message: "the output cannot be serialized as JSON".to_owned(),
            source: Box::new(e),
        })?;
        let result = self.client.send_task_success().task_token(token.expose()).output(output).send().await;
        result.map(drop).map_err(|err| {
            let gone = match err.as_service_error() {
                Some(SendTaskSuccessError::InvalidToken(_)) => Some("InvalidToken"),
                Some(SendTaskSuccessError::TaskTimedOut(_)) => Some("TaskTimedOut"),
                Some(SendTaskSuccessError::TaskDoesNotExist(_)) => Some("TaskDoesNotExist"),
                _ => None,
            };
            token_or_other(OP, token, gone, err)
        })
    }

    #[tracing::instrument(skip_all, fields(token = %token.fingerprint(), error = error))]
    async fn send_task_failure(
        &self,
        token: &TaskToken,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError> {
        const OP: &str = "send_task_failure";
        let result =
            self.client.send_task_failure().task_token(token.expose()).error(error).cause(cause).send().await;
        result.map(drop).map_err(|err| {
            let gone = match err.as_service_error() {
                Some(SendTaskFailureError::InvalidToken(_)) => Some("InvalidToken"),
                Some(SendTaskFailureError::TaskTimedOut(_)) => Some("TaskTimedOut"),
                Some(SendTaskFailureError::TaskDoesNotExist(_)) => Some("TaskDoesNotExist"),
                _ => None,
            };
            token_or_other(OP, token, gone, err)
        })
    }

    #[tracing::instrument(skip_all, fields(token = %token.fingerprint()))]
    async fn send_task_heartbeat(&self, token: &TaskToken) -> Result<(), OrchestratorError> {
        const OP: &str = "send_task_heartbeat";
        let result = self.client.send_task_heartbeat().task_token(token.expose()).send().await;
        result.map(drop).map_err(|err| {
            let gone = match err.as_service_error() {
                Some(SendTaskHeartbeatError::InvalidToken(_)) => Some("InvalidToken"),
                Some(SendTaskHeartbeatError::TaskTimedOut(_)) => Some("TaskTimedOut"),
                Some(SendTaskHeartbeatError::TaskDoesNotExist(_)) => Some("TaskDoesNotExist"),
                _ => None,
            };
            token_or_other(OP, token, gone, err)
        })
    }

    #[tracing::instrument(skip_all, fields(execution_arn = execution_arn))]
    async fn describe(&self, execution_arn: &str) -> Result<ExecutionInfo, OrchestratorError> {
        const OP: &str = "describe_execution";
        let out =
            self.client.describe_execution().execution_arn(execution_arn).send().await.map_err(|err| {
                match err.as_service_error() {
                    Some(DescribeExecutionError::ExecutionDoesNotExist(_)) => {
                        not_found(OP, execution_arn, err)
                    }
                    _ => other(OP, err),
                }
            })?;
        execution_info(OP, out)
    }

    #[tracing::instrument(skip_all, fields(execution_arn = execution_arn))]
    async fn history(&self, execution_arn: &str) -> Result<Vec<HistoryEvent>, OrchestratorError> {
        const OP: &str = "get_execution_history";
        let mut pages = self
            .client
            .get_execution_history()
            .execution_arn(execution_arn)
            .include_execution_data(false)
            .into_paginator()
            .send();
        let mut events = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|err| match err.as_service_error() {
                Some(GetExecutionHistoryError::ExecutionDoesNotExist(_)) => not_found(OP, execution_arn, err),
                _ => other(OP, err),
            })?;
            for event in page.events {
                events.push(history_event(OP, &event)?);
            }
        }
        // Ascending is the default order; sort anyway so callers can rely on it.
        events.sort_by_key(|e| e.id);
        Ok(events)
    }

    #[tracing::instrument(skip_all, fields(execution_arn = execution_arn, error = error))]
    async fn stop_execution(
        &self,
        execution_arn: &str,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError> {
        const OP: &str = "stop_execution";
        let before = self.describe(execution_arn).await?;
        if before.status.is_closed() {
            tracing::info!(status = %before.status, "execution already closed; nothing to stop");
            return Ok(());
        }
        let result =
            self.client.stop_execution().execution_arn(execution_arn).error(error).cause(cause).send().await;
        let err = match result {
            Ok(_) => {
                tracing::info!("execution stopped");
                return Ok(());
            }
            Err(err) => err,
        };
        if let Some(StopExecutionError::ExecutionDoesNotExist(_)) = err.as_service_error() {
            return Err(not_found(OP, execution_arn, err));
        }
        // The execution may have closed between the describe and the stop: then the stop's
        // refusal is the idempotent outcome, not a failure.
        if !sdk_retryable(&err) {
            let after = self.describe(execution_arn).await?;
            if after.status.is_closed() {
                tracing::info!(status = %after.status, "execution closed before it could be stopped");
                return Ok(());
            }
        }
        Err(other(OP, err))
    }
}

/// `TokenGone` when the typed match found a dead token, otherwise the general mapping.
fn token_or_other<E>(
    op: &'static str,
    token: &TaskToken,
    gone: Option<&'static str>,
    err: SdkError<E, HttpResponse>,
) -> OrchestratorError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match gone {
        Some(code) => {
            tracing::info!(code, "task token can no longer be used");
            OrchestratorError::TokenGone { op, fingerprint: token.fingerprint(), code, source: Box::new(err) }
        }
        None => other(op, err),
    }
}

/// The mapping for every failure an operation has no specific meaning for.
fn other<E>(op: &'static str, err: SdkError<E, HttpResponse>) -> OrchestratorError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    // Throttles come back as 400s (KMS's too), which only their codes tell from a refusal.
    if sdk_throttled(&err) {
        return OrchestratorError::Throttled { op, source: Box::new(err) };
    }
    if sdk_retryable(&err) {
        return OrchestratorError::Unavailable { op, source: Box::new(err) };
    }
    let code = err.code().unwrap_or("Unknown").to_owned();
    let message = err.message().unwrap_or("no message").to_owned();
    OrchestratorError::Rejected { op, code, message, source: Box::new(err) }
}

fn execution_info(
    op: &'static str,
    out: DescribeExecutionOutput,
) -> Result<ExecutionInfo, OrchestratorError> {
    Ok(ExecutionInfo {
        status: status(&out.status),
        start_date: datetime(op, "start date", &out.start_date)?,
        stop_date: out.stop_date.as_ref().map(|d| datetime(op, "stop date", d)).transpose()?,
        input: out.input.as_deref().map(|s| json(op, "input", s)).transpose()?,
        output: out.output.as_deref().map(|s| json(op, "output", s)).transpose()?,
        error: out.error,
        cause: out.cause,
        execution_arn: out.execution_arn,
    })
}

fn status(s: &types::ExecutionStatus) -> ExecutionStatus {
    match s {
        types::ExecutionStatus::Running => ExecutionStatus::Running,
        types::ExecutionStatus::Succeeded => ExecutionStatus::Succeeded,
        types::ExecutionStatus::Failed => ExecutionStatus::Failed,
        types::ExecutionStatus::TimedOut => ExecutionStatus::TimedOut,
        types::ExecutionStatus::Aborted => ExecutionStatus::Aborted,
        types::ExecutionStatus::PendingRedrive => ExecutionStatus::PendingRedrive,
        other => ExecutionStatus::Other(other.as_str().to_owned()),
    }
}

fn history_event(op: &'static str, e: &types::HistoryEvent) -> Result<HistoryEvent, OrchestratorError> {
    Ok(HistoryEvent {
        id: e.id,
        timestamp: datetime(op, "event timestamp", &e.timestamp)?,
        event_type: e.r#type.as_str().to_owned(),
        detail: detail(e),
    })
}

/// A one-line summary of an event. Inputs, outputs and task parameters are left out on purpose:
/// a `waitForTaskToken` task's parameters contain the live token.
fn detail(e: &types::HistoryEvent) -> String {
    fn failure(error: Option<&str>, cause: Option<&str>) -> String {
        let error = error.unwrap_or("");
        match cause.filter(|c| !c.is_empty()) {
            Some(cause) => format!("{error}: {}", shorten(cause, MAX_DETAIL_CAUSE)),
            None => error.to_owned(),
        }
    }
    let resource = |t: &str, r: &str| format!("{t}:{r}");
    if let Some(d) = &e.state_entered_event_details {
        d.name.clone()
    } else if let Some(d) = &e.state_exited_event_details {
        d.name.clone()
    } else if let Some(d) = &e.task_scheduled_event_details {
        resource(&d.resource_type, &d.resource)
    } else if let Some(d) = &e.task_started_event_details {
        resource(&d.resource_type, &d.resource)
    } else if let Some(d) = &e.task_submitted_event_details {
        resource(&d.resource_type, &d.resource)
    } else if let Some(d) = &e.task_succeeded_event_details {
        resource(&d.resource_type, &d.resource)
    } else if let Some(d) = &e.task_failed_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.task_timed_out_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.task_start_failed_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.task_submit_failed_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.execution_failed_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.execution_aborted_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else if let Some(d) = &e.execution_timed_out_event_details {
        failure(d.error.as_deref(), d.cause.as_deref())
    } else {
        String::new()
    }
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

fn datetime(
    op: &'static str,
    what: &'static str,
    d: &aws_smithy_types::DateTime,
) -> Result<OffsetDateTime, OrchestratorError> {
    OffsetDateTime::from_unix_timestamp_nanos(d.as_nanos())
        .map_err(|e| OrchestratorError::MalformedResponse { op, what, source: Box::new(e) })
}

fn json(op: &'static str, what: &'static str, s: &str) -> Result<serde_json::Value, OrchestratorError> {
    serde_json::from_str(s).map_err(|e| OrchestratorError::MalformedResponse {
        op,
        what,
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_shortened_on_a_char_boundary() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("ééééé", 2), "éé…");
    }

    #[test]
    fn history_details_never_show_task_parameters() {
        // Given a TaskScheduled event whose parameters carry a task token
        let event = types::HistoryEvent::builder()
            .timestamp(aws_smithy_types::DateTime::from_secs(0))
            .r#type(types::HistoryEventType::TaskScheduled)
            .id(3)
            .task_scheduled_event_details(
                types::TaskScheduledEventDetails::builder()
                    .resource_type("sqs")
                    .resource("sendMessage.waitForTaskToken")
                    .region("us-east-1")
                    .parameters(r#"{"MessageBody":{"token":"SECRET-TOKEN"}}"#)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        // When it is summarised
        let e = history_event("test", &event).unwrap();
        // Then the summary names the resource and not the token
        assert_eq!(e.detail, "sqs:sendMessage.waitForTaskToken");
        assert_eq!(e.event_type, "TaskScheduled");
        assert!(!format!("{e:?}").contains("SECRET"));
    }
}
