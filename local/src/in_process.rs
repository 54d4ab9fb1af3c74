//! baton on one machine: the template's resources on the emulator, and the template's functions
//! running in-process behind local event source mappings.
//!
//! Which handler runs for a function comes from the template (`BuildProperties.Binary`), and so
//! do its environment, its queues, batch sizes and redrive policies. A change to template.yaml
//! therefore shows up locally without a second list to keep in step. `baton local` and the
//! end-to-end tests both start baton through [`LocalBaton::start`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use baton_core::ports::secrets::SecretSource;
use baton_secrets_manager::SecretsManagerSource;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::mapping::{self, Mapping};
use crate::provision::{Clients, ProvisionError, Provisioned, ensure_secret, provision};
use crate::template::Template;
use baton_aws::dynamodb::DynamoDbStore;
use baton_aws::sqs::SqsDeadLetters;
use baton_aws::sqs::SqsTaskPublisher;
use baton_aws::stepfunctions::StepFunctionsOrchestrator;
use baton_aws::wiring::{Settings, SettingsError};
use baton_core::domain::config::Config;
use baton_core::domain::error::Classified;
use baton_core::domain::error::error_chain;
use baton_core::ports::dead_letters::DeadLetters;
use baton_core::ports::metrics::Metrics;
use baton_core::use_cases::batch::SqsHandler;
use baton_core::use_cases::callback::Callbacks;
use baton_core::use_cases::engine::{Clock, Engine};
use baton_core::use_cases::intake::Intake;
use baton_core::use_cases::progress::Progress;
use baton_core::use_cases::sweeper::Sweeper;

/// How to run baton locally.
pub struct LocalOptions {
    pub config: Config,
    /// Where the template's `DefinitionUri` paths are read from (the repository root, or a
    /// directory holding definitions generated for a test config).
    pub root: PathBuf,
    pub stack_name: String,
    /// Template parameter values. `WebhookSecretArn`, when the template has it and it is not
    /// given here, is a secret this stack creates on the emulator holding `webhook_secret`.
    pub parameters: BTreeMap<String, String>,
    /// The callback API's `whsec_...` secrets (comma separated) for the secret created locally.
    pub webhook_secret: String,
    /// Environment variables set on every function, over the template's (e.g. a short
    /// `BATON_WEBHOOK_SECRETS_TTL_SECONDS` in a test of rotation).
    pub env: BTreeMap<String, String>,
    /// See [`Mapping::visibility_timeout`].
    pub visibility_timeout: Option<i32>,
    /// Long-poll wait of the local mappings, in seconds.
    pub wait_seconds: i32,
    pub metrics: Metrics,
    pub clock: Clock,
    /// Functions (logical ids) whose event source mappings (or schedule) are not started: a
    /// test drives their handlers by hand.
    pub paused: Vec<String>,
    /// Where the HTTP API listens (port 0: any free port on 127.0.0.1).
    pub http_port: u16,
    /// How often the sweeper runs; `None` follows the template's schedule.
    pub sweep_every: Option<Duration>,
}

/// A running local baton.
pub struct LocalBaton {
    pub provisioned: Provisioned,
    /// Per function (logical id), the engine its handler uses.
    pub engines: BTreeMap<String, Arc<Engine>>,
    /// An engine for operators and tests: what `baton cancel` or `baton replay` does, with the
    /// operator's own identity rather than a function's.
    operator: Arc<Engine>,
    /// Per function (logical id), its SQS handler.
    pub handlers: BTreeMap<String, Arc<dyn SqsHandler>>,
    /// The callback handler, when the template has the callback function.
    pub callbacks: Option<Arc<Callbacks>>,
    /// The sweeper, when the template has the sweeper function.
    pub sweeper: Option<Arc<Sweeper>>,
    /// The HTTP API's base URL (`http://127.0.0.1:<port>`), when it has routes.
    pub api_url: Option<String>,
    stop: watch::Sender<bool>,
    pollers: Vec<JoinHandle<()>>,
}

