//! The Lambda functions' serving code: cold start (settings, config, clients, engine), the
//! warm-up, a failed init reported to the Runtime API, and the `lambda_runtime` loop of each kind
//! of function. Each function's `main` is one call into here.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::event::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use baton_aws::sdk::sdk_loader;
use baton_aws::sqs::SqsDeadLetters;
use baton_aws::wiring::{Settings, SettingsError, engine_with, init_tracing};
use baton_core::domain::error::{Classified, error_chain};
use baton_core::ports::dead_letters::DeadLetters;
use baton_core::ports::metrics::Metrics;
use baton_core::ports::secrets::SecretSource;
use baton_core::use_cases::batch::{SqsHandler, TimerDeadline};
use baton_core::use_cases::callback::Callbacks;
use baton_core::use_cases::engine::Engine;
use baton_core::use_cases::sweeper::Sweeper;
use lambda_runtime::LambdaEvent;

/// The longest init waits for its warm-up call. Lambda gives init 10 seconds; a warm-up that
/// cannot finish in this is abandoned (and the first request connects for itself).
pub const WARM_UP_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A function started: its settings, the SDK configuration, the engine, and the engine's Step
/// Functions client (a clone shares its connection pool), for the warm-up.
struct Started {
    /// When init began, and how long it took to get here (settings, config, clients).
    began: std::time::Instant,
    setup: std::time::Duration,
    settings: Settings,
    sdk: SdkConfig,
    engine: Arc<Engine>,
    sfn: aws_sdk_sfn::Client,
}

/// Cold start shared by every function: logs, settings, config, clients, engine. Only what the
/// first request needs: the settings and config it is decided by, and the clients it calls.
async fn cold_start() -> Result<Started, SettingsError> {
    let began = std::time::Instant::now();
    init_tracing();
    let settings = Settings::from_env()?;
    let config = settings.config()?;
    let sdk = sdk_loader().load().await;
    let sfn = baton_aws::stepfunctions::client(&sdk);
    let engine = Arc::new(engine_with(&sdk, &settings, config, Metrics::stdout(), sfn.clone()));
    Ok(Started { began, setup: began.elapsed(), settings, sdk, engine, sfn })
}

/// The execution the warm-up describes. None has this name: baton names its executions
/// `<workflow>-<key>-g<generation>[-<hash>]`.
const WARM_UP_EXECUTION: &str = "baton-warm-up";

/// The warm-up, before the first request: opens the connections (TCP and TLS) that request will
/// use and leaves them in the clients' pools.
/// - DynamoDB: registers the embedded config (put-if-absent), which the first start needs anyway.
/// - Step Functions: describes an execution that does not exist, under a state machine the role
///   may describe (`ExecutionDoesNotExist`, no effect).
///
/// Both run at once, bounded by [`WARM_UP_LIMIT`]; one that fails or times out is logged and
/// init goes on (the registration is tried again before the first start). SQS is not warmed:
/// no function may make an SQS call without an effect.
async fn warm_up(started: &Started) -> std::time::Duration {
    let engine = &started.engine;
    let describe = async {
        let Some(workflow) = engine.config.workflows.first() else {
            return;
        };
        let machine = engine.state_machine_arn(workflow.name.as_str());
        let execution =
            format!("{}:{WARM_UP_EXECUTION}", machine.replacen(":stateMachine:", ":execution:", 1));
        match started.sfn.describe_execution().execution_arn(execution).send().await {
            Ok(_) => {}
            Err(e) if e.as_service_error().is_some_and(|e| e.is_execution_does_not_exist()) => {}
            Err(e) => tracing::warn!(error = %error_chain(&e), "Step Functions warm-up failed; init goes on"),
        }
    };
    let both = async { tokio::join!(engine.register_config(), describe) };
    let began = std::time::Instant::now();
    if tokio::time::timeout(WARM_UP_LIMIT, both).await.is_err() {
        tracing::warn!(
            limit_ms = WARM_UP_LIMIT.as_millis() as u64,
            "warm-up timed out; init goes on without it"
        );
    }
    began.elapsed()
}

/// The last line of a cold start, just before the first `next`: how long each part took.
fn init_done(started: &Started, warm_up: std::time::Duration) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    tracing::info!(
        setup_ms = ms(started.setup),
        warm_up_ms = ms(warm_up),
        init_ms = ms(started.began.elapsed()),
        "init done"
    );
}

