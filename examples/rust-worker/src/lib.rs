//! A baton task worker: takes one team's tasks from its task queue, does the work, calls back.
//!
//! Copy this crate and replace [`WORK`] with your team's work. The rest is what any worker
//! needs: reading and checking the CloudEvent ([`parse_task`]), signing the callback
//! ([`signing`]), and acting on each answer baton documents (docs/TASK_WORKERS.md):
//!
//! | answer | [`Action`] |
//! |---|---|
//! | 200 `applied`, 202 `buffered`, 200 `ignored` | `Done`: the message is deleted |
//! | 429, 5xx (503 with `Retry-After`), or no answer at all | `Retry`: the worker keeps the message invisible and calls back again with the same `webhook-id` after `Retry-After`, else a backoff; no further receive, so never the dead-letter queue for it |
//! | 3xx | `Later`: never followed (the signed headers go to the callback URL and nowhere else); visible again after a minute, and after 10 receives in the dead-letter queue |
//! | 409 and every other 4xx | `Refused`: retrying cannot help; left for the queue's redrive to its dead-letter queue |
//!
//! A reminder ([`TASK_REMINDER`]: the task its `data.reminds` names still waits for an answer) is
//! taken as that task: the same work, and the same callback with the reminded task's id as its
//! `webhook-id` ([`Task::webhook_id`]), so that a task answered already is answered again as a
//! duplicate, never twice.
//!
//! An escalation ([`TASK_ESCALATED`]: the task its `data.escalates` names, given to a further
//! level's queue, this worker's, while it still waits) is taken as that task too, by the level's
//! team, for a step [`WORK`] lists for this queue: the same work and callback, but with the
//! escalation's own id (`data.task_id`) as its `webhook-id`, for the level's answer is another
//! input than the first holder's. Whichever answer comes first completes the step; a later one is
//! `ignored`.
//!
//! A message that is not a task this worker takes (not JSON, not a baton task, reminder or
//! escalation, a field missing or of the wrong type, another team's `queue`, a workflow and step
//! [`WORK`] does not list for its queue) is never acted on: it is logged and `Refused`, left for
//! the redrive, where a person looks.

pub mod signing;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
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
/// A reminder of a step's task still waiting for an answer: answered as that task.
pub const TASK_REMINDER: &str = "baton.task.reminder";
/// A step's task given to a further level's queue while it still waits: answered as that task,
/// by the level's team, with the escalation's own id.
pub const TASK_ESCALATED: &str = "baton.task.escalated";

/// Where the worker reads and calls back.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The team's queue name, as the config's tasks give it (`queue: risk-review`).
    pub queue: String,
    pub queue_url: String,
    pub api_url: String,
    pub secret: String,
    /// The AWS endpoint and region of a local stack; `None` for AWS itself.
    pub local_endpoint: Option<(String, String)>,
}

impl Settings {
    /// From the environment: `BATON_TASK_QUEUE` (the team's queue name),
    /// `BATON_TASK_QUEUE_URL_PREFIX` (the stack's `TaskQueueUrlPrefix` output), `BATON_API_URL`
    /// (the `CallbackUrl` output without its `/v1/callbacks`), `BATON_WEBHOOK_SECRET`; AWS region
    /// and credentials as the SDK finds them.
    pub fn from_env() -> Result<Settings> {
        let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
        let queue = var("BATON_TASK_QUEUE")?;
        Ok(Settings {
            queue_url: format!("{}{queue}", var("BATON_TASK_QUEUE_URL_PREFIX")?),
            queue,
            api_url: var("BATON_API_URL")?,
            secret: var("BATON_WEBHOOK_SECRET")?,
            local_endpoint: None,
        })
    }

    /// From the `local.json` that `baton local` (`make run`) writes, for the team's `queue`.
    pub fn from_local(path: &Path, queue: &str) -> Result<Settings> {
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
            queue: queue.to_owned(),
            queue_url: field(&format!("/queues/tasks/{queue}/url"))
                .context("no task in the running config names this queue")?,
            api_url: field("/api_url")?,
            secret: field("/webhook_secret")?,
            local_endpoint: Some((field("/aws_endpoint")?, field("/region")?)),
        })
    }
}

