//! What baton needs to know from `template.yaml`, read into types.
//!
//! template.yaml is the one list of baton's AWS resources: `sam deploy` creates them on AWS and
//! [`crate::provision()`] creates them on the local emulator, so the two cannot drift apart. moto's
//! own CloudFormation is no substitute: it skips the HttpApi and TTL, ignores
//! DefinitionSubstitutions, and registers state machines where executions cannot see them
//! (docs/EMULATOR_DEVIATIONS.md).
//!
//! Rules this parser keeps:
//! - **Nothing disappears silently.** Every resource type is either modelled here, or listed in
//!   [`SKIPPED_TYPES`] with the reason it has no local counterpart; any other type is an error.
//!   Within a modelled resource, each property is either handled, or listed as ignored because
//!   it changes nothing a local run can observe (encryption, tags, IAM, backups, memory size);
//!   any other property is an error naming its path. Adding something to the template that
//!   would behave differently locally therefore fails `baton local` and the tests until this
//!   module learns it.
//! - **References are checked here, where the path is known.** Every `Ref`, `Fn::GetAtt` and
//!   `${...}` in a value baton uses must name a parameter, a pseudo parameter or a resource
//!   that exists locally, with an attribute the provisioner can produce.
//! - **Long-form intrinsics only.** `!Ref` and friends are YAML tags that serde-saphyr would
//!   otherwise drop without a word (`!Ref Table` would read as the string `Table`); they are
//!   rejected with a message saying what to write instead.
//! - **No explicit physical names** (`TableName`, `FunctionName`): resources are named after the
//!   stack, so that every test and every local run gets its own. A `QueueName` is taken only as
//!   an `Fn::Sub` that starts with `${AWS::StackName}` (the task queues, found by name), which
//!   keeps it the stack's own.
//!
//! Errors name the YAML path, e.g. `Resources.IntakeQueue.Properties.RedrivePolicy.maxReceiveCount:
//! expected a number`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Resource types baton knowingly does not create on the emulator, each with the reason.
pub const SKIPPED_TYPES: &[(&str, &str)] = &[
    (
        "AWS::CloudWatch::Alarm",
        "moto has no metrics to alarm on; alarms are for operators on AWS (RUNBOOK.md)",
    ),
    (
        "AWS::Serverless::HttpApi",
        "`baton local` serves the functions' HttpApi routes itself, as API Gateway would (with the \
         stage's throttle, `DefaultRouteSettings`); moto's API Gateway v2 cannot invoke in-process \
         handlers",
    ),
    (
        "AWS::Serverless::Api",
        "`baton local` serves HTTP routes itself; moto's API Gateway cannot invoke in-process handlers",
    ),
    ("AWS::Logs::LogGroup", "local handlers log to the terminal, not to CloudWatch Logs"),
    ("AWS::IAM::Role", "moto does not enforce IAM, so a role would change nothing locally"),
    (
        "AWS::SQS::QueuePolicy",
        "moto does not enforce queue policies (who may send, TLS only); they guard the queues on AWS, \
         and tools/template_test.py checks what they say",
    ),
    (
        "AWS::IAM::ManagedPolicy",
        "moto does not enforce IAM; the policy contract (tools/policy-check.py) checks the functions' \
         calls against it instead",
    ),
    (
        "AWS::Events::Rule",
        "`baton local` runs the functions' Schedule events itself; moto's EventBridge cannot invoke \
         in-process handlers",
    ),
];

/// Pseudo parameters a local stack can resolve.
pub const PSEUDO_PARAMETERS: &[&str] =
    &["AWS::AccountId", "AWS::Partition", "AWS::Region", "AWS::StackName", "AWS::URLSuffix"];

/// SAM's default function timeout, when neither the function nor Globals sets one.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 3;

/// Lambda's default SQS batch size, when an SQS event does not set `BatchSize`.
pub const DEFAULT_SQS_BATCH_SIZE: u32 = 10;

/// The resources, parameters and function settings baton provisions and runs locally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub tables: Vec<TableSpec>,
    pub queues: Vec<QueueSpec>,
    pub state_machines: Vec<StateMachineSpec>,
    pub functions: Vec<FunctionSpec>,
    /// Parameter name to its `Default`, if it has one.
    pub parameters: BTreeMap<String, Option<String>>,
    /// Parameter name to its `AllowedPattern`, for the parameters that have one: a local stack
    /// refuses a value CloudFormation would refuse.
    pub parameter_patterns: BTreeMap<String, String>,
    /// `Globals.Function.Environment.Variables`; already merged into each [`FunctionSpec::env`].
    pub globals_env: BTreeMap<String, Intrinsic>,
    /// Resources of a [`SKIPPED_TYPES`] type: logical id to type.
    pub skipped: BTreeMap<String, String>,
    /// The HttpApi's stage throttle (`DefaultRouteSettings`), which the local HTTP API applies
    /// as API Gateway does: a request over it is answered 429 before any function runs.
    pub http_throttle: Option<Throttle>,
}

/// An API stage's throttle: requests per second on average, and at once above that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttle {
    pub rate: Intrinsic,
    pub burst: Intrinsic,
}

/// A value in the template: a literal or one of the three long-form intrinsics baton resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intrinsic {
    /// A string, or a number or boolean written as its text.
    Literal(String),
    /// `Ref: Name`: a parameter, a pseudo parameter or a resource.
    Ref(String),
    /// `Fn::GetAtt: [Resource, Attribute]`.
    GetAtt(String, String),
    /// `Fn::Sub: "...${Name}...${Resource.Attribute}..."`.
    Sub(String),
}

/// An `AWS::DynamoDB::Table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub logical_id: String,
    /// Attribute name and type (`S`, `N` or `B`).
    pub attributes: Vec<(String, String)>,
    /// Attribute name and key type (`HASH`, then optionally `RANGE`).
    pub key_schema: Vec<(String, String)>,
    pub gsis: Vec<GsiSpec>,
    /// The TTL attribute, when TTL is enabled.
    pub ttl_attribute: Option<String>,
}

/// A global secondary index. Its projection is always `ALL` (anything else is rejected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiSpec {
    pub name: String,
    pub key_schema: Vec<(String, String)>,
}

/// An `AWS::SQS::Queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub logical_id: String,
    /// `QueueName`: always `${AWS::StackName}...`. `None`: `<stack>-<LogicalId>`.
    pub name: Option<Intrinsic>,
    pub visibility_timeout: Option<u32>,
    pub message_retention: Option<u32>,
    pub fifo: bool,
    pub content_based_deduplication: bool,
    pub redrive: Option<Redrive>,
}

/// Where a queue's messages go after `max_receive_count` receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redrive {
    pub dlq_logical_id: String,
    pub max_receive_count: u32,
}

