//! Creating a [`Template`]'s resources on the local emulator, and resolving its intrinsics.
//!
//! A stack here is a name prefix, not a CloudFormation stack: every table and queue is called
//! `<stack>-<LogicalId>`, so tests and local runs on one emulator never share a resource. The
//! account, region and partition are moto's defaults ([`ACCOUNT_ID`], [`REGION`], [`PARTITION`]).
//!
//! Rules it keeps:
//! - **Dependencies first.** Tables, then queues (a dead-letter queue before the queues that
//!   redrive to it), then state machines (whose substitutions name queues and tables), then
//!   the functions' environments. Within each kind, template order, unless a dependency says
//!   otherwise.
//! - **Re-running is safe.** Against an emulator that already holds the stack, each resource is
//!   reused: an existing table must have the template's keys and indexes (else [`ProvisionError::Drift`]),
//!   a queue whose attributes changed gets them set, and a state machine whose definition
//!   changed gets the new one, so an edited ASL file shows up without restarting the emulator.
//! - **Definitions are substituted as SAM does,** `${Name}` for each DefinitionSubstitutions
//!   key, with the value JSON-escaped when the placeholder sits inside a JSON string. A
//!   placeholder left without a value is an error here rather than a `States.Runtime` failure
//!   in the middle of an execution.
//! - **SDK errors are kept whole** as the `#[source]` of [`ProvisionError::Aws`].
//!
//! Step Functions execution must be switched on in moto before any state machine is created
//! (docs/EMULATOR_DEVIATIONS.md); tools/emulator.py does that at start.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_sfn::types::StateMachineType;
use aws_sdk_sqs::types::QueueAttributeName;
use sha2::{Digest, Sha256};

use crate::template::{
    Intrinsic, PSEUDO_PARAMETERS, QueueSpec, StateMachineSpec, SubPart, TableSpec, Template, sub_parts,
};

/// moto's default region.
pub const REGION: &str = "us-east-1";
/// moto's default account.
pub const ACCOUNT_ID: &str = "123456789012";
/// The partition of [`REGION`].
pub const PARTITION: &str = "aws";
/// `AWS::URLSuffix` in [`PARTITION`].
pub const URL_SUFFIX: &str = "amazonaws.com";

const STACK_NAME_MAX: usize = 128;
const TABLE_NAME_MAX: usize = 255;
const QUEUE_NAME_MAX: usize = 80;
const ROLE_NAME_MAX: usize = 64;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The SDK clients provisioning and the local functions use, all pointed at the emulator.
#[derive(Debug, Clone)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub sfn: aws_sdk_sfn::Client,
    pub secretsmanager: aws_sdk_secretsmanager::Client,
    /// The emulator's URL, when the configuration names one.
    pub endpoint: Option<String>,
}

impl Clients {
    pub fn new(sdk: &aws_config::SdkConfig) -> Clients {
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            sfn: baton_aws::stepfunctions::client(sdk),
            secretsmanager: aws_sdk_secretsmanager::Client::new(sdk),
            endpoint: sdk.endpoint_url().map(str::to_owned),
        }
    }

    /// The same clients, with every request tagged as made by `function` of `stack`
    /// ([`crate::identity`]).
    pub fn acting_as(&self, function: &str, stack: &str) -> Clients {
        let id = crate::identity::CallerIdentity { function: function.to_owned(), stack: stack.to_owned() };
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(
                self.dynamodb.config().to_builder().interceptor(id.clone()).build(),
            ),
            sqs: aws_sdk_sqs::Client::from_conf(
                self.sqs.config().to_builder().interceptor(id.clone()).build(),
            ),
            sfn: aws_sdk_sfn::Client::from_conf(
                self.sfn.config().to_builder().interceptor(id.clone()).build(),
            ),
            secretsmanager: aws_sdk_secretsmanager::Client::from_conf(
                self.secretsmanager.config().to_builder().interceptor(id).build(),
            ),
            endpoint: self.endpoint.clone(),
        }
    }
}

/// What [`provision`] created (or found), by logical id.
#[derive(Clone)]
pub struct Provisioned {
    pub stack_name: String,
    pub region: String,
    pub account_id: String,
    /// Logical id to table name.
    pub tables: BTreeMap<String, String>,
    pub queues: BTreeMap<String, QueueInfo>,
    pub state_machines: BTreeMap<String, StateMachineInfo>,
    /// Logical id of each function to its environment, every intrinsic resolved.
    pub function_env: BTreeMap<String, BTreeMap<String, String>>,
    /// Every template parameter: the value given, else its Default. May hold secrets.
    parameters: BTreeMap<String, String>,
}

/// A provisioned queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    pub url: String,
    pub arn: String,
    pub name: String,
}

/// A provisioned state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachineInfo {
    pub name: String,
    pub arn: String,
}

