//! Where the callback API's webhook secrets come from, and how a rotation reaches a running
//! function.
//!
//! On AWS the secrets live in Secrets Manager (`BATON_WEBHOOK_SECRET_ARN`, read by the
//! `baton-secrets-manager` crate's [`SecretSource`]): never in an
//! environment variable, where anyone allowed `lambda:GetFunctionConfiguration` could read them.
//! The secret's value is the list the verifier accepts, `whsec_...` entries separated by commas,
//! so a rotation is: put `new,old`, move the senders to `new`, put `new`.
//!
//! Rules kept here:
//! - **Read at cold start, then cached**, and read again once [`RotatingSecrets`]'s TTL has
//!   passed, on the next request: a rotation is picked up within the TTL, without a redeploy,
//!   and a warm function makes one read per TTL, not one per request.
//! - **A failed refresh keeps the secrets it has** (and says so in the log): an outage of
//!   Secrets Manager does not refuse callbacks that were accepted a moment ago. It tries again
//!   after [`RETRY_AFTER_FAILURE`], not on every request.
//! - **Nothing to verify with is an answer, not a crash**: when the first read fails for a reason
//!   that can pass, the function starts anyway and answers 503 until a read succeeds. A secret
//!   that does not exist, cannot be read, or is not a valid list fails the cold start, naming it.
//! - Values are [`SecretString`]s and [`Secrets`]: never in `Debug` output or logs.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use time::{Duration, OffsetDateTime};
use tokio::sync::Mutex;
use tracing::{error, info, warn};

use crate::domain::error::Classified;
use crate::domain::webhook::{SecretError, Secrets};
use crate::ports::metrics::{Metric, Metrics};

/// How long fetched secrets are used before they are read again.
pub const DEFAULT_TTL: Duration = Duration::minutes(5);
/// How long to wait before reading again after a failed read.
pub const RETRY_AFTER_FAILURE: Duration = Duration::seconds(5);
/// How long the cold start waits for its first read. Lambda gives init 10 seconds and the SDK's
/// own bound (three attempts) is longer; a read still unanswered by then counts as unavailable
/// (503 until a later read succeeds) rather than letting Lambda kill the init.
pub const START_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the secret list is read from.
#[async_trait::async_trait]
pub trait SecretSource: Send + Sync {
    /// The current list (`whsec_...`, comma separated).
    async fn fetch(&self) -> Result<SecretString, SecretsError>;
    /// What it reads, for logs and errors (an ARN; never a value).
    fn describe(&self) -> String;
}

/// Why the secrets cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("cannot read secret {secret}")]
    Read {
        secret: String,
        retryable: bool,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("secret {secret} has no SecretString: store the whsec_ list as text")]
    NotText { secret: String },
    #[error("secret {secret} is not a list of whsec_ secrets")]
    Invalid {
        secret: String,
        #[source]
        source: SecretError,
    },
}

impl Classified for SecretsError {
    fn error_type(&self) -> &'static str {
        match self {
            SecretsError::Read { retryable: true, .. } => "secrets_unavailable",
            SecretsError::Read { .. } => "secrets_unreadable",
            SecretsError::NotText { .. } | SecretsError::Invalid { .. } => "secrets_invalid",
        }
    }

    fn retryable(&self) -> bool {
        matches!(self, SecretsError::Read { retryable: true, .. })
    }
}

impl SecretsError {
    /// Every `error_type` this module can produce (RUNBOOK.md documents each).
    pub const ERROR_TYPES: &[&str] = &["secrets_unavailable", "secrets_unreadable", "secrets_invalid"];
}

struct Cached {
    secrets: Option<Arc<Secrets>>,
    /// When the cache is next read again (after the TTL, or after a failure).
    refresh_at: OffsetDateTime,
}

/// The secrets a callback is verified with, refreshed from their source on a TTL.
pub struct RotatingSecrets {
    source: Option<Arc<dyn SecretSource>>,
    ttl: Duration,
    cached: Mutex<Cached>,
}

impl RotatingSecrets {
    /// Secrets that never change (a local run's, or a test's): with no source, nothing is ever
    /// read again, whatever `refresh_at` says.
    pub fn fixed(secrets: Secrets) -> Self {
        RotatingSecrets {
            source: None,
            ttl: Duration::MAX,
            cached: Mutex::new(Cached {
                secrets: Some(Arc::new(secrets)),
                refresh_at: OffsetDateTime::UNIX_EPOCH,
            }),
        }
    }