/// An `AWS::Serverless::StateMachine` (type STANDARD, definition in a file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachineSpec {
    pub logical_id: String,
    /// `Name`, or `${AWS::StackName}-<LogicalId>` when the template gives none.
    pub name: Intrinsic,
    /// The definition file, relative to the template's directory.
    pub definition_uri: String,
    /// `DefinitionSubstitutions`: each `${Key}` in the definition is replaced by the value.
    pub substitutions: BTreeMap<String, Intrinsic>,
    /// `AutoPublishAlias`: each definition deployed is published as a version, and this alias
    /// points at it.
    pub auto_publish_alias: Option<String>,
}

/// An `AWS::Serverless::Function`: which binary, with which environment, fed by which events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSpec {
    pub logical_id: String,
    /// `Metadata.BuildProperties.Binary`: the cargo binary that implements the function.
    pub binary: String,
    /// Globals' environment, overridden by the function's own.
    pub env: BTreeMap<String, Intrinsic>,
    pub sqs_events: Vec<SqsEventSpec>,
    pub http_events: Vec<HttpEventSpec>,
    pub schedule_events: Vec<ScheduleSpec>,
    pub timeout_seconds: u32,
}

/// An SQS event source mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsEventSpec {
    pub queue_logical_id: String,
    pub batch_size: u32,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`: the handler returns the failed ids.
    pub report_batch_item_failures: bool,
    /// `ScalingConfig.MaximumConcurrency`: the most batches Lambda runs at once for this queue.
    pub maximum_concurrency: Option<u32>,
}

/// An HttpApi route. Without `Path` and `Method`, SAM's default route: `ANY $default`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpEventSpec {
    pub method: String,
    pub path: String,
}

/// A `Schedule` or `ScheduleV2` event: `rate(...)` or `cron(...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    pub expression: String,
}

/// Why the template cannot be used locally.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read the template {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the template is not valid YAML")]
    Yaml {
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error(
        "line {line}, column {column}: short-form tag `{tag}`; baton reads the template as plain \
         YAML, so use the long form Ref:/Fn::GetAtt:/Fn::Sub:"
    )]
    ShortFormTag { tag: String, line: u64, column: u64 },
    #[error(
        "Resources.{logical_id}: resource type {resource_type} has no local counterpart; teach \
         local/src/template.rs to provision it, or add it to SKIPPED_TYPES with the reason"
    )]
    UnsupportedResource { logical_id: String, resource_type: String },
    #[error("{path}: unknown reference `{name}`: not a parameter, a pseudo parameter or a resource")]
    UnknownReference { path: String, name: String },
    #[error("{path}: {problem}")]
    Invalid { path: String, problem: String },
    #[error("cannot write the template's task queues for the config")]
    TaskQueues(#[source] crate::task_queues::TaskQueueError),
}

impl Template {
    /// Reads and parses the template at `path`.
    pub fn load(path: &Path) -> Result<Template, TemplateError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TemplateError::Io { path: path.to_owned(), source })?;
        Template::parse(&text)
    }

    /// Reads the template at `path` with its task queue section written for `config`
    /// ([`crate::task_queues`]): what a deploy of `config` creates, as the state machine
    /// definitions generated for it are.
    pub fn load_for(
        path: &Path,
        config: &baton_core::domain::config::Config,
    ) -> Result<Template, TemplateError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TemplateError::Io { path: path.to_owned(), source })?;
        Template::parse_for(&text, config)
    }

    /// Parses template text with its task queue section written for `config`.
    pub fn parse_for(
        yaml: &str,
        config: &baton_core::domain::config::Config,
    ) -> Result<Template, TemplateError> {
        Template::parse(&crate::task_queues::splice(yaml, config).map_err(TemplateError::TaskQueues)?)
    }

    /// Parses template text. See the module docs for what is accepted.
    pub fn parse(yaml: &str) -> Result<Template, TemplateError> {
        let mut options = serde_saphyr::Options::default();
        // Without this, `!Ref Table` silently reads as the string "Table".
        options.reject_unsupported_tags = true;
        let doc: Value = serde_saphyr::from_str_with_options(yaml, options).map_err(yaml_error)?;
        let root = Node::root(&doc);
        root.entries()?;

        let (parameters, parameter_patterns) = parameters(&root)?;
        let resources = root.field("Resources")?;
        let names = Names::collect(&resources, &parameters)?;

        let globals = root.get("Globals").and_then(|g| g.get("Function"));
        let (globals_env, globals_timeout) = match &globals {
            Some(g) => {
                check_properties(g, FUNCTION_HANDLED, FUNCTION_IGNORED)?;
                (environment(g, &names)?, g.get("Timeout").map(|t| t.u32()).transpose()?)
            }
            None => (BTreeMap::new(), None),
        };

        let mut template = Template {
            tables: Vec::new(),
            queues: Vec::new(),
            state_machines: Vec::new(),
            functions: Vec::new(),
            parameters,
            parameter_patterns,
            globals_env,
            skipped: BTreeMap::new(),
            http_throttle: None,
        };
        for (logical_id, resource) in resources.entries()? {
            if resource.get("Condition").is_some() {
                return Err(resource.field("Condition")?.invalid(
                    "conditions are not evaluated locally, so the resource would always exist; \
                     drop the condition or teach local/src/template.rs to evaluate it",
                ));
            }
            let props = resource.get("Properties").unwrap_or_else(|| resource.null_child("Properties"));
            match Kind::of(logical_id, &resource)? {
                Kind::Table => template.tables.push(table(logical_id, &props)?),
                Kind::Queue => template.queues.push(queue(logical_id, &props, &names)?),
                Kind::StateMachine => {
                    template.state_machines.push(state_machine(logical_id, &props, &names)?)
                }
                Kind::Function => template.functions.push(function(
                    logical_id,
                    &resource,
                    &props,
                    &names,
                    &template.globals_env,
                    globals_timeout,
                )?),
                Kind::Skipped(resource_type) => {
                    if resource_type == "AWS::Serverless::HttpApi"
                        && let Some(settings) = props.get("DefaultRouteSettings")
                    {
                        template.http_throttle = Some(Throttle {
                            rate: intrinsic(&settings.field("ThrottlingRateLimit")?, &names)?,
                            burst: intrinsic(&settings.field("ThrottlingBurstLimit")?, &names)?,
                        });
                    }
                    template.skipped.insert(logical_id.to_owned(), resource_type.to_owned());
                }
            }
        }
        Ok(template)
    }

    /// The table with this logical id.
    pub fn table(&self, logical_id: &str) -> Option<&TableSpec> {
        self.tables.iter().find(|t| t.logical_id == logical_id)
    }

    /// The queue with this logical id.
    pub fn queue(&self, logical_id: &str) -> Option<&QueueSpec> {
        self.queues.iter().find(|q| q.logical_id == logical_id)
    }

    /// The function built from this cargo binary.
    pub fn function_by_binary(&self, binary: &str) -> Option<&FunctionSpec> {
        self.functions.iter().find(|f| f.binary == binary)
    }
}

