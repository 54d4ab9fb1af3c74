//! Standard Webhooks signing (<https://www.standardwebhooks.com/>), the part a sender needs:
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`,
//! keyed with the base64 bytes after the secret's `whsec_` prefix.

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Signs callbacks with one secret.
pub struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// From the secret as baton holds it: the first (newest) of a comma-separated list, and a
    /// scope (`whsec_...@order-review`) is baton's to read, not part of the key.
    pub fn new(secret: &str) -> Result<Signer> {
        let first = secret.split(',').next().unwrap_or_default().trim();
        let key = first.split('@').next().unwrap_or_default();
        let Some(encoded) = key.strip_prefix("whsec_") else {
            bail!("the webhook secret must start with whsec_");
        };
        let key = STANDARD.decode(encoded).context("the webhook secret after whsec_ is not base64")?;
        Ok(Signer { key })
    }

    /// The `webhook-signature` header's value for this message.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_as_the_specification_s_reference_libraries_do() {
        let signer = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn reads_the_first_secret_of_a_list_without_its_scope() {
        let a = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw@order-review, whsec_c2VjcmV0").unwrap();
        let b = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(a.sign("id", 1, b"{}"), b.sign("id", 1, b"{}"));
        assert!(Signer::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
    }
}
