//! baton's whole stack on the emulator, provisioned from `template.yaml` as `baton local` does it.
//!
//! Tests that need the real tables, queues and state machines call [`provision_stack`]: each
//! call gets a stack of its own (a short unique name, since queue and state machine names are
//! limited to 80 characters), so tests run in parallel on one emulator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use baton_local::{Clients, Provisioned, Template, provision};

use crate::{Emulator, unique_name};

/// The workspace root: where template.yaml is, and what its DefinitionUris are relative to.
pub fn workspace_dir() -> PathBuf {
    let tests_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests_crate.parent().map(Path::to_path_buf).unwrap_or_else(|| tests_crate.join(".."))
}

/// The workspace's template.yaml, parsed.
///
/// # Panics
/// When the template cannot be read or used locally, with the reason.
pub fn load_template() -> Template {
    let path = workspace_dir().join("template.yaml");
    Template::load(&path).unwrap_or_else(|e| {
        panic!("cannot use {}: {}", path.display(), baton_core::domain::error::error_chain(&e))
    })
}

/// The workspace's template.yaml with its task queues written for `config`, as a deploy of that
/// config has them (`baton synth`), parsed.
///
/// # Panics
/// When the template cannot be read or used locally, with the reason.
pub fn load_template_for(config: &baton_core::domain::config::Config) -> Template {
    let path = workspace_dir().join("template.yaml");
    Template::load_for(&path, config).unwrap_or_else(|e| {
        panic!("cannot use {}: {}", path.display(), baton_core::domain::error::error_chain(&e))
    })
}

/// SDK clients for DynamoDB, SQS, Step Functions and Secrets Manager on the emulator.
pub async fn clients(emulator: &Emulator) -> Clients {
    Clients::new(&emulator.sdk_config().await)
}

/// template.yaml provisioned on the emulator under a new stack name, with parameter Defaults.
pub async fn provision_stack(emulator: &Emulator) -> (Template, Provisioned) {
    provision_stack_at(emulator, &unique_name("st"), &workspace_dir()).await
}

/// template.yaml provisioned as the stack `stack_name`, reading DefinitionUris under `root`.
/// Provisioning the same name again reuses the stack's resources.
///
/// # Panics
/// When provisioning fails, with the whole chain of causes.
pub async fn provision_stack_at(
    emulator: &Emulator,
    stack_name: &str,
    root: &Path,
) -> (Template, Provisioned) {
    let template = load_template();
    let clients = clients(emulator).await;
    match provision(&template, root, stack_name, &parameters(), &clients).await {
        Ok(provisioned) => (template, provisioned),
        Err(e) => {
            panic!("cannot provision stack {stack_name}: {}", baton_core::domain::error::error_chain(&e))
        }
    }
}

/// The parameters the template needs without a default. The callback's secret is read by the
/// function, not by provisioning: any complete ARN will do (its AllowedPattern is checked).
pub fn parameters() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "WebhookSecretArn".to_owned(),
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:unused-AbC123".to_owned(),
    )])
}
