//! Standard Webhooks signature verification (<https://www.standardwebhooks.com/>).
//!
//! A callback carries `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`
//! (space-separated `v1,<base64 HMAC-SHA256>` entries). The signed content is
//! `{id}.{timestamp}.{body}`, keyed with the secret's bytes (`whsec_` then base64).
//!
//! Rules kept here:
//! - Several signatures may be sent and several secrets may be active, so keys can rotate: any
//!   active secret matching any `v1` signature is enough.
//! - **The work before authentication is bounded**, whatever the request: the body is hashed
//!   once per active secret (at most [`MAX_SECRETS`]), never once per signature entry, and at
//!   most [`MAX_SIGNATURES`] entries are read. Computed per entry, one forged request with an
//!   8 KB header of empty `v1,` entries cost about 2,000 HMACs over a 64 KiB body (found by
//!   review).
//! - Comparison is constant-time (`Mac::verify_slice`).
//! - A timestamp more than five minutes from now, either way, is refused, so a captured request
//!   cannot be replayed later. The clock is an argument. Any 64-bit value is compared without
//!   overflow.
//! - Secrets are `SecretSlice`s: they never appear in `Debug` output or logs. A secret shorter
//!   than [`MIN_SECRET_BYTES`] (the Standard Webhooks minimum) is refused at start-up.
//! - A secret may be **scoped** to the workflows, or workflow steps, its sender may call back
//!   (`whsec_...@order-review+billing/payment`): [`Authority::allows`] says whether a verified
//!   request may touch a given step.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice};
use sha2::Sha256;
use time::OffsetDateTime;

/// How far a timestamp may be from now.
pub const TOLERANCE_SECONDS: u64 = 5 * 60;
/// The shortest secret accepted, in bytes: the Standard Webhooks specification's minimum.
pub const MIN_SECRET_BYTES: usize = 24;
/// The most secrets active at once: a rotation needs two.
pub const MAX_SECRETS: usize = 8;
/// The most `webhook-signature` entries read. A sender signs with one secret, or one per active
/// secret while it rotates.
pub const MAX_SIGNATURES: usize = 8;
/// The length of an HMAC-SHA256 signature, decoded: an entry of any other length cannot match.
const SIGNATURE_BYTES: usize = 32;

// A sender that signs with every secret a verifier accepts must have all its entries read.
const _: () = assert!(MAX_SIGNATURES >= MAX_SECRETS);

pub const ID_HEADER: &str = "webhook-id";
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// What a secret lets its sender call back: everything, or the listed workflows and steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    /// `workflow` (every step of it) or `workflow/step` entries.
    Only(Vec<String>),
}

impl Scope {
    fn allows(&self, workflow: &str, step: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(entries) => entries.iter().any(|e| match e.split_once('/') {
                Some((w, s)) => w == workflow && s == step,
                None => e == workflow,
            }),
        }
    }

    fn parse(text: &str, index: usize) -> Result<Scope, SecretError> {
        let entries: Vec<String> = text.split('+').map(str::trim).map(str::to_owned).collect();
        let valid = |e: &str| {
            let mut parts = e.split('/');
            let ok = |p: Option<&str>| {
                p.is_some_and(|p| {
                    !p.is_empty()
                        && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
            };
            let workflow = parts.next();
            let step = parts.next();
            ok(workflow) && (step.is_none() || ok(step)) && parts.next().is_none()
        };
        match entries.iter().find(|e| !valid(e)) {
            Some(bad) => Err(SecretError::Scope { index, entry: bad.clone() }),
            None => Ok(Scope::Only(entries)),
        }
    }
}

struct Secret {
    key: SecretSlice<u8>,
    scope: Scope,
}

/// The secrets a verifier accepts.
pub struct Secrets(Vec<Secret>);

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
    #[error("secret {index} is {len} bytes long; the shortest accepted is {MIN_SECRET_BYTES}")]
    TooShort { index: usize, len: usize },
    #[error("secret {index}'s scope entry {entry:?} is not `workflow` or `workflow/step` (a-z, 0-9, '-')")]
    Scope { index: usize, entry: String },
    #[error("{count} secrets are listed; at most {MAX_SECRETS} may be active at once")]
    TooMany { count: usize },
    #[error("no secret is configured: every callback would be refused")]
    None,
}

