//! baton on one machine: template.yaml's resources, created on the local emulator (moto).
//!
//! `template.yaml` is the single list of baton's resources. On AWS, `sam deploy` creates them; on
//! the emulator, [`template::Template`] reads the same file and [`provision::provision`] creates
//! the tables, queues and state machines through the AWS SDK and resolves every function's
//! environment. `baton local` and the tests both start here, so a resource added to the template
//! shows up locally without a second, hand-kept list.
//!
//! Why not moto's CloudFormation: it skips the HttpApi and TTL, ignores DefinitionSubstitutions,
//! and registers state machines where executions cannot see them (docs/EMULATOR_DEVIATIONS.md).

pub mod identity;
pub mod in_process;
pub mod info;
pub mod mapping;
pub mod provision;
pub mod task_queues;
pub mod template;

pub use provision::{Clients, ProvisionError, Provisioned, QueueInfo, StateMachineInfo, provision};
pub use template::{Intrinsic, Template, TemplateError};

/// SDK configuration for the local emulator: its endpoint, a fixed region and static test
/// credentials, and otherwise exactly what the deployed functions use
/// ([`baton_aws::sdk::sdk_loader`]): the standard retry mode and the same timeouts. moto answers
/// a transient fault with a 500 as AWS does (e.g. a SendTaskSuccess that races a starting
/// execution, docs/EMULATOR_DEVIATIONS.md), and the retries are what makes it pass, here as on
/// AWS. None of the operations baton calls is one moto lacks, so no operation needs its retries
/// turned off.
pub async fn emulator_sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    baton_aws::sdk::sdk_loader()
        .region(aws_config::Region::new(provision::REGION))
        .endpoint_url(endpoint)
        .credentials_provider(aws_credential_types::Credentials::new(
            "testing", "testing", None, None, "static",
        ))
        .load()
        .await
}