/// A failed init, reported to Lambda's Runtime API (`/runtime/init/error`) as well as logged.
/// Lambda then fails the request that waited for this environment with the error's type and
/// message, so the cause (the variable's name) shows where the caller and the console see it,
/// not only as a bare exit. Returns the error for `main` to exit with.
async fn init_failed(e: SettingsError) -> lambda_runtime::Error {
    let message = error_chain(&e);
    tracing::error!(error_type = e.error_type(), error = %message, "init failed");
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        let body =
            serde_json::json!({"errorType": e.error_type(), "errorMessage": message, "stackTrace": []});
        let request = http::Request::post("/2018-06-01/runtime/init/error")
            .header("lambda-runtime-function-error-type", "Runtime.InitError")
            .header("content-type", "application/json")
            .body(lambda_runtime_api_client::body::Body::from(body.to_string()));
        let sent = match request {
            Ok(request) => {
                let client = lambda_runtime_api_client::PooledClient::builder().build();
                match tokio::time::timeout(WARM_UP_LIMIT, client.call(request)).await {
                    Ok(Ok(answer)) if answer.status().is_success() => Ok(()),
                    Ok(Ok(answer)) => Err(format!("the Runtime API answered {}", answer.status())),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {WARM_UP_LIMIT:?}")),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(problem) = sent {
            tracing::error!(error = %problem, "cannot report the init failure to the Runtime API");
        }
    }
    Box::new(e)
}

/// Runs an SQS-driven Lambda function with the handler `make` builds.
pub async fn serve_sqs<H, F>(make: F) -> Result<(), lambda_runtime::Error>
where
    H: SqsHandler + 'static,
    F: FnOnce(Arc<Engine>, DeadLetters) -> H,
{
    let started = cold_start().await.and_then(|started| {
        let dlq_url = started.settings.dlq_url()?.to_owned();
        Ok((started, dlq_url))
    });
    let (started, dlq_url) = match started {
        Ok(started) => started,
        Err(e) => return Err(init_failed(e).await),
    };
    let warmed = warm_up(&started).await;
    init_done(&started, warmed);
    let sqs = aws_sdk_sqs::Client::new(&started.sdk);
    let settings = &started.settings;
    let dead_letters = SqsDeadLetters::shared(
        sqs,
        &dlq_url,
        settings.max_receive_count,
        settings.source_queue_url.clone(),
        settings.requeue_delay_seconds,
    );
    let handler = Arc::new(make(started.engine, dead_letters));
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<SqsEvent>| {
        let handler = handler.clone();
        // The batch answers before Lambda's deadline, not when Lambda kills it (baton_core::use_cases::batch).
        let deadline = TimerDeadline::from_epoch_millis(event.context.deadline);
        async move {
            Ok::<SqsBatchResponse, lambda_runtime::Error>(
                handler.handle_within(event.payload, &deadline).await,
            )
        }
    }))
    .await
}

/// Runs the callback function behind API Gateway (HTTP API, payload 2.0): the request event in,
/// the proxy response out, read and written with aws_lambda_events' types directly (no
/// lambda_http: the function needs one route of one payload version).
///
/// `secret_source` makes the reader of the secret `BATON_WEBHOOK_SECRET_ARN` names: the callback
/// function passes Secrets Manager's, so that only it links that SDK.
pub async fn serve_callback(
    secret_source: fn(&SdkConfig, String) -> Arc<dyn SecretSource>,
) -> Result<(), lambda_runtime::Error> {
    let started = match cold_start().await {
        Ok(started) => started,
        Err(e) => return Err(init_failed(e).await),
    };
    // The secrets are read while the connections warm: init waits for the slower of the two.
    let sdk = started.sdk.clone();
    let read = started.settings.secrets(move |arn| secret_source(&sdk, arn), started.engine.now());
    let (secrets, warmed) = tokio::join!(read, warm_up(&started));
    let secrets = match secrets {
        Ok(secrets) => secrets,
        Err(e) => return Err(init_failed(e).await),
    };
    init_done(&started, warmed);
    let callbacks = Arc::new(Callbacks::new(started.engine, secrets));
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<ApiGatewayV2httpRequest>| {
        let callbacks = callbacks.clone();
        async move {
            let request = event.payload;
            let answer = match http_api_body(&request) {
                Ok(body) => callbacks.handle(&request.headers, &body).await.into_response(),
                Err(answer) => *answer,
            };
            Ok::<_, lambda_runtime::Error>(proxy_response(answer))
        }
    }))
    .await
}

