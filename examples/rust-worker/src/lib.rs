//! A baton task worker: takes tasks from baton's outbound queue, does the work, calls back.
//!
//! Copy this crate and replace [`do_the_work`] with your team's work. The rest is what any
//! worker needs: reading the CloudEvent, signing the callback ([`signing`]), and acting on each
//! answer baton documents (docs/TASK_WORKERS.md):
//!
//! | answer | [`Action`] |
//! |---|---|
//! | 200 `applied`, 202 `buffered`, 200 `ignored` | `Done`: the message is deleted |
//! | 503 with `Retry-After`, or no answer at all | `Retry`: visible again after `Retry-After`, and the next delivery calls back with the same `webhook-id` |
//! | 409 and every other 4xx | `Refused`: retrying cannot help; left for the queue's redrive to its dead-letter queue |

pub mod signing;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use aws_sdk_sqs::types::Message;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use signing::Signer;

pub const TASK_CREATED: &str = "baton.task.created";
pub const COMPENSATION_REQUESTED: &str = "baton.compensation.requested";

/// Where the worker reads and calls back.
#[derive(Debug, Clone)]
pub struct Settings {
    pub queue_url: String,
    pub api_url: String,
    pub secret: String,
    /// The AWS endpoint and region of a local stack; `None` for AWS itself.
    pub local_endpoint: Option<(String, String)>,
}

impl Settings {
    /// From a deployed stack's outputs in the environment: `BATON_OUTBOUND_QUEUE_URL`,
    /// `BATON_API_URL` (the `CallbackUrl` output without its `/v1/callbacks`),
    /// `BATON_WEBHOOK_SECRET`; AWS region and credentials as the SDK finds them.
    pub fn from_env() -> Result<Settings> {
        let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
        Ok(Settings {
            queue_url: var("BATON_OUTBOUND_QUEUE_URL")?,
            api_url: var("BATON_API_URL")?,
            secret: var("BATON_WEBHOOK_SECRET")?,
            local_endpoint: None,
        })
    }

    /// From the `local.json` that `baton local` (`make run`) writes.
    pub fn from_local(path: &Path) -> Result<Settings> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let info: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        let field = |pointer: &str| {
            info.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .with_context(|| format!("{} has no {pointer}", path.display()))
        };
        Ok(Settings {
            queue_url: field("/queues/outbound")?,
            api_url: field("/api_url")?,
            secret: field("/webhook_secret")?,
            local_endpoint: Some((field("/aws_endpoint")?, field("/region")?)),
        })
    }
}

/// A task: the `data` of a `baton.task.created` or `baton.compensation.requested` event.
#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub workflow: String,
    pub key: String,
    pub generation: u64,
    pub step: String,
    pub title: String,
    pub queue: Option<String>,
    pub attempt: Option<u32>,
    pub previous_error: Option<Value>,
    pub compensation: bool,
}

/// What the work came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Succeeded(Option<Value>),
    Failed { error: String, cause: String },
}

/// Your team's work. This demo approves reviews and holds stock, and undoes whatever a
/// compensation task names.
pub fn do_the_work(task: &Task) -> Work {
    if task.compensation {
        return Work::Succeeded(None);
    }
    match task.step.as_str() {
        "manual-review" => Work::Succeeded(Some(json!({"decision": "approve"}))),
        "reserve-stock" => Work::Succeeded(Some(json!({"hold": format!("hold-{}", task.key)}))),
        other => {
            Work::Failed { error: "worker.unknown_step".into(), cause: format!("no work for step {other}") }
        }
    }
}

/// The callback for `task`. It names the generation and attempt the task carries, so that a late
/// answer to an earlier run or attempt is ignored instead of completing a later one.
pub fn callback_body(task: &Task, work: &Work) -> Value {
    let mut body = json!({"workflow": task.workflow, "key": task.key, "step": task.step,
        "generation": task.generation});
    if let Some(attempt) = task.attempt {
        body["attempt"] = json!(attempt);
    }
    if task.compensation {
        body["compensation"] = json!(true);
    }
    match work {
        Work::Succeeded(data) => {
            body["outcome"] = json!("succeeded");
            if let Some(data) = data.as_ref().filter(|_| !task.compensation) {
                body["data"] = data.clone();
            }
        }
        Work::Failed { error, cause } => {
            body["outcome"] = json!("failed");
            body["error"] = json!(error);
            body["cause"] = json!(cause);
        }
    }
    body
}