/// Why the local runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error("function {function}: {source}")]
    Settings {
        function: String,
        #[source]
        source: SettingsError,
    },
    #[error("function {function} builds binary {binary:?}, which the local runtime cannot run")]
    UnknownBinary { function: String, binary: String },
    #[error("function {function} is triggered by queue {queue}, which the template does not declare")]
    UnknownQueue { function: String, queue: String },
    #[error(
        "function {function} has schedule {expression:?}; locally only rate(N minute[s]|hour[s]|day[s]) runs"
    )]
    Schedule { function: String, expression: String },
    #[error("the template declares no function")]
    NoFunctions,
    #[error(
        "the config's task queue {queue:?} ({named_by}) has no queue {logical_id} in the template; \
         run `baton synth`, which writes the task queues from the config"
    )]
    MissingTaskQueue { queue: String, named_by: String, logical_id: String },
    #[error(transparent)]
    TaskQueues(#[from] crate::task_queues::TaskQueueError),
    #[error("the HttpApi's {name} is {value:?}, not a number of requests (0 or more)")]
    Throttle { name: &'static str, value: String },
    #[error("cannot serve the HTTP API on 127.0.0.1:{port}")]
    Http {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

impl LocalBaton {
    /// Provisions the template and starts a mapping per SQS event of each function.
    #[expect(
        clippy::too_many_lines,
        reason = "the template's functions started one after another, each kind with its own wiring"
    )]
    pub async fn start(
        template: &Template,
        clients: &Clients,
        options: LocalOptions,
    ) -> Result<LocalBaton, LocalError> {
        let mut parameters = options.parameters.clone();
        if template.parameters.contains_key(WEBHOOK_SECRET_PARAMETER)
            && !parameters.contains_key(WEBHOOK_SECRET_PARAMETER)
        {
            let name = format!("{}-webhook-secrets", options.stack_name);
            let arn = ensure_secret(&clients.secretsmanager, &name, &options.webhook_secret).await?;
            parameters.insert(WEBHOOK_SECRET_PARAMETER.to_owned(), arn);
        }
        // Every task must have its team's queue to go to: a config the template was not written
        // for is refused here, naming the queue, rather than failing each publish later.
        for queue in crate::task_queues::task_queues(&options.config)? {
            if template.queue(&queue.queue_id()).is_none() {
                return Err(LocalError::MissingTaskQueue {
                    logical_id: queue.queue_id(),
                    queue: queue.name,
                    named_by: queue.named_by,
                });
            }
        }
        let provisioned =
            provision(template, &options.root, &options.stack_name, &parameters, clients).await?;
        register_stack(clients, &provisioned).await;
        let (stop, stopped) = watch::channel(false);
        let config = Arc::new(options.config);
        let engine_for = |clients: &Clients, settings: &Settings| {
            Arc::new(Engine {
                config: config.clone(),
                store: Arc::new(
                    DynamoDbStore::new(clients.dynamodb.clone(), settings.table.clone())
                        .with_due_shards(settings.due_shards)
                        .with_token_inline_max(settings.token_inline_max),
                ),
                orchestrator: Arc::new(StepFunctionsOrchestrator::new(clients.sfn.clone())),
                publisher: Arc::new(SqsTaskPublisher::new(
                    clients.sqs.clone(),
                    settings.task_queue_url_prefix.clone().unwrap_or_default(),
                )),
                state_machine_prefix: settings.state_machine_prefix.clone(),
                state_machine_alias: settings.state_machine_alias.clone(),
                metrics: options.metrics.clone(),
                clock: options.clock.clone(),
                write_ids: baton_core::use_cases::engine::random_write_ids(),
                item_sizes: baton_aws::dynamodb::ITEM_SIZES,
                versions: Default::default(),
            })
        };
        let settings_of = |logical_id: &str| {
            let mut env = provisioned.function_env.get(logical_id).cloned().unwrap_or_default();
            env.extend(options.env.clone());
            Settings::from_lookup(&|name| env.get(name).cloned())
                .map_err(|source| LocalError::Settings { function: logical_id.to_owned(), source })
        };
        let operator = match template.functions.first() {
            Some(first) => engine_for(clients, &settings_of(&first.logical_id)?),
            None => return Err(LocalError::NoFunctions),
        };
        let mut baton = LocalBaton {
            provisioned: provisioned.clone(),
            engines: BTreeMap::new(),
            operator,
            handlers: BTreeMap::new(),
            callbacks: None,
            sweeper: None,
            api_url: None,
            stop,
            pollers: Vec::new(),
        };
        let mut routes: Vec<(String, String)> = Vec::new();
        for function in &template.functions {
            let settings = settings_of(&function.logical_id)?;
            let own = clients.acting_as(&function.logical_id, &options.stack_name);
            let engine = engine_for(&own, &settings);
            engine.register_config().await;
            let dead_letters = || -> Result<DeadLetters, LocalError> {
                let url = settings.dlq_url().map_err(|source| LocalError::Settings {
                    function: function.logical_id.clone(),
                    source,
                })?;
                Ok(SqsDeadLetters::shared(
                    own.sqs.clone(),
                    url,
                    settings.max_receive_count,
                    settings.source_queue_url.clone(),
                    settings.requeue_delay_seconds,
                ))
            };
            let function_id = function.logical_id.clone();
            let handler: Option<Arc<dyn SqsHandler>> = match function.binary.as_str() {
                "baton-intake" => Some(Arc::new(Intake::new(engine.clone(), dead_letters()?))),
                "baton-progress" => Some(Arc::new(Progress::new(engine.clone(), dead_letters()?))),
                "baton-callback" => {
                    let client = own.secretsmanager.clone();
                    let source = move |arn: String| -> Arc<dyn SecretSource> {
                        Arc::new(SecretsManagerSource::new(client, arn))
                    };
                    let secrets = settings
                        .secrets(source, engine.now())
                        .await
                        .map_err(|source| LocalError::Settings { function: function_id.clone(), source })?;
                    baton.callbacks = Some(Arc::new(Callbacks::new(engine.clone(), secrets)));
                    routes.extend(function.http_events.iter().map(|e| (e.method.clone(), e.path.clone())));
                    None
                }
                "baton-sweeper" => {
                    let sweeper = Arc::new(Sweeper::new(engine.clone()));
                    let every = match (options.sweep_every, function.schedule_events.first()) {
                        (Some(every), _) => every,
                        (None, Some(s)) => rate(&s.expression).ok_or_else(|| LocalError::Schedule {
                            function: function_id.clone(),
                            expression: s.expression.clone(),
                        })?,
                        (None, None) => Duration::from_secs(60),
                    };
                    if !options.paused.contains(&function_id) {
                        baton.pollers.push(tokio::spawn(sweep_every(
                            sweeper.clone(),
                            every,
                            stopped.clone(),
                        )));
                    }
                    baton.sweeper = Some(sweeper);
                    None
                }
                other => {
                    return Err(LocalError::UnknownBinary {
                        function: function_id,
                        binary: other.to_owned(),
                    });
                }
            };
            let paused = options.paused.contains(&function_id);
            if paused {
                info!(function = %function_id, "paused: its event source mappings are not started");
            }
            for event in function.sqs_events.iter().filter(|_| !paused) {
                let Some(handler) = handler.clone() else { break };
                let queue = baton.provisioned.queues.get(&event.queue_logical_id).ok_or_else(|| {
                    LocalError::UnknownQueue {
                        function: function_id.clone(),
                        queue: event.queue_logical_id.clone(),
                    }
                })?;
                let timeout = Duration::from_secs(function.timeout_seconds.into());
                let m = Mapping {
                    queue_url: queue.url.clone(),
                    queue_arn: queue.arn.clone(),
                    batch_size: i32::try_from(event.batch_size).unwrap_or(10),
                    wait_seconds: options.wait_seconds,
                    visibility_timeout: options.visibility_timeout,
                    timeout,
                    concurrency: mapping::concurrency(
                        event.maximum_concurrency,
                        options.visibility_timeout,
                        timeout,
                    ),
                };
                info!(function = %function_id, queue = %queue.name, batch_size = m.batch_size, concurrency = m.concurrency, "event source mapping started");
                baton.pollers.push(tokio::spawn(mapping::run(
                    clients.sqs.clone(),
                    m,
                    handler,
                    stopped.clone(),
                )));
            }
            if let Some(handler) = handler {
                baton.handlers.insert(function_id.clone(), handler);
            }
            baton.engines.insert(function.logical_id.clone(), engine);
        }
        if let (Some(callbacks), false) = (baton.callbacks.clone(), routes.is_empty()) {
            let throttle = match &template.http_throttle {
                Some(t) => Some(Throttle::new(
                    throttle_value(&baton.provisioned, &t.rate, "ThrottlingRateLimit")?,
                    throttle_value(&baton.provisioned, &t.burst, "ThrottlingBurstLimit")?,
                )),
                None => None,
            };
            let (url, server) =
                serve_http(callbacks, &routes, throttle, options.http_port, stopped.clone()).await?;
            info!(url = %url, routes = ?routes, "HTTP API listening");
            baton.api_url = Some(url);
            baton.pollers.push(server);
        }
        Ok(baton)
    }

    /// What `.baton/local.json` says about this running stack.
    pub fn info(&self, aws_endpoint: &str, webhook_secret: &str) -> crate::info::LocalInfo {
        let queue = |id: &str| self.provisioned.queues.get(id).map(|q| q.url.clone()).unwrap_or_default();
        let prefix = self.engine().map(|e| e.state_machine_prefix.clone()).unwrap_or_default();
        let workflows = self.engine().map(|e| e.config.workflows.clone()).unwrap_or_default();
        let tasks = self
            .engine()
            .and_then(|e| crate::task_queues::task_queues(&e.config).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|q| {
                let urls = crate::info::TaskQueueUrls { url: queue(&q.queue_id()), dlq: queue(&q.dlq_id()) };
                (q.name, urls)
            })
            .collect();
        let task_url_prefix = self
            .provisioned
            .function_env
            .values()
            .find_map(|env| env.get("BATON_TASK_QUEUE_URL_PREFIX").cloned())
            .unwrap_or_default();
        crate::info::LocalInfo {
            api_url: self.api_url.clone().unwrap_or_default(),
            aws_endpoint: aws_endpoint.to_owned(),
            region: crate::provision::REGION.to_owned(),
            table: self.provisioned.tables.get("Table").cloned().unwrap_or_default(),
            queues: crate::info::Queues {
                intake: queue("IntakeQueue"),
                intake_dlq: queue("IntakeDLQ"),
                progress: queue("ProgressQueue"),
                progress_dlq: queue("ProgressDLQ"),
                tasks,
                task_url_prefix,
            },
            state_machines: workflows
                .iter()
                .map(|w| (w.name.to_string(), format!("{prefix}{}", w.name)))
                .collect(),
            webhook_secret: webhook_secret.to_owned(),
            console_url: None,
        }
    }

    /// The operator's engine, for tests and operator commands that act as an operator would.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        Some(self.operator.clone())
    }

    /// Stops the mappings and waits for them (a batch in progress finishes first).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for poller in self.pollers {
            let _ = poller.await;
        }
    }
}

