//! Where an operator command points: the local stack `baton local` describes in
//! `.baton/local.json`, or a deployed stack named by flags and environment variables.
//!
//! Rules kept here:
//! - **Flags (and their environment variables) win over the file**, value by value, so one
//!   local value can be overridden without restating the others.
//! - **The file is read only when a value the command needs is missing from the flags.** Then
//!   the endpoint and region come from it too (unless given as flags): that is what makes
//!   `baton trace` after `make run` need no flags at all. When the flags give everything, the
//!   file is not touched, and a missing `--endpoint` means real AWS.
//! - **A missing value is named**: the flag, its environment variable, and that `make run`
//!   writes the file. A file given with `--local` that cannot be read is an error; the default
//!   file being absent is not, until a value is missing.
//! - **Emulator or AWS.** With an endpoint, the SDK gets static test credentials, as the tests
//!   do; without one, the default credential chain. Either way the retries and timeouts are the
//!   deployed functions' ([`baton_aws::sdk::sdk_loader`]).
//! - **The webhook secret is a [`SecretString`]**: `Debug` shows `[REDACTED]`, and nothing
//!   here prints it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_config::{Region, SdkConfig};
use aws_credential_types::Credentials;
use baton_local::info::{self, InfoError, LocalInfo};
use secrecy::SecretString;

/// Where to find the stack: the flags every operator command shares.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Where the stack is (flags and variables win over --local)")]
pub struct TargetArgs {
    /// The file `baton local` (`make run`) writes [default: .baton/local.json].
    #[arg(long = "local", value_name = "PATH")]
    pub local: Option<PathBuf>,
    /// AWS endpoint override, e.g. the emulator's URL. Absent: real AWS.
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub endpoint: Option<String>,
    /// AWS region [default: the file's, else the AWS profile's].
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
    /// The DynamoDB table holding the workflow records.
    #[arg(long, env = "BATON_TABLE")]
    pub table: Option<String>,
    /// The SQS queue domain events arrive on.
    #[arg(long, env = "BATON_INTAKE_QUEUE_URL", value_name = "URL")]
    pub intake_queue_url: Option<String>,
    /// Base URL of the callback API (`POST {api_url}/v1/callbacks`).
    #[arg(long, env = "BATON_API_URL", value_name = "URL")]
    pub api_url: Option<String>,
    /// The `whsec_...` secret callbacks are signed with. Prefer the environment variable: a flag
    /// is visible to other users of the machine.
    #[arg(long, env = "BATON_WEBHOOK_SECRET", hide_env_values = true, value_name = "SECRET")]
    pub webhook_secret: Option<SecretString>,
    /// `arn:...:stateMachine:<stack>-`: a workflow's state machine ARN is this plus its name.
    #[arg(long, env = "BATON_STATE_MACHINE_PREFIX", value_name = "ARN_PREFIX")]
    pub state_machine_prefix: Option<String>,
    /// The SQS queue Step Functions reports to (for `redrive --dlq progress`).
    #[arg(long, env = "BATON_PROGRESS_QUEUE_URL", value_name = "URL")]
    pub progress_queue_url: Option<String>,
    /// The intake dead-letter queue (for `replay`/`redrive --dlq intake`).
    #[arg(long, env = "BATON_INTAKE_DLQ_URL", value_name = "URL")]
    pub intake_dlq_url: Option<String>,
    /// The progress dead-letter queue (for `replay`/`redrive --dlq progress`).
    #[arg(long, env = "BATON_PROGRESS_DLQ_URL", value_name = "URL")]
    pub progress_dlq_url: Option<String>,
    /// The task queues' URL up to the queue name, the stack's `TaskQueueUrlPrefix` output: a
    /// task goes to this followed by its `queue` (a replay may create a task).
    #[arg(long, env = "BATON_TASK_QUEUE_URL_PREFIX", value_name = "URL")]
    pub task_queue_url_prefix: Option<String>,
}

/// A value the command needs, and where it can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Table,
    IntakeQueueUrl,
    ApiUrl,
    WebhookSecret,
    StateMachines,
    ProgressQueueUrl,
    IntakeDlqUrl,
    ProgressDlqUrl,
    TaskQueueUrlPrefix,
}

