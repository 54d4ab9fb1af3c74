//! Inputs from the outside, sent by hand: `baton send` puts a domain event on the intake queue as
//! a producer would, and `baton callback` posts a signed callback as an external system would.
//!
//! Both go through the public entrances (SQS, the HTTP API), never around them, so what an
//! operator sees is what a real producer would get. An event is checked with the same parser
//! intake uses before it is sent, because an invalid one would only end up on the dead-letter
//! queue. A callback is signed with Standard Webhooks headers; its `webhook-id` is printed, so
//! the same callback can be sent again with `--id` to see the duplicate answer.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use baton_core::domain::event::Event;
use baton_core::domain::webhook::{ID_HEADER, SIGNATURE_HEADER, Secrets, TIMESTAMP_HEADER};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use secrecy::ExposeSecret;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::ops::rfc3339;
use crate::target::{self, Field, TargetArgs};

/// How long a callback may take before the command gives up.
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(30);

/// `baton send`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("event").required(true).args(["file", "type"])))]
pub struct SendArgs {
    /// A file holding the event (CloudEvents 1.0 JSON or an EventBridge event); `-` reads stdin.
    /// Without it, the event is built from the flags.
    #[arg(value_name = "FILE", conflicts_with_all = ["type", "subject", "data", "source", "id"])]
    pub file: Option<PathBuf>,
    /// The event's `type`, e.g. order.placed.
    #[arg(long = "type", id = "type", value_name = "TYPE")]
    pub event_type: Option<String>,
    /// The event's `subject`: often the correlation key.
    #[arg(long, requires = "type")]
    pub subject: Option<String>,
    /// The event's `data`, as JSON.
    #[arg(long, value_name = "JSON", requires = "type")]
    pub data: Option<String>,
    /// The event's `source`.
    #[arg(long, default_value = "baton-cli")]
    pub source: String,
    /// The event's `id` [default: a fresh unique id].
    #[arg(long, requires = "type")]
    pub id: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `baton callback`.
#[derive(Debug, clap::Args)]
pub struct CallbackArgs {
    /// The workflow's name, as in the config.
    #[arg(long)]
    pub workflow: String,
    /// The correlation key.
    #[arg(long)]
    pub key: String,
    /// The step's name.
    #[arg(long)]
    pub step: String,
    #[arg(long, value_enum, default_value_t = CallbackOutcome::Succeeded)]
    pub outcome: CallbackOutcome,
    /// Inputs for the step, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
    /// With --outcome failed: the error name the execution's Catch sees.
    #[arg(long)]
    pub error: Option<String>,
    /// With --outcome failed: a description.
    #[arg(long)]
    pub cause: Option<String>,
    /// Acknowledge the step's compensation (a `baton.compensation.requested` task) instead of
    /// answering the step: --outcome succeeded (undone) or failed (this attempt failed).
    #[arg(long)]
    pub compensation: bool,
    /// The attempt the callback answers (the task's `attempt`).
    #[arg(long)]
    pub attempt: Option<u32>,
    /// The `webhook-id`, the callback's idempotency key [default: a fresh unique id].
    #[arg(long = "id", value_name = "WEBHOOK_ID")]
    pub id: Option<String>,
    /// How many times to send it: a 503 is sent again with the same webhook-id after its
    /// `Retry-After`, as a Standard Webhooks sender does.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub attempts: u32,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// A callback's `outcome`, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CallbackOutcome {
    Succeeded,
    Failed,
    #[value(name = "in_progress", alias = "in-progress")]
    InProgress,
}

impl CallbackOutcome {
    fn as_str(self) -> &'static str {
        match self {
            CallbackOutcome::Succeeded => "succeeded",
            CallbackOutcome::Failed => "failed",
            CallbackOutcome::InProgress => "in_progress",
        }
    }
}

/// `baton send`: validates the event, sends it to the intake queue, prints both ids.
pub async fn send(args: SendArgs) -> Result<()> {
    let body = match (&args.file, &args.event_type) {
        (Some(file), _) => read_event(file)?,
        (None, Some(event_type)) => build_event(&args, event_type, OffsetDateTime::now_utc())?,
        // clap requires one of the two.
        (None, None) => bail!("give an event FILE, or build one with --type"),
    };
    let event = Event::parse(&body).map_err(|e| anyhow!("the event is invalid, not sent: {e}"))?;

    let target = target::resolve(&args.target, &[Field::IntakeQueueUrl], true)?;
    let queue = target.intake_queue_url.clone().context("no intake queue URL")?;
    let sqs = aws_sdk_sqs::Client::new(&target.aws().sdk_config().await?);
    let sent = sqs
        .send_message()
        .queue_url(&queue)
        .message_body(&body)
        .send()
        .await
        .with_context(|| format!("cannot send to the intake queue {queue} at {}", target.location()))?;
    println!("event id:   {}", event.id);
    println!("message id: {}", sent.message_id().unwrap_or("(none given)"));
    Ok(())
}