impl Intrinsic {
    /// The logical ids and parameter names this value refers to (pseudo parameters excluded).
    pub fn references(&self) -> Vec<&str> {
        let name = match self {
            Intrinsic::Literal(_) => return Vec::new(),
            Intrinsic::Ref(name) | Intrinsic::GetAtt(name, _) => name.as_str(),
            Intrinsic::Sub(text) => {
                return sub_parts(text)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|p| match p {
                        SubPart::Text(_) => None,
                        SubPart::Ref(name) | SubPart::GetAtt(name, _) => Some(name),
                    })
                    .filter(|name| !PSEUDO_PARAMETERS.contains(name))
                    .collect();
            }
        };
        if PSEUDO_PARAMETERS.contains(&name) { Vec::new() } else { vec![name] }
    }
}

/// One piece of an `Fn::Sub` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SubPart<'a> {
    Text(String),
    /// `${Name}`
    Ref(&'a str),
    /// `${Resource.Attribute}`
    GetAtt(&'a str, &'a str),
}

/// Splits an `Fn::Sub` string into text and references. `${!Literal}` stands for `${Literal}`.
pub(crate) fn sub_parts(text: &str) -> Result<Vec<SubPart<'_>>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed `${{` in Fn::Sub string {text:?}"));
        };
        let inner = &after[..end];
        if let Some(escaped) = inner.strip_prefix('!') {
            literal.push_str("${");
            literal.push_str(escaped);
            literal.push('}');
        } else {
            if inner.is_empty() {
                return Err(format!("empty `${{}}` in Fn::Sub string {text:?}"));
            }
            if !literal.is_empty() {
                parts.push(SubPart::Text(std::mem::take(&mut literal)));
            }
            parts.push(match inner.split_once('.') {
                Some((resource, attribute)) => SubPart::GetAtt(resource, attribute),
                None => SubPart::Ref(inner),
            });
        }
        rest = &after[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(SubPart::Text(literal));
    }
    Ok(parts)
}

fn yaml_error(err: serde_saphyr::Error) -> TemplateError {
    if let serde_saphyr::Error::UnsupportedTag { tag, location } = err.without_snippet() {
        return TemplateError::ShortFormTag {
            tag: tag.clone(),
            line: location.line(),
            column: location.column(),
        };
    }
    TemplateError::Yaml { source: Box::new(err) }
}

// ---- properties each resource type handles or knowingly ignores ----------------------------------

const TABLE_HANDLED: &[&str] =
    &["AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes", "TimeToLiveSpecification"];
/// Capacity, backups, encryption and tags change nothing a local run observes. The emulator's
/// table is always PAY_PER_REQUEST.
const TABLE_IGNORED: &[&str] = &[
    "BillingMode",
    "ProvisionedThroughput",
    "PointInTimeRecoverySpecification",
    "SSESpecification",
    "DeletionProtectionEnabled",
    "TableClass",
    "ContributorInsightsSpecification",
    "OnDemandThroughput",
    "Tags",
];
const QUEUE_HANDLED: &[&str] = &[
    "QueueName",
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "RedrivePolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
];
/// Encryption and tags change nothing a local run observes; `RedriveAllowPolicy` limits which
/// queues may dead-letter into a queue, and locally no queue but the template's tries.
const QUEUE_IGNORED: &[&str] =
    &["KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "RedriveAllowPolicy", "Tags"];
const STATE_MACHINE_HANDLED: &[&str] =
    &["Name", "Type", "DefinitionUri", "DefinitionSubstitutions", "AutoPublishAlias"];
/// IAM is not enforced by moto; logging and tracing go nowhere locally.
const STATE_MACHINE_IGNORED: &[&str] =
    &["Policies", "Role", "RolePath", "PermissionsBoundary", "Logging", "Tracing", "Tags", "PropagateTags"];
const FUNCTION_HANDLED: &[&str] = &["Environment", "Events", "Timeout"];
/// Packaging, runtime, sizing and IAM: locally the handler runs in-process from its cargo binary.
const FUNCTION_IGNORED: &[&str] = &[
    "CodeUri",
    "Handler",
    "Runtime",
    "Architectures",
    "MemorySize",
    "EphemeralStorage",
    "Description",
    "Policies",
    "Role",
    "PermissionsBoundary",
    "KmsKeyArn",
    "Layers",
    "Tracing",
    "LoggingConfig",
    "AutoPublishAlias",
    "ReservedConcurrentExecutions",
    "Tags",
];

// ---- the YAML tree, with paths -------------------------------------------------------------------

static NULL: Value = Value::Null;

/// A value in the parsed YAML and the path that leads to it, for error messages.
#[derive(Debug, Clone)]
struct Node<'a> {
    value: &'a Value,
    path: String,
}

impl<'a> Node<'a> {
    fn root(value: &'a Value) -> Node<'a> {
        Node { value, path: String::new() }
    }

    fn child_path(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_owned() } else { format!("{}.{key}", self.path) }
    }

    /// An absent optional mapping (e.g. `Properties`), read as empty.
    fn null_child(&self, key: &str) -> Node<'a> {
        Node { value: &NULL, path: self.child_path(key) }
    }

    fn invalid(&self, problem: impl Into<String>) -> TemplateError {
        let path = if self.path.is_empty() { "(template)".to_owned() } else { self.path.clone() };
        TemplateError::Invalid { path, problem: problem.into() }
    }

    fn get(&self, key: &str) -> Option<Node<'a>> {
        let value = self.value.as_object()?.get(key)?;
        Some(Node { value, path: self.child_path(key) })
    }

    fn field(&self, key: &str) -> Result<Node<'a>, TemplateError> {
        self.entries()?;
        self.get(key)
            .ok_or_else(|| TemplateError::Invalid { path: self.child_path(key), problem: "required".into() })
    }

    /// The entries of a mapping; `null` (an empty YAML value) reads as an empty mapping.
    fn entries(&self) -> Result<Vec<(&'a str, Node<'a>)>, TemplateError> {
        match self.value {
            Value::Null => Ok(Vec::new()),
            Value::Object(map) => Ok(map
                .iter()
                .map(|(k, v)| (k.as_str(), Node { value: v, path: self.child_path(k) }))
                .collect()),
            _ => Err(self.invalid("expected a mapping")),
        }
    }

    fn items(&self) -> Result<Vec<Node<'a>>, TemplateError> {
        match self.value {
            Value::Array(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, value)| Node { value, path: format!("{}[{i}]", self.path) })
                .collect()),
            _ => Err(self.invalid("expected a list")),
        }
    }

    fn str(&self) -> Result<&'a str, TemplateError> {
        self.value.as_str().ok_or_else(|| self.invalid("expected a string"))
    }

    /// A whole number; CloudFormation also accepts one written as a string.
    fn u32(&self) -> Result<u32, TemplateError> {
        let n = match self.value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| self.invalid("expected a number"))
    }

    fn bool(&self) -> Result<bool, TemplateError> {
        match self.value {
            Value::Bool(b) => Ok(*b),
            Value::String(s) if s == "true" => Ok(true),
            Value::String(s) if s == "false" => Ok(false),
            _ => Err(self.invalid("expected true or false")),
        }
    }

    /// A string, number or boolean, as text.
    fn scalar(&self) -> Result<String, TemplateError> {
        match self.value {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            _ => Err(self.invalid("expected a string or a number")),
        }
    }
}

