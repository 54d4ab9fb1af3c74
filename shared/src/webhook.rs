//! Standard Webhooks signature verification (<https://www.standardwebhooks.com/>).
//!
//! A callback carries `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`
//! (space-separated `v1,<base64 HMAC-SHA256>` entries). The signed content is
//! `{id}.{timestamp}.{body}`, keyed with the secret's bytes (`whsec_` then base64).
//!
//! Rules kept here:
//! - Several signatures may be sent and several secrets may be active, so keys can rotate: any
//!   active secret matching any `v1` signature is enough.
//! - Comparison is constant-time (`Mac::verify_slice`).
//! - A timestamp more than five minutes from now, either way, is refused, so a captured request
//!   cannot be replayed later. The clock is an argument.
//! - Secrets are `SecretSlice`s: they never appear in `Debug` output or logs. An empty secret is
//!   refused at start-up (a stale crate accepts one; baton does not).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice};
use sha2::Sha256;
use time::OffsetDateTime;

/// How far a timestamp may be from now.
pub const TOLERANCE_SECONDS: i64 = 5 * 60;

pub const ID_HEADER: &str = "webhook-id";
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The secrets a verifier accepts.
pub struct Secrets(Vec<SecretSlice<u8>>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} active, redacted)", self.0.len())
    }
}

/// A secret that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret {index} does not start with whsec_")]
    Prefix { index: usize },
    #[error("secret {index} is not valid base64 after whsec_")]
    Base64 { index: usize },
    #[error("secret {index} is empty")]
    Empty { index: usize },
    #[error("no secret is configured: every callback would be refused")]
    None,
}

impl Secrets {
    /// Parses a comma-separated list of `whsec_...` secrets (whitespace around each ignored).
    pub fn parse(list: &str) -> Result<Secrets, SecretError> {
        let mut secrets = Vec::new();
        for (index, s) in list.split(',').map(str::trim).filter(|s| !s.is_empty()).enumerate() {
            let encoded = s.strip_prefix("whsec_").ok_or(SecretError::Prefix { index })?;
            let bytes = STANDARD.decode(encoded).map_err(|_| SecretError::Base64 { index })?;
            if bytes.is_empty() {
                return Err(SecretError::Empty { index });
            }
            secrets.push(SecretSlice::from(bytes));
        }
        if secrets.is_empty() {
            return Err(SecretError::None);
        }
        Ok(Secrets(secrets))
    }

    /// The `v1,...` signature of a message with the first (newest) secret: what senders do,
    /// and what `baton callback` does.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mac = mac(self.0[0].expose_secret(), id, timestamp, body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// Verifies a request's three headers against its body at time `now`.
    pub fn verify(
        &self,
        id: Option<&str>,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<(), VerifyError> {
        let id = id.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(ID_HEADER))?;
        let timestamp =
            timestamp.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(TIMESTAMP_HEADER))?;
        let signature =
            signature.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(SIGNATURE_HEADER))?;
        let ts: i64 = timestamp.trim().parse().map_err(|_| VerifyError::InvalidTimestamp)?;
        if (now.unix_timestamp() - ts).abs() > TOLERANCE_SECONDS {
            return Err(VerifyError::StaleTimestamp);
        }
        let candidates: Vec<Vec<u8>> = signature
            .split_whitespace()
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|sig| STANDARD.decode(sig).ok())
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::NoSignature);
        }
        for secret in &self.0 {
            for candidate in &candidates {
                if mac(secret.expose_secret(), id, ts, body).verify_slice(candidate).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(VerifyError::Mismatch)
    }
}

fn mac(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Why a request's signature was refused. All are answered 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("webhook-timestamp is not a Unix time in seconds")]
    InvalidTimestamp,
    #[error("webhook-timestamp is more than five minutes from now")]
    StaleTimestamp,
    #[error("webhook-signature has no v1 signature")]
    NoSignature,
    #[error("no signature matches an active secret")]
    Mismatch,
}

