//! Identifier newtypes, parsed once at the edge.
//!
//! Every identifier that ends up in a DynamoDB key, an execution name or a log line is checked for
//! length and characters here, so the rest of the code never handles an unchecked string. The
//! rules are deliberately narrow: they are what Step Functions execution names and DynamoDB keys
//! accept without escaping, and what an operator can type on a command line.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string was refused as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} is empty")]
    Empty { kind: &'static str },
    #[error("{kind} is {len} characters long; the limit is {max}")]
    TooLong { kind: &'static str, len: usize, max: usize },
    #[error("{kind} is {len} bytes long in UTF-8; the limit is {max} bytes")]
    TooManyBytes { kind: &'static str, len: usize, max: usize },
    #[error("{kind} {value:?} contains {ch:?}; allowed: {allowed}")]
    BadChar { kind: &'static str, value: String, ch: char, allowed: &'static str },
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr, $max_bytes:expr, $allowed:literal, $check:expr) => {
        $(#[$doc])*
        ///
        /// Shared, not copied: a clone (and records, keys and ids are cloned on every write) is
        /// a reference count.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The most characters it may have.
            pub const MAX_CHARS: usize = $max;
            /// The most bytes it may take in UTF-8: what DynamoDB's key limits count.
            pub const MAX_BYTES: usize = $max_bytes;

            /// Parses and checks the identifier.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                check(&value, $kind, ($max, $max_bytes), $allowed, $check)?;
                Ok(Self(value.into()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text itself, shared: a reference count, not a copy.
            pub fn shared(&self) -> Arc<str> {
                Arc::clone(&self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn check(
    value: &str,
    kind: &'static str,
    (max, max_bytes): (usize, usize),
    allowed: &'static str,
    ok: fn(char) -> bool,
) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    let len = value.chars().count();
    if len > max {
        return Err(IdError::TooLong { kind, len, max });
    }
    if value.len() > max_bytes && !crate::mutants::active(crate::mutants::Mutation::IdWithoutByteLimit) {
        return Err(IdError::TooManyBytes { kind, len: value.len(), max: max_bytes });
    }
    if let Some(ch) = value.chars().find(|c| !ok(*c)) {
        return Err(IdError::BadChar { kind, value: value.to_owned(), ch, allowed });
    }
    Ok(())
}

fn name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '@' | '+' | '=')
}

fn printable(c: char) -> bool {
    !c.is_control()
}

id_newtype!(
    /// A workflow's name, as written under `workflows:` in the config.
    WorkflowName, "workflow name", 40, 40, "a-z, 0-9 and '-'", name_char
);
id_newtype!(
    /// A step's name inside one workflow.
    StepName, "step name", 40, 40, "a-z, 0-9 and '-'", name_char
);
id_newtype!(
    /// The correlation key: what ties events and callbacks to one workflow instance.
    CorrelationKey, "correlation key", 128, 128, "A-Z, a-z, 0-9 and - _ . : / @ + =", key_char
);
id_newtype!(
    /// The id of an input: a domain event's `id`, or a callback's `webhook-id`. It ends up in
    /// DynamoDB sort keys (`INBOX#<step>#<id>`, `LEDGER#<reason>#<id>`), which take at most
    /// 1,024 bytes: 256 four-byte characters would not fit (found by review), hence the byte
    /// limit too.
    EventId, "event id", 256, 768, "printable characters", printable
);

/// A Step Functions task token. Secret-ish and long: it is never logged in full, only as
/// [`TaskToken::fingerprint`].
#[derive(Clone, PartialEq, Eq)]
pub struct TaskToken(Arc<str>);

impl Serialize for TaskToken {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Read back as stored, without the checks of [`TaskToken::parse`] (as the derived form was).
impl<'de> Deserialize<'de> for TaskToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self(String::deserialize(d)?.into()))
    }
}

impl TaskToken {
    /// The longest token Step Functions' API takes (`SendTaskSuccess`, `SendTaskFailure`,
    /// `SendTaskHeartbeat`: `taskToken`, 1 to 2,048 characters; older models said 1,024). A
    /// token baton refused would have its `step_ready` dead-lettered on every replay, and the
    /// step would never wait: the limit is the API's, not less.
    pub const MAX_LEN: usize = 2048;

    pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        check(&value, "task token", (Self::MAX_LEN, 4 * Self::MAX_LEN), "printable characters", printable)?;
        Ok(Self(value.into()))
    }

    /// The full token, for the one place that needs it: the call to Step Functions.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A short, stable hash of the token (FNV-1a, 64 bits), safe to log and to compare.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.0.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("tok-{:08x}", h >> 32)
    }
}

impl fmt::Debug for TaskToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskToken({})", self.fingerprint())
    }
}

/// A stable hash of an input's payload (SHA-256, hex): the same idempotency key with another
/// payload is a conflict.
pub fn payload_hash(payload: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_kebab_case_and_refuse_the_rest() {
        assert!(WorkflowName::parse("order-review").is_ok());
        assert_eq!(WorkflowName::parse(""), Err(IdError::Empty { kind: "workflow name" }));
        let err = StepName::parse("Manual Review").unwrap_err();
        assert!(err.to_string().contains("'M'"), "{err}");
        let long = "a".repeat(41);
        assert!(matches!(StepName::parse(long), Err(IdError::TooLong { len: 41, .. })));
    }

    #[test]
    fn correlation_keys_allow_common_id_shapes() {
        for k in ["order-42", "urn:order:42", "acme/orders/42", "a@b.c", "X_1+2=3"] {
            assert!(CorrelationKey::parse(k).is_ok(), "{k}");
        }
        assert!(CorrelationKey::parse("has space").is_err());
    }

    #[test]
    fn task_tokens_are_never_printed_in_full() {
        let t = TaskToken::parse("AAAAKgAAAAIAAAAAAAAAAbcdefSECRET").unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(t.fingerprint(), TaskToken::parse(t.expose()).unwrap().fingerprint());
        assert!(t.fingerprint().starts_with("tok-"));
    }

    /// Found by review: tokens of 1,025 to 2,048 characters, which the API takes, were
    /// refused, and their step_ready dead-lettered on every replay.
    #[test]
    fn task_tokens_are_taken_up_to_the_apis_2048_characters() {
        let longest = "A".repeat(2048);
        assert_eq!(TaskToken::parse(longest.as_str()).map(|t| t.expose().len()), Ok(2048));
        assert_eq!(
            TaskToken::parse(format!("{longest}A")).unwrap_err(),
            IdError::TooLong { kind: "task token", len: 2049, max: 2048 }
        );
    }

    #[test]
    fn event_ids_are_limited_in_bytes_as_well_as_characters() {
        // Given 256 characters: ASCII fits, four-byte characters would not fit a sort key
        assert!(EventId::parse("a".repeat(256)).is_ok());
        assert_eq!(
            EventId::parse("\u{1F600}".repeat(256)),
            Err(IdError::TooManyBytes { kind: "event id", len: 1024, max: 768 })
        );
        // Three-byte characters up to the character limit fit both
        assert!(EventId::parse("\u{20AC}".repeat(256)).is_ok());
    }
}