/// Every key of `props` is handled or knowingly ignored.
fn check_properties(props: &Node<'_>, handled: &[&str], ignored: &[&str]) -> Result<(), TemplateError> {
    for (key, node) in props.entries()? {
        if matches!(key, "TableName" | "FunctionName") {
            return Err(node.invalid(
                "explicit physical names are not allowed: baton names resources after the stack, so \
                 each local run and each test gets its own",
            ));
        }
        if !handled.contains(&key) && !ignored.contains(&key) {
            return Err(node.invalid(
                "not supported locally; teach local/src/template.rs to provision it, or list \
                 it there as ignored with the reason",
            ));
        }
    }
    Ok(())
}

// ---- names and references ------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Table,
    Queue,
    StateMachine,
    Function,
    Skipped(&'static str),
}

impl Kind {
    /// The kind of a resource, from its `Type`; an error for a type baton does not know.
    fn of(logical_id: &str, resource: &Node<'_>) -> Result<Kind, TemplateError> {
        let kind = match resource.field("Type")?.str()? {
            "AWS::DynamoDB::Table" => Kind::Table,
            "AWS::SQS::Queue" => Kind::Queue,
            "AWS::Serverless::StateMachine" => Kind::StateMachine,
            "AWS::Serverless::Function" => Kind::Function,
            other => match SKIPPED_TYPES.iter().find(|(t, _)| *t == other) {
                Some((t, _)) => Kind::Skipped(t),
                None => {
                    return Err(TemplateError::UnsupportedResource {
                        logical_id: logical_id.to_owned(),
                        resource_type: other.to_owned(),
                    });
                }
            },
        };
        Ok(kind)
    }

    /// The `Fn::GetAtt` attributes the provisioner can produce for this kind.
    fn attributes(self) -> &'static [&'static str] {
        match self {
            Kind::Table => &["Arn"],
            Kind::Queue => &["Arn", "QueueName", "QueueUrl"],
            Kind::StateMachine => &["Arn", "Name"],
            Kind::Function | Kind::Skipped(_) => &[],
        }
    }
}

/// Everything a reference may name.
struct Names {
    /// Each parameter's default, when it has one.
    parameters: BTreeMap<String, Option<String>>,
    kinds: BTreeMap<String, Kind>,
}

impl Names {
    fn collect(
        resources: &Node<'_>,
        parameters: &BTreeMap<String, Option<String>>,
    ) -> Result<Names, TemplateError> {
        let mut kinds = BTreeMap::new();
        for (logical_id, resource) in resources.entries()? {
            kinds.insert(logical_id.to_owned(), Kind::of(logical_id, &resource)?);
        }
        Ok(Names { parameters: parameters.clone(), kinds })
    }

    /// A whole number, written out or as `Ref` to a parameter with a default (what a local
    /// stack deploys with).
    fn u32(&self, node: &Node<'_>) -> Result<u32, TemplateError> {
        let Some(name) = node.get("Ref").map(|r| r.str()).transpose()? else { return node.u32() };
        let default = self.parameters.get(name).ok_or_else(|| Names::unknown(node, name))?;
        let default =
            default.as_deref().ok_or_else(|| node.invalid(format!("parameter {name} has no default")))?;
        default
            .trim()
            .parse()
            .map_err(|_| node.invalid(format!("parameter {name}'s default is not a number")))
    }

    fn unknown(node: &Node<'_>, name: &str) -> TemplateError {
        TemplateError::UnknownReference { path: node.path.clone(), name: name.to_owned() }
    }

    fn check_ref(&self, node: &Node<'_>, name: &str) -> Result<(), TemplateError> {
        if PSEUDO_PARAMETERS.contains(&name) || self.parameters.contains_key(name) {
            return Ok(());
        }
        match self.kinds.get(name) {
            Some(Kind::Table | Kind::Queue | Kind::StateMachine) => Ok(()),
            Some(Kind::Function) => Err(node.invalid(format!(
                "`{name}` is a function; functions run in-process locally and have no name or ARN"
            ))),
            Some(Kind::Skipped(t)) => Err(node.invalid(format!(
                "`{name}` is an {t}, which baton does not create locally, so it has no value here"
            ))),
            None if name.starts_with("AWS::") => {
                Err(node.invalid(format!("pseudo parameter `{name}` is not available locally")))
            }
            None => Err(Names::unknown(node, name)),
        }
    }

    fn check_getatt(&self, node: &Node<'_>, name: &str, attribute: &str) -> Result<(), TemplateError> {
        let Some(kind) = self.kinds.get(name) else {
            return Err(Names::unknown(node, name));
        };
        if kind.attributes().contains(&attribute) {
            return Ok(());
        }
        Err(node.invalid(format!(
            "`{name}.{attribute}` is not available locally (available: {})",
            if kind.attributes().is_empty() { "none".to_owned() } else { kind.attributes().join(", ") }
        )))
    }

    fn is_queue(&self, name: &str) -> bool {
        self.kinds.get(name) == Some(&Kind::Queue)
    }
}