/// Why provisioning failed.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("invalid stack name {name:?}: {problem}")]
    InvalidStackName { name: String, problem: &'static str },
    #[error(
        "queue {logical_id}: its name {name:?} is over SQS's 80 characters; use a shorter stack name \
         (or queue name in the config)"
    )]
    QueueNameTooLong { logical_id: String, name: String },
    #[error("parameter {name} has no Default in the template and no value was given")]
    MissingParameter { name: String },
    #[error("parameter {name} is not declared in the template")]
    UnknownParameter { name: String },
    #[error("parameter {name}: {value:?} does not match its AllowedPattern {pattern}")]
    ParameterPattern { name: String, value: String, pattern: String },
    #[error("cannot resolve `{reference}`: {problem}")]
    Unresolved { reference: String, problem: String },
    /// An [`ProvisionError::Unresolved`] (the source), and where it was met.
    #[error("{context}: a value cannot be resolved")]
    Resolving {
        context: String,
        #[source]
        source: Box<ProvisionError>,
    },
    #[error("{kind} depend on each other in a cycle: {}", ids.join(", "))]
    Cycle { kind: &'static str, ids: Vec<String> },
    #[error("state machine {logical_id}: cannot read its definition {}", path.display())]
    ReadDefinition {
        logical_id: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "state machine {logical_id}: {} has the placeholder `${{{placeholder}}}`, which \
         DefinitionSubstitutions does not define",
        path.display()
    )]
    Placeholder { logical_id: String, path: PathBuf, placeholder: String },
    #[error("state machine {logical_id}: {} is not valid JSON after substitution", path.display())]
    DefinitionNotJson {
        logical_id: String,
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{resource} already exists on the emulator with {problem}; use a new stack name, or reset \
         the emulator (POST /moto-api/reset)"
    )]
    Drift { resource: String, problem: String },
    #[error("{op} on {resource} failed")]
    Aws {
        op: &'static str,
        resource: String,
        #[source]
        source: BoxError,
    },
    #[error("{op} on {resource} answered without {what}")]
    Incomplete { op: &'static str, resource: String, what: &'static str },
}

/// Creates, or reuses, `template`'s tables, queues and state machines for the stack
/// `stack_name`, and resolves every function's environment.
///
/// `root` is the directory each `DefinitionUri` is relative to (the template's). `params`
/// overrides parameter Defaults.
pub async fn provision(
    template: &Template,
    root: &Path,
    stack_name: &str,
    params: &BTreeMap<String, String>,
    clients: &Clients,
) -> Result<Provisioned, ProvisionError> {
    check_stack_name(stack_name)?;
    let mut stack = Provisioned {
        stack_name: stack_name.to_owned(),
        region: REGION.to_owned(),
        account_id: ACCOUNT_ID.to_owned(),
        tables: BTreeMap::new(),
        queues: BTreeMap::new(),
        state_machines: BTreeMap::new(),
        function_env: BTreeMap::new(),
        parameters: parameter_values(template, params)?,
    };

    for table in &template.tables {
        let name = physical_name(stack_name, &table.logical_id, TABLE_NAME_MAX, "");
        ensure_table(&clients.dynamodb, table, &name).await?;
        stack.tables.insert(table.logical_id.clone(), name);
    }

    let queues = dependency_order(
        "queues",
        &template.queues,
        |q| &q.logical_id,
        |q| q.redrive.iter().map(|r| r.dlq_logical_id.as_str()).collect(),
    )?;
    for queue in queues {
        let info = ensure_queue(&clients.sqs, queue, &stack).await?;
        stack.queues.insert(queue.logical_id.clone(), info);
    }

    let machines = dependency_order(
        "state machines",
        &template.state_machines,
        |m| &m.logical_id,
        |m| {
            let mut refs = m.name.references();
            refs.extend(m.substitutions.values().flat_map(Intrinsic::references));
            refs
        },
    )?;
    for machine in machines {
        let info = ensure_state_machine(&clients.sfn, machine, root, &stack).await?;
        stack.state_machines.insert(machine.logical_id.clone(), info);
    }

    for function in &template.functions {
        let mut env = BTreeMap::new();
        for (key, value) in &function.env {
            let context = format!("Resources.{}: environment variable {key}", function.logical_id);
            env.insert(key.clone(), stack.resolve_in(value, context)?);
        }
        stack.function_env.insert(function.logical_id.clone(), env);
    }
    Ok(stack)
}

impl Provisioned {
    /// Every `Ref` and `Fn::GetAtt` this stack can resolve, with its value: what the policy
    /// contract needs to resolve the transformed template's roles for this stack
    /// ([`crate::identity`]). Parameters are included: none of the template's is a secret.
    pub fn resolution(&self) -> serde_json::Value {
        let mut refs = serde_json::Map::new();
        let mut attrs = serde_json::Map::new();
        let mut names: Vec<&str> = PSEUDO_PARAMETERS.to_vec();
        names.extend(self.parameters.keys().map(String::as_str));
        names.extend(
            self.tables
                .keys()
                .chain(self.queues.keys())
                .chain(self.state_machines.keys())
                .map(String::as_str),
        );
        for name in names {
            if let Ok(value) = self.resolve_ref(name) {
                refs.insert(name.to_owned(), value.into());
            }
        }
        let with = |ids: Vec<&String>,
                    attributes: &[&str],
                    attrs: &mut serde_json::Map<String, serde_json::Value>| {
            for id in ids {
                for attribute in attributes {
                    if let Ok(value) = self.resolve_getatt(id, attribute) {
                        attrs.insert(format!("{id}.{attribute}"), value.into());
                    }
                }
            }
        };
        with(self.tables.keys().collect(), &["Arn"], &mut attrs);
        with(self.queues.keys().collect(), &["Arn", "QueueName", "QueueUrl"], &mut attrs);
        with(self.state_machines.keys().collect(), &["Arn", "Name"], &mut attrs);
        serde_json::json!({"stack": self.stack_name, "refs": refs, "attrs": attrs})
    }