/// What becomes of the message after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Done,
    Retry,
    Refused,
}

/// `status` is `None` when no answer came (the network, a timeout): retried, as a 503 is.
pub fn verdict(status: Option<u16>) -> Action {
    match status {
        Some(200 | 202) => Action::Done,
        None | Some(500..) => Action::Retry,
        Some(_) => Action::Refused,
    }
}

/// One message handled: the worker's log line.
#[derive(Debug, Clone, Serialize)]
pub struct Handled {
    pub task_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub webhook_id: Option<String>,
    pub http: Option<u16>,
    /// The answer's `status` (`applied`, `buffered`, `ignored`) or `error`.
    pub answer: Option<String>,
    pub reason: Option<String>,
    /// An error's explanation in words.
    pub message: Option<String>,
    pub duplicate: Option<bool>,
    pub action: Action,
    pub retry_after: Option<u64>,
}

/// An answer to one callback.
struct Reply {
    status: Option<u16>,
    body: Value,
    retry_after: Option<u64>,
}

/// When a 503 names no `Retry-After`, or nothing answered.
const DEFAULT_RETRY_SECONDS: u64 = 5;

/// The worker: one SQS client, one HTTP client, one signer.
pub struct Worker {
    settings: Settings,
    sqs: aws_sdk_sqs::Client,
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    signer: Signer,
}

impl Worker {
    pub async fn new(settings: Settings) -> Result<Worker> {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some((endpoint, region)) = &settings.local_endpoint {
            let credentials = aws_credential_types::Credentials::from_keys("testing", "testing", None);
            loader = loader
                .endpoint_url(endpoint)
                .region(aws_config::Region::new(region.clone()))
                .credentials_provider(credentials);
        }
        let sqs = aws_sdk_sqs::Client::new(&loader.load().await);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .context("cannot load the system's TLS root certificates")?
            .https_or_http()
            .enable_http1()
            .build();
        let http = Client::builder(TokioExecutor::new()).build(connector);
        let signer = Signer::new(&settings.secret)?;
        Ok(Worker { settings, sqs, http, signer })
    }