/// What a verified request may call back: the scopes of every active secret that signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority(Vec<Scope>);

impl Authority {
    /// May the sender call back step `step` of workflow `workflow`?
    pub fn allows(&self, workflow: &str, step: &str) -> bool {
        self.0.iter().any(|s| s.allows(workflow, step))
    }
}

impl Secrets {
    /// Parses a comma-separated list of `whsec_...` secrets (whitespace around each ignored),
    /// each optionally scoped: `whsec_...@workflow+workflow/step`.
    pub fn parse(list: &str) -> Result<Secrets, SecretError> {
        let entries: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if entries.len() > MAX_SECRETS {
            return Err(SecretError::TooMany { count: entries.len() });
        }
        let secrets = entries.iter().enumerate().map(|(index, s)| parse_one(s, index));
        let secrets = secrets.collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SecretError::None);
        }
        Ok(Secrets(secrets))
    }

    /// The `v1,...` signature of a message with the first (newest) secret: what senders do,
    /// and what `baton callback` does.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mac = mac(self.0[0].key.expose_secret(), id, timestamp, body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// Verifies a request's three headers against its body at time `now`, and says what the
    /// secrets that signed it allow.
    pub fn verify(
        &self,
        id: Option<&str>,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<Authority, VerifyError> {
        let id = id.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(ID_HEADER))?;
        let timestamp =
            timestamp.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(TIMESTAMP_HEADER))?;
        let signature =
            signature.filter(|v| !v.is_empty()).ok_or(VerifyError::MissingHeader(SIGNATURE_HEADER))?;
        let ts: i64 = timestamp.trim().parse().map_err(|_| VerifyError::InvalidTimestamp)?;
        if now.unix_timestamp().abs_diff(ts) > TOLERANCE_SECONDS {
            return Err(VerifyError::StaleTimestamp);
        }
        let candidates = candidates(signature)?;
        // One MAC over the body per secret; each candidate is compared against its result.
        let scopes: Vec<Scope> = self
            .0
            .iter()
            .filter(|secret| {
                let mac = mac(secret.key.expose_secret(), id, ts, body);
                candidates.iter().any(|c| mac.clone().verify_slice(c).is_ok())
            })
            .map(|secret| secret.scope.clone())
            .collect();
        if scopes.is_empty() {
            return Err(VerifyError::Mismatch);
        }
        Ok(Authority(scopes))
    }
}

fn parse_one(entry: &str, index: usize) -> Result<Secret, SecretError> {
    let (secret, scope) = match entry.split_once('@') {
        Some((secret, scope)) => (secret.trim(), Scope::parse(scope, index)?),
        None => (entry, Scope::All),
    };
    let encoded = secret.strip_prefix("whsec_").ok_or(SecretError::Prefix { index })?;
    let bytes = STANDARD.decode(encoded).map_err(|_| SecretError::Base64 { index })?;
    match bytes.len() {
        0 => Err(SecretError::Empty { index }),
        len if len < MIN_SECRET_BYTES => Err(SecretError::TooShort { index, len }),
        _ => Ok(Secret { key: SecretSlice::from(bytes), scope }),
    }
}

/// The header's `v1` signatures that could match: well-formed, of an HMAC-SHA256's length. More
/// than [`MAX_SIGNATURES`] entries are refused before anything is decoded.
fn candidates(header: &str) -> Result<Vec<[u8; SIGNATURE_BYTES]>, VerifyError> {
    let entries = header.split_whitespace().count();
    if entries > MAX_SIGNATURES {
        return Err(VerifyError::TooManySignatures { entries });
    }
    let candidates: Vec<_> = header
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|sig| STANDARD.decode(sig).ok())
        .filter_map(|bytes| <[u8; SIGNATURE_BYTES]>::try_from(bytes).ok())
        .collect();
    if candidates.is_empty() {
        return Err(VerifyError::NoSignature);
    }
    Ok(candidates)
}