/// A task: the `data` of a `baton.task.created` or `baton.compensation.requested` event, or of
/// a `baton.task.reminder` (whose `task_id` is its own, `reminds` the task's, `reminder` its
/// count) or a `baton.task.escalated` (whose `task_id` is its own, `escalates` the task's,
/// `level` its level, `queue` and `title` the level's). Every field is required and typed; an
/// event whose data does not fit is not a task.
#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub workflow: String,
    pub key: String,
    pub generation: u64,
    pub step: String,
    pub title: String,
    pub queue: String,
    pub attempt: Option<u32>,
    pub previous_error: Option<String>,
    pub compensation: bool,
    /// A reminder's: the id of the task it reminds of. A task's is null (or absent).
    #[serde(default)]
    pub reminds: Option<String>,
    /// A reminder's: its count, from 1. A task's is null (or absent).
    #[serde(default)]
    pub reminder: Option<u64>,
    /// An escalation's: the id of the task it escalates. A task's is null (or absent).
    #[serde(default)]
    pub escalates: Option<String>,
    /// An escalation's: its level, from 1. A task's is null (or absent).
    #[serde(default)]
    pub level: Option<u64>,
}

impl Task {
    /// The callback's `webhook-id`: the task id, and for a reminder the id of the task it
    /// reminds of. A task and each of its reminders then make one callback, applied at most
    /// once: whichever comes later is answered as a duplicate of the first. An escalation's is
    /// its own id (`task_id`, `<escalates>/e<level>`): the level's team answers as another input,
    /// and the task's id with another body would be refused (409 `idempotency_key_reused`).
    pub fn webhook_id(&self) -> &str {
        self.reminds.as_deref().unwrap_or(&self.task_id)
    }
}

/// What the work came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Succeeded(Option<Value>),
    Failed { error: String, cause: String },
}

/// One kind of task a team's worker takes: its queue, workflow, step, whether it is the step's
/// compensation, and the work.
pub type Entry = (&'static str, &'static str, &'static str, bool, fn(&Task) -> Work);

/// The work each team's worker does, by (queue, workflow, step, compensation): anything else
/// it never acts on. This demo approves reviews (`risk-review`), holds stock and releases it
/// (`stock`), refunds payments (`payments`), and has the leads, to whom a review or a stock hold
/// left waiting escalates (`escalate: [{ after: ..., queue: leads }]`), do either (`leads`);
/// replace these with your team's. A reminder is looked up as the step's task (not a
/// compensation), and so is an escalation, under its level's queue: this one.
pub const WORK: &[Entry] = &[
    ("risk-review", "order-review", "manual-review", false, review),
    ("stock", "order-review", "reserve-stock", false, hold_stock),
    ("stock", "order-review", "reserve-stock", true, |_| Work::Succeeded(None)),
    ("payments", "order-review", "payment", true, |_| Work::Succeeded(None)),
    ("leads", "order-review", "manual-review", false, review),
    ("leads", "order-review", "reserve-stock", false, hold_stock),
];

fn review(_: &Task) -> Work {
    Work::Succeeded(Some(json!({"decision": "approve"})))
}

fn hold_stock(task: &Task) -> Work {
    Work::Succeeded(Some(json!({"hold": format!("hold-{}", task.key)})))
}

/// The work for `task` on `queue`, if this worker does it.
pub fn work_for(queue: &str, task: &Task) -> Option<fn(&Task) -> Work> {
    WORK.iter()
        .find(|(q, workflow, step, compensation, _)| {
            *q == queue
                && *workflow == task.workflow
                && *step == task.step
                && *compensation == task.compensation
        })
        .map(|entry| entry.4)
}

/// Why a message is not a task this worker takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotMine {
    /// `malformed_task`, `not_a_baton_task`, `foreign_queue` or `not_handled`.
    pub code: &'static str,
    pub problem: String,
}

fn not_mine(code: &'static str, problem: impl Into<String>) -> NotMine {
    NotMine { code, problem: problem.into() }
}