/// The template parameter naming the callback API's Secrets Manager secret.
pub const WEBHOOK_SECRET_PARAMETER: &str = "WebhookSecretArn";

/// Hands the stack's resolved names and ARNs to the emulator for the policy contract
/// ([`crate::identity`]). Best effort: a plain moto_server has no such route, and a local run
/// needs none of it.
async fn register_stack(clients: &Clients, provisioned: &Provisioned) {
    let Some(endpoint) = &clients.endpoint else { return };
    let url = format!("{endpoint}/_baton/stacks");
    let body = provisioned.resolution().to_string();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = http::Request::post(&url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)));
    match request {
        Ok(request) => match client.request(request).await {
            Ok(response) if response.status().is_success() => {}
            Ok(response) => tracing::debug!(status = %response.status(), "the emulator keeps no call record"),
            Err(e) => tracing::debug!(error = %e, "cannot register the stack with the emulator"),
        },
        Err(e) => tracing::debug!(error = %e, "cannot build the stack registration"),
    }
}

/// Parses `rate(N minute|minutes|hour|hours|day|days)`, the schedules SAM templates use.
pub fn rate(expression: &str) -> Option<Duration> {
    let inner = expression.strip_prefix("rate(")?.strip_suffix(')')?;
    let (n, unit) = inner.trim().split_once(' ')?;
    let n: u64 = n.parse().ok()?;
    let unit = match unit.trim() {
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3600,
        "day" | "days" => 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(n * unit))
}

