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

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use super::mapping::{self, Mapping};
use super::provision::{Clients, ProvisionError, Provisioned, provision};
use super::template::Template;
use crate::config::Config;
use crate::engine::{Clock, Engine};
use crate::intake::Intake;
use crate::metrics::Metrics;
use crate::orchestrator::stepfunctions::StepFunctions;
use crate::outbound::SqsTaskPublisher;
use crate::progress::Progress;
use crate::runtime::{Settings, SettingsError};
use crate::sqs::{DeadLetters, SqsHandler};
use crate::store::dynamodb::DynamoStore;

/// How to run baton locally.
pub struct LocalOptions {
    pub config: Config,
    /// Where the template's `DefinitionUri` paths are read from (the repository root, or a
    /// directory holding definitions generated for a test config).
    pub root: PathBuf,
    pub stack_name: String,
    /// Template parameter values (e.g. `WebhookSecrets`).
    pub parameters: BTreeMap<String, String>,
    /// See [`Mapping::visibility_timeout`].
    pub visibility_timeout: Option<i32>,
    /// Long-poll wait of the local mappings, in seconds.
    pub wait_seconds: i32,
    pub metrics: Metrics,
    pub clock: Clock,
}

/// A running local baton.
pub struct LocalBaton {
    pub provisioned: Provisioned,
    /// Per function (logical id), the engine its handler uses.
    pub engines: BTreeMap<String, Arc<Engine>>,
    /// Per function (logical id), its SQS handler.
    pub handlers: BTreeMap<String, Arc<dyn SqsHandler>>,
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
}

impl LocalBaton {
    /// Provisions the template and starts a mapping per SQS event of each function.
    pub async fn start(
        template: &Template,
        clients: &Clients,
        options: LocalOptions,
    ) -> Result<LocalBaton, LocalError> {
        let provisioned =
            provision(template, &options.root, &options.stack_name, &options.parameters, clients).await?;
        let (stop, stopped) = watch::channel(false);
        let mut baton = LocalBaton {
            provisioned,
            engines: BTreeMap::new(),
            handlers: BTreeMap::new(),
            stop,
            pollers: Vec::new(),
        };
        let config = Arc::new(options.config);
        for function in &template.functions {
            let env = baton.provisioned.function_env.get(&function.logical_id).cloned().unwrap_or_default();
            let settings = Settings::from_lookup(&|name| env.get(name).cloned())
                .map_err(|source| LocalError::Settings { function: function.logical_id.clone(), source })?;
            let engine = Arc::new(Engine {
                config: config.clone(),
                store: Arc::new(DynamoStore::new(clients.dynamodb.clone(), settings.table.clone())),
                orchestrator: Arc::new(StepFunctions::new(clients.sfn.clone())),
                publisher: Arc::new(SqsTaskPublisher::new(
                    clients.sqs.clone(),
                    settings.outbound_queue_url.clone().unwrap_or_default(),
                )),
                state_machine_prefix: settings.state_machine_prefix.clone(),
                metrics: options.metrics.clone(),
                clock: options.clock.clone(),
            });
            let dead_letters = || -> Result<DeadLetters, LocalError> {
                let url = settings.dlq_url().map_err(|source| LocalError::Settings {
                    function: function.logical_id.clone(),
                    source,
                })?;
                Ok(DeadLetters::new(clients.sqs.clone(), url))
            };
            let handler: Arc<dyn SqsHandler> = match function.binary.as_str() {
                "baton-intake" => Arc::new(Intake::new(engine.clone(), dead_letters()?)),
                "baton-progress" => Arc::new(Progress::new(engine.clone(), dead_letters()?)),
                other => {
                    return Err(LocalError::UnknownBinary {
                        function: function.logical_id.clone(),
                        binary: other.to_owned(),
                    });
                }
            };
            for event in &function.sqs_events {
                let queue = baton.provisioned.queues.get(&event.queue_logical_id).ok_or_else(|| {
                    LocalError::UnknownQueue {
                        function: function.logical_id.clone(),
                        queue: event.queue_logical_id.clone(),
                    }
                })?;
                let m = Mapping {
                    queue_url: queue.url.clone(),
                    queue_arn: queue.arn.clone(),
                    batch_size: i32::try_from(event.batch_size).unwrap_or(10),
                    wait_seconds: options.wait_seconds,
                    visibility_timeout: options.visibility_timeout,
                };
                info!(function = %function.logical_id, queue = %queue.name, batch_size = m.batch_size, "event source mapping started");
                baton.pollers.push(tokio::spawn(mapping::run(
                    clients.sqs.clone(),
                    m,
                    handler.clone(),
                    stopped.clone(),
                )));
            }
            baton.engines.insert(function.logical_id.clone(), engine);
            baton.handlers.insert(function.logical_id.clone(), handler);
        }
        Ok(baton)
    }

    /// The engine of the first function, for tests and operator commands that need one.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        self.engines.values().next().cloned()
    }

    /// Stops the mappings and waits for them (a batch in progress finishes first).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for poller in self.pollers {
            let _ = poller.await;
        }
    }
}