/// The task in a message body, checked: a baton task event (or a reminder or an escalation of
/// one), every field there and of its type, for this worker's `queue`, and one [`WORK`] lists.
/// Returns the event's type with it.
pub fn parse_task(body: &str, queue: &str) -> Result<(String, Task), NotMine> {
    let event: Value =
        serde_json::from_str(body).map_err(|e| not_mine("malformed_task", format!("not JSON: {e}")))?;
    let event_type = match event.get("type").and_then(Value::as_str) {
        Some(t @ (TASK_CREATED | COMPENSATION_REQUESTED | TASK_REMINDER | TASK_ESCALATED)) => t.to_owned(),
        other => return Err(not_mine("not_a_baton_task", format!("type {other:?} is not a baton task"))),
    };
    let data = event.get("data").cloned().unwrap_or(Value::Null);
    let task: Task =
        serde_json::from_value(data).map_err(|e| not_mine("malformed_task", format!("data: {e}")))?;
    let empty =
        [("task_id", &task.task_id), ("workflow", &task.workflow), ("key", &task.key), ("step", &task.step)]
            .into_iter()
            .find(|(_, v)| v.is_empty());
    if let Some((name, _)) = empty {
        return Err(not_mine("malformed_task", format!("data.{name} is empty")));
    }
    if task.generation == 0 || task.attempt == Some(0) {
        return Err(not_mine("malformed_task", "data.generation and data.attempt count from 1"));
    }
    if task.compensation != (event_type == COMPENSATION_REQUESTED) {
        return Err(not_mine("malformed_task", "data.compensation does not match the event's type"));
    }
    check_notice(&event, &event_type, &task).map_err(|problem| not_mine("malformed_task", problem))?;
    if task.queue != queue {
        return Err(not_mine(
            "foreign_queue",
            format!("data.queue {:?} is not this worker's {queue:?}", task.queue),
        ));
    }
    if work_for(queue, &task).is_none() {
        let what = if task.compensation { "compensation" } else { "step" };
        return Err(not_mine(
            "not_handled",
            format!("this worker does no {what} {:?} of workflow {:?}", task.step, task.workflow),
        ));
    }
    Ok((event_type, task))
}

/// A reminder names the task it reminds of (`reminds`, a task id) and its count (`reminder`, from
/// 1); an escalation the task it escalates (`escalates`) and its level (`level`, from 1). A
/// notice's own id is the two together (`<reminds>/r<reminder>`, `<escalates>/e<level>`). A task
/// carries neither pair, and a notice not the other kind's (null or absent).
fn check_notice(event: &Value, event_type: &str, task: &Task) -> Result<(), String> {
    let notices = [
        (TASK_REMINDER, ("reminds", "reminder", 'r'), (&task.reminds, task.reminder)),
        (TASK_ESCALATED, ("escalates", "level", 'e'), (&task.escalates, task.level)),
    ];
    for (kind, (names, counts, letter), pair) in notices {
        match (event_type == kind, pair) {
            (false, (None, None)) => {}
            (false, _) => {
                return Err(format!("data.{names} and data.{counts} do not belong to a {event_type}"));
            }
            (true, (None, _)) => return Err(format!("data.{names} is missing or null")),
            (true, (_, None)) => return Err(format!("data.{counts} is missing or null")),
            (true, (Some(of), _)) if of.is_empty() => return Err(format!("data.{names} is empty")),
            (true, (_, Some(0))) => return Err(format!("data.{counts} counts from 1")),
            (true, (Some(of), Some(count))) => {
                let own = format!("{of}/{letter}{count}");
                let event_id = event.get("id").and_then(Value::as_str);
                if task.task_id != own || event_id != Some(own.as_str()) {
                    return Err(format!(
                        "the id (and data.task_id) is not data.{names} + \"/{letter}\" + data.{counts}"
                    ));
                }
            }
        }
    }
    Ok(())
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
    /// Settled: deleted.
    Done,
    /// Transient: kept invisible, and the callback sent again after `retry_after`.
    Retry,
    /// A redirect: left, visible again after `retry_after`.
    Later,
    /// Left for the queue's redrive to its dead-letter queue.
    Refused,
}

/// `status` is `None` when no answer came (the network, a timeout): retried, as a 503 is.
pub fn verdict(status: Option<u16>) -> Action {
    match status {
        Some(200 | 202) => Action::Done,
        None | Some(429 | 500..) => Action::Retry,
        Some(300..=399) => Action::Later,
        Some(_) => Action::Refused,
    }
}

/// The most a `Retry-After` is honoured for, and the longest backoff without one.
pub const MAX_RETRY_AFTER: u64 = 900;
const MAX_BACKOFF: u64 = 60;
/// How long a redirected task stays invisible before its next delivery.
pub const LATER_SECONDS: u64 = 60;
/// Visibility kept beyond a retry's wait, for the callback itself.
const HOLD_MARGIN: u64 = 60;
/// SQS keeps a message invisible for at most 12 hours.
const MAX_VISIBILITY: u64 = 43_200;