    /// The value of `v` in this stack, as CloudFormation would resolve it:
    /// - `Ref`: a parameter's value, a pseudo parameter, a table's name, a queue's URL or a
    ///   state machine's ARN;
    /// - `Fn::GetAtt`: a table's `Arn`; a queue's `Arn`, `QueueName` or `QueueUrl`; a state
    ///   machine's `Arn` or `Name`;
    /// - `Fn::Sub`: each `${Name}` as `Ref`, each `${Resource.Attribute}` as `Fn::GetAtt`.
    pub fn resolve(&self, v: &Intrinsic) -> Result<String, ProvisionError> {
        match v {
            Intrinsic::Literal(s) => Ok(s.clone()),
            Intrinsic::Ref(name) => self.resolve_ref(name),
            Intrinsic::GetAtt(name, attribute) => self.resolve_getatt(name, attribute),
            Intrinsic::Sub(text) => {
                let parts = sub_parts(text)
                    .map_err(|problem| ProvisionError::Unresolved { reference: text.clone(), problem })?;
                let mut out = String::new();
                for part in parts {
                    match part {
                        SubPart::Text(s) => out.push_str(&s),
                        SubPart::Ref(name) => out.push_str(&self.resolve_ref(name)?),
                        SubPart::GetAtt(name, attribute) => {
                            out.push_str(&self.resolve_getatt(name, attribute)?)
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    fn resolve_in(&self, v: &Intrinsic, context: String) -> Result<String, ProvisionError> {
        self.resolve(v).map_err(|source| ProvisionError::Resolving { context, source: Box::new(source) })
    }

    fn resolve_ref(&self, name: &str) -> Result<String, ProvisionError> {
        let value = match name {
            "AWS::StackName" => self.stack_name.clone(),
            "AWS::Region" => self.region.clone(),
            "AWS::AccountId" => self.account_id.clone(),
            "AWS::Partition" => PARTITION.to_owned(),
            "AWS::URLSuffix" => URL_SUFFIX.to_owned(),
            _ => {
                if let Some(value) = self.parameters.get(name) {
                    value.clone()
                } else if let Some(table) = self.tables.get(name) {
                    table.clone()
                } else if let Some(queue) = self.queues.get(name) {
                    queue.url.clone()
                } else if let Some(machine) = self.state_machines.get(name) {
                    machine.arn.clone()
                } else {
                    return Err(ProvisionError::Unresolved {
                        reference: name.to_owned(),
                        problem: "not a parameter, a pseudo parameter, or a table, queue or state machine \
                                  provisioned so far"
                            .to_owned(),
                    });
                }
            }
        };
        Ok(value)
    }

    fn resolve_getatt(&self, name: &str, attribute: &str) -> Result<String, ProvisionError> {
        let value =
            match (attribute, self.tables.get(name), self.queues.get(name), self.state_machines.get(name)) {
                ("Arn", Some(table), _, _) => {
                    format!("arn:{PARTITION}:dynamodb:{}:{}:table/{table}", self.region, self.account_id)
                }
                ("Arn", _, Some(queue), _) => queue.arn.clone(),
                ("QueueName", _, Some(queue), _) => queue.name.clone(),
                ("QueueUrl", _, Some(queue), _) => queue.url.clone(),
                ("Arn", _, _, Some(machine)) => machine.arn.clone(),
                ("Name", _, _, Some(machine)) => machine.name.clone(),
                (_, None, None, None) => {
                    return Err(ProvisionError::Unresolved {
                        reference: format!("{name}.{attribute}"),
                        problem: format!(
                            "`{name}` is not a table, queue or state machine provisioned so far"
                        ),
                    });
                }
                _ => {
                    return Err(ProvisionError::Unresolved {
                        reference: format!("{name}.{attribute}"),
                        problem: format!("`{name}` has no attribute {attribute} locally"),
                    });
                }
            };
        Ok(value)
    }
}

/// Parameter values are left out: some are secrets (`NoEcho`), and so may environments be.
impl fmt::Debug for Provisioned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: BTreeMap<_, Vec<_>> =
            self.function_env.iter().map(|(function, env)| (function, env.keys().collect())).collect();
        f.debug_struct("Provisioned")
            .field("stack_name", &self.stack_name)
            .field("region", &self.region)
            .field("account_id", &self.account_id)
            .field("tables", &self.tables)
            .field("queues", &self.queues)
            .field("state_machines", &self.state_machines)
            .field("function_env (names only)", &env_names)
            .field("parameters (names only)", &self.parameters.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// CloudFormation's rule for stack names, which also keeps every derived name valid.
fn check_stack_name(name: &str) -> Result<(), ProvisionError> {
    let problem = if name.is_empty() || name.len() > STACK_NAME_MAX {
        Some("expected 1 to 128 characters")
    } else if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        Some("expected a letter first")
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Some("expected only letters, digits and hyphens")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(ProvisionError::InvalidStackName { name: name.to_owned(), problem }),
        None => Ok(()),
    }
}

fn parameter_values(
    template: &Template,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ProvisionError> {
    if let Some(name) = given.keys().find(|name| !template.parameters.contains_key(*name)) {
        return Err(ProvisionError::UnknownParameter { name: name.clone() });
    }
    let mut values = BTreeMap::new();
    for (name, default) in &template.parameters {
        let value = given
            .get(name)
            .or(default.as_ref())
            .ok_or_else(|| ProvisionError::MissingParameter { name: name.clone() })?;
        // As CloudFormation does: the whole value must match (the template's patterns are
        // anchored). A pattern this engine cannot read is the template's bug, and says so.
        if let Some(pattern) = template.parameter_patterns.get(name) {
            let matches = regex_lite::Regex::new(pattern).map(|r| r.is_match(value));
            if !matches.map_err(|e| ProvisionError::Unresolved {
                reference: format!("{name}'s AllowedPattern"),
                problem: e.to_string(),
            })? {
                let (name, value, pattern) = (name.clone(), value.clone(), pattern.clone());
                return Err(ProvisionError::ParameterPattern { name, value, pattern });
            }
        }
        values.insert(name.clone(), value.clone());
    }
    Ok(values)
}

/// Creates the Secrets Manager secret `name` holding `value`, or gives an existing one that
/// value; returns its ARN. On AWS the operator creates it (README.md, "Deploying with SAM"); a
/// local stack makes its own.
pub async fn ensure_secret(
    client: &aws_sdk_secretsmanager::Client,
    name: &str,
    value: &str,
) -> Result<String, ProvisionError> {
    let aws =
        |op: &'static str, source: BoxError| ProvisionError::Aws { op, resource: name.to_owned(), source };
    let created = client.create_secret().name(name).secret_string(value).send().await;
    let arn = match created {
        Ok(out) => out.arn,
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_exists_exception()) => {
            let put = client.put_secret_value().secret_id(name).secret_string(value).send().await;
            put.map_err(|e| aws("PutSecretValue", Box::new(e)))?.arn
        }
        Err(e) => return Err(aws("CreateSecret", Box::new(e))),
    };
    arn.ok_or(ProvisionError::Incomplete { op: "CreateSecret", resource: name.to_owned(), what: "an ARN" })
}

/// `<stack>-<LogicalId><suffix>`, shortened to `max` with a hash of the full name when too
/// long, so that it stays unique and is the same on every run.
fn physical_name(stack: &str, logical_id: &str, max: usize, suffix: &str) -> String {
    let full = format!("{stack}-{logical_id}");
    if full.len() + suffix.len() <= max {
        return full + suffix;
    }
    let hash = hex::encode(&Sha256::digest(full.as_bytes())[..4]);
    let mut keep = max.saturating_sub(suffix.len() + hash.len() + 1);
    while !full.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}-{hash}{suffix}", &full[..keep])
}

/// `items` with each one after those it depends on (dependencies outside `items` are ignored),
/// otherwise in their original order.
fn dependency_order<'a, T>(
    kind: &'static str,
    items: &'a [T],
    id: impl Fn(&T) -> &str,
    depends_on: impl Fn(&'a T) -> Vec<&'a str>,
) -> Result<Vec<&'a T>, ProvisionError> {
    let ids: Vec<&str> = items.iter().map(&id).collect();
    let mut placed = vec![false; items.len()];
    let mut order = Vec::with_capacity(items.len());
    while order.len() < items.len() {
        let ready = (0..items.len()).find(|&i| {
            !placed[i]
                && depends_on(&items[i])
                    .iter()
                    .all(|dep| ids.iter().zip(&placed).all(|(other, done)| other != dep || *done))
        });
        let Some(i) = ready else {
            let ids = (0..items.len()).filter(|&i| !placed[i]).map(|i| ids[i].to_owned()).collect();
            return Err(ProvisionError::Cycle { kind, ids });
        };
        placed[i] = true;
        order.push(&items[i]);
    }
    Ok(order)
}

fn aws<E: std::error::Error + Send + Sync + 'static>(
    op: &'static str,
    resource: &str,
) -> impl FnOnce(E) -> ProvisionError {
    let resource = resource.to_owned();
    move |e| ProvisionError::Aws { op, resource, source: Box::new(e) }
}

// ---- tables --------------------------------------------------------------------------------------

type KeySchema = Vec<(String, String)>;

async fn ensure_table(
    client: &aws_sdk_dynamodb::Client,
    spec: &TableSpec,
    name: &str,
) -> Result<(), ProvisionError> {
    const OP: &str = "CreateTable";
    let keys = |schema: &KeySchema| {
        schema
            .iter()
            .map(|(attribute, key_type)| {
                KeySchemaElement::builder()
                    .attribute_name(attribute)
                    .key_type(KeyType::from(key_type.as_str()))
                    .build()
                    .map_err(aws(OP, name))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let attributes = spec
        .attributes
        .iter()
        .map(|(attribute, attribute_type)| {
            AttributeDefinition::builder()
                .attribute_name(attribute)
                .attribute_type(ScalarAttributeType::from(attribute_type.as_str()))
                .build()
                .map_err(aws(OP, name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut gsis = Vec::new();
    for gsi in &spec.gsis {
        gsis.push(
            GlobalSecondaryIndex::builder()
                .index_name(&gsi.name)
                .set_key_schema(Some(keys(&gsi.key_schema)?))
                .projection(Projection::builder().projection_type(ProjectionType::All).build())
                .build()
                .map_err(aws(OP, name))?,
        );
    }
    let created = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(attributes))
        .set_key_schema(Some(keys(&spec.key_schema)?))
        .set_global_secondary_indexes(if gsis.is_empty() { None } else { Some(gsis) })
        .send()
        .await;
    match created {
        Ok(_) => tracing::info!(table = name, "created table"),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_in_use_exception()) => {
            check_table(client, spec, name).await?;
            tracing::info!(table = name, "reusing table");
        }
        Err(e) => return Err(aws(OP, name)(e)),
    }
    if let Some(attribute) = &spec.ttl_attribute {
        ensure_ttl(client, name, attribute).await?;
    }
    Ok(())
}

/// An existing table must have the template's keys and indexes: queries depend on them.
async fn check_table(
    client: &aws_sdk_dynamodb::Client,
    spec: &TableSpec,
    name: &str,
) -> Result<(), ProvisionError> {
    let described =
        client.describe_table().table_name(name).send().await.map_err(aws("DescribeTable", name))?;
    let table = described.table().ok_or_else(|| ProvisionError::Incomplete {
        op: "DescribeTable",
        resource: name.to_owned(),
        what: "the table",
    })?;
    let schema = |elements: &[KeySchemaElement]| -> KeySchema {
        elements.iter().map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned())).collect()
    };
    let indexes: BTreeMap<String, KeySchema> = table
        .global_secondary_indexes()
        .iter()
        .map(|gsi| (gsi.index_name().unwrap_or_default().to_owned(), schema(gsi.key_schema())))
        .collect();
    let wanted: BTreeMap<String, KeySchema> =
        spec.gsis.iter().map(|gsi| (gsi.name.clone(), gsi.key_schema.clone())).collect();
    let problem = if schema(table.key_schema()) != spec.key_schema {
        Some(format!("the key schema {:?}, not {:?}", schema(table.key_schema()), spec.key_schema))
    } else if indexes != wanted {
        Some(format!("the indexes {indexes:?}, not {wanted:?}"))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(ProvisionError::Drift { resource: format!("table {name}"), problem }),
        None => Ok(()),
    }
}

/// Enables TTL unless it already is, on this attribute: AWS refuses to enable it twice.
async fn ensure_ttl(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    attribute: &str,
) -> Result<(), ProvisionError> {
    let current = client
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(aws("DescribeTimeToLive", name))?;
    let enabled = current.time_to_live_description().is_some_and(|ttl| {
        ttl.time_to_live_status() == Some(&TimeToLiveStatus::Enabled)
            && ttl.attribute_name() == Some(attribute)
    });
    if enabled {
        return Ok(());
    }
    let ttl = TimeToLiveSpecification::builder()
        .attribute_name(attribute)
        .enabled(true)
        .build()
        .map_err(aws("UpdateTimeToLive", name))?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(ttl)
        .send()
        .await
        .map_err(aws("UpdateTimeToLive", name))?;
    Ok(())
}

// ---- queues --------------------------------------------------------------------------------------

/// The RedrivePolicy attribute as SQS documents it: a JSON string, the count as a string. SQS
/// (and moto) accept the count as a number too, and answer GetQueueAttributes with a number.
fn redrive_policy(dlq_arn: &str, max_receive_count: u32) -> String {
    serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receive_count.to_string(),
    })
    .to_string()
}

#[expect(
    clippy::too_many_lines,
    reason = "one queue's every attribute from the template, checked and set in turn"
)]
async fn ensure_queue(
    client: &aws_sdk_sqs::Client,
    spec: &QueueSpec,
    stack: &Provisioned,
) -> Result<QueueInfo, ProvisionError> {
    let name = match &spec.name {
        // A task queue is found by its name (`<stack>_tasks-<queue>`): it must be exactly that,
        // and SQS refuses a name over 80 characters, as CloudFormation would at deploy.
        Some(name) => {
            let name =
                stack.resolve_in(name, format!("Resources.{}.Properties.QueueName", spec.logical_id))?;
            if name.len() > QUEUE_NAME_MAX {
                return Err(ProvisionError::QueueNameTooLong { logical_id: spec.logical_id.clone(), name });
            }
            name
        }
        None => physical_name(
            &stack.stack_name,
            &spec.logical_id,
            QUEUE_NAME_MAX,
            if spec.fifo { ".fifo" } else { "" },
        ),
    };
    let mut attributes = HashMap::new();
    if let Some(seconds) = spec.visibility_timeout {
        attributes.insert(QueueAttributeName::VisibilityTimeout, seconds.to_string());
    }
    if let Some(seconds) = spec.message_retention {
        attributes.insert(QueueAttributeName::MessageRetentionPeriod, seconds.to_string());
    }
    if let Some(redrive) = &spec.redrive {
        let dlq_arn = stack.resolve_getatt(&redrive.dlq_logical_id, "Arn")?;
        attributes
            .insert(QueueAttributeName::RedrivePolicy, redrive_policy(&dlq_arn, redrive.max_receive_count));
    }
    if spec.fifo {
        attributes.insert(QueueAttributeName::FifoQueue, "true".to_owned());
        attributes.insert(
            QueueAttributeName::ContentBasedDeduplication,
            spec.content_based_deduplication.to_string(),
        );
    }

    // CreateQueue returns the existing queue when the attributes are the same.
    let created = client
        .create_queue()
        .queue_name(&name)
        .set_attributes(if attributes.is_empty() { None } else { Some(attributes.clone()) })
        .send()
        .await;
    let url = match created {
        Ok(out) => out.queue_url().map(str::to_owned),
        // Same name, other attributes: the template changed since this stack was provisioned.
        Err(e) if e.as_service_error().is_some_and(|e| e.is_queue_name_exists()) => {
            let url = client
                .get_queue_url()
                .queue_name(&name)
                .send()
                .await
                .map_err(aws("GetQueueUrl", &name))?
                .queue_url()
                .map(str::to_owned);
            if let Some(url) = &url {
                attributes.remove(&QueueAttributeName::FifoQueue); // fixed at creation
                client
                    .set_queue_attributes()
                    .queue_url(url)
                    .set_attributes(Some(attributes))
                    .send()
                    .await
                    .map_err(aws("SetQueueAttributes", &name))?;
                tracing::info!(queue = %name, "updated the attributes of an existing queue");
            }
            url
        }
        Err(e) => return Err(aws("CreateQueue", &name)(e)),
    };
    let url = url.ok_or_else(|| ProvisionError::Incomplete {
        op: "CreateQueue",
        resource: name.clone(),
        what: "a queue URL",
    })?;
    let arn = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(aws("GetQueueAttributes", &name))?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or_else(|| ProvisionError::Incomplete {
            op: "GetQueueAttributes",
            resource: name.clone(),
            what: "the QueueArn",
        })?;
    tracing::info!(queue = %name, "queue ready");
    Ok(QueueInfo { url, arn, name })
}

// ---- state machines ------------------------------------------------------------------------------

/// A definition placeholder without a value, or an unclosed `${`.
#[derive(Debug, PartialEq, Eq)]
struct MissingPlaceholder(String);

/// Replaces each `${Name}` in a JSON definition with its value, as SAM's DefinitionSubstitutions
/// do. Inside a JSON string the value is JSON-escaped, so a value with `"` or `\` keeps the
/// definition valid; outside one (e.g. `"MaxConcurrency": ${Limit}`) it goes in as it is.
fn substitute(text: &str, values: &BTreeMap<&str, String>) -> Result<String, MissingPlaceholder> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => {
                i += 2;
                continue;
            }
            b'"' => in_string = !in_string,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                let start = i + 2;
                let Some(len) = text[start..].find('}') else {
                    return Err(MissingPlaceholder(text[start..].chars().take(40).collect()));
                };
                let name = &text[start..start + len];
                let Some(value) = values.get(name) else {
                    return Err(MissingPlaceholder(name.to_owned()));
                };
                out.push_str(&text[copied..i]);
                if in_string {
                    let quoted = serde_json::Value::String(value.clone()).to_string();
                    out.push_str(&quoted[1..quoted.len() - 1]);
                } else {
                    out.push_str(value);
                }
                i = start + len + 1;
                copied = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&text[copied.min(text.len())..]);
    Ok(out)
}