async fn sweep_every(sweeper: Arc<Sweeper>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = sweeper.run_once(sweeper.now()).await {
            warn!(error_type = e.error_type(), error = %error_chain(&e), "sweep failed; the next one retries");
        }
    }
}

/// API Gateway's payload limit: larger bodies never reach the function.
const GATEWAY_MAX_BODY: usize = 10 * 1024 * 1024;

/// A throttle value of the template's HttpApi, resolved for this stack (a parameter, say).
fn throttle_value(
    provisioned: &Provisioned,
    value: &crate::template::Intrinsic,
    name: &'static str,
) -> Result<f64, LocalError> {
    let text = provisioned.resolve(value)?;
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| *v >= 0.0)
        .ok_or_else(|| LocalError::Throttle { name, value: text })
}

/// API Gateway's stage throttle, a token bucket: `burst` requests at once, refilled at `rate`
/// a second. What it refuses gets 429 before any function runs, as on AWS.
#[derive(Debug)]
pub struct Throttle {
    rate: f64,
    burst: f64,
    /// Tokens left, and when they were counted.
    bucket: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl Throttle {
    pub fn new(rate: f64, burst: f64) -> Throttle {
        Throttle { rate, burst, bucket: std::sync::Mutex::new((burst, std::time::Instant::now())) }
    }

    /// Takes a token if there is one.
    pub fn admit(&self) -> bool {
        let Ok(mut bucket) = self.bucket.lock() else { return true };
        let now = std::time::Instant::now();
        let (tokens, since) = *bucket;
        let tokens = (tokens + now.duration_since(since).as_secs_f64() * self.rate).min(self.burst);
        let admitted = tokens >= 1.0;
        *bucket = (if admitted { tokens - 1.0 } else { tokens }, now);
        admitted
    }
}

/// Serves the template's HTTP routes on 127.0.0.1, as API Gateway would.
async fn serve_http(
    callbacks: Arc<Callbacks>,
    routes: &[(String, String)],
    throttle: Option<Throttle>,
    port: u16,
    mut stop: watch::Receiver<bool>,
) -> Result<(String, JoinHandle<()>), LocalError> {
    let mut router = axum::Router::new();
    let throttle = Arc::new(throttle);
    for (method, path) in routes {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap_or(http::Method::POST);
        let filter =
            axum::routing::MethodFilter::try_from(method).unwrap_or(axum::routing::MethodFilter::POST);
        let (callbacks, throttle) = (callbacks.clone(), throttle.clone());
        router = router.route(
            path,
            axum::routing::on(filter, move |headers: http::HeaderMap, body: axum::body::Bytes| {
                let (callbacks, throttle) = (callbacks.clone(), throttle.clone());
                async move {
                    if throttle.as_ref().as_ref().is_some_and(|t| !t.admit()) {
                        // API Gateway's own answer to a request over the stage's rate.
                        return axum::response::Response::builder()
                            .status(http::StatusCode::TOO_MANY_REQUESTS)
                            .header("content-type", "application/json")
                            .body(axum::body::Body::from(r#"{"message":"Too Many Requests"}"#))
                            .unwrap_or_default();
                    }
                    let (parts, body) = callbacks.handle(&headers, &body).await.into_response().into_parts();
                    axum::response::Response::from_parts(parts, axum::body::Body::from(body))
                }
            }),
        );
    }
    let router = router.layer(axum::extract::DefaultBodyLimit::max(GATEWAY_MAX_BODY));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| LocalError::Http { port, source })?;
    let addr = listener.local_addr().map_err(|source| LocalError::Http { port, source })?;
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.changed().await;
        };
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            warn!(error = %e, "HTTP API stopped");
        }
    });
    Ok((format!("http://{addr}"), server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_throttle_lets_a_burst_through_then_the_rate() {
        let throttle = Throttle::new(0.0, 3.0);
        assert_eq!([(); 4].map(|()| throttle.admit()), [true, true, true, false]);
        let refilled = Throttle::new(1000.0, 1.0);
        assert!(refilled.admit());
        std::thread::sleep(Duration::from_millis(5));
        assert!(refilled.admit(), "a token a millisecond at 1000/s");
    }

    #[test]
    fn rates_parse_as_sam_writes_them() {
        assert_eq!(rate("rate(1 minute)"), Some(Duration::from_secs(60)));
        assert_eq!(rate("rate(5 minutes)"), Some(Duration::from_secs(300)));
        assert_eq!(rate("rate(2 hours)"), Some(Duration::from_secs(7200)));
        assert_eq!(rate("cron(0 * * * ? *)"), None);
        assert_eq!(rate("rate(1 fortnight)"), None);
    }
}
