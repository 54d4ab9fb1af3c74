//! Start-up for the Lambda functions: typed settings from the environment, JSON logs, clients
//! built once, and the engine they share.
//!
//! Every setting is read once, at start-up, into [`Settings`]. A missing or invalid variable
//! fails start-up with a message that names it, rather than failing the first message later.

use std::path::PathBuf;
use std::sync::Arc;

use aws_config::SdkConfig;
use secrecy::{ExposeSecret, SecretString};
use tracing_subscriber::filter::LevelFilter;

use crate::config::{Config, ConfigErrors};
use crate::engine::{Engine, random_write_ids, system_clock};
use crate::metrics::Metrics;
use crate::orchestrator::stepfunctions::StepFunctions;
use crate::outbound::SqsTaskPublisher;
use aws_lambda_events::event::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;

use crate::callback::Callbacks;
use crate::error::Classified;
use crate::error::error_chain;
use crate::ids::TaskToken;
use crate::secrets::{RotatingSecrets, SecretsManager};
use crate::sqs::{DeadLetters, SqsDeadLetters, SqsHandler, TimerDeadline};
use crate::store::dynamodb::{DEFAULT_DUE_SHARDS, DynamoStore, ItemFormat, MAX_DUE_SHARDS, TOKEN_INLINE_MAX};
use crate::sweeper::Sweeper;
use crate::webhook::Secrets;

/// The config compiled into the functions: `infra/workflows.yaml` at build time. The state
/// machines are generated from the same file, so both change together at deploy.
pub const EMBEDDED_CONFIG: &str = include_str!("../../infra/workflows.yaml");

/// What a function reads from its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `BATON_TABLE`: the DynamoDB table.
    pub table: String,
    /// `BATON_STATE_MACHINE_PREFIX`: a workflow's state machine ARN is this plus its name.
    pub state_machine_prefix: String,
    /// `BATON_STATE_MACHINE_ALIAS`: executions start through this alias of each state machine
    /// (SAM's `AutoPublishAlias`), which points at the most recently deployed version.
    pub state_machine_alias: Option<String>,
    /// `BATON_DLQ_URL`: the dead-letter queue for this function's poison messages.
    pub dlq_url: Option<String>,
    /// `BATON_MAX_RECEIVE_COUNT`: the source queue's `maxReceiveCount` (default 5, as in
    /// template.yaml; `baton synth --check` keeps the two equal).
    pub max_receive_count: u32,
    /// `BATON_OUTBOUND_QUEUE_URL`: where operator tasks are published.
    pub outbound_queue_url: Option<String>,
    /// `BATON_CONFIG`: a workflow config file to use instead of the embedded one.
    pub config_path: Option<PathBuf>,
    /// `BATON_WEBHOOK_SECRET_ARN`: the Secrets Manager secret holding the callback API's
    /// `whsec_...` secrets, comma separated. What the deployed callback function uses.
    pub webhook_secret_arn: Option<String>,
    /// `BATON_WEBHOOK_SECRETS`: the secrets themselves, for local use only (a Lambda
    /// environment variable is readable by anyone allowed `lambda:GetFunctionConfiguration`).
    pub webhook_secrets: Option<SecretString>,
    /// `BATON_WEBHOOK_SECRETS_TTL_SECONDS`: how long read secrets are used before they are read
    /// again (default 300).
    pub webhook_secrets_ttl: time::Duration,
    /// `BATON_SOURCE_QUEUE_URL`: the queue an SQS-driven function reads, where a message
    /// throttled on every receive is sent back instead of being dead-lettered.
    pub source_queue_url: Option<String>,
    /// `BATON_REQUEUE_DELAY_SECONDS`: how long a requeued copy stays invisible (default 60,
    /// at most 900).
    pub requeue_delay_seconds: i32,
    /// `BATON_DUE_SHARDS`: how many `by_due` index partitions each state is spread over
    /// (default 8; only ever raise it).
    pub due_shards: u32,
    /// `BATON_ITEM_FORMAT`: `compact` (default) or `objects`, how table items are written
    /// ([`ItemFormat`]; docs/RUNBOOK.md, "Upgrading across the compact record").
    pub item_format: ItemFormat,
    /// `BATON_TOKEN_INLINE_MAX`: task tokens longer than this many characters are kept in an
    /// item of their own (default [`TOKEN_INLINE_MAX`], 128; 0 to 1,024).
    pub token_inline_max: usize,
}