/// The event text from a file, or stdin for `-`.
fn read_event(file: &Path) -> Result<String> {
    if file.as_os_str() == "-" {
        let mut body = String::new();
        std::io::stdin().read_to_string(&mut body).context("cannot read the event from stdin")?;
        Ok(body)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
    }
}

/// A CloudEvent from the flags.
fn build_event(args: &SendArgs, event_type: &str, now: OffsetDateTime) -> Result<String> {
    let mut event = Map::new();
    event.insert("specversion".into(), json!("1.0"));
    event.insert("id".into(), json!(args.id.clone().unwrap_or_else(|| fresh_id("evt"))));
    event.insert("source".into(), json!(args.source));
    event.insert("type".into(), json!(event_type));
    if let Some(subject) = &args.subject {
        event.insert("subject".into(), json!(subject));
    }
    event.insert("time".into(), json!(rfc3339(now)));
    if let Some(data) = &args.data {
        let data: Value = serde_json::from_str(data).context("--data is not valid JSON")?;
        event.insert("data".into(), data);
    }
    Ok(Value::Object(event).to_string())
}

/// `<prefix>-<16 hex digits>`: 64 random bits, so unique for any practical purpose without a
/// UUID dependency. The randomness is the standard library's hash keys (seeded from the OS),
/// applied to the time and process id.
fn fresh_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("{prefix}-{:016x}", RandomState::new().hash_one((nanos, std::process::id())))
}

/// `baton callback`: builds, signs and posts the callback; prints the status and the answer.
/// Fails (exit 1) on a 4xx or 5xx answer, after printing it.
pub async fn callback(args: CallbackArgs) -> Result<()> {
    let body = callback_body(&args)?;
    let target = target::resolve(&args.target, &[Field::ApiUrl, Field::WebhookSecret], false)?;
    let (api_url, secret) = match (target.api_url, target.webhook_secret) {
        (Some(url), Some(secret)) => (url, secret),
        _ => bail!("the callback API URL and the webhook secret are both needed"),
    };
    let secrets = Secrets::parse(secret.expose_secret()).context("the webhook secret cannot be used")?;
    let id = args.id.clone().unwrap_or_else(|| fresh_id("cb"));
    let url = format!("{api_url}/v1/callbacks");
    let mut attempt = 1;
    let (status, retry_after, answer) = loop {
        // Each attempt is signed afresh: the timestamp must be within five minutes of the send.
        let timestamp = OffsetDateTime::now_utc().unix_timestamp();
        let headers = [
            (ID_HEADER, id.clone()),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, secrets.sign(&id, timestamp, body.as_bytes())),
        ];
        let reply = tokio::time::timeout(CALLBACK_TIMEOUT, post(&url, &headers, body.clone()))
            .await
            .map_err(|_| anyhow!("no answer from {url} within {}s", CALLBACK_TIMEOUT.as_secs()))??;
        let wait = reply.1.as_deref().and_then(|s| s.parse::<u64>().ok());
        match (reply.0, wait) {
            (503, Some(seconds)) if attempt < args.attempts => {
                eprintln!("HTTP 503 (attempt {attempt} of {}): sending again in {seconds}s", args.attempts);
                tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
                attempt += 1;
            }
            _ => break reply,
        }
    };

    println!("webhook-id: {id}");
    println!("HTTP {status}");
    if let Some(seconds) = retry_after {
        println!("retry-after: {seconds}");
    }
    match serde_json::from_slice::<Value>(&answer) {
        Ok(json) => println!("{}", serde_json::to_string_pretty(&json)?),
        Err(_) => println!("{}", String::from_utf8_lossy(&answer)),
    }
    if status >= 400 {
        bail!("the callback was refused with HTTP {status}");
    }
    Ok(())
}

/// The JSON body, as `infra/openapi.yaml` describes it.
fn callback_body(args: &CallbackArgs) -> Result<String> {
    if args.outcome != CallbackOutcome::Failed && (args.error.is_some() || args.cause.is_some()) {
        bail!("--error and --cause go with --outcome failed");
    }
    let mut body = Map::new();
    body.insert("workflow".into(), json!(args.workflow));
    body.insert("key".into(), json!(args.key));
    body.insert("step".into(), json!(args.step));
    body.insert("outcome".into(), json!(args.outcome.as_str()));
    if let Some(data) = &args.data {
        let data: Value = serde_json::from_str(data).context("--data is not valid JSON")?;
        if !data.is_object() {
            bail!("--data must be a JSON object, e.g. '{{\"decision\": \"approve\"}}'");
        }
        body.insert("data".into(), data);
    }
    if let Some(error) = &args.error {
        body.insert("error".into(), json!(error));
    }
    if let Some(cause) = &args.cause {
        body.insert("cause".into(), json!(cause));
    }
    if args.compensation {
        body.insert("compensation".into(), json!(true));
    }
    if let Some(attempt) = args.attempt {
        body.insert("attempt".into(), json!(attempt));
    }
    Ok(Value::Object(body).to_string())
}