impl VerifyError {
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_signature_header",
            VerifyError::InvalidTimestamp => "invalid_timestamp",
            VerifyError::StaleTimestamp => "stale_timestamp",
            VerifyError::NoSignature | VerifyError::Mismatch => "invalid_signature",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The known-answer vector of the Standard Webhooks reference libraries.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(ts: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(ts).unwrap()
    }

    #[test]
    fn the_known_answer_vector_signs_and_verifies() {
        let secrets = Secrets::parse(SECRET).unwrap();
        assert_eq!(secrets.sign(ID, TS, BODY), SIG);
        assert_eq!(secrets.verify(Some(ID), Some("1614265330"), Some(SIG), BODY, at(TS)), Ok(()));
    }

    #[test]
    fn any_signature_against_any_active_secret_verifies_during_rotation() {
        let other = "whsec_c2VjcmV0LW51bWJlci10d28=";
        let rotated = Secrets::parse(&format!("{other}, {SECRET}")).unwrap();
        let header = format!("v1,bm90IGl0 {SIG} v2,ignored");
        assert_eq!(rotated.verify(Some(ID), Some("1614265330"), Some(&header), BODY, at(TS)), Ok(()));
        let only_other = Secrets::parse(other).unwrap();
        assert_eq!(
            only_other.verify(Some(ID), Some("1614265330"), Some(SIG), BODY, at(TS)),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_changed_body_id_or_timestamp_is_refused() {
        let s = Secrets::parse(SECRET).unwrap();
        assert_eq!(
            s.verify(Some(ID), Some("1614265330"), Some(SIG), b"{\"test\": 1}", at(TS)),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            s.verify(Some("msg_other"), Some("1614265330"), Some(SIG), BODY, at(TS)),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            s.verify(Some(ID), Some("1614265331"), Some(SIG), BODY, at(TS)),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn timestamps_outside_five_minutes_either_way_are_refused() {
        let s = Secrets::parse(SECRET).unwrap();
        let ok = |now| s.verify(Some(ID), Some("1614265330"), Some(SIG), BODY, at(now));
        assert_eq!(ok(TS + 300), Ok(()));
        assert_eq!(ok(TS - 300), Ok(()));
        assert_eq!(ok(TS + 301), Err(VerifyError::StaleTimestamp));
        assert_eq!(ok(TS - 301), Err(VerifyError::StaleTimestamp));
    }

    #[test]
    fn missing_or_malformed_headers_are_named() {
        let s = Secrets::parse(SECRET).unwrap();
        assert_eq!(
            s.verify(None, Some("1"), Some(SIG), BODY, at(TS)),
            Err(VerifyError::MissingHeader(ID_HEADER))
        );
        assert_eq!(
            s.verify(Some(ID), None, Some(SIG), BODY, at(TS)),
            Err(VerifyError::MissingHeader(TIMESTAMP_HEADER))
        );
        assert_eq!(
            s.verify(Some(ID), Some("1"), Some(""), BODY, at(TS)),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            s.verify(Some(ID), Some("soon"), Some(SIG), BODY, at(TS)),
            Err(VerifyError::InvalidTimestamp)
        );
        assert_eq!(
            s.verify(Some(ID), Some("1614265330"), Some("v2,abc"), BODY, at(TS)),
            Err(VerifyError::NoSignature)
        );
    }

    #[test]
    fn unusable_secrets_are_refused_and_never_printed() {
        assert_eq!(Secrets::parse("").unwrap_err(), SecretError::None);
        assert_eq!(Secrets::parse("MfKQ9r8").unwrap_err(), SecretError::Prefix { index: 0 });
        assert_eq!(Secrets::parse("whsec_").unwrap_err(), SecretError::Empty { index: 0 });
        assert_eq!(Secrets::parse("whsec_!!!").unwrap_err(), SecretError::Base64 { index: 0 });
        let shown = format!("{:?}", Secrets::parse(SECRET).unwrap());
        assert!(!shown.contains("MfKQ"), "{shown}");
    }
}