/// A setting that is missing or invalid.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {problem}")]
    Invalid { name: &'static str, problem: String },
    #[error("the workflow config is invalid")]
    Config(#[source] ConfigErrors),
}

impl SettingsError {
    /// The stable error type an init failure is reported with.
    pub fn error_type(&self) -> &'static str {
        match self {
            SettingsError::Missing(_) => "setting_missing",
            SettingsError::Invalid { .. } => "setting_invalid",
            SettingsError::Config(_) => "config_invalid",
        }
    }
}

fn lookup(env: &dyn Fn(&str) -> Option<String>, name: &'static str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

fn required(env: &dyn Fn(&str) -> Option<String>, name: &'static str) -> Result<String, SettingsError> {
    lookup(env, name).ok_or(SettingsError::Missing(name))
}

/// An optional setting: `default` when unset, else the value `parse`d; an invalid one names the
/// variable and what is wrong with it.
fn optional<T>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, SettingsError> {
    match lookup(env, name) {
        None => Ok(default),
        Some(v) => parse(v.trim()).map_err(|problem| SettingsError::Invalid { name, problem }),
    }
}

/// A whole number that `fits`, or the problem: `"x" is not a whole number <what>`.
fn whole<T: std::str::FromStr>(v: &str, fits: impl Fn(&T) -> bool, what: &str) -> Result<T, String> {
    v.parse::<T>().ok().filter(|n| fits(n)).ok_or_else(|| format!("{v:?} is not a whole number {what}"))
}

/// `BATON_DUE_SHARDS` (default [`DEFAULT_DUE_SHARDS`], 1 to [`MAX_DUE_SHARDS`]): how many `by_due`
/// partitions each state is spread over. The operator commands read it as the functions do.
pub fn due_shards(env: &dyn Fn(&str) -> Option<String>) -> Result<u32, SettingsError> {
    optional(env, "BATON_DUE_SHARDS", DEFAULT_DUE_SHARDS, |v| {
        whole(v, |n: &u32| (1..=MAX_DUE_SHARDS).contains(n), &format!("from 1 to {MAX_DUE_SHARDS}"))
    })
}

/// `BATON_ITEM_FORMAT` (default `compact`): how table items are written ([`ItemFormat`]). The
/// operator commands read it as the functions do.
pub fn item_format(env: &dyn Fn(&str) -> Option<String>) -> Result<ItemFormat, SettingsError> {
    optional(env, "BATON_ITEM_FORMAT", ItemFormat::default(), ItemFormat::parse)
}

impl Settings {
    /// From the process environment (variables that are not UTF-8 count as unset).
    pub fn from_env() -> Result<Settings, SettingsError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// From any variable lookup: the local runtime passes the template's resolved environment.
    pub fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let state_machine_prefix = required(env, "BATON_STATE_MACHINE_PREFIX")?;
        if !state_machine_prefix.starts_with("arn:") || !state_machine_prefix.contains(":stateMachine:") {
            return Err(SettingsError::Invalid {
                name: "BATON_STATE_MACHINE_PREFIX",
                problem: format!(
                    "{state_machine_prefix:?} is not a state machine ARN prefix (arn:...:stateMachine:<stack>-)"
                ),
            });
        }
        const ALIAS: &str = "BATON_STATE_MACHINE_ALIAS";
        let state_machine_alias = lookup(env, ALIAS);
        if let Some(alias) = &state_machine_alias
            && (alias.chars().all(|c| c.is_ascii_digit())
                || !alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(SettingsError::Invalid {
                name: ALIAS,
                problem: format!(
                    "{alias:?} is not a state machine alias name (letters, digits, - and _, not only digits)"
                ),
            });
        }
        let webhook_secrets_ttl =
            optional(env, "BATON_WEBHOOK_SECRETS_TTL_SECONDS", crate::secrets::DEFAULT_TTL, |v| {
                whole(v, |n: &u32| *n > 0, "of seconds above 0").map(|n| time::Duration::seconds(n.into()))
            })?;
        let max_receive_count =
            optional(env, "BATON_MAX_RECEIVE_COUNT", crate::sqs::DEFAULT_MAX_RECEIVE_COUNT, |v| {
                whole(v, |n: &u32| *n > 0, "above 0")
            })?;
        let requeue_delay_seconds =
            optional(env, "BATON_REQUEUE_DELAY_SECONDS", crate::sqs::REQUEUE_DELAY_SECONDS, |v| {
                whole(v, |n: &i32| (0..=900).contains(n), "of seconds from 0 to 900")
            })?;
        let (due_shards, item_format) = (due_shards(env)?, item_format(env)?);
        let token_inline_max = optional(env, "BATON_TOKEN_INLINE_MAX", TOKEN_INLINE_MAX, |v| {
            whole(v, |n: &usize| *n <= TaskToken::MAX_LEN, "of characters from 0 to 1024")
        })?;
        Ok(Settings {
            table: required(env, "BATON_TABLE")?,
            state_machine_prefix,
            state_machine_alias,
            dlq_url: lookup(env, "BATON_DLQ_URL"),
            max_receive_count,
            outbound_queue_url: lookup(env, "BATON_OUTBOUND_QUEUE_URL"),
            config_path: lookup(env, "BATON_CONFIG").map(PathBuf::from),
            webhook_secret_arn: lookup(env, "BATON_WEBHOOK_SECRET_ARN"),
            webhook_secrets: lookup(env, "BATON_WEBHOOK_SECRETS").map(SecretString::from),
            webhook_secrets_ttl,
            source_queue_url: lookup(env, "BATON_SOURCE_QUEUE_URL"),
            requeue_delay_seconds,
            due_shards,
            item_format,
            token_inline_max,
        })
    }

    /// The DLQ URL, required by the SQS-driven functions.
    pub fn dlq_url(&self) -> Result<&str, SettingsError> {
        self.dlq_url.as_deref().ok_or(SettingsError::Missing("BATON_DLQ_URL"))
    }

    /// The callback API's secrets, required by the callback function: read from Secrets Manager
    /// (`BATON_WEBHOOK_SECRET_ARN`) at `now` and refreshed on the TTL, or, for local use, fixed
    /// by `BATON_WEBHOOK_SECRETS`. Setting both is refused: which one is in use must be obvious.
    pub async fn secrets(
        &self,
        client: &aws_sdk_secretsmanager::Client,
        now: time::OffsetDateTime,
    ) -> Result<RotatingSecrets, SettingsError> {
        match (&self.webhook_secret_arn, &self.webhook_secrets) {
            (Some(_), Some(_)) => Err(SettingsError::Invalid {
                name: "BATON_WEBHOOK_SECRETS",
                problem: "set either it (local use) or BATON_WEBHOOK_SECRET_ARN, not both".into(),
            }),
            (Some(arn), None) => {
                let source = SecretsManager::new(client.clone(), arn.clone());
                RotatingSecrets::load(Arc::new(source), self.webhook_secrets_ttl, now).await.map_err(|e| {
                    SettingsError::Invalid { name: "BATON_WEBHOOK_SECRET_ARN", problem: error_chain(&e) }
                })
            }
            (None, Some(raw)) => {
                Secrets::parse(raw.expose_secret()).map(RotatingSecrets::fixed).map_err(|e| {
                    SettingsError::Invalid { name: "BATON_WEBHOOK_SECRETS", problem: e.to_string() }
                })
            }
            (None, None) => Err(SettingsError::Missing("BATON_WEBHOOK_SECRET_ARN")),
        }
    }

    /// The workflow config: `BATON_CONFIG` when set, else the embedded one.
    pub fn config(&self) -> Result<Config, SettingsError> {
        match &self.config_path {
            Some(path) => Config::load(path),
            None => Config::parse(EMBEDDED_CONFIG),
        }
        .map_err(SettingsError::Config)
    }
}

