//! What every baton process wires the same way: typed settings from the environment, JSON logs,
//! and the engine over the AWS adapters. The Lambda functions (`baton_lambda`) and `baton local`
//! both start from here.
//!
//! Every setting is read once, at start-up, into [`Settings`]. A missing or invalid variable
//! fails start-up with a message that names it, rather than failing the first message later.

use std::path::PathBuf;
use std::sync::Arc;

use aws_config::SdkConfig;
use baton_core::domain::config::{Config, ConfigErrors};
use baton_core::domain::error::error_chain;
use baton_core::domain::ids::TaskToken;
use baton_core::domain::webhook::Secrets;
use baton_core::ports::dead_letters::{DEFAULT_MAX_RECEIVE_COUNT, REQUEUE_DELAY_SECONDS};
use baton_core::ports::metrics::Metrics;
use baton_core::ports::secrets::{DEFAULT_TTL, RotatingSecrets, SecretSource};
use baton_core::use_cases::engine::{Engine, random_write_ids, system_clock};
use secrecy::{ExposeSecret, SecretString};
use tracing_subscriber::filter::LevelFilter;

use crate::dynamodb::{DEFAULT_DUE_SHARDS, DynamoDbStore, MAX_DUE_SHARDS, TOKEN_INLINE_MAX};
use crate::sqs::SqsTaskPublisher;
use crate::stepfunctions::StepFunctionsOrchestrator;

/// The config compiled into the functions: `infra/workflows.yaml` at build time. The state
/// machines are generated from the same file, so both change together at deploy.
pub const EMBEDDED_CONFIG: &str = include_str!("../../../infra/workflows.yaml");

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
    /// `BATON_TASK_QUEUE_URL_PREFIX`: a task is published to this URL followed by its `queue`
    /// name, its team's own queue (`https://sqs.<region>.<suffix>/<account>/<stack>_tasks-`).
    pub task_queue_url_prefix: Option<String>,
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
    /// `BATON_TOKEN_INLINE_MAX`: task tokens longer than this many characters are kept in an
    /// item of their own (default [`TOKEN_INLINE_MAX`], 128; 0 to [`TaskToken::MAX_LEN`], 2,048).
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