/// The request body's bytes: API Gateway base64-encodes a body it takes for binary. A body that
/// does not decode gets 400 `invalid_body`.
fn http_api_body(request: &ApiGatewayV2httpRequest) -> Result<Vec<u8>, Box<http::Response<String>>> {
    use base64::Engine as _;
    let body = request.body.as_deref().unwrap_or_default();
    if !request.is_base64_encoded {
        return Ok(body.as_bytes().to_vec());
    }
    base64::engine::general_purpose::STANDARD.decode(body).map_err(|e| {
        let error = serde_json::json!({"error": "invalid_body", "field": "body",
                                       "message": format!("the base64 body does not decode: {e}")});
        let mut response = http::Response::new(error.to_string());
        *response.status_mut() = http::StatusCode::BAD_REQUEST;
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        Box::new(response)
    })
}

/// An HTTP response as the HTTP API's Lambda proxy integration (payload 2.0) takes it.
fn proxy_response(response: http::Response<String>) -> ApiGatewayV2httpResponse {
    let (parts, body) = response.into_parts();
    let mut proxy = ApiGatewayV2httpResponse::default();
    proxy.status_code = parts.status.as_u16().into();
    proxy.headers = parts.headers;
    proxy.body = Some(aws_lambda_events::encodings::Body::Text(body));
    proxy
}

/// Runs the sweeper on its schedule. A failed sweep reports a `Diagnostic` with the stable
/// `error_type`, so the Lambda error metric and logs name what failed.
pub async fn serve_sweeper() -> Result<(), lambda_runtime::Error> {
    let started = match cold_start().await {
        Ok(started) => started,
        Err(e) => return Err(init_failed(e).await),
    };
    let warmed = warm_up(&started).await;
    init_done(&started, warmed);
    let engine = started.engine;
    let sweeper = Arc::new(Sweeper::new(engine.clone()));
    lambda_runtime::run(lambda_runtime::service_fn(
        move |_: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (sweeper, engine) = (sweeper.clone(), engine.clone());
            async move {
                sweeper
                    .run_once(engine.now())
                    .await
                    .map(|report| serde_json::json!({"repaired": report.repaired, "expired": report.expired}))
                    .map_err(|e| diagnostic(&e))
            }
        },
    ))
    .await
}

/// A classified error as Lambda reports it: the stable `error_type`, and the whole chain.
pub fn diagnostic<E: Classified + std::error::Error>(e: &E) -> lambda_runtime::Diagnostic {
    lambda_runtime::Diagnostic { error_type: e.error_type().to_owned(), error_message: error_chain(e) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::use_cases::engine::EngineError;

    #[test]
    fn a_diagnostic_carries_the_stable_error_type_and_the_chain() {
        let d = diagnostic(&EngineError::Contended { attempts: 8 });
        assert_eq!(d.error_type, "record_contended");
        assert!(d.error_message.contains("8 attempts"), "{}", d.error_message);
    }

    #[test]
    fn an_http_api_request_body_is_read_as_api_gateway_sends_it() {
        let request = |body: &str, base64: bool| -> ApiGatewayV2httpRequest {
            serde_json::from_value(serde_json::json!({
                "version": "2.0", "rawPath": "/v1/callbacks", "headers": {}, "body": body,
                "isBase64Encoded": base64,
                "requestContext": {"http": {"method": "POST", "path": "/v1/callbacks"}, "timeEpoch": 0}
            }))
            .unwrap()
        };
        assert_eq!(http_api_body(&request("{\"a\":1}", false)).unwrap(), b"{\"a\":1}");
        assert_eq!(http_api_body(&request("eyJhIjoxfQ==", true)).unwrap(), b"{\"a\":1}");
        let refused = proxy_response(*http_api_body(&request("not base64!", true)).unwrap_err());
        assert_eq!(refused.status_code, 400);
        assert_eq!(refused.headers["content-type"], "application/json");
        let Some(aws_lambda_events::encodings::Body::Text(body)) = refused.body else {
            panic!("a text body")
        };
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"], "invalid_body");
    }
}