impl Field {
    /// What it is, for a person.
    fn what(self) -> &'static str {
        match self {
            Field::Table => "DynamoDB table",
            Field::IntakeQueueUrl => "intake queue URL",
            Field::ApiUrl => "callback API URL",
            Field::WebhookSecret => "webhook secret",
            Field::StateMachines => "state machine ARN prefix",
            Field::ProgressQueueUrl => "progress queue URL",
            Field::IntakeDlqUrl => "intake dead-letter queue URL",
            Field::ProgressDlqUrl => "progress dead-letter queue URL",
            Field::TaskQueueUrlPrefix => "task queue URL prefix",
        }
    }

    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Field::Table => "--table",
            Field::IntakeQueueUrl => "--intake-queue-url",
            Field::ApiUrl => "--api-url",
            Field::WebhookSecret => "--webhook-secret",
            Field::StateMachines => "--state-machine-prefix",
            Field::ProgressQueueUrl => "--progress-queue-url",
            Field::IntakeDlqUrl => "--intake-dlq-url",
            Field::ProgressDlqUrl => "--progress-dlq-url",
            Field::TaskQueueUrlPrefix => "--task-queue-url-prefix",
        }
    }

    /// The environment variable that sets it.
    pub fn env(self) -> &'static str {
        match self {
            Field::Table => "BATON_TABLE",
            Field::IntakeQueueUrl => "BATON_INTAKE_QUEUE_URL",
            Field::ApiUrl => "BATON_API_URL",
            Field::WebhookSecret => "BATON_WEBHOOK_SECRET",
            Field::StateMachines => "BATON_STATE_MACHINE_PREFIX",
            Field::ProgressQueueUrl => "BATON_PROGRESS_QUEUE_URL",
            Field::IntakeDlqUrl => "BATON_INTAKE_DLQ_URL",
            Field::ProgressDlqUrl => "BATON_PROGRESS_DLQ_URL",
            Field::TaskQueueUrlPrefix => "BATON_TASK_QUEUE_URL_PREFIX",
        }
    }
}

/// Why a target could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(
        "no {what}: pass {flag} or set {env}, or start the local stack with `make run` (baton local), \
         which writes {path}",
        what = .0.what(), flag = .0.flag(), env = .0.env(), path = info::DEFAULT_PATH
    )]
    Missing(Field),
    #[error(transparent)]
    File(#[from] InfoError),
    #[error(
        "{path} names no state machine for workflow {workflow:?} (it has: {known}); is `baton local` \
         running with the same config? Or pass --state-machine-prefix"
    )]
    UnknownWorkflow { path: String, workflow: String, known: String },
    #[error("no AWS region: pass --region or set AWS_REGION (or configure one in your AWS profile)")]
    NoRegion,
}

/// How a workflow's state machine ARN is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateMachines {
    /// From `--state-machine-prefix`: the prefix plus the workflow's name.
    Prefix(String),
    /// From local.json's map of workflow to ARN.
    Listed { path: String, arns: BTreeMap<String, String> },
}

impl StateMachines {
    /// The ARN prefix every workflow's state machine shares (`arn:...:stateMachine:<stack>-`).
    pub fn prefix(&self) -> Option<String> {
        match self {
            StateMachines::Prefix(prefix) => Some(prefix.clone()),
            StateMachines::Listed { arns, .. } => {
                arns.iter().find_map(|(workflow, arn)| arn.strip_suffix(workflow.as_str()).map(str::to_owned))
            }
        }
    }

    /// The workflow's state machine ARN.
    pub fn arn(&self, workflow: &str) -> Result<String, TargetError> {
        match self {
            StateMachines::Prefix(prefix) => Ok(format!("{prefix}{workflow}")),
            StateMachines::Listed { path, arns } => {
                arns.get(workflow).cloned().ok_or_else(|| TargetError::UnknownWorkflow {
                    path: path.clone(),
                    workflow: workflow.to_owned(),
                    known: arns.keys().cloned().collect::<Vec<_>>().join(", "),
                })
            }
        }
    }
}

/// Where the AWS SDK points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aws {
    /// `None`: real AWS.
    pub endpoint: Option<String>,
    /// `None`: whatever the SDK's default chain finds (e.g. the profile's region).
    pub region: Option<String>,
}

impl Aws {
    /// The SDK configuration, with the functions' retries (standard mode): static test
    /// credentials on an emulator, the default chain otherwise.
    pub async fn sdk_config(&self) -> Result<SdkConfig, TargetError> {
        let mut loader = baton_aws::sdk::sdk_loader();
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &self.endpoint {
            loader = loader
                .endpoint_url(endpoint)
                .credentials_provider(Credentials::new("testing", "testing", None, None, "static"));
        }
        let config = loader.load().await;
        if config.region().is_none() {
            return Err(TargetError::NoRegion);
        }
        Ok(config)
    }
}