    /// One long poll (`wait` seconds, at most 20): each message received, handled.
    pub async fn poll(&self, wait: i32) -> Result<Vec<Handled>> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.settings.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait)
            .send()
            .await
            .context("cannot receive from the outbound queue")?;
        let mut handled = Vec::new();
        for message in received.messages() {
            handled.push(self.handle(message).await?);
        }
        Ok(handled)
    }

    async fn handle(&self, message: &Message) -> Result<Handled> {
        let event: Value = serde_json::from_str(message.body().unwrap_or_default()).unwrap_or(Value::Null);
        let event_type = event["type"].as_str().map(str::to_owned);
        let task = match event_type.as_deref() {
            Some(TASK_CREATED | COMPENSATION_REQUESTED) => {
                serde_json::from_value::<Task>(event["data"].clone()).ok()
            }
            _ => None,
        };
        let Some(task) = task else {
            // Not a baton task: left for the redrive, as any refusal is.
            return Ok(Handled { event_type, ..refused() });
        };
        let body = callback_body(&task, &do_the_work(&task));
        // The webhook-id is the task id: the same for every delivery of this task, so a repeated
        // callback (a redelivery, a retry after a 503) is applied at most once and answered as
        // the first one was.
        let reply = self.post_callback(&task.task_id, &body).await;
        let action = verdict(reply.status);
        let receipt = message.receipt_handle().unwrap_or_default();
        let retry_after =
            (action == Action::Retry).then(|| reply.retry_after.unwrap_or(DEFAULT_RETRY_SECONDS));
        match (action, retry_after) {
            (Action::Done, _) => self.delete(receipt).await?,
            (Action::Retry, Some(seconds)) => self.retry_after(receipt, seconds).await?,
            _ => {}
        }
        let text = |name: &str| reply.body[name].as_str().map(str::to_owned);
        Ok(Handled {
            task_id: Some(task.task_id.clone()),
            event_type,
            webhook_id: Some(task.task_id),
            http: reply.status,
            answer: text("status").or_else(|| text("error")),
            reason: text("reason"),
            message: text("message"),
            duplicate: reply.body["duplicate"].as_bool(),
            action,
            retry_after,
        })
    }

    async fn delete(&self, receipt: &str) -> Result<()> {
        let queue = &self.settings.queue_url;
        self.sqs.delete_message().queue_url(queue).receipt_handle(receipt).send().await?;
        Ok(())
    }

    /// Back on the queue once `seconds` have passed (SQS caps visibility at 12 hours).
    async fn retry_after(&self, receipt: &str, seconds: u64) -> Result<()> {
        let seconds = i32::try_from(seconds.min(43_200)).unwrap_or(43_200);
        let queue = &self.settings.queue_url;
        let change = self.sqs.change_message_visibility().queue_url(queue).receipt_handle(receipt);
        change.visibility_timeout(seconds).send().await?;
        Ok(())
    }

    /// POSTs a signed callback once.
    async fn post_callback(&self, id: &str, body: &Value) -> Reply {
        let text = body.to_string();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let request = hyper::Request::post(format!("{}/v1/callbacks", self.settings.api_url))
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", self.signer.sign(id, now, text.as_bytes()))
            .body(Full::new(Bytes::from(text)));
        let no_answer = |message: String| Reply {
            status: None,
            body: json!({"error": "no_answer", "message": message}),
            retry_after: None,
        };
        let request = match request {
            Ok(request) => request,
            Err(e) => return no_answer(e.to_string()),
        };
        let response = match tokio::time::timeout(Duration::from_secs(30), self.http.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return no_answer(e.to_string()),
            Err(_) => return no_answer("no answer within 30 s".into()),
        };
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let body = match response.into_body().collect().await {
            Ok(bytes) => serde_json::from_slice(&bytes.to_bytes()).unwrap_or(Value::Null),
            Err(e) => return no_answer(e.to_string()),
        };
        Reply { status: Some(status), body, retry_after }
    }
}

fn refused() -> Handled {
    Handled {
        task_id: None,
        event_type: None,
        webhook_id: None,
        http: None,
        answer: Some("not_a_baton_task".into()),
        reason: None,
        message: None,
        duplicate: None,
        action: Action::Refused,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(step: &str, compensation: bool) -> Task {
        Task {
            task_id: format!("order-review/k/1/{step}"),
            workflow: "order-review".into(),
            key: "k".into(),
            generation: 1,
            step: step.into(),
            title: "t".into(),
            queue: None,
            attempt: Some(2),
            previous_error: None,
            compensation,
        }
    }

    #[test]
    fn a_callback_names_the_task_s_generation_and_attempt_and_a_compensation_carries_no_data() {
        let review = task("manual-review", false);
        assert_eq!(
            callback_body(&review, &do_the_work(&review)),
            json!({"workflow": "order-review", "key": "k", "step": "manual-review", "generation": 1,
                "attempt": 2, "outcome": "succeeded", "data": {"decision": "approve"}})
        );
        let undo = task("payment", true);
        assert_eq!(
            callback_body(&undo, &do_the_work(&undo)),
            json!({"workflow": "order-review", "key": "k", "step": "payment", "generation": 1,
                "attempt": 2, "compensation": true, "outcome": "succeeded"})
        );
    }

    #[test]
    fn every_documented_answer_has_its_action() {
        assert_eq!([200, 202].map(|s| verdict(Some(s))), [Action::Done; 2]);
        assert_eq!([503, 500, 502].map(|s| verdict(Some(s))), [Action::Retry; 3]);
        assert_eq!(verdict(None), Action::Retry);
        assert_eq!([400, 401, 403, 404, 409, 413].map(|s| verdict(Some(s))), [Action::Refused; 6]);
    }
}