/// The wait before the next try after `retries` transient answers: `Retry-After` when it came
/// (at most [`MAX_RETRY_AFTER`]), else a jittered exponential backoff up to a minute.
pub fn retry_delay(retry_after: Option<u64>, retries: u32) -> u64 {
    match retry_after {
        Some(seconds) => seconds.clamp(1, MAX_RETRY_AFTER),
        None => {
            let ceiling = 1u64.checked_shl(retries.min(16)).unwrap_or(MAX_BACKOFF).min(MAX_BACKOFF);
            (ceiling / 2 + fastrand::u64(0..=ceiling / 2)).max(1)
        }
    }
}

/// `Retry-After` as seconds from now: a number of seconds, or an HTTP date.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).map(|d| d.as_secs()).unwrap_or(0))
}

/// One message handled, or one try at its callback: the worker's log line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Handled {
    pub message_id: Option<String>,
    /// How many times SQS has delivered the message.
    pub receives: Option<u32>,
    pub task_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub webhook_id: Option<String>,
    pub http: Option<u16>,
    /// The answer's `status` (`applied`, `buffered`, `ignored`) or `error`; for a message that
    /// is not this worker's task, why (`malformed_task`, `not_a_baton_task`, `foreign_queue`,
    /// `not_handled`); `redirect` for a 3xx.
    pub answer: Option<String>,
    pub reason: Option<String>,
    /// An error's explanation in words.
    pub message: Option<String>,
    pub duplicate: Option<bool>,
    /// A 3xx's `Location`, which the worker did not follow.
    pub location: Option<String>,
    pub action: Option<Action>,
    pub retry_after: Option<u64>,
}

/// An answer to one callback.
struct Reply {
    status: Option<u16>,
    body: Value,
    retry_after: Option<u64>,
    location: Option<String>,
}

/// The worker: one SQS client, one HTTP client, one signer.
pub struct Worker {
    settings: Settings,
    sqs: aws_sdk_sqs::Client,
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    signer: Signer,
}

impl Worker {
    pub async fn new(settings: Settings) -> Result<Worker> {
        if !WORK.iter().any(|entry| entry.0 == settings.queue) {
            anyhow::bail!("this worker has no work for the queue {:?}: add it to WORK", settings.queue);
        }
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
        // hyper's client follows no redirect: a 3xx is an answer, and the signed headers go to
        // the callback URL alone.
        let http = Client::builder(TokioExecutor::new()).build(connector);
        let signer = Signer::new(&settings.secret)?;
        Ok(Worker { settings, sqs, http, signer })
    }