    /// Reads the secrets from `source` now (the cold start). A failure that can pass leaves the
    /// cache empty (callbacks get 503 until a read succeeds); any other failure is returned.
    pub async fn load(
        source: Arc<dyn SecretSource>,
        ttl: Duration,
        now: OffsetDateTime,
    ) -> Result<Self, SecretsError> {
        let first = tokio::time::timeout(START_READ_LIMIT, read(&*source)).await.unwrap_or_else(|_| {
            Err(SecretsError::Read {
                retryable: true,
                source: format!("no answer within {START_READ_LIMIT:?} at start-up").into(),
                secret: source.describe(),
            })
        });
        let secrets = match first {
            Ok(secrets) => Some(Arc::new(secrets)),
            Err(e) if e.retryable() => {
                warn!(secret = %source.describe(), error = %crate::domain::error::error_chain(&e),
                    "cannot read the webhook secrets at start-up; callbacks get 503 until a read succeeds");
                None
            }
            Err(e) => return Err(e),
        };
        let refresh_at = if secrets.is_some() { now + ttl } else { now + RETRY_AFTER_FAILURE };
        Ok(RotatingSecrets { source: Some(source), ttl, cached: Mutex::new(Cached { secrets, refresh_at }) })
    }

    /// The secrets to verify with at `now`: the cached ones, read again first once they are due.
    /// A value that cannot be used (a rotation that put a malformed list) is counted as
    /// [`Metric::SecretsInvalid`], which raises an alarm: the old secrets stay in use only until
    /// the function's next cold start, which would then fail.
    pub async fn current(
        &self,
        now: OffsetDateTime,
        metrics: &Metrics,
    ) -> Result<Arc<Secrets>, SecretsError> {
        let mut cached = self.cached.lock().await;
        let Some(source) = self.source.as_ref().filter(|_| now >= cached.refresh_at) else {
            return cached.secrets.clone().ok_or_else(|| self.unavailable());
        };
        match read(&**source).await {
            Ok(secrets) => {
                info!(secret = %source.describe(), "webhook secrets read");
                cached.secrets = Some(Arc::new(secrets));
                cached.refresh_at = now + self.ttl;
            }
            Err(e @ (SecretsError::Invalid { .. } | SecretsError::NotText { .. })) => {
                error!(secret = %source.describe(), error_type = e.error_type(), error = %crate::domain::error::error_chain(&e),
                    kept = cached.secrets.is_some(),
                    "the webhook secret's new value cannot be used; keeping the ones in use: put a valid list (RUNBOOK: secrets_invalid)");
                metrics.count(Metric::SecretsInvalid, None, now);
                cached.refresh_at = now + RETRY_AFTER_FAILURE;
                if cached.secrets.is_none() {
                    return Err(e);
                }
            }
            Err(e) => {
                warn!(secret = %source.describe(), error_type = e.error_type(), error = %crate::domain::error::error_chain(&e),
                    kept = cached.secrets.is_some(), "cannot read the webhook secrets; keeping the ones in use");
                cached.refresh_at = now + RETRY_AFTER_FAILURE;
                if cached.secrets.is_none() {
                    return Err(e);
                }
            }
        }
        cached.secrets.clone().ok_or_else(|| self.unavailable())
    }

    fn unavailable(&self) -> SecretsError {
        let secret = self.source.as_ref().map_or_else(String::new, |s| s.describe());
        SecretsError::Read {
            retryable: true,
            source: format!("no successful read of {secret} yet").into(),
            secret,
        }
    }
}