fn mac(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    #[cfg(test)]
    tests::MACS.with(|n| n.set(n.get() + 1));
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
    #[error("webhook-signature has no v1 signature of 32 bytes")]
    NoSignature,
    #[error("webhook-signature has {entries} entries; at most {MAX_SIGNATURES} are read")]
    TooManySignatures { entries: usize },
    #[error("no signature matches an active secret")]
    Mismatch,
}

impl VerifyError {
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_signature_header",
            VerifyError::InvalidTimestamp => "invalid_timestamp",
            VerifyError::StaleTimestamp => "stale_timestamp",
            VerifyError::NoSignature | VerifyError::TooManySignatures { .. } | VerifyError::Mismatch => {
                "invalid_signature"
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        /// How many MACs over a body this thread has computed.
        pub(super) static MACS: Cell<usize> = const { Cell::new(0) };
    }

    // The known-answer vector of the Standard Webhooks reference libraries.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    /// A second secret of 24 bytes.
    const OTHER: &str = "whsec_c2Vjb25kLXNlY3JldC1vZi0yNC1ieXRlcw==";

    fn at(ts: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(ts).unwrap()
    }

    #[test]
    fn the_known_answer_vector_signs_and_verifies() {
        let secrets = Secrets::parse(SECRET).unwrap();
        assert_eq!(secrets.sign(ID, TS, BODY), SIG);
        assert_eq!(
            secrets.verify(Some(ID), Some("1614265330"), Some(SIG), BODY, at(TS)),
            Ok(Authority(vec![Scope::All]))
        );
    }