async fn ensure_state_machine(
    client: &aws_sdk_sfn::Client,
    spec: &StateMachineSpec,
    root: &Path,
    stack: &Provisioned,
) -> Result<StateMachineInfo, ProvisionError> {
    let id = &spec.logical_id;
    let name = stack.resolve_in(&spec.name, format!("Resources.{id}.Properties.Name"))?;
    let path = root.join(&spec.definition_uri);
    let text = std::fs::read_to_string(&path).map_err(|source| ProvisionError::ReadDefinition {
        logical_id: id.clone(),
        path: path.clone(),
        source,
    })?;
    let mut values = BTreeMap::new();
    for (key, value) in &spec.substitutions {
        let context = format!("Resources.{id}.Properties.DefinitionSubstitutions.{key}");
        values.insert(key.as_str(), stack.resolve_in(value, context)?);
    }
    let definition = substitute(&text, &values).map_err(|MissingPlaceholder(placeholder)| {
        ProvisionError::Placeholder { logical_id: id.clone(), path: path.clone(), placeholder }
    })?;
    if let Err(source) = serde_json::from_str::<serde_json::Value>(&definition) {
        return Err(ProvisionError::DefinitionNotJson { logical_id: id.clone(), path, source });
    }
    let role_arn = format!(
        "arn:{PARTITION}:iam::{}:role/{}",
        stack.account_id,
        physical_name(&stack.stack_name, id, ROLE_NAME_MAX, "")
    );

    // With an alias (AutoPublishAlias), each definition deployed is published as a version.
    let publish = spec.auto_publish_alias.is_some();
    let created = client
        .create_state_machine()
        .name(&name)
        .definition(&definition)
        .role_arn(role_arn)
        .r#type(StateMachineType::Standard)
        .publish(publish)
        .send()
        .await;
    let (arn, version) = match created {
        // moto answers with the existing machine, definition unchanged, where AWS would say
        // StateMachineAlreadyExists: compare, and update when the definition changed.
        Ok(out) => {
            let arn = out.state_machine_arn().to_owned();
            let current = client
                .describe_state_machine()
                .state_machine_arn(&arn)
                .send()
                .await
                .map_err(aws("DescribeStateMachine", &name))?;
            let version = match out.state_machine_version_arn() {
                Some(version) if current.definition() == definition => Some(version.to_owned()),
                _ if current.definition() != definition || publish => {
                    update_definition(client, &name, &arn, &definition, publish).await?
                }
                _ => None,
            };
            (arn, version)
        }
        Err(e) if e.as_service_error().is_some_and(|e| e.is_state_machine_already_exists()) => {
            let arn = find_state_machine(client, &name).await?;
            let version = update_definition(client, &name, &arn, &definition, publish).await?;
            (arn, version)
        }
        Err(e) => return Err(aws("CreateStateMachine", &name)(e)),
    };
    if let (Some(alias), Some(version)) = (&spec.auto_publish_alias, &version) {
        point_alias(client, &name, &arn, alias, version).await?;
    }
    tracing::info!(state_machine = %name, version = version.as_deref().unwrap_or("unversioned"), "state machine ready");
    Ok(StateMachineInfo { name, arn })
}