async fn read(source: &dyn SecretSource) -> Result<Secrets, SecretsError> {
    let text = source.fetch().await?;
    Secrets::parse(text.expose_secret())
        .map_err(|e| SecretsError::Invalid { secret: source.describe(), source: e })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    /// A source whose value and availability a test sets.
    struct Scripted {
        value: StdMutex<Result<String, bool>>,
        reads: StdMutex<u32>,
    }

    #[async_trait::async_trait]
    impl SecretSource for Scripted {
        async fn fetch(&self) -> Result<SecretString, SecretsError> {
            *self.reads.lock().unwrap() += 1;
            match &*self.value.lock().unwrap() {
                Ok(v) => Ok(SecretString::from(v.clone())),
                Err(retryable) => Err(SecretsError::Read {
                    secret: "s".into(),
                    retryable: *retryable,
                    source: "scripted failure".into(),
                }),
            }
        }
        fn describe(&self) -> String {
            "s".into()
        }
    }

    fn quiet() -> Metrics {
        Metrics::to(Box::new(std::io::sink()))
    }

    const A: &str = "whsec_c2VjcmV0LWEtb2YtdHdlbnR5LWZvdXItYnl0ZXM=";
    const B: &str = "whsec_c2VjcmV0LWItb2YtdHdlbnR5LWZvdXItYnl0ZXM=";

    fn signs_with(secrets: &Secrets, list: &str) -> bool {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let signer = Secrets::parse(list).unwrap();
        let sig = signer.sign("id", now.unix_timestamp(), b"{}");
        secrets.verify(Some("id"), Some(&now.unix_timestamp().to_string()), Some(&sig), b"{}", now).is_ok()
    }

    #[tokio::test]
    async fn a_rotation_is_read_after_the_ttl_and_not_before() {
        let source = Arc::new(Scripted { value: StdMutex::new(Ok(A.into())), reads: StdMutex::new(0) });
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let secrets = RotatingSecrets::load(source.clone(), Duration::minutes(5), t0).await.unwrap();
        *source.value.lock().unwrap() = Ok(format!("{B},{A}"));
        let before = secrets.current(t0 + Duration::minutes(4), &quiet()).await.unwrap();
        assert!(signs_with(&before, A) && !signs_with(&before, B), "within the TTL: the cached list");
        let after = secrets.current(t0 + Duration::minutes(5), &quiet()).await.unwrap();
        assert!(signs_with(&after, A) && signs_with(&after, B), "after it: both, during the rotation");
        *source.value.lock().unwrap() = Ok(B.into());
        let done = secrets.current(t0 + Duration::minutes(10), &quiet()).await.unwrap();
        assert!(!signs_with(&done, A) && signs_with(&done, B), "the old secret is refused once removed");
        assert_eq!(*source.reads.lock().unwrap(), 3, "one read per TTL");
    }

    #[tokio::test]
    async fn an_outage_keeps_the_secrets_in_use_and_retries_after_a_pause() {
        let source = Arc::new(Scripted { value: StdMutex::new(Ok(A.into())), reads: StdMutex::new(0) });
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let secrets = RotatingSecrets::load(source.clone(), Duration::minutes(5), t0).await.unwrap();
        *source.value.lock().unwrap() = Err(true);
        let t1 = t0 + Duration::minutes(6);
        assert!(signs_with(&secrets.current(t1, &quiet()).await.unwrap(), A), "kept through the outage");
        assert!(signs_with(&secrets.current(t1 + Duration::seconds(1), &quiet()).await.unwrap(), A));
        assert_eq!(*source.reads.lock().unwrap(), 2, "no read on every request while it is down");
        *source.value.lock().unwrap() = Ok(B.into());
        let back = secrets.current(t1 + RETRY_AFTER_FAILURE, &quiet()).await.unwrap();
        assert!(signs_with(&back, B));
    }

    /// A source that never answers (a hung connection).
    struct Hung;

    #[async_trait::async_trait]
    impl SecretSource for Hung {
        async fn fetch(&self) -> Result<SecretString, SecretsError> {
            std::future::pending().await
        }
        fn describe(&self) -> String {
            "hung".into()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_hangs_ends_at_the_start_limit_as_unavailable() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let began = tokio::time::Instant::now();
        let secrets = RotatingSecrets::load(Arc::new(Hung), Duration::minutes(5), t0).await.unwrap();
        assert_eq!(began.elapsed(), START_READ_LIMIT, "init waits the limit, not the SDK's 25 s");
        let err = secrets.current(t0, &quiet()).await.unwrap_err();
        assert_eq!((err.error_type(), err.retryable()), ("secrets_unavailable", true));
    }

    #[tokio::test]
    async fn a_start_without_secrets_answers_unavailable_until_a_read_succeeds_but_a_bad_secret_fails_it() {
        let source = Arc::new(Scripted { value: StdMutex::new(Err(true)), reads: StdMutex::new(0) });
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let secrets = RotatingSecrets::load(source.clone(), Duration::minutes(5), t0).await.unwrap();
        let err = secrets.current(t0, &quiet()).await.unwrap_err();
        assert_eq!((err.error_type(), err.retryable()), ("secrets_unavailable", true));
        *source.value.lock().unwrap() = Ok(A.into());
        assert!(signs_with(&secrets.current(t0 + RETRY_AFTER_FAILURE, &quiet()).await.unwrap(), A));

        for bad in [Err(false), Ok("not-a-secret".to_owned()), Ok(String::new())] {
            let source = Arc::new(Scripted { value: StdMutex::new(bad), reads: StdMutex::new(0) });
            let err = RotatingSecrets::load(source, Duration::minutes(5), t0).await.err().expect("refused");
            assert!(!err.retryable(), "{err}");
        }
    }

    #[tokio::test]
    async fn a_rotation_to_an_unusable_value_keeps_the_old_secrets_and_raises_the_alarm_metric() {
        // Given secrets in use
        let source = Arc::new(Scripted { value: StdMutex::new(Ok(A.into())), reads: StdMutex::new(0) });
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let secrets = RotatingSecrets::load(source.clone(), Duration::minutes(5), t0).await.unwrap();
        let captured = crate::ports::metrics::Captured::default();
        let metrics = Metrics::to(Box::new(captured.clone()));
        // When a rotation puts a value that cannot be parsed (a secret too short)
        *source.value.lock().unwrap() = Ok("whsec_c2VjcmV0".into());
        let kept = secrets.current(t0 + Duration::minutes(5), &metrics).await.unwrap();
        // Then the old secrets stay in use, and the alarm's metric is counted
        assert!(signs_with(&kept, A));
        assert_eq!(captured.count(Metric::SecretsInvalid, None), 1);
        // An outage is no alarm of this kind
        *source.value.lock().unwrap() = Err(true);
        secrets.current(t0 + Duration::minutes(6), &metrics).await.unwrap();
        assert_eq!(captured.count(Metric::SecretsInvalid, None), 1);
    }
}