/// A literal or a long-form intrinsic, with its references checked.
fn intrinsic(node: &Node<'_>, names: &Names) -> Result<Intrinsic, TemplateError> {
    const EXPECTED: &str = "expected a string, a number or an intrinsic (Ref, Fn::GetAtt, Fn::Sub)";
    let map = match node.value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => return node.scalar().map(Intrinsic::Literal),
        Value::Object(map) if map.len() == 1 => map,
        _ => return Err(node.invalid(EXPECTED)),
    };
    let Some(key) = map.keys().next() else { return Err(node.invalid(EXPECTED)) };
    let inner = node.field(key)?;
    match key.as_str() {
        "Ref" => {
            let name = inner.str()?;
            names.check_ref(&inner, name)?;
            Ok(Intrinsic::Ref(name.to_owned()))
        }
        "Fn::GetAtt" => {
            let (name, attribute) = match inner.value {
                Value::String(s) => {
                    s.split_once('.').ok_or_else(|| inner.invalid("expected Resource.Attribute"))?
                }
                Value::Array(items) if items.len() == 2 => {
                    let items = inner.items()?;
                    (items[0].str()?, items[1].str()?)
                }
                _ => return Err(inner.invalid("expected [Resource, Attribute]")),
            };
            names.check_getatt(&inner, name, attribute)?;
            Ok(Intrinsic::GetAtt(name.to_owned(), attribute.to_owned()))
        }
        "Fn::Sub" => {
            let text = match inner.value {
                Value::String(s) => s,
                Value::Array(_) => {
                    return Err(inner.invalid(
                        "the list form of Fn::Sub (with a variable map) is not supported locally; \
                         write ${Name} or ${Resource.Attribute} directly",
                    ));
                }
                _ => return Err(inner.invalid("expected a string")),
            };
            for part in sub_parts(text).map_err(|problem| inner.invalid(problem))? {
                match part {
                    SubPart::Text(_) => {}
                    SubPart::Ref(name) => names.check_ref(&inner, name)?,
                    SubPart::GetAtt(name, attribute) => names.check_getatt(&inner, name, attribute)?,
                }
            }
            Ok(Intrinsic::Sub(text.clone()))
        }
        other if other.starts_with("Fn::") || other == "Condition" => {
            Err(node.invalid(format!("{other} is not supported locally; use Ref, Fn::GetAtt or Fn::Sub")))
        }
        _ => Err(node.invalid(EXPECTED)),
    }
}

/// `Fn::GetAtt: [Queue, Arn]` naming a queue of this template: its logical id.
fn queue_arn(node: &Node<'_>, names: &Names) -> Result<String, TemplateError> {
    match intrinsic(node, names)? {
        Intrinsic::GetAtt(name, attribute) if attribute == "Arn" && names.is_queue(&name) => Ok(name),
        _ => Err(node.invalid("expected Fn::GetAtt: [<queue>, Arn] naming a queue in this template")),
    }
}

// ---- sections and resources ----------------------------------------------------------------------

/// Each parameter's `Default` and `AllowedPattern`, by name.
type Parameters = (BTreeMap<String, Option<String>>, BTreeMap<String, String>);

fn parameters(root: &Node<'_>) -> Result<Parameters, TemplateError> {
    let (mut defaults, mut patterns) = (BTreeMap::new(), BTreeMap::new());
    if let Some(section) = root.get("Parameters") {
        for (name, parameter) in section.entries()? {
            parameter.entries()?;
            let default = parameter.get("Default").map(|d| d.scalar()).transpose()?;
            defaults.insert(name.to_owned(), default);
            if let Some(pattern) = parameter.get("AllowedPattern") {
                patterns.insert(name.to_owned(), pattern.scalar()?);
            }
        }
    }
    Ok((defaults, patterns))
}

fn parse_key_schema(
    node: &Node<'_>,
    attributes: &[(String, String)],
) -> Result<Vec<(String, String)>, TemplateError> {
    let mut keys = Vec::new();
    for element in node.items()? {
        let name = element.field("AttributeName")?.str()?;
        let key_type = element.field("KeyType")?;
        let expected = if keys.is_empty() { "HASH" } else { "RANGE" };
        if key_type.str()? != expected || keys.len() >= 2 {
            return Err(key_type.invalid("expected a HASH key, then optionally one RANGE key"));
        }
        if !attributes.iter().any(|(a, _)| a == name) {
            return Err(element.invalid(format!("key attribute `{name}` is not in AttributeDefinitions")));
        }
        keys.push((name.to_owned(), expected.to_owned()));
    }
    if keys.is_empty() {
        return Err(node.invalid("expected at least a HASH key"));
    }
    Ok(keys)
}

fn table(logical_id: &str, props: &Node<'_>) -> Result<TableSpec, TemplateError> {
    check_properties(props, TABLE_HANDLED, TABLE_IGNORED)?;
    let mut attributes = Vec::new();
    for definition in props.field("AttributeDefinitions")?.items()? {
        let name = definition.field("AttributeName")?.str()?;
        let attribute_type = definition.field("AttributeType")?;
        if !matches!(attribute_type.str()?, "S" | "N" | "B") {
            return Err(attribute_type.invalid("expected S, N or B"));
        }
        attributes.push((name.to_owned(), attribute_type.str()?.to_owned()));
    }
    let key_schema = parse_key_schema(&props.field("KeySchema")?, &attributes)?;
    let mut gsis = Vec::new();
    if let Some(indexes) = props.get("GlobalSecondaryIndexes") {
        for index in indexes.items()? {
            for (key, node) in index.entries()? {
                if !matches!(key, "IndexName" | "KeySchema" | "Projection" | "ProvisionedThroughput") {
                    return Err(node.invalid("not supported locally"));
                }
            }
            let projection = index.field("Projection")?.field("ProjectionType")?;
            if projection.str()? != "ALL" {
                return Err(projection.invalid("only ProjectionType ALL is supported locally"));
            }
            gsis.push(GsiSpec {
                name: index.field("IndexName")?.str()?.to_owned(),
                key_schema: parse_key_schema(&index.field("KeySchema")?, &attributes)?,
            });
        }
    }
    let ttl_attribute = match props.get("TimeToLiveSpecification") {
        Some(ttl) if ttl.field("Enabled")?.bool()? => Some(ttl.field("AttributeName")?.str()?.to_owned()),
        _ => None,
    };
    Ok(TableSpec { logical_id: logical_id.to_owned(), attributes, key_schema, gsis, ttl_attribute })
}

fn queue(logical_id: &str, props: &Node<'_>, names: &Names) -> Result<QueueSpec, TemplateError> {
    check_properties(props, QUEUE_HANDLED, QUEUE_IGNORED)?;
    let redrive = match props.get("RedrivePolicy") {
        Some(policy) => {
            for (key, node) in policy.entries()? {
                if !matches!(key, "deadLetterTargetArn" | "maxReceiveCount") {
                    return Err(node.invalid("not supported locally"));
                }
            }
            let dlq_logical_id = queue_arn(&policy.field("deadLetterTargetArn")?, names)?;
            if dlq_logical_id == logical_id {
                return Err(policy.invalid("a queue cannot be its own dead-letter queue"));
            }
            Some(Redrive { dlq_logical_id, max_receive_count: policy.field("maxReceiveCount")?.u32()? })
        }
        None => None,
    };
    let flag = |key| props.get(key).map(|n| n.bool()).transpose().map(Option::unwrap_or_default);
    let name = match props.get("QueueName") {
        Some(node) => match intrinsic(&node, names)? {
            Intrinsic::Sub(text) if text.starts_with("${AWS::StackName}") => Some(Intrinsic::Sub(text)),
            _ => {
                return Err(node.invalid(
                    "explicit physical names are allowed only as an Fn::Sub starting with \
                     ${AWS::StackName}: baton names resources after the stack, so each local run and \
                     each test gets its own",
                ));
            }
        },
        None => None,
    };
    Ok(QueueSpec {
        logical_id: logical_id.to_owned(),
        name,
        visibility_timeout: props.get("VisibilityTimeout").map(|n| n.u32()).transpose()?,
        message_retention: props.get("MessageRetentionPeriod").map(|n| n.u32()).transpose()?,
        fifo: flag("FifoQueue")?,
        content_based_deduplication: flag("ContentBasedDeduplication")?,
        redrive,
    })
}