/// Updates a machine's definition (publishing it as a version when asked); the version's ARN.
async fn update_definition(
    client: &aws_sdk_sfn::Client,
    name: &str,
    arn: &str,
    definition: &str,
    publish: bool,
) -> Result<Option<String>, ProvisionError> {
    let out = client
        .update_state_machine()
        .state_machine_arn(arn)
        .definition(definition)
        .publish(publish)
        .send()
        .await
        .map_err(aws("UpdateStateMachine", name))?;
    tracing::info!(state_machine = name, "updated the definition of an existing state machine");
    Ok(out.state_machine_version_arn().map(str::to_owned))
}

/// Points `alias` of the machine at `version` (all executions), creating it the first time.
async fn point_alias(
    client: &aws_sdk_sfn::Client,
    name: &str,
    arn: &str,
    alias: &str,
    version: &str,
) -> Result<(), ProvisionError> {
    let routing = aws_sdk_sfn::types::RoutingConfigurationListItem::builder()
        .state_machine_version_arn(version)
        .weight(100)
        .build()
        .map_err(aws("CreateStateMachineAlias", name))?;
    let alias_arn = format!("{arn}:{alias}");
    match client.describe_state_machine_alias().state_machine_alias_arn(&alias_arn).send().await {
        Ok(_) => {
            client
                .update_state_machine_alias()
                .state_machine_alias_arn(&alias_arn)
                .routing_configuration(routing)
                .send()
                .await
                .map_err(aws("UpdateStateMachineAlias", name))?;
        }
        Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found()) => {
            client
                .create_state_machine_alias()
                .name(alias)
                .routing_configuration(routing)
                .send()
                .await
                .map_err(aws("CreateStateMachineAlias", name))?;
        }
        Err(e) => return Err(aws("DescribeStateMachineAlias", name)(e)),
    }
    tracing::info!(state_machine = name, alias, version, "alias points at the deployed version");
    Ok(())
}