/// `BATON_TASK_QUEUE_URL_PREFIX`, when set: an http(s) URL up to the queue name, to which each
/// task's `queue` is appended.
fn task_queue_url_prefix(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, SettingsError> {
    const NAME: &str = "BATON_TASK_QUEUE_URL_PREFIX";
    let Some(prefix) = lookup(env, NAME) else { return Ok(None) };
    let prefix = prefix.trim();
    let after_scheme = prefix.strip_prefix("https://").or_else(|| prefix.strip_prefix("http://"));
    match after_scheme {
        Some(rest) if rest.contains('/') && !prefix.ends_with('/') => Ok(Some(prefix.to_owned())),
        _ => Err(SettingsError::Invalid {
            name: NAME,
            problem: format!(
                "{prefix:?} is not a queue URL up to the queue name (https://sqs.<region>.amazonaws.com/<account>/<stack>_tasks-)"
            ),
        }),
    }
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
        let webhook_secrets_ttl = optional(env, "BATON_WEBHOOK_SECRETS_TTL_SECONDS", DEFAULT_TTL, |v| {
            whole(v, |n: &u32| *n > 0, "of seconds above 0").map(|n| time::Duration::seconds(n.into()))
        })?;
        let max_receive_count = optional(env, "BATON_MAX_RECEIVE_COUNT", DEFAULT_MAX_RECEIVE_COUNT, |v| {
            whole(v, |n: &u32| *n > 0, "above 0")
        })?;
        let requeue_delay_seconds =
            optional(env, "BATON_REQUEUE_DELAY_SECONDS", REQUEUE_DELAY_SECONDS, |v| {
                whole(v, |n: &i32| (0..=900).contains(n), "of seconds from 0 to 900")
            })?;
        let due_shards = due_shards(env)?;
        let token_inline_max = optional(env, "BATON_TOKEN_INLINE_MAX", TOKEN_INLINE_MAX, |v| {
            let what = format!("of characters from 0 to {}", TaskToken::MAX_LEN);
            whole(v, |n: &usize| *n <= TaskToken::MAX_LEN, &what)
        })?;
        Ok(Settings {
            table: required(env, "BATON_TABLE")?,
            state_machine_prefix,
            state_machine_alias,
            dlq_url: lookup(env, "BATON_DLQ_URL"),
            max_receive_count,
            task_queue_url_prefix: task_queue_url_prefix(env)?,
            config_path: lookup(env, "BATON_CONFIG").map(PathBuf::from),
            webhook_secret_arn: lookup(env, "BATON_WEBHOOK_SECRET_ARN"),
            webhook_secrets: lookup(env, "BATON_WEBHOOK_SECRETS").map(SecretString::from),
            webhook_secrets_ttl,
            source_queue_url: lookup(env, "BATON_SOURCE_QUEUE_URL"),
            requeue_delay_seconds,
            due_shards,
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
    /// `source` makes the reader of the secret an ARN names (Secrets Manager's, on AWS).
    pub async fn secrets(
        &self,
        source: impl FnOnce(String) -> Arc<dyn SecretSource>,
        now: time::OffsetDateTime,
    ) -> Result<RotatingSecrets, SettingsError> {
        match (&self.webhook_secret_arn, &self.webhook_secrets) {
            (Some(_), Some(_)) => Err(SettingsError::Invalid {
                name: "BATON_WEBHOOK_SECRETS",
                problem: "set either it (local use) or BATON_WEBHOOK_SECRET_ARN, not both".into(),
            }),
            (Some(arn), None) => {
                RotatingSecrets::load(source(arn.clone()), self.webhook_secrets_ttl, now).await.map_err(|e| {
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
    engine_with(sdk, settings, config, metrics, crate::stepfunctions::client(sdk))
}

/// The engine over real AWS clients, with the Step Functions client given (a cold start keeps a
/// clone of it for its warm-up).
pub fn engine_with(
    sdk: &SdkConfig,
    settings: &Settings,
    config: Config,
    metrics: Metrics,
    sfn: aws_sdk_sfn::Client,
) -> Engine {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let prefix = settings.task_queue_url_prefix.clone().unwrap_or_default();
    Engine {
        config: Arc::new(config),
        store: Arc::new(
            DynamoDbStore::new(aws_sdk_dynamodb::Client::new(sdk), settings.table.clone())
                .with_due_shards(settings.due_shards)
                .with_token_inline_max(settings.token_inline_max),
        ),
        orchestrator: Arc::new(StepFunctionsOrchestrator::new(sfn)),
        publisher: Arc::new(SqsTaskPublisher::new(sqs, prefix)),
        state_machine_prefix: settings.state_machine_prefix.clone(),
        state_machine_alias: settings.state_machine_alias.clone(),
        metrics,
        clock: system_clock(),
        versions: Default::default(),
        write_ids: random_write_ids(),
        item_sizes: crate::dynamodb::ITEM_SIZES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            Settings::from_lookup(&inline("2048")).unwrap().token_inline_max,
            2048,
            "the API's longest"
        );
        let err = Settings::from_lookup(&inline("2049")).unwrap_err();
        assert!(err.to_string().contains("BATON_TOKEN_INLINE_MAX is invalid"), "{err}");
        assert!(err.to_string().contains("from 0 to 2048"), "{err}");
        let prefix = |value: &'static str| {
            move |name: &str| {
                if name == "BATON_TASK_QUEUE_URL_PREFIX" { Some(value.to_owned()) } else { env(name) }
            }
        };
        let good = "https://sqs.us-east-1.amazonaws.com/123456789012/baton_tasks-";
        assert_eq!(
            Settings::from_lookup(&prefix(good)).unwrap().task_queue_url_prefix.as_deref(),
            Some(good)
        );
        for bad in ["baton_tasks-", "https://sqs.us-east-1.amazonaws.com/123456789012/"] {
            let err = Settings::from_lookup(&prefix(bad)).unwrap_err();
            assert!(err.to_string().contains("BATON_TASK_QUEUE_URL_PREFIX is invalid"), "{err}");
        }
    }

    #[tokio::test]
    async fn the_callback_needs_its_secrets_from_one_place() {
        // Never called: the cases below fail, or use the local secrets, before any read.
        let sdk = |arn: String| -> Arc<dyn SecretSource> { panic!("no secret is read from {arn}") };
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let base = |name: &str| match name {
            "BATON_STATE_MACHINE_PREFIX" => Some("arn:aws:states:us-east-1:1:stateMachine:s-".to_owned()),
            "BATON_TABLE" => Some("t".to_owned()),
            _ => None,
        };
        let none = Settings::from_lookup(&base).unwrap();
        let err = none.secrets(sdk, now).await.err().unwrap();
        assert!(err.to_string().contains("BATON_WEBHOOK_SECRET_ARN is not set"), "{err}");
        let local = |name: &str| match name {
            "BATON_WEBHOOK_SECRETS" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()),
            other => base(other),
        };
        assert!(Settings::from_lookup(&local).unwrap().secrets(sdk, now).await.is_ok());
        let both = |name: &str| match name {
            "BATON_WEBHOOK_SECRET_ARN" => Some("arn:aws:secretsmanager:us-east-1:1:secret:w".to_owned()),
            other => local(other),
        };
        let err = Settings::from_lookup(&both).unwrap().secrets(sdk, now).await.err().unwrap();
        assert!(err.to_string().contains("not both"), "{err}");
    }
}