fn state_machine(
    logical_id: &str,
    props: &Node<'_>,
    names: &Names,
) -> Result<StateMachineSpec, TemplateError> {
    if let Some(definition) = props.get("Definition") {
        return Err(definition.invalid("inline definitions are not supported locally; use DefinitionUri"));
    }
    if let Some(events) = props.get("Events") {
        return Err(events.invalid("state machine events are not supported locally"));
    }
    check_properties(props, STATE_MACHINE_HANDLED, STATE_MACHINE_IGNORED)?;
    if let Some(kind) = props.get("Type")
        && kind.str()? != "STANDARD"
    {
        return Err(kind.invalid("only STANDARD state machines are supported locally"));
    }
    let name = match props.get("Name") {
        Some(name) => intrinsic(&name, names)?,
        None => Intrinsic::Sub(format!("${{AWS::StackName}}-{logical_id}")),
    };
    let mut substitutions = BTreeMap::new();
    if let Some(section) = props.get("DefinitionSubstitutions") {
        for (key, value) in section.entries()? {
            substitutions.insert(key.to_owned(), intrinsic(&value, names)?);
        }
    }
    let definition_uri = props.field("DefinitionUri")?;
    let auto_publish_alias = match props.get("AutoPublishAlias") {
        Some(alias) => Some(alias.str()?.to_owned()),
        None => None,
    };
    Ok(StateMachineSpec {
        auto_publish_alias,
        logical_id: logical_id.to_owned(),
        name,
        definition_uri: definition_uri
            .str()
            .map_err(|_| definition_uri.invalid("expected a path relative to the template"))?
            .to_owned(),
        substitutions,
    })
}

/// `Environment.Variables` of a function or of Globals.
fn environment(node: &Node<'_>, names: &Names) -> Result<BTreeMap<String, Intrinsic>, TemplateError> {
    let mut env = BTreeMap::new();
    if let Some(environment) = node.get("Environment") {
        for (key, value) in environment.entries()? {
            if key != "Variables" {
                return Err(value.invalid("not supported locally"));
            }
        }
        if let Some(variables) = environment.get("Variables") {
            for (name, value) in variables.entries()? {
                env.insert(name.to_owned(), intrinsic(&value, names)?);
            }
        }
    }
    Ok(env)
}

fn function(
    logical_id: &str,
    resource: &Node<'_>,
    props: &Node<'_>,
    names: &Names,
    globals_env: &BTreeMap<String, Intrinsic>,
    globals_timeout: Option<u32>,
) -> Result<FunctionSpec, TemplateError> {
    check_properties(props, FUNCTION_HANDLED, FUNCTION_IGNORED)?;
    let binary = resource.field("Metadata")?.field("BuildProperties")?.field("Binary")?.str()?.to_owned();
    let mut env = globals_env.clone();
    env.extend(environment(props, names)?);
    let mut spec = FunctionSpec {
        logical_id: logical_id.to_owned(),
        binary,
        env,
        sqs_events: Vec::new(),
        http_events: Vec::new(),
        schedule_events: Vec::new(),
        timeout_seconds: match props.get("Timeout") {
            Some(timeout) => timeout.u32()?,
            None => globals_timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        },
    };
    if let Some(events) = props.get("Events") {
        for (_, event) in events.entries()? {
            event_source(&mut spec, &event, names)?;
        }
    }
    Ok(spec)
}