async fn find_state_machine(client: &aws_sdk_sfn::Client, name: &str) -> Result<String, ProvisionError> {
    let mut next_token = None;
    loop {
        let page = client
            .list_state_machines()
            .set_next_token(next_token)
            .send()
            .await
            .map_err(aws("ListStateMachines", name))?;
        if let Some(machine) = page.state_machines().iter().find(|m| m.name() == name) {
            return Ok(machine.state_machine_arn().to_owned());
        }
        match page.next_token() {
            Some(token) => next_token = Some(token.to_owned()),
            None => {
                return Err(ProvisionError::Incomplete {
                    op: "ListStateMachines",
                    resource: name.to_owned(),
                    what: "the state machine CreateStateMachine said exists",
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&'static str, &str)]) -> BTreeMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn placeholders_inside_json_strings_are_escaped_and_outside_inserted_as_they_are() {
        // Given a definition with a placeholder in a string and one as a bare number
        let text = r#"{"QueueUrl": "${Url}", "Note": "say \"${Url}\"", "Max": ${Max}}"#;
        // When substituted with a value that needs escaping
        let out = substitute(text, &values(&[("Url", r#"a"b\c"#), ("Max", "3")])).expect("substitutes");
        // Then the result is JSON with the value intact
        let json: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(json["QueueUrl"], r#"a"b\c"#);
        assert_eq!(json["Note"], r#"say "a"b\c""#);
        assert_eq!(json["Max"], 3);
    }

    #[test]
    fn a_placeholder_without_a_value_is_an_error_naming_it() {
        let text = r#"{"QueueUrl": "${ProgressQueueUrl}", "Other": "${Missing}"}"#;
        let err = substitute(text, &values(&[("ProgressQueueUrl", "https://q")])).unwrap_err();
        assert_eq!(err, MissingPlaceholder("Missing".into()));
        assert!(substitute(r#"{"a": "${Unclosed"}"#, &values(&[])).is_err());
        assert_eq!(substitute(r#"{"a": "$5 {b}"}"#, &values(&[])), Ok(r#"{"a": "$5 {b}"}"#.to_owned()));
    }

    #[test]
    fn names_are_stack_prefixed_and_shortened_stably_when_too_long() {
        assert_eq!(physical_name("st-1", "IntakeQueue", 80, ""), "st-1-IntakeQueue");
        assert_eq!(physical_name("st-1", "Events", 80, ".fifo"), "st-1-Events.fifo");
        let long_stack = "s".repeat(90);
        let name = physical_name(&long_stack, "IntakeQueue", 80, ".fifo");
        assert_eq!(name.len(), 80);
        assert!(name.ends_with(".fifo"));
        assert_eq!(name, physical_name(&long_stack, "IntakeQueue", 80, ".fifo"));
        assert_ne!(name, physical_name(&long_stack, "ProgressQueue", 80, ".fifo"));
    }

    #[test]
    fn stack_names_follow_cloudformation_rules() {
        assert!(check_stack_name("st-123-456-0").is_ok());
        for bad in ["", "1st", "st_1", "st.1", &"s".repeat(129)] {
            assert!(check_stack_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dead_letter_queues_come_before_the_queues_that_redrive_to_them() {
        let items = [("Intake", Some("IntakeDLQ")), ("IntakeDLQ", None), ("Outbound", None)];
        let order =
            dependency_order("queues", &items, |i| i.0, |i| i.1.into_iter().collect()).expect("order");
        let ids: Vec<_> = order.iter().map(|i| i.0).collect();
        assert_eq!(ids, ["IntakeDLQ", "Intake", "Outbound"]);
        let cycle = [("A", Some("B")), ("B", Some("A"))];
        let err = dependency_order("queues", &cycle, |i| i.0, |i| i.1.into_iter().collect()).unwrap_err();
        assert!(matches!(err, ProvisionError::Cycle { ref ids, .. } if ids == &["A", "B"]), "{err:?}");
    }

    #[test]
    fn a_parameter_is_checked_against_its_allowed_pattern_as_cloudformation_does() {
        // Given template.yaml, whose WebhookSecretArn must be a secret's complete ARN
        let template = Template::parse(include_str!("../../template.yaml")).expect("template.yaml");
        let given = |arn: &str| BTreeMap::from([("WebhookSecretArn".to_owned(), arn.to_owned())]);
        // Then the ARN create-secret prints is taken
        let full = "arn:aws:secretsmanager:us-east-1:123456789012:secret:baton/webhook-secrets-AbC123";
        assert_eq!(parameter_values(&template, &given(full)).expect("a full ARN")["WebhookSecretArn"], full);
        // And a partial one (no suffix: the grant would match nothing) or a blank one is refused,
        // naming the parameter
        for bad in ["arn:aws:secretsmanager:us-east-1:123456789012:secret:baton/webhook-secrets", ""] {
            let err = parameter_values(&template, &given(bad)).unwrap_err();
            assert!(
                matches!(&err, ProvisionError::ParameterPattern { name, .. } if name == "WebhookSecretArn"),
                "{err:?}"
            );
            assert!(err.to_string().contains("WebhookSecretArn"), "{err}");
        }
    }

    #[test]
    fn intrinsics_resolve_against_the_stack() {
        // Given a provisioned stack
        let stack = Provisioned {
            stack_name: "st-1".into(),
            region: REGION.into(),
            account_id: ACCOUNT_ID.into(),
            tables: BTreeMap::from([("Table".into(), "st-1-Table".into())]),
            queues: BTreeMap::from([(
                "Q".into(),
                QueueInfo {
                    url: "https://sqs/st-1-Q".into(),
                    arn: "arn:aws:sqs:us-east-1:123456789012:st-1-Q".into(),
                    name: "st-1-Q".into(),
                },
            )]),
            state_machines: BTreeMap::new(),
            function_env: BTreeMap::new(),
            parameters: BTreeMap::from([("LogLevel".into(), "info".into())]),
        };
        let resolve = |v: Intrinsic| stack.resolve(&v).expect("resolves");
        // Then
        assert_eq!(resolve(Intrinsic::Ref("Table".into())), "st-1-Table");
        assert_eq!(resolve(Intrinsic::Ref("Q".into())), "https://sqs/st-1-Q");
        assert_eq!(resolve(Intrinsic::Ref("LogLevel".into())), "info");
        assert_eq!(resolve(Intrinsic::GetAtt("Q".into(), "QueueName".into())), "st-1-Q");
        assert_eq!(
            resolve(Intrinsic::Sub("${Table.Arn}/index/*".into())),
            "arn:aws:dynamodb:us-east-1:123456789012:table/st-1-Table/index/*"
        );
        assert_eq!(
            resolve(Intrinsic::Sub(
                "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:x:${AWS::StackName}-".into()
            )),
            "arn:aws:states:us-east-1:123456789012:x:st-1-"
        );
        let err = stack.resolve(&Intrinsic::Sub("${Nope}".into())).unwrap_err();
        assert!(
            matches!(err, ProvisionError::Unresolved { ref reference, .. } if reference == "Nope"),
            "{err:?}"
        );
        assert!(stack.resolve(&Intrinsic::GetAtt("Table".into(), "StreamArn".into())).is_err());
        assert!(!format!("{stack:?}").contains("info"), "parameter values stay out of Debug");
    }
}