    #[test]
    fn any_signature_against_any_active_secret_verifies_during_rotation() {
        let other = OTHER;
        let rotated = Secrets::parse(&format!("{other}, {SECRET}")).unwrap();
        let header = format!("v1,bm90IGl0 {SIG} v2,ignored");
        assert!(rotated.verify(Some(ID), Some("1614265330"), Some(&header), BODY, at(TS)).is_ok());
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
        assert!(ok(TS + 300).is_ok());
        assert!(ok(TS - 300).is_ok());
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

    /// The review's amplification request: an 8 KB `webhook-signature` of empty `v1,` entries.
    fn forged_header(entries: usize) -> String {
        vec!["v1,"; entries].join(" ")
    }

    #[test]
    fn a_header_of_thousands_of_entries_is_refused_before_any_mac() {
        // Given a 64 KiB body and the review's forged header (about 2,000 MACs before the fix)
        let s = Secrets::parse(&format!("{SECRET},{OTHER}")).unwrap();
        let body = vec![b'x'; 64 * 1024];
        MACS.with(|n| n.set(0));
        // When it is verified
        let refused = s.verify(Some(ID), Some("1614265330"), Some(&forged_header(2_000)), &body, at(TS));
        // Then it is refused without hashing the body once
        assert_eq!(refused, Err(VerifyError::TooManySignatures { entries: 2_000 }));
        assert_eq!(MACS.with(Cell::get), 0);
    }

    #[test]
    fn the_body_is_hashed_once_per_secret_whatever_the_signatures() {
        // Given as many forged signatures of the right length as are read, and two secrets
        let s = Secrets::parse(&format!("{SECRET},{OTHER}")).unwrap();
        let forged = format!("v1,{}", STANDARD.encode([7u8; SIGNATURE_BYTES]));
        let header = [forged.as_str(); MAX_SIGNATURES].join(" ");
        MACS.with(|n| n.set(0));
        // When it is verified
        let refused = s.verify(Some(ID), Some("1614265330"), Some(&header), BODY, at(TS));
        // Then it costs one MAC per secret, not one per secret and signature
        assert_eq!(refused, Err(VerifyError::Mismatch));
        assert_eq!(MACS.with(Cell::get), 2);
        // And empty or short entries are no candidates at all
        let empty = s.verify(Some(ID), Some("1614265330"), Some("v1, v1,AAAA"), BODY, at(TS));
        assert_eq!(empty, Err(VerifyError::NoSignature));
    }

    #[test]
    fn a_timestamp_at_either_end_of_64_bits_is_stale_not_a_panic() {
        let s = Secrets::parse(SECRET).unwrap();
        for ts in [i64::MIN, i64::MIN + 1, i64::MAX] {
            let refused = s.verify(Some(ID), Some(&ts.to_string()), Some(SIG), BODY, at(TS));
            assert_eq!(refused, Err(VerifyError::StaleTimestamp), "{ts}");
        }
    }

    #[test]
    fn secrets_shorter_than_24_bytes_or_too_many_are_refused() {
        // "whsec_c2VjcmV0" is "secret", 6 bytes
        assert_eq!(Secrets::parse("whsec_c2VjcmV0").unwrap_err(), SecretError::TooShort { index: 0, len: 6 });
        let nine = [SECRET; MAX_SECRETS + 1].join(",");
        assert_eq!(Secrets::parse(&nine).unwrap_err(), SecretError::TooMany { count: MAX_SECRETS + 1 });
    }

    #[test]
    fn a_scoped_secret_allows_only_its_workflows_and_steps() {
        // Given a secret scoped to one workflow and one step of another
        let scoped = Secrets::parse(&format!("{SECRET}@order-review+billing/payment")).unwrap();
        // When a request it signed is verified
        let authority = scoped.verify(Some(ID), Some("1614265330"), Some(SIG), BODY, at(TS)).unwrap();
        // Then it may call back those, and nothing else
        assert!(authority.allows("order-review", "manual-review"));
        assert!(authority.allows("billing", "payment"));
        assert!(!authority.allows("billing", "refund"));
        assert!(!authority.allows("order-reviews", "manual-review"));
        // And during a rotation, what any signing secret allows is allowed
        let both = Secrets::parse(&format!("{OTHER}@billing, {SECRET}@order-review")).unwrap();
        let header = format!("{} {SIG}", both.sign(ID, TS, BODY));
        let authority = both.verify(Some(ID), Some("1614265330"), Some(&header), BODY, at(TS)).unwrap();
        assert!(authority.allows("billing", "x") && authority.allows("order-review", "y"));
        // A malformed scope is refused at start-up, naming the entry
        assert_eq!(
            Secrets::parse(&format!("{SECRET}@Billing/x/y")).unwrap_err(),
            SecretError::Scope { index: 0, entry: "Billing/x/y".into() }
        );
    }

    /// Attacks that held (coverage): scopes refuse prefixes, case, empty parts, '/' tricks and
    /// whitespace; timestamps at the ends of 64 bits are refused without overflow.
    #[test]
    fn scopes_and_timestamps_hold_against_edge_inputs() {
        let key = format!("whsec_{}", STANDARD.encode([7u8; 24]));
        for bad in ["", "wf/", "/step", "wf//s", "wf/s/x", "WF", "wf /s", "w f", "wf+", "+wf", "wf\t/s"] {
            assert!(Secrets::parse(&format!("{key}@{bad}")).is_err(), "{bad:?} accepted as a scope");
        }
        let secrets = Secrets::parse(&format!("{key}@order+billing/pay")).unwrap();
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let sig = secrets.sign("id", 1_700_000_000, b"{}");
        let authority = secrets.verify(Some("id"), Some("1700000000"), Some(&sig), b"{}", now).unwrap();
        assert!(authority.allows("order", "any") && authority.allows("billing", "pay"));
        for (w, s) in [
            ("orde", "x"),
            ("order-x", "x"),
            ("Order", "x"),
            ("order ", "x"),
            ("billing", "pa"),
            ("billing", "pay "),
            ("billing", "pay/x"),
            ("billing/pay", ""),
            ("billing", ""),
            ("", "pay"),
            ("billing/pay", "pay"),
            ("order/x", "y"),
        ] {
            assert!(!authority.allows(w, s), "{w:?}/{s:?} allowed");
        }
        for ts in
            ["-9223372036854775808", "9223372036854775807", "18446744073709551615", "+99999999999999999999"]
        {
            assert!(secrets.verify(Some("id"), Some(ts), Some(&sig), b"{}", now).is_err(), "{ts}");
        }
        let far = OffsetDateTime::from_unix_timestamp(253_402_300_799).unwrap();
        assert_eq!(
            secrets.verify(Some("id"), Some("-9223372036854775808"), Some(&sig), b"{}", far),
            Err(VerifyError::StaleTimestamp)
        );
    }
}