/// The values one command asked for. Each field is `Some` exactly when it was asked for.
#[derive(Debug, Default)]
pub struct Target {
    pub table: Option<String>,
    pub intake_queue_url: Option<String>,
    pub api_url: Option<String>,
    pub webhook_secret: Option<SecretString>,
    pub state_machines: Option<StateMachines>,
    /// Queue URLs by field (progress, the DLQs, the task queue prefix), for the recovery commands.
    pub queues: BTreeMap<&'static str, String>,
    /// The local.json the values came from, when one was read.
    pub file: Option<PathBuf>,
    aws: Option<Aws>,
}

impl Target {
    /// Where the SDK points. Present whenever the target was resolved with `aws: true`.
    pub fn aws(&self) -> Aws {
        self.aws.clone().unwrap_or(Aws { endpoint: None, region: None })
    }

    /// Where the AWS requests go, for error messages: `http://127.0.0.1:5000 (region us-east-1,
    /// values from .baton/local.json)`. A wrong region or endpoint is the usual reason for "not
    /// found", so it is always named.
    pub fn location(&self) -> String {
        let aws = self.aws();
        let mut text = aws.endpoint.unwrap_or_else(|| "AWS".to_owned());
        text.push_str(&format!(" (region {}", aws.region.as_deref().unwrap_or("from the AWS profile")));
        if let Some(file) = &self.file {
            text.push_str(&format!(", values missing from the flags taken from {}", file.display()));
        }
        text.push(')');
        text
    }
}

/// Resolves the `fields` a command needs (and, with `aws`, where the SDK points) from the
/// flags, then from local.json for whatever the flags leave out.
pub fn resolve(args: &TargetArgs, fields: &[Field], aws: bool) -> Result<Target, TargetError> {
    resolve_with(args, fields, aws, Path::new(info::DEFAULT_PATH))
}

/// [`resolve`], with the default file's location as an argument.
#[expect(
    clippy::too_many_lines,
    reason = "one resolution of a target's resources, each read in turn with its own error"
)]
fn resolve_with(
    args: &TargetArgs,
    fields: &[Field],
    aws: bool,
    default_file: &Path,
) -> Result<Target, TargetError> {
    let missing = fields.iter().any(|f| match f {
        Field::Table => args.table.is_none(),
        Field::IntakeQueueUrl => args.intake_queue_url.is_none(),
        Field::ApiUrl => args.api_url.is_none(),
        Field::WebhookSecret => args.webhook_secret.is_none(),
        Field::StateMachines => args.state_machine_prefix.is_none(),
        Field::ProgressQueueUrl => args.progress_queue_url.is_none(),
        Field::IntakeDlqUrl => args.intake_dlq_url.is_none(),
        Field::ProgressDlqUrl => args.progress_dlq_url.is_none(),
        Field::TaskQueueUrlPrefix => args.task_queue_url_prefix.is_none(),
    });
    let file = if missing { load(args.local.as_deref(), default_file)? } else { None };
    let from_file = |field: Field, pick: fn(&LocalInfo) -> String| -> Result<String, TargetError> {
        file.as_ref().map(|(_, info)| pick(info)).ok_or(TargetError::Missing(field))
    };

    let mut target = Target::default();
    for &field in fields {
        match field {
            Field::Table => {
                target.table = Some(match &args.table {
                    Some(t) => t.clone(),
                    None => from_file(field, |i| i.table.clone())?,
                });
            }
            Field::IntakeQueueUrl => {
                target.intake_queue_url = Some(match &args.intake_queue_url {
                    Some(u) => u.clone(),
                    None => from_file(field, |i| i.queues.intake.clone())?,
                });
            }
            Field::ApiUrl => {
                let url = match &args.api_url {
                    Some(u) => u.clone(),
                    None => from_file(field, |i| i.api_url.clone())?,
                };
                target.api_url = Some(url.trim_end_matches('/').to_owned());
            }
            Field::WebhookSecret => {
                target.webhook_secret = Some(match &args.webhook_secret {
                    Some(s) => s.clone(),
                    None => SecretString::from(from_file(field, |i| i.webhook_secret.clone())?),
                });
            }
            Field::StateMachines => {
                target.state_machines = Some(match (&args.state_machine_prefix, &file) {
                    (Some(prefix), _) => StateMachines::Prefix(prefix.clone()),
                    (None, Some((path, info))) => StateMachines::Listed {
                        path: path.display().to_string(),
                        arns: info.state_machines.clone(),
                    },
                    (None, None) => return Err(TargetError::Missing(field)),
                });
            }
            Field::ProgressQueueUrl
            | Field::IntakeDlqUrl
            | Field::ProgressDlqUrl
            | Field::TaskQueueUrlPrefix => {
                let (flag, pick): (&Option<String>, fn(&LocalInfo) -> String) = match field {
                    Field::ProgressQueueUrl => (&args.progress_queue_url, |i| i.queues.progress.clone()),
                    Field::IntakeDlqUrl => (&args.intake_dlq_url, |i| i.queues.intake_dlq.clone()),
                    Field::ProgressDlqUrl => (&args.progress_dlq_url, |i| i.queues.progress_dlq.clone()),
                    _ => (&args.task_queue_url_prefix, |i| i.queues.task_url_prefix.clone()),
                };
                let url = match flag {
                    Some(u) => u.clone(),
                    None => from_file(field, pick)?,
                };
                target.queues.insert(field.env(), url);
            }
        }
    }
    if aws {
        let info = file.as_ref().map(|(_, info)| info);
        target.aws = Some(Aws {
            endpoint: args.endpoint.clone().or_else(|| info.map(|i| i.aws_endpoint.clone())),
            region: args.region.clone().or_else(|| info.map(|i| i.region.clone())),
        });
    }
    target.file = file.map(|(path, _)| path);
    Ok(target)
}