fn event_source(spec: &mut FunctionSpec, event: &Node<'_>, names: &Names) -> Result<(), TemplateError> {
    let event_type = event.field("Type")?;
    let props = event.get("Properties").unwrap_or_else(|| event.null_child("Properties"));
    let allow = |handled: &[&str], ignored: &[&str]| check_properties(&props, handled, ignored);
    match event_type.str()? {
        "SQS" => {
            // The batching window only shapes throughput, not what the handler sees.
            allow(
                &["Queue", "BatchSize", "FunctionResponseTypes", "ScalingConfig"],
                &["MaximumBatchingWindowInSeconds"],
            )?;
            let mut report_batch_item_failures = false;
            if let Some(types) = props.get("FunctionResponseTypes") {
                for t in types.items()? {
                    match t.str()? {
                        "ReportBatchItemFailures" => report_batch_item_failures = true,
                        _ => return Err(t.invalid("expected ReportBatchItemFailures")),
                    }
                }
            }
            spec.sqs_events.push(SqsEventSpec {
                queue_logical_id: queue_arn(&props.field("Queue")?, names)?,
                batch_size: props
                    .get("BatchSize")
                    .map(|n| names.u32(&n))
                    .transpose()?
                    .unwrap_or(DEFAULT_SQS_BATCH_SIZE),
                report_batch_item_failures,
                maximum_concurrency: props
                    .get("ScalingConfig")
                    .and_then(|c| c.get("MaximumConcurrency"))
                    .map(|n| names.u32(&n))
                    .transpose()?,
            });
        }
        "HttpApi" => {
            // Auth, route settings and timeouts belong to API Gateway, not to the handler.
            allow(
                &["Method", "Path", "PayloadFormatVersion"],
                &["ApiId", "Auth", "RouteSettings", "TimeoutInMillis"],
            )?;
            if let Some(version) = props.get("PayloadFormatVersion")
                && version.scalar()? != "2.0"
            {
                return Err(version.invalid("only payload format 2.0 is served locally"));
            }
            let method = props.get("Method").map(|m| m.str()).transpose()?;
            let path = props.get("Path").map(|p| p.str()).transpose()?;
            let (method, path) = match (method, path) {
                (Some(method), Some(path)) => (method.to_ascii_uppercase(), path.to_owned()),
                // SAM's default route: everything no other route matches.
                (None, None) => ("ANY".to_owned(), "$default".to_owned()),
                _ => return Err(props.invalid("give both Method and Path, or neither for the default route")),
            };
            spec.http_events.push(HttpEventSpec { method, path });
        }
        "Schedule" | "ScheduleV2" => {
            let key = if event_type.str()? == "Schedule" { "Schedule" } else { "ScheduleExpression" };
            allow(&[key], &["Name", "Description"])?;
            spec.schedule_events.push(ScheduleSpec { expression: props.field(key)?.str()?.to_owned() });
        }
        _ => {
            return Err(
                event_type.invalid("event type not supported locally (supported: SQS, HttpApi, Schedule)")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = include_str!("../../template.yaml");

    fn parsed() -> Template {
        match Template::parse(TEMPLATE) {
            Ok(t) => t,
            Err(e) => panic!("template.yaml does not parse: {e}"),
        }
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    fn reference(name: &str) -> Intrinsic {
        Intrinsic::Ref(name.to_owned())
    }

    /// A minimal template around `resources` (indented two spaces under `Resources:`).
    fn with_resources(resources: &str) -> Result<Template, TemplateError> {
        Template::parse(&format!(
            "Parameters:\n  LogLevel:\n    Type: String\n    Default: info\nResources:\n{resources}"
        ))
    }

    #[test]
    fn the_table_has_its_keys_the_due_index_and_ttl() {
        // Given template.yaml / When it is parsed
        let template = parsed();
        // Then
        let table = template.table("Table").expect("a Table resource");
        assert_eq!(table.key_schema, pairs(&[("pk", "HASH"), ("sk", "RANGE")]));
        assert_eq!(table.attributes, pairs(&[("pk", "S"), ("sk", "S"), ("due_kind", "S"), ("due_at", "S")]));
        assert_eq!(
            table.gsis,
            vec![GsiSpec {
                name: "by_due".into(),
                key_schema: pairs(&[("due_kind", "HASH"), ("due_at", "RANGE")]),
            }]
        );
        assert_eq!(table.ttl_attribute.as_deref(), Some("expires_at"));
    }

    /// What a person must see is kept and said: the table and the dead-letter queues survive a
    /// stack deletion or replacement, and every alarm notifies the alarm topic when one is given.
    #[test]
    fn data_outlives_the_stack_and_every_alarm_notifies() {
        let doc: Value = serde_saphyr::from_str(TEMPLATE).expect("template.yaml parses as YAML");
        let resources = doc["Resources"].as_object().expect("Resources");
        for name in ["Table", "IntakeDLQ", "ProgressDLQ", "TaskDLQRiskReview"] {
            let r = &resources[name];
            assert_eq!(
                (r["DeletionPolicy"].as_str(), r["UpdateReplacePolicy"].as_str()),
                (Some("Retain"), Some("Retain")),
                "{name} must be retained"
            );
        }
        let alarms: Vec<(&String, &Value)> =
            resources.iter().filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm").collect();
        assert!(alarms.len() >= 4, "the DLQ, timed-out and failed alarms");
        let notifies = serde_json::json!({"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]});
        for (name, alarm) in alarms {
            assert_eq!(alarm["Properties"]["AlarmActions"], notifies, "{name} notifies the alarm topic");
        }
    }

    #[test]
    fn work_queues_redrive_to_their_dead_letter_queues_after_five_receives() {
        let template = parsed();
        for (queue, dlq) in [("IntakeQueue", "IntakeDLQ"), ("ProgressQueue", "ProgressDLQ")] {
            let spec = template.queue(queue).expect("the queue");
            assert_eq!(
                spec.redrive,
                Some(Redrive { dlq_logical_id: dlq.into(), max_receive_count: 5 }),
                "{queue}"
            );
            assert_eq!(spec.visibility_timeout, Some(180), "{queue}");
            assert!(!spec.fifo);
            let dlq = template.queue(dlq).expect("the dead-letter queue");
            assert_eq!(dlq.message_retention, Some(1_209_600));
            assert_eq!(dlq.redrive, None);
        }
        // Tasks a worker could not settle: after ten receives, to the task queue's own DLQ,
        // which keeps a task longer than the queue did (its retention counts from the first
        // enqueue), under the name a task is sent to.
        let tasks = template.queue("TaskQueueRiskReview").expect("the risk-review task queue");
        assert_eq!(
            tasks.redrive,
            Some(Redrive { dlq_logical_id: "TaskDLQRiskReview".into(), max_receive_count: 10 })
        );
        assert_eq!(tasks.message_retention, Some(345_600));
        assert_eq!(tasks.name, Some(Intrinsic::Sub("${AWS::StackName}_tasks-risk-review".into())));
        let dlq = template.queue("TaskDLQRiskReview").expect("its dead-letter queue");
        assert_eq!((dlq.message_retention, dlq.redrive.as_ref()), (Some(1_209_600), None));
    }

    #[test]
    fn the_state_machine_reads_its_definition_file_and_substitutes_the_progress_queue() {
        let template = parsed();
        let machine = template
            .state_machines
            .iter()
            .find(|m| m.logical_id == "OrderReviewStateMachine")
            .expect("the order-review state machine");
        assert_eq!(machine.name, Intrinsic::Sub("${AWS::StackName}-order-review".into()));
        assert_eq!(machine.definition_uri, "infra/statemachines/order-review.asl.json");
        assert_eq!(machine.substitutions.get("ProgressQueueUrl"), Some(&reference("ProgressQueue")));
    }

    #[test]
    fn functions_get_their_sqs_events_and_globals_merged_into_their_environment() {
        let template = parsed();
        for (binary, queue, dlq) in
            [("baton-intake", "IntakeQueue", "IntakeDLQ"), ("baton-progress", "ProgressQueue", "ProgressDLQ")]
        {
            let function = template.function_by_binary(binary).expect("the function");
            assert_eq!(
                function.sqs_events,
                vec![SqsEventSpec {
                    queue_logical_id: queue.into(),
                    batch_size: 10,
                    report_batch_item_failures: true,
                    // The template's `IntakeMaximumConcurrency` and `ProgressMaximumConcurrency`.
                    maximum_concurrency: Some(20),
                }]
            );
            assert_eq!(function.timeout_seconds, 30);
            // From Globals
            assert_eq!(function.env.get("BATON_TABLE"), Some(&reference("Table")));
            assert_eq!(function.env.get("RUST_LOG"), Some(&reference("LogLevel")));
            assert_eq!(
                function.env.get("BATON_STATE_MACHINE_PREFIX"),
                Some(&Intrinsic::Sub(
                    "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:${AWS::StackName}-"
                        .into()
                ))
            );
            // Its own
            assert_eq!(function.env.get("BATON_DLQ_URL"), Some(&reference(dlq)));
        }
        let progress = template.function_by_binary("baton-progress").expect("progress");
        let prefix = Intrinsic::Sub(
            "https://sqs.${AWS::Region}.${AWS::URLSuffix}/${AWS::AccountId}/${AWS::StackName}_tasks-".into(),
        );
        assert_eq!(progress.env.get("BATON_TASK_QUEUE_URL_PREFIX"), Some(&prefix));
        assert_eq!(template.globals_env.get("BATON_TABLE"), Some(&reference("Table")));
    }

    #[test]
    fn parameters_keep_their_defaults_and_alarms_are_knowingly_skipped() {
        let template = parsed();
        assert_eq!(template.parameters.get("LogLevel"), Some(&Some("info".to_owned())));
        assert_eq!(template.parameters.get("WebhookSecretArn"), Some(&None), "no default: it must be given");
        assert_eq!(template.parameters.get("AlarmTopicArn"), Some(&Some(String::new())));
        assert_eq!(
            template.skipped.get("IntakeDLQDepthAlarm").map(String::as_str),
            Some("AWS::CloudWatch::Alarm")
        );
    }

    #[test]
    fn an_unknown_resource_type_is_an_error_naming_it() {
        let err = with_resources("  Topic:\n    Type: AWS::SNS::Topic\n").unwrap_err();
        assert!(
            matches!(&err, TemplateError::UnsupportedResource { logical_id, resource_type }
                if logical_id == "Topic" && resource_type == "AWS::SNS::Topic"),
            "{err:?}"
        );
        assert!(err.to_string().contains("Resources.Topic: resource type AWS::SNS::Topic"), "{err}");
    }

    #[test]
    fn a_short_form_tag_says_to_use_the_long_form() {
        let err = with_resources(
            "  Q:\n    Type: AWS::SQS::Queue\n  F:\n    Type: AWS::Serverless::Function\n    \
             Metadata: {BuildProperties: {Binary: f}}\n    Properties:\n      Environment:\n        \
             Variables:\n          URL: !Ref Q\n",
        )
        .unwrap_err();
        assert!(
            matches!(&err, TemplateError::ShortFormTag { tag, line: 14, .. } if tag.contains("Ref")),
            "{err:?}"
        );
        assert!(err.to_string().contains("use the long form Ref:/Fn::GetAtt:/Fn::Sub:"), "{err}");
    }

    #[test]
    fn a_max_receive_count_that_is_not_a_number_names_its_path() {
        let err = with_resources(
            "  IntakeQueue:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy:\n        \
             deadLetterTargetArn:\n          Fn::GetAtt: [IntakeDLQ, Arn]\n        maxReceiveCount: five\n  \
             IntakeDLQ:\n    Type: AWS::SQS::Queue\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Resources.IntakeQueue.Properties.RedrivePolicy.maxReceiveCount: expected a number"
        );
    }

    #[test]
    fn an_unknown_reference_is_an_error_naming_it_and_its_path() {
        let err = with_resources(
            "  M:\n    Type: AWS::Serverless::StateMachine\n    Properties:\n      DefinitionUri: m.json\n      \
             DefinitionSubstitutions:\n        QueueUrl:\n          Ref: NoSuchQueue\n",
        )
        .unwrap_err();
        assert!(
            matches!(&err, TemplateError::UnknownReference { path, name }
                if path == "Resources.M.Properties.DefinitionSubstitutions.QueueUrl.Ref" && name == "NoSuchQueue"),
            "{err:?}"
        );
    }

    #[test]
    fn unknown_references_inside_sub_and_getatt_are_errors_too() {
        let sub = with_resources(
            "  M:\n    Type: AWS::Serverless::StateMachine\n    Properties:\n      DefinitionUri: m.json\n      \
             Name:\n        Fn::Sub: \"${AWS::StackName}-${Nope}\"\n",
        )
        .unwrap_err();
        assert!(matches!(&sub, TemplateError::UnknownReference { name, .. } if name == "Nope"), "{sub:?}");
        let getatt = with_resources(
            "  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy:\n        \
             deadLetterTargetArn:\n          Fn::GetAtt: [Gone, Arn]\n        maxReceiveCount: 3\n",
        )
        .unwrap_err();
        assert!(
            matches!(&getatt, TemplateError::UnknownReference { name, .. } if name == "Gone"),
            "{getatt:?}"
        );
    }

    #[test]
    fn a_reference_to_a_skipped_resource_or_an_unavailable_attribute_is_explained() {
        let machine = |value: &str| {
            with_resources(&format!(
                "  Alarm:\n    Type: AWS::CloudWatch::Alarm\n  M:\n    Type: AWS::Serverless::StateMachine\n    \
                 Properties:\n      DefinitionUri: m.json\n      DefinitionSubstitutions:\n        A:\n          \
                 {value}\n"
            ))
            .unwrap_err()
            .to_string()
        };
        let skipped = machine("Ref: Alarm");
        assert!(skipped.contains("AWS::CloudWatch::Alarm, which baton does not create locally"), "{skipped}");
        let attribute = machine("Fn::GetAtt: [M, StateMachineRevisionId]");
        assert!(
            attribute.ends_with("`M.StateMachineRevisionId` is not available locally (available: Arn, Name)"),
            "{attribute}"
        );
    }

    #[test]
    fn an_unhandled_property_is_an_error_rather_than_a_silent_difference() {
        let err = with_resources("  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      DelaySeconds: 5\n")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("Resources.Q.Properties.DelaySeconds: not supported locally"),
            "{err}"
        );
        let named =
            with_resources("  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName: fixed\n")
                .unwrap_err();
        assert!(named.to_string().contains("explicit physical names"), "{named}");
        let own = "  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName:\n        Fn::Sub: \"${AWS::StackName}_q\"\n";
        assert_eq!(
            with_resources(own).expect("the stack's own name").queues[0].name,
            Some(Intrinsic::Sub("${AWS::StackName}_q".into()))
        );
    }

    #[test]
    fn sub_strings_split_into_text_and_references() {
        assert_eq!(
            sub_parts("arn:${AWS::Partition}:x/${Table.Arn}/${!Literal}-${Name}"),
            Ok(vec![
                SubPart::Text("arn:".into()),
                SubPart::Ref("AWS::Partition"),
                SubPart::Text(":x/".into()),
                SubPart::GetAtt("Table", "Arn"),
                SubPart::Text("/${Literal}-".into()),
                SubPart::Ref("Name"),
            ])
        );
        assert!(sub_parts("broken ${Name").is_err());
        assert_eq!(Intrinsic::Sub("${AWS::StackName}-${Q.Arn}-${P}".into()).references(), vec!["Q", "P"]);
    }

    #[test]
    fn http_and_schedule_events_are_read() {
        let template = with_resources(
            "  F:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: f}}\n    \
             Properties:\n      Timeout: 10\n      Events:\n        Cb:\n          Type: HttpApi\n          \
             Properties: {Method: post, Path: /callbacks}\n        Any:\n          Type: HttpApi\n        \
             Tick:\n          Type: Schedule\n          Properties: {Schedule: rate(1 minute)}\n",
        )
        .expect("parses");
        let function = template.function_by_binary("f").expect("f");
        assert_eq!(
            function.http_events,
            vec![
                HttpEventSpec { method: "POST".into(), path: "/callbacks".into() },
                HttpEventSpec { method: "ANY".into(), path: "$default".into() },
            ]
        );
        assert_eq!(function.schedule_events, vec![ScheduleSpec { expression: "rate(1 minute)".into() }]);
        assert_eq!(function.timeout_seconds, 10);
    }
}