    /// One long poll (`wait` seconds, at most 20) for one task, handled; each line it logs is
    /// handed to `log` as it happens (a task retried through a throttle logs one per try).
    pub async fn poll(&self, wait: i32, log: &(dyn Fn(Handled) + Send + Sync)) -> Result<()> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.settings.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(wait)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .context("cannot receive from the task queue")?;
        for message in received.messages() {
            if let Err(e) = self.handle(message, log).await {
                // An SQS call about this message failed: it comes back after its visibility.
                let id = message.message_id().map(str::to_owned);
                let text = format!("{e:#}");
                log(Handled {
                    message_id: id,
                    answer: Some("sqs_error".into()),
                    message: Some(text),
                    ..Default::default()
                });
            }
        }
        Ok(())
    }

    async fn handle(&self, message: &Message, log: &(dyn Fn(Handled) + Send + Sync)) -> Result<()> {
        let receives = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok());
        let base =
            Handled { message_id: message.message_id().map(str::to_owned), receives, ..Default::default() };
        let (event_type, task) = match parse_task(message.body().unwrap_or_default(), &self.settings.queue) {
            Ok(parsed) => parsed,
            Err(NotMine { code, problem }) => {
                // Never acted on: left for the redrive, where a person looks.
                log(Handled {
                    answer: Some(code.into()),
                    message: Some(problem),
                    action: Some(Action::Refused),
                    ..base
                });
                return Ok(());
            }
        };
        let Some(work) = work_for(&self.settings.queue, &task) else { return Ok(()) };
        let work = work(&task);
        let body = callback_body(&task, &work);
        let base = Handled {
            task_id: Some(task.task_id.clone()),
            event_type: Some(event_type),
            webhook_id: Some(task.webhook_id().to_owned()),
            ..base
        };
        self.deliver(message.receipt_handle().unwrap_or_default(), task.webhook_id(), &body, base, log).await
    }

    /// Calls back until the answer is not transient, keeping the message invisible meanwhile.
    /// The webhook-id is the task id (a reminder's: the id of the task it reminds of; an
    /// escalation's: its own): the same for every try and every delivery of this task and of its
    /// reminders, so a repeated callback is applied at most once and answered as the first one was.
    async fn deliver(
        &self,
        receipt: &str,
        id: &str,
        body: &Value,
        base: Handled,
        log: &(dyn Fn(Handled) + Send + Sync),
    ) -> Result<()> {
        let mut retries = 0;
        loop {
            let reply = self.post_callback(id, body).await;
            let action = verdict(reply.status);
            let retry_after = match action {
                Action::Retry => Some(retry_delay(reply.retry_after, retries)),
                Action::Later => Some(LATER_SECONDS),
                Action::Done | Action::Refused => None,
            };
            match (action, retry_after) {
                (Action::Done, _) => self.delete(receipt).await?,
                (Action::Retry, Some(seconds)) => self.hide(receipt, seconds + HOLD_MARGIN).await?,
                (Action::Later, Some(seconds)) => self.hide(receipt, seconds).await?,
                _ => {}
            }
            let text = |name: &str| reply.body[name].as_str().map(str::to_owned);
            log(Handled {
                http: reply.status,
                answer: text("status")
                    .or_else(|| text("error"))
                    .or(reply.location.as_ref().map(|_| "redirect".into())),
                reason: text("reason"),
                message: text("message"),
                duplicate: reply.body["duplicate"].as_bool(),
                location: reply.location,
                action: Some(action),
                retry_after,
                ..base.clone()
            });
            match (action, retry_after) {
                (Action::Retry, Some(seconds)) => tokio::time::sleep(Duration::from_secs(seconds)).await,
                _ => return Ok(()),
            }
            retries += 1;
        }
    }

    async fn delete(&self, receipt: &str) -> Result<()> {
        let queue = &self.settings.queue_url;
        self.sqs.delete_message().queue_url(queue).receipt_handle(receipt).send().await?;
        Ok(())
    }

    /// Invisible for `seconds` from now (SQS caps visibility at 12 hours).
    async fn hide(&self, receipt: &str, seconds: u64) -> Result<()> {
        let seconds = i32::try_from(seconds.min(MAX_VISIBILITY)).unwrap_or(43_200);
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
            location: None,
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
        let header =
            |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let retry_after = header("retry-after").and_then(|v| parse_retry_after(&v, SystemTime::now()));
        let location = header("location").filter(|_| (300..400).contains(&status));
        let body = match response.into_body().collect().await {
            Ok(bytes) => serde_json::from_slice(&bytes.to_bytes()).unwrap_or(Value::Null),
            Err(e) => return no_answer(e.to_string()),
        };
        Reply { status: Some(status), body, retry_after, location }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(step: &str, compensation: bool) -> Task {
        Task {
            task_id: format!("order-review/k/g1/{step}"),
            workflow: "order-review".into(),
            key: "k".into(),
            generation: 1,
            step: step.into(),
            title: "t".into(),
            queue: "stock".into(),
            attempt: Some(2),
            previous_error: None,
            compensation,
            reminds: None,
            reminder: None,
            escalates: None,
            level: None,
        }
    }

    fn event(data: Value, compensation: bool) -> String {
        let kind = if compensation { COMPENSATION_REQUESTED } else { TASK_CREATED };
        json!({"specversion": "1.0", "id": "x", "source": "baton", "type": kind, "data": data}).to_string()
    }

    fn data(step: &str, compensation: bool) -> Value {
        json!({"task_id": format!("order-review/k/g1/{step}"), "workflow": "order-review", "key": "k",
            "generation": 1, "step": step, "title": "t", "queue": "stock", "attempt": 1,
            "previous_error": null, "compensation": compensation})
    }

    #[test]
    fn a_callback_names_the_task_s_generation_and_attempt_and_a_compensation_carries_no_data() {
        let review = Task { queue: "risk-review".into(), ..task("manual-review", false) };
        let work = work_for("risk-review", &review).unwrap()(&review);
        assert_eq!(
            callback_body(&review, &work),
            json!({"workflow": "order-review", "key": "k", "step": "manual-review", "generation": 1,
                "attempt": 2, "outcome": "succeeded", "data": {"decision": "approve"}})
        );
        let undo = Task { queue: "payments".into(), ..task("payment", true) };
        assert_eq!(
            callback_body(&undo, &work_for("payments", &undo).unwrap()(&undo)),
            json!({"workflow": "order-review", "key": "k", "step": "payment", "generation": 1,
                "attempt": 2, "compensation": true, "outcome": "succeeded"})
        );
    }

    #[test]
    fn every_documented_answer_has_its_action() {
        assert_eq!([200, 202].map(|s| verdict(Some(s))), [Action::Done; 2]);
        assert_eq!([429, 503, 500, 502, 504].map(|s| verdict(Some(s))), [Action::Retry; 5]);
        assert_eq!(verdict(None), Action::Retry);
        assert_eq!([301, 302, 307, 308].map(|s| verdict(Some(s))), [Action::Later; 4]);
        assert_eq!([400, 401, 403, 404, 409, 413].map(|s| verdict(Some(s))), [Action::Refused; 6]);
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_or_as_a_date_and_otherwise_the_backoff_grows_to_a_minute() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(parse_retry_after(" 7 ", now), Some(7));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(30));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(retry_delay(Some(7), 9), 7);
        assert_eq!(retry_delay(Some(0), 0), 1, "never a tight loop");
        assert_eq!(retry_delay(Some(86_400), 0), MAX_RETRY_AFTER);
        for retries in 0..40 {
            let ceiling = (1u64 << retries.min(16)).min(MAX_BACKOFF);
            let delay = retry_delay(None, retries);
            assert!((1..=ceiling.max(1)).contains(&delay) && delay * 2 >= ceiling, "{retries}: {delay}");
        }
    }

    #[test]
    fn a_message_that_is_not_this_worker_s_task_is_refused_with_the_reason() {
        let refused = |body: &str| parse_task(body, "stock").unwrap_err().code;
        assert_eq!(refused("not json"), "malformed_task");
        assert_eq!(refused(r#"{"type": "order.placed", "data": {}}"#), "not_a_baton_task");
        assert_eq!(refused(&event(json!({"task_id": "x"}), false)), "malformed_task");
        let mut wrong = data("reserve-stock", false);
        wrong["generation"] = json!("1");
        assert_eq!(refused(&event(wrong, false)), "malformed_task");
        assert_eq!(
            refused(&event(data("reserve-stock", true), false)),
            "malformed_task",
            "type and flag disagree"
        );
        let mut other = data("reserve-stock", false);
        other["queue"] = json!("payments");
        assert_eq!(refused(&event(other, false)), "foreign_queue");
        assert_eq!(refused(&event(data("shipping", true), true)), "not_handled");
        assert_eq!(refused(&event(data("manual-review", true), true)), "not_handled", "no undo of a review");
        assert_eq!(
            refused(&event(data("payment", true), true)),
            "not_handled",
            "a refund is not the stock team's"
        );
        let (kind, task) = parse_task(&event(data("reserve-stock", true), true), "stock").unwrap();
        assert_eq!((kind.as_str(), task.compensation), (COMPENSATION_REQUESTED, true));
    }

    /// A change to a message.
    type Change = fn(&mut Value);

    /// A reminder of the task `data(step, false)`, its `count`th, as baton publishes it.
    fn reminder(step: &str, count: u64) -> Value {
        let mut data = data(step, false);
        let reminds = data["task_id"].as_str().unwrap().to_owned();
        let id = format!("{reminds}/r{count}");
        data["task_id"] = json!(id);
        data["reminds"] = json!(reminds);
        data["reminder"] = json!(count);
        json!({"specversion": "1.0", "id": id, "source": "baton", "type": TASK_REMINDER, "data": data})
    }

    #[test]
    fn a_reminder_is_taken_as_the_task_it_reminds_of_and_answered_with_that_task_s_id() {
        let (kind, reminded) = parse_task(&reminder("reserve-stock", 2).to_string(), "stock").unwrap();
        assert_eq!(kind, TASK_REMINDER);
        assert_eq!(reminded.task_id, "order-review/k/g1/reserve-stock/r2");
        assert_eq!(reminded.webhook_id(), "order-review/k/g1/reserve-stock", "the reminded task's id");
        // The task itself, as baton publishes it now (a task's reminds and reminder are null).
        let mut data = data("reserve-stock", false);
        data["reminds"] = Value::Null;
        data["reminder"] = Value::Null;
        let (kind, task) = parse_task(&event(data, false), "stock").unwrap();
        assert_eq!((kind.as_str(), task.webhook_id()), (TASK_CREATED, "order-review/k/g1/reserve-stock"));
        // The same work, the same callback, the same webhook-id: a duplicate of the task's answer.
        let answer = |t: &Task| callback_body(t, &work_for("stock", t).unwrap()(t));
        assert_eq!(answer(&reminded), answer(&task));
        assert_eq!(
            answer(&reminded),
            json!({"workflow": "order-review", "key": "k", "step": "reserve-stock", "generation": 1,
                "attempt": 1, "outcome": "succeeded", "data": {"hold": "hold-k"}})
        );
    }

    #[test]
    fn a_malformed_reminder_is_refused_as_a_malformed_task_is() {
        let refused = |event: Value| parse_task(&event.to_string(), "stock").unwrap_err().code;
        let with = |change: &dyn Fn(&mut Value)| {
            let mut event = reminder("reserve-stock", 1);
            change(&mut event);
            refused(event)
        };
        let malformed: [(&str, Change); 16] = [
            ("no reminds", |e| _ = e["data"].as_object_mut().unwrap().remove("reminds")),
            ("reminds null", |e| e["data"]["reminds"] = Value::Null),
            ("reminds a number", |e| e["data"]["reminds"] = json!(7)),
            ("reminds empty", |e| {
                e["data"]["reminds"] = json!("");
                e["data"]["task_id"] = json!("/r1");
                e["id"] = json!("/r1");
            }),
            ("no count", |e| _ = e["data"].as_object_mut().unwrap().remove("reminder")),
            ("count 0", |e| e["data"]["reminder"] = json!(0)),
            ("count negative", |e| e["data"]["reminder"] = json!(-1)),
            ("count a fraction", |e| e["data"]["reminder"] = json!(1.5)),
            ("count a string", |e| e["data"]["reminder"] = json!("1")),
            ("count a boolean", |e| e["data"]["reminder"] = json!(true)),
            ("a compensation", |e| e["data"]["compensation"] = json!(true)),
            ("its id not reminds/rN", |e| e["data"]["reminder"] = json!(2)),
            ("the event's id another", |e| e["id"] = json!("order-review/k/g1/reserve-stock")),
            ("a field missing", |e| _ = e["data"].as_object_mut().unwrap().remove("generation")),
            ("a field of the wrong type", |e| e["data"]["attempt"] = json!("1")),
            ("a task naming a reminded task", |e| e["type"] = json!(TASK_CREATED)),
        ];
        for (what, change) in malformed {
            assert_eq!(with(&change), "malformed_task", "{what}");
        }
        assert_eq!(with(&|e| e["data"]["queue"] = json!("payments")), "foreign_queue");
        assert_eq!(refused(reminder("shipping", 1)), "not_handled");
        assert_eq!(
            refused(json!({"type": "baton.task.reminded", "data": reminder("reserve-stock", 1)["data"]})),
            "not_a_baton_task"
        );
    }

    /// The task `data(step, false)` escalated to the `leads` queue, its `level`, as baton
    /// publishes it: its own id, the level's queue and title.
    fn escalation(step: &str, level: u64) -> Value {
        let mut data = data(step, false);
        let escalates = data["task_id"].as_str().unwrap().to_owned();
        let id = format!("{escalates}/e{level}");
        data["task_id"] = json!(id);
        data["queue"] = json!("leads");
        data["title"] = json!("Overdue: k");
        data["reminds"] = Value::Null;
        data["reminder"] = Value::Null;
        data["escalates"] = json!(escalates);
        data["level"] = json!(level);
        json!({"specversion": "1.0", "id": id, "source": "baton", "type": TASK_ESCALATED, "data": data})
    }

    #[test]
    fn an_escalation_is_taken_by_its_level_s_team_as_the_task_and_answered_with_its_own_id() {
        let (kind, escalated) = parse_task(&escalation("reserve-stock", 2).to_string(), "leads").unwrap();
        assert_eq!(kind, TASK_ESCALATED);
        assert_eq!(
            (escalated.escalates.as_deref(), escalated.level),
            (Some("order-review/k/g1/reserve-stock"), Some(2))
        );
        assert_eq!(
            escalated.webhook_id(),
            "order-review/k/g1/reserve-stock/e2",
            "its own id: another input than the task's, never a 409 for reusing its id"
        );
        // The same callback as the task's, from the leads' work for the step.
        let (_, task) = parse_task(&event(data("reserve-stock", false), false), "stock").unwrap();
        assert_eq!(task.webhook_id(), "order-review/k/g1/reserve-stock");
        let answer = |queue: &str, t: &Task| callback_body(t, &work_for(queue, t).unwrap()(t));
        assert_eq!(answer("leads", &escalated), answer("stock", &task));
        // A review escalated is the leads' too; a level on another team's queue is not.
        let mut review = escalation("manual-review", 1);
        assert!(parse_task(&review.to_string(), "leads").is_ok());
        review["data"]["queue"] = json!("risk-review");
        assert_eq!(parse_task(&review.to_string(), "leads").unwrap_err().code, "foreign_queue");
        // Tasks and reminders with escalates and level null, as baton publishes them, are taken.
        let mut data = data("reserve-stock", false);
        data["escalates"] = Value::Null;
        data["level"] = Value::Null;
        assert!(parse_task(&event(data, false), "stock").is_ok());
        let mut reminder = reminder("reserve-stock", 1);
        reminder["data"]["escalates"] = Value::Null;
        reminder["data"]["level"] = Value::Null;
        assert!(parse_task(&reminder.to_string(), "stock").is_ok());
    }

    #[test]
    fn a_malformed_escalation_is_refused_as_a_malformed_task_is() {
        let refused = |event: Value, queue: &str| parse_task(&event.to_string(), queue).unwrap_err().code;
        let with = |change: &dyn Fn(&mut Value)| {
            let mut event = escalation("reserve-stock", 1);
            change(&mut event);
            refused(event, "leads")
        };
        let malformed: [(&str, Change); 20] = [
            ("no escalates", |e| _ = e["data"].as_object_mut().unwrap().remove("escalates")),
            ("escalates null", |e| e["data"]["escalates"] = Value::Null),
            ("escalates a number", |e| e["data"]["escalates"] = json!(7)),
            ("escalates empty", |e| {
                e["data"]["escalates"] = json!("");
                e["data"]["task_id"] = json!("/e1");
                e["id"] = json!("/e1");
            }),
            ("no level", |e| _ = e["data"].as_object_mut().unwrap().remove("level")),
            ("level null", |e| e["data"]["level"] = Value::Null),
            ("level 0", |e| e["data"]["level"] = json!(0)),
            ("level negative", |e| e["data"]["level"] = json!(-1)),
            ("level a fraction", |e| e["data"]["level"] = json!(1.5)),
            ("level a string", |e| e["data"]["level"] = json!("1")),
            ("level a boolean", |e| e["data"]["level"] = json!(true)),
            ("a compensation", |e| e["data"]["compensation"] = json!(true)),
            ("its id not escalates/eN", |e| e["data"]["level"] = json!(2)),
            ("the escalated task's id as its own", |e| {
                e["id"] = json!("order-review/k/g1/reserve-stock");
                e["data"]["task_id"] = json!("order-review/k/g1/reserve-stock");
            }),
            ("a reminder's id", |e| {
                e["id"] = json!("order-review/k/g1/reserve-stock/r1");
                e["data"]["task_id"] = json!("order-review/k/g1/reserve-stock/r1");
            }),
            ("the event's id another", |e| e["id"] = json!("order-review/k/g1/reserve-stock")),
            ("a field missing", |e| _ = e["data"].as_object_mut().unwrap().remove("title")),
            ("a field of the wrong type", |e| e["data"]["generation"] = json!("1")),
            ("an escalation naming a reminded task", |e| {
                e["data"]["reminds"] = json!("order-review/k/g1/reserve-stock");
                e["data"]["reminder"] = json!(1);
            }),
            ("a task naming an escalated task", |e| e["type"] = json!(TASK_CREATED)),
        ];
        for (what, change) in malformed {
            assert_eq!(with(&change), "malformed_task", "{what}");
        }
        // A reminder that names an escalation, or a task that has a level, is no task either.
        let mut reminder = reminder("reserve-stock", 1);
        reminder["data"]["escalates"] = json!("order-review/k/g1/reserve-stock");
        assert_eq!(refused(reminder, "stock"), "malformed_task");
        let mut data = data("reserve-stock", false);
        data["level"] = json!(1);
        assert_eq!(refused(serde_json::from_str(&event(data, false)).unwrap(), "stock"), "malformed_task");
        // The leads' escalation is not the stock worker's, and the leads do no shipping.
        assert_eq!(refused(escalation("reserve-stock", 1), "stock"), "foreign_queue");
        assert_eq!(refused(escalation("shipping", 1), "leads"), "not_handled");
        assert_eq!(
            refused(
                json!({"type": "baton.task.escalation", "data": escalation("reserve-stock", 1)["data"]}),
                "leads"
            ),
            "not_a_baton_task"
        );
    }
}
