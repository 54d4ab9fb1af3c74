//! The Secrets Manager adapter: where the callback API's webhook secrets are read on AWS
//! (`BATON_WEBHOOK_SECRET_ARN`). A crate of its own so that only what verifies callbacks (the
//! callback function and `baton local`) links the Secrets Manager SDK.

use std::sync::Arc;

use baton_aws::sdk::sdk_retryable;
use baton_core::ports::secrets::{SecretSource, SecretsError};
use secrecy::SecretString;

/// A Secrets Manager secret.
pub struct SecretsManagerSource {
    client: aws_sdk_secretsmanager::Client,
    secret_id: String,
}

impl SecretsManagerSource {
    pub fn new(client: aws_sdk_secretsmanager::Client, secret_id: impl Into<String>) -> Self {
        SecretsManagerSource { client, secret_id: secret_id.into() }
    }

    /// The secret `secret_id` names, read with a client from `sdk`: what the callback function
    /// gives `baton_lambda::serve_callback`.
    pub fn shared(sdk: &aws_config::SdkConfig, secret_id: String) -> Arc<dyn SecretSource> {
        Arc::new(SecretsManagerSource::new(aws_sdk_secretsmanager::Client::new(sdk), secret_id))
    }
}

#[async_trait::async_trait]
impl SecretSource for SecretsManagerSource {
    async fn fetch(&self) -> Result<SecretString, SecretsError> {
        let out = self.client.get_secret_value().secret_id(&self.secret_id).send().await.map_err(|e| {
            SecretsError::Read {
                secret: self.secret_id.clone(),
                retryable: sdk_retryable(&e),
                source: Box::new(e),
            }
        })?;
        out.secret_string
            .map(SecretString::from)
            .ok_or_else(|| SecretsError::NotText { secret: self.secret_id.clone() })
    }

    fn describe(&self) -> String {
        self.secret_id.clone()
    }
}