/// JSON logs at the level `RUST_LOG` names (`error`, `warn`, `info`, `debug` or `trace`; default
/// `info`, as template.yaml's `LogLevel`), with the span fields (workflow, key, input id) on every
/// line. A level, not per-target directives: the functions need no more, and a directive filter
/// links a regex engine into every function.
pub fn init_tracing() {
    let level = std::env::var("RUST_LOG").ok();
    let filter = level.as_deref().map(str::parse::<LevelFilter>);
    let _ = tracing_subscriber::fmt()
        .json()
        .with_max_level(match filter {
            Some(Ok(level)) => level,
            _ => LevelFilter::INFO,
        })
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .without_time()
        .try_init();
    if let Some(Err(_)) = filter {
        tracing::warn!(
            rust_log = level.as_deref().unwrap_or_default(),
            "RUST_LOG is not a level; logging at info"
        );
    }
}

/// The engine over real AWS clients.
pub fn engine(sdk: &SdkConfig, settings: &Settings, config: Config, metrics: Metrics) -> Engine {
    engine_with(sdk, settings, config, metrics, crate::orchestrator::stepfunctions::client(sdk))
}

fn engine_with(
    sdk: &SdkConfig,
    settings: &Settings,
    config: Config,
    metrics: Metrics,
    sfn: aws_sdk_sfn::Client,
) -> Engine {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let outbound = settings.outbound_queue_url.clone().unwrap_or_default();
    Engine {
        config: Arc::new(config),
        store: Arc::new(
            DynamoStore::new(aws_sdk_dynamodb::Client::new(sdk), settings.table.clone())
                .with_format(settings.item_format)
                .with_due_shards(settings.due_shards)
                .with_token_inline_max(settings.token_inline_max),
        ),
        orchestrator: Arc::new(StepFunctions::new(sfn)),
        publisher: Arc::new(SqsTaskPublisher::new(sqs, outbound)),
        state_machine_prefix: settings.state_machine_prefix.clone(),
        state_machine_alias: settings.state_machine_alias.clone(),
        metrics,
        clock: system_clock(),
        versions: Default::default(),
        write_ids: random_write_ids(),
        record_limit: crate::store::dynamodb::RECORD_LIMIT,
    }
}

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
    SDK_OPERATION_TIMEOUT.as_millis() + crate::sqs::DEADLINE_RESERVE.as_millis()
        <= crate::sqs::FUNCTION_TIMEOUT.as_millis()
);
// Every message taken gets at least one whole SDK attempt before its cut-off.
const _: () = assert!(
    SDK_ATTEMPT_TIMEOUT.as_millis()
        <= crate::sqs::FUNCTION_TIMEOUT.as_millis() - crate::sqs::DEADLINE_RESERVE.as_millis()
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
    let sfn = crate::orchestrator::stepfunctions::client(&sdk);
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
        // The batch answers before Lambda's deadline, not when Lambda kills it (sqs.rs).
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
pub async fn serve_callback() -> Result<(), lambda_runtime::Error> {
    let started = match cold_start().await {
        Ok(started) => started,
        Err(e) => return Err(init_failed(e).await),
    };
    // The secrets are read while the connections warm: init waits for the slower of the two.
    let secrets_client = aws_sdk_secretsmanager::Client::new(&started.sdk);
    let read = started.settings.secrets(&secrets_client, started.engine.now());
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
    use crate::engine::EngineError;

    #[test]
    fn a_diagnostic_carries_the_stable_error_type_and_the_chain() {
        let d = diagnostic(&EngineError::Contended { attempts: 8 });
        assert_eq!(d.error_type, "record_contended");
        assert!(d.error_message.contains("8 attempts"), "{}", d.error_message);
    }

    #[test]
    fn missing_or_invalid_settings_name_the_variable() {
        let none = |_: &str| None;
        let err = Settings::from_lookup(&none).unwrap_err();
        assert!(err.to_string().contains("BATON_STATE_MACHINE_PREFIX"), "{err}");
        let bad = |name: &str| (name == "BATON_STATE_MACHINE_PREFIX").then(|| "order-review".to_owned());
        let err = Settings::from_lookup(&bad).unwrap_err();
        assert!(err.to_string().contains("BATON_STATE_MACHINE_PREFIX is invalid"), "{err}");
        let env = |name: &str| match name {
            "BATON_STATE_MACHINE_PREFIX" => Some("arn:aws:states:us-east-1:1:stateMachine:s-".to_owned()),
            "BATON_TABLE" => Some("t".to_owned()),
            "BATON_WEBHOOK_SECRETS" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()),
            _ => None,
        };
        let settings = Settings::from_lookup(&env).unwrap();
        assert!(settings.dlq_url().unwrap_err().to_string().contains("BATON_DLQ_URL"));
        assert!(!format!("{settings:?}").contains("c2VjcmV0"), "secrets never in Debug output");
        assert!(settings.config().is_ok(), "the embedded config is valid");
        let bad_ttl = |name: &str| match name {
            "BATON_WEBHOOK_SECRETS_TTL_SECONDS" => Some("soon".to_owned()),
            other => env(other),
        };
        let err = Settings::from_lookup(&bad_ttl).unwrap_err();
        assert!(err.to_string().contains("BATON_WEBHOOK_SECRETS_TTL_SECONDS is invalid"), "{err}");
        assert_eq!(settings.item_format, ItemFormat::Compact, "compact unless told");
        let format = |value: &'static str| {
            move |name: &str| if name == "BATON_ITEM_FORMAT" { Some(value.to_owned()) } else { env(name) }
        };
        assert_eq!(Settings::from_lookup(&format("objects")).unwrap().item_format, ItemFormat::Objects);
        let err = Settings::from_lookup(&format("json")).unwrap_err();
        assert!(err.to_string().contains("BATON_ITEM_FORMAT is invalid"), "{err}");
        let shards = |value: &'static str| due_shards(&move |_| Some(value.to_owned()));
        assert_eq!(shards(" 16 ").unwrap(), 16);
        assert!(shards("0").is_err() && shards("257").is_err() && shards("x").is_err());
        assert_eq!(due_shards(&|_| None).unwrap(), DEFAULT_DUE_SHARDS);
        assert_eq!(settings.token_inline_max, TOKEN_INLINE_MAX, "128 unless told");
        let inline = |value: &'static str| {
            move |name: &str| {
                if name == "BATON_TOKEN_INLINE_MAX" { Some(value.to_owned()) } else { env(name) }
            }
        };
        assert_eq!(Settings::from_lookup(&inline("0")).unwrap().token_inline_max, 0);
        let err = Settings::from_lookup(&inline("1025")).unwrap_err();
        assert!(err.to_string().contains("BATON_TOKEN_INLINE_MAX is invalid"), "{err}");
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

    #[tokio::test]
    async fn the_callback_needs_its_secrets_from_one_place() {
        let sdk = aws_sdk_secretsmanager::Client::new(
            &aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build(),
        );
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let base = |name: &str| match name {
            "BATON_STATE_MACHINE_PREFIX" => Some("arn:aws:states:us-east-1:1:stateMachine:s-".to_owned()),
            "BATON_TABLE" => Some("t".to_owned()),
            _ => None,
        };
        let none = Settings::from_lookup(&base).unwrap();
        let err = none.secrets(&sdk, now).await.err().unwrap();
        assert!(err.to_string().contains("BATON_WEBHOOK_SECRET_ARN is not set"), "{err}");
        let local = |name: &str| match name {
            "BATON_WEBHOOK_SECRETS" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()),
            other => base(other),
        };
        assert!(Settings::from_lookup(&local).unwrap().secrets(&sdk, now).await.is_ok());
        let both = |name: &str| match name {
            "BATON_WEBHOOK_SECRET_ARN" => Some("arn:aws:secretsmanager:us-east-1:1:secret:w".to_owned()),
            other => local(other),
        };
        let err = Settings::from_lookup(&both).unwrap().secrets(&sdk, now).await.err().unwrap();
        assert!(err.to_string().contains("not both"), "{err}");
    }
}