/// POSTs JSON; returns the status, `Retry-After`, and the body. HTTPS uses the system's roots.
async fn post(url: &str, headers: &[(&str, String)], body: String) -> Result<(u16, Option<String>, Bytes)> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let mut request = hyper::Request::post(uri.clone()).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(Full::new(Bytes::from(body))).context("cannot build the request")?;
    let response = match uri.scheme_str() {
        Some("https") => {
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .context("cannot load the system's TLS root certificates")?
                .https_only()
                .enable_http1()
                .build();
            Client::builder(TokioExecutor::new()).build(connector).request(request).await
        }
        Some("http") => {
            Client::builder(TokioExecutor::new()).build(HttpConnector::new()).request(request).await
        }
        _ => bail!("{url}: the API URL must start with http:// or https://"),
    }
    .with_context(|| format!("POST {url} failed"))?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = response.into_body().collect().await.context("cannot read the answer")?.to_bytes();
    Ok((status, retry_after, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_args(event_type: &str) -> SendArgs {
        SendArgs {
            file: None,
            event_type: Some(event_type.into()),
            subject: Some("k1".into()),
            data: Some(r#"{"total": 1500}"#.into()),
            source: "baton-cli".into(),
            id: None,
            target: TargetArgs::default(),
        }
    }

    #[test]
    fn a_built_event_is_a_valid_cloudevent_with_a_fresh_id() {
        // Given flags for an event
        let args = send_args("order.placed");
        // When it is built twice
        let (a, b) = (
            build_event(&args, "order.placed", OffsetDateTime::UNIX_EPOCH).unwrap(),
            build_event(&args, "order.placed", OffsetDateTime::UNIX_EPOCH).unwrap(),
        );
        // Then it parses as intake parses it, with the flags' values and distinct ids
        let event = Event::parse(&a).unwrap();
        assert_eq!(
            (event.r#type.as_str(), event.subject.as_deref(), event.source.as_str()),
            ("order.placed", Some("k1"), "baton-cli")
        );
        assert_eq!(event.data, json!({"total": 1500}));
        assert_eq!(event.time, Some(OffsetDateTime::UNIX_EPOCH));
        assert_ne!(event.id, Event::parse(&b).unwrap().id);
    }

    #[test]
    fn an_id_too_long_for_a_dynamodb_key_is_refused_before_sending() {
        // Given an id of 256 four-byte characters: 1,024 bytes, past a sort key's limit with
        // its prefix
        let mut args = send_args("t");
        args.id = Some("\u{1F600}".repeat(256));
        let body = build_event(&args, "t", OffsetDateTime::UNIX_EPOCH).unwrap();
        // Then the check `send` makes before sending refuses it, naming the byte limit
        let err = Event::parse(&body).unwrap_err().to_string();
        assert!(err.contains("1024 bytes") && err.contains("768"), "{err}");
    }

    #[test]
    fn bad_data_is_named() {
        let mut args = send_args("t");
        args.data = Some("{total".into());
        let err = build_event(&args, "t", OffsetDateTime::UNIX_EPOCH).unwrap_err();
        assert!(err.to_string().contains("--data"), "{err}");
    }

    fn callback_args() -> CallbackArgs {
        CallbackArgs {
            workflow: "order-review".into(),
            key: "k1".into(),
            step: "manual-review".into(),
            outcome: CallbackOutcome::Succeeded,
            data: Some(r#"{"decision": "approve"}"#.into()),
            error: None,
            cause: None,
            compensation: false,
            attempt: None,
            id: None,
            attempts: 3,
            target: TargetArgs::default(),
        }
    }

    #[test]
    fn a_compensation_acknowledgement_is_marked_and_names_its_attempt() {
        let args = CallbackArgs { data: None, compensation: true, attempt: Some(2), ..callback_args() };
        assert_eq!(
            callback_body(&args).unwrap(),
            r#"{"workflow":"order-review","key":"k1","step":"manual-review","outcome":"succeeded","compensation":true,"attempt":2}"#
        );
    }

    #[test]
    fn a_callback_body_follows_the_api_and_is_the_same_every_time() {
        let args = callback_args();
        let body = callback_body(&args).unwrap();
        assert_eq!(
            body,
            r#"{"workflow":"order-review","key":"k1","step":"manual-review","outcome":"succeeded","data":{"decision":"approve"}}"#
        );
        assert_eq!(body, callback_body(&args).unwrap(), "a repeat must hash the same");
    }

    #[test]
    fn a_callback_refuses_error_without_failed_and_data_that_is_not_an_object() {
        let mut args = callback_args();
        args.error = Some("Rejected".into());
        assert!(callback_body(&args).unwrap_err().to_string().contains("--outcome failed"));
        args.outcome = CallbackOutcome::Failed;
        let body: Value = serde_json::from_str(&callback_body(&args).unwrap()).unwrap();
        assert_eq!((body["outcome"].as_str(), body["error"].as_str()), (Some("failed"), Some("Rejected")));
        let mut args = callback_args();
        args.data = Some("[1]".into());
        assert!(callback_body(&args).unwrap_err().to_string().contains("JSON object"));
    }
}