/// Reads local.json: the `--local` file (which must exist), else the default one if present.
fn load(explicit: Option<&Path>, default: &Path) -> Result<Option<(PathBuf, LocalInfo)>, InfoError> {
    match explicit {
        Some(path) => Ok(Some((path.to_owned(), LocalInfo::load(path)?))),
        None if default.exists() => Ok(Some((default.to_owned(), LocalInfo::load(default)?))),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use baton_local::info::Queues;
    use secrecy::ExposeSecret;

    use super::*;

    fn info() -> LocalInfo {
        LocalInfo {
            api_url: "http://127.0.0.1:9000/".into(),
            aws_endpoint: "http://127.0.0.1:5000".into(),
            region: "us-east-1".into(),
            table: "local-table".into(),
            queues: Queues {
                intake: "http://q/intake".into(),
                intake_dlq: "http://q/intake-dlq".into(),
                progress: "http://q/progress".into(),
                progress_dlq: "http://q/progress-dlq".into(),
                tasks: Default::default(),
                task_url_prefix: "http://q/l_tasks-".into(),
            },
            state_machines: [(
                "order-review".to_owned(),
                "arn:aws:states:us-east-1:1:stateMachine:l-order-review".to_owned(),
            )]
            .into(),
            webhook_secret: "whsec_bG9jYWw=".into(),
            console_url: None,
        }
    }

    fn file_with(info: &LocalInfo) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("local.json");
        info.save(&path).unwrap();
        (dir, path)
    }

    #[test]
    fn given_no_flags_the_file_supplies_everything_including_the_emulator() {
        let (_dir, path) = file_with(&info());
        let args = TargetArgs { local: Some(path.clone()), ..TargetArgs::default() };
        let all =
            [Field::Table, Field::IntakeQueueUrl, Field::ApiUrl, Field::WebhookSecret, Field::StateMachines];

        let target = resolve(&args, &all, true).unwrap();

        assert_eq!(target.table.as_deref(), Some("local-table"));
        assert_eq!(target.intake_queue_url.as_deref(), Some("http://q/intake"));
        assert_eq!(target.api_url.as_deref(), Some("http://127.0.0.1:9000"), "trailing slash trimmed");
        assert_eq!(target.webhook_secret.as_ref().map(|s| s.expose_secret()), Some("whsec_bG9jYWw="));
        assert_eq!(
            target.state_machines.as_ref().unwrap().arn("order-review").unwrap(),
            "arn:aws:states:us-east-1:1:stateMachine:l-order-review"
        );
        assert_eq!(
            target.aws(),
            Aws { endpoint: Some("http://127.0.0.1:5000".into()), region: Some("us-east-1".into()) }
        );
        assert!(target.location().starts_with("http://127.0.0.1:5000 (region us-east-1, values missing"));
        assert_eq!(target.file, Some(path));
    }

    #[test]
    fn given_flags_and_a_file_the_flags_win_value_by_value() {
        let (_dir, path) = file_with(&info());
        let args = TargetArgs {
            local: Some(path),
            table: Some("flag-table".into()),
            region: Some("eu-west-1".into()),
            state_machine_prefix: Some("arn:aws:states:eu-west-1:2:stateMachine:prod-".into()),
            ..TargetArgs::default()
        };

        let target = resolve(&args, &[Field::Table, Field::StateMachines, Field::ApiUrl], true).unwrap();

        assert_eq!(target.table.as_deref(), Some("flag-table"));
        assert_eq!(
            target.state_machines.as_ref().unwrap().arn("anything").unwrap(),
            "arn:aws:states:eu-west-1:2:stateMachine:prod-anything"
        );
        // The API URL was missing from the flags, so the file was read, and its endpoint used.
        assert_eq!(target.api_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(
            target.aws(),
            Aws { endpoint: Some("http://127.0.0.1:5000".into()), region: Some("eu-west-1".into()) }
        );
    }

    #[test]
    fn given_every_needed_flag_the_file_is_not_read_and_no_endpoint_means_aws() {
        // Given a --local path that does not exist, and flags for everything the command needs
        let args = TargetArgs {
            local: Some(PathBuf::from("/nonexistent/local.json")),
            table: Some("prod-table".into()),
            region: Some("eu-west-1".into()),
            ..TargetArgs::default()
        };
        // When resolved
        let target = resolve(&args, &[Field::Table], true).unwrap();
        // Then nothing came from a file, and the SDK points at real AWS
        assert_eq!(target.file, None);
        assert_eq!(target.aws(), Aws { endpoint: None, region: Some("eu-west-1".into()) });
    }

    #[test]
    fn given_nothing_a_missing_value_names_its_flag_its_variable_and_make_run() {
        // Given no flags and no default local.json
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join(".baton/local.json");
        // When a table is needed
        let err = resolve_with(&TargetArgs::default(), &[Field::Table], true, &absent).unwrap_err();
        // Then the message says how to supply it
        let text = err.to_string();
        for part in ["--table", "BATON_TABLE", "make run", ".baton/local.json"] {
            assert!(text.contains(part), "{text}");
        }
        let err = resolve_with(&TargetArgs::default(), &[Field::WebhookSecret], false, &absent).unwrap_err();
        assert!(err.to_string().contains("--webhook-secret or set BATON_WEBHOOK_SECRET"), "{err}");
    }

    #[test]
    fn given_no_local_flag_the_default_file_is_used_when_present() {
        let (_dir, path) = file_with(&info());
        let target = resolve_with(&TargetArgs::default(), &[Field::Table], true, &path).unwrap();
        assert_eq!(target.table.as_deref(), Some("local-table"));
        assert_eq!(target.file.as_deref(), Some(path.as_path()));
    }

    #[test]
    fn given_a_local_path_that_cannot_be_read_it_is_an_error_naming_it() {
        let args =
            TargetArgs { local: Some(PathBuf::from("/nonexistent/local.json")), ..TargetArgs::default() };
        let err = resolve(&args, &[Field::ApiUrl], false).unwrap_err();
        assert!(matches!(err, TargetError::File(InfoError::Read { .. })), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/local.json"), "{err}");
    }

    #[test]
    fn a_workflow_missing_from_the_file_is_named_with_the_ones_it_has() {
        let (_dir, path) = file_with(&info());
        let args = TargetArgs { local: Some(path), ..TargetArgs::default() };
        let target = resolve(&args, &[Field::StateMachines], false).unwrap();
        let err = target.state_machines.unwrap().arn("refunds").unwrap_err();
        assert!(err.to_string().contains("\"refunds\" (it has: order-review)"), "{err}");
    }

    #[test]
    fn the_secret_stays_out_of_debug_output() {
        let (_dir, path) = file_with(&info());
        let args = TargetArgs {
            local: Some(path),
            webhook_secret: Some(SecretString::from("whsec_ZmxhZw==")),
            ..TargetArgs::default()
        };
        let target = resolve(&args, &[Field::WebhookSecret, Field::ApiUrl], false).unwrap();
        let debug = format!("{args:?} {target:?}");
        assert!(!debug.contains("ZmxhZw"), "{debug}");
        assert!(debug.contains("REDACTED"), "{debug}");
    }
}
