//! The task workers to copy (`examples/`), each against `baton local` as `make run` starts it:
//! the Python worker as a subprocess, the Rust worker's library in this process. The same stories
//! for both, with one worker per team, each reading its own task queue.
//!
//! Every documented answer: tasks go out on the teams' queues; each worker takes its own team's
//! alone and acts on every answer:
//! - `applied` (a step's task, and both compensations of a saga that fails at shipping, each
//!   taken by the worker of its team);
//! - `503` with `Retry-After` (a fault on the record write, so the answer is lost): the worker
//!   keeps the task and calls back again with the same `webhook-id`, without another receive;
//! - `ignored` (a task whose workflow was cancelled before the worker got to it);
//! - `202 buffered` and `409` (one task id delivered with two different answers: the first is
//!   kept early, the second is refused and left on the queue for its redrive);
//! - reminders (`baton.task.reminder`), answered as the task they remind of, with its id as the
//!   `webhook-id`: a duplicate (`"duplicate": true`) of a task the worker answered already, and
//!   `ignored` for a step answered elsewhere; each deleted, none left for the redrive;
//! - escalations (`baton.task.escalated`), on the `leads` queue the saga's reserve-stock escalates
//!   to, read by a third worker of the same kind: answered as the task, with the escalation's own
//!   id as the `webhook-id`: `applied` for a step nobody answered yet (the stock worker's answer
//!   to the task then `ignored`), `ignored` for a step answered elsewhere; each deleted, none left
//!   for the redrive.
//!
//! Both workers also parse the same messages alike, without the stack: a reminder as its task,
//! an escalation as its task on the level's queue with its own id, and a malformed reminder or
//! escalation refused.
//!
//! The attacks: a flood of the callback URL over the stage's rate (429 for the worker too), which
//! sends no task to the dead-letter queue; messages that are not the worker's tasks (not JSON,
//! fields missing or of the wrong type, another team's, a forged refund the stock team does not
//! do), logged and never acted on, the worker going on; and a callback URL that redirects
//! elsewhere, whose target never sees the signed request.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton_core::domain::webhook::Secrets;
use baton_local::info::LocalInfo;
use baton_tests::SAGA;
use baton_tests::http::send_callback;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

mod local_stack;
use local_stack::{Local, bin, eventually_trace, root};

/// What a worker logged: one JSON value per handled message, and per further try.
struct Lines {
    rx: mpsc::UnboundedReceiver<Value>,
    seen: Vec<Value>,
}

impl Lines {
    /// Waits until `check` holds of every line logged so far; returns those lines.
    async fn until(&mut self, what: &str, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(150);
        while !check(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(line)) => self.seen.push(line),
                Ok(None) => panic!("the worker stopped before {what}; it logged {:#?}", self.seen),
                Err(_) => panic!("timed out waiting for {what}; the worker logged {:#?}", self.seen),
            }
        }
        self.seen.clone()
    }
}

/// Which example worker.
#[derive(Clone, Copy)]
enum Worker {
    Python,
    Rust,
}

impl Worker {
    /// Starts this worker for the team `queue`, with the settings in `info_path`.
    fn start(self, info_path: &Path, queue: &str) -> Lines {
        match self {
            Worker::Python => python_worker(info_path, queue),
            Worker::Rust => rust_worker(info_path, queue),
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Worker::Python => "py",
            Worker::Rust => "rs",
        }
    }
}

fn python_worker(info_path: &Path, queue: &str) -> Lines {
    let python = std::env::var("BATON_PYTHON")
        .unwrap_or_else(|_| root().join(".venv/bin/python").display().to_string());
    let mut child = tokio::process::Command::new(python)
        .arg(root().join("examples/python-worker/worker.py"))
        .arg("--local")
        .arg(info_path)
        .args(["--queue", queue, "--wait", "1"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the python worker starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _child = child; // killed when the test ends
        let mut out = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = out.next_line().await {
            let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            if value.get("ready").is_none() && tx.send(value).is_err() {
                break;
            }
        }
    });
    Lines { rx, seen: Vec::new() }
}

fn rust_worker(info_path: &Path, queue: &str) -> Lines {
    let settings = baton_example_worker::Settings::from_local(info_path, queue).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let worker = baton_example_worker::Worker::new(settings).await.unwrap();
        let log = move |handled| {
            let _ = tx.send(serde_json::to_value(handled).unwrap());
        };
        loop {
            worker.poll(1, &log).await.unwrap();
        }
    });
    Lines { rx, seen: Vec::new() }
}

fn about<'a>(lines: &'a [Value], key: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["task_id"].as_str().is_some_and(|id| id.split('/').nth(1) == Some(key)))
        .collect()
}

fn answers(lines: &[&Value]) -> Vec<(u64, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    lines.iter().map(|l| (l["http"].as_u64().unwrap_or(0), text(&l["answer"]), text(&l["action"]))).collect()
}

fn task_url(info: &LocalInfo, queue: &str) -> String {
    info.queues.tasks.get(queue).unwrap_or_else(|| panic!("no task queue {queue} in {info:?}")).url.clone()
}

async fn sqs(info: &LocalInfo) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&baton_local::emulator_sdk_config(&info.aws_endpoint).await)
}

/// Sends `body` to the team `queue`'s task queue as only a listed role may on AWS (the
/// emulator enforces no queue policy); returns its message id.
async fn put_on(info: &LocalInfo, queue: &str, body: &str) -> String {
    let sent =
        sqs(info).await.send_message().queue_url(task_url(info, queue)).message_body(body).send().await;
    sent.unwrap().message_id().unwrap().to_owned()
}

/// A task event as baton publishes it, for `step` of `key` on `queue`.
fn forged(key: &str, step: &str, queue: &str, generation: u64, compensation: bool) -> Value {
    let task_id =
        format!("order-review/{key}/g{generation}/{step}{}", if compensation { "/undo" } else { "" });
    let kind = if compensation { "baton.compensation.requested" } else { "baton.task.created" };
    json!({"specversion": "1.0", "id": task_id, "source": "baton", "type": kind, "subject": key,
        "data": {"task_id": task_id, "workflow": "order-review", "key": key, "generation": generation,
        "step": step, "title": "t", "queue": queue, "attempt": 1, "previous_error": null,
        "compensation": compensation}})
}

/// A reminder of `task` (as [`forged`] builds it), its `count`th, as baton publishes it.
fn reminder_of(task: &Value, count: u64) -> Value {
    let reminds = task["id"].as_str().expect("a task id").to_owned();
    let id = format!("{reminds}/r{count}");
    let mut reminder = task.clone();
    reminder["type"] = json!("baton.task.reminder");
    reminder["id"] = json!(id);
    reminder["data"]["task_id"] = json!(id);
    reminder["data"]["reminds"] = json!(reminds);
    reminder["data"]["reminder"] = json!(count);
    reminder
}

/// `task` (as [`forged`] builds it) escalated to `queue`, its `level`, as baton publishes it: its
/// own id, the level's queue and title, the task it escalates and its level.
fn escalation_of(task: &Value, level: u64, queue: &str) -> Value {
    let escalates = task["id"].as_str().expect("a task id").to_owned();
    let id = format!("{escalates}/e{level}");
    let mut escalation = task.clone();
    escalation["type"] = json!("baton.task.escalated");
    escalation["id"] = json!(id);
    let data = &mut escalation["data"];
    data["task_id"] = json!(id);
    data["queue"] = json!(queue);
    data["title"] = json!(format!("Overdue: {}", task["data"]["key"].as_str().unwrap_or_default()));
    data["reminds"] = Value::Null;
    data["reminder"] = Value::Null;
    data["escalates"] = json!(escalates);
    data["level"] = json!(level);
    escalation
}

/// Places an order for each key, and waits until each one's reserve-stock task is out.
async fn orders(local: &Local, info: &LocalInfo, keys: &[&str]) {
    let sqs = sqs(info).await;
    for key in keys {
        let placed = json!({"specversion": "1.0", "id": format!("evt-{key}"), "source": "shop",
            "type": "order.placed", "subject": key, "data": {"total": 2500}});
        sqs.send_message()
            .queue_url(&info.queues.intake)
            .message_body(placed.to_string())
            .send()
            .await
            .unwrap();
    }
    for key in keys {
        eventually_trace(local, key, "the reserve-stock task out", |t| {
            t["record"]["state"] == "waiting{0}"
                && t["timeline"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|e| e["kind"] == "task_created" && e["published"] == true))
        })
        .await;
    }
}

/// [`SAGA`] with reserve-stock escalated to the `leads` queue (a level whose time never comes in
/// a test): the stack then has the leads' task queue, which a deploy of it would have.
fn escalating_saga() -> String {
    let requires = "        requires: [hold]\n";
    let saga = SAGA.replacen(
        requires,
        &format!("{requires}        escalate: [{{ after: 30m, queue: leads }}]\n"),
        1,
    );
    assert_ne!(saga, SAGA, "reserve-stock requires a hold");
    saga
}

/// `baton local` running the saga (reserve-stock escalating to `leads`), with `extra` arguments.
fn saga_stack(extra: &[&str]) -> (Local, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("workflows.yaml");
    std::fs::write(&config, escalating_saga()).unwrap();
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    (Local::start_with(&args), dir)
}

// ---- every documented answer ---------------------------------------------------------------------

/// The keys of one run, apart from the other worker's.
struct Keys {
    ok: String,
    unavailable: String,
    cancelled: String,
    twice: String,
    elsewhere: String,
    escalated: String,
}

impl Keys {
    fn new(prefix: &str) -> Keys {
        Keys {
            ok: format!("{prefix}-ok"),
            unavailable: format!("{prefix}-503"),
            cancelled: format!("{prefix}-cancelled"),
            twice: format!("{prefix}-twice"),
            elsewhere: format!("{prefix}-elsewhere"),
            escalated: format!("{prefix}-escalated"),
        }
    }
}

/// Sets the scene on a running saga stack before any worker runs.
async fn scene(local: &Local, info: &LocalInfo, keys: &Keys, config: &Path) {
    let keys_ordered = [&keys.ok, &keys.unavailable, &keys.cancelled, &keys.elsewhere, &keys.escalated];
    orders(local, info, &keys_ordered.map(String::as_str)).await;
    // Cancelled while its task waits on the queue.
    let cancel = std::process::Command::new(bin())
        .args(["cancel", "order-review", &keys.cancelled, "--reason", "customer withdrew", "--config"])
        .arg(config)
        .arg("--local")
        .arg(&local.info_path)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(cancel.status.success(), "baton cancel: {}", String::from_utf8_lossy(&cancel.stderr));
    // The record write that applies this key's answer reaches the table, but its answer is
    // lost each time the callback tries: baton cannot know, and answers 503.
    let rule = json!({"operation": "DynamoDB_20120810.PutItem", "match": [&keys.unavailable, r#"{"S":"advancing"}"#],
        "times": baton_aws::sdk::SDK_MAX_ATTEMPTS, "when": "after", "status": 500, "code": "InternalServerError"});
    baton_tests::Emulator { endpoint: info.aws_endpoint.clone() }.inject(rule).await;
    // One task id delivered with two different answers (generation 1, then 2).
    for generation in [1, 2] {
        let mut event = forged(&keys.twice, "reserve-stock", "stock", generation, false);
        let task_id = format!("order-review/{}/1/reserve-stock", keys.twice);
        event["id"] = json!(task_id);
        event["data"]["task_id"] = json!(task_id);
        put_on(info, "stock", &event.to_string()).await;
    }
    // A step answered elsewhere (by a person, say), then reminded of: its task and its reminder
    // are both on the queue.
    let secrets = Secrets::parse(&info.webhook_secret).unwrap();
    let by_hand = json!({"workflow": "order-review", "key": &keys.elsewhere, "step": "reserve-stock",
        "outcome": "succeeded", "data": {"hold": "by-hand"}});
    let by = format!("{}-by-hand", keys.elsewhere);
    let (status, body) = send_callback(&info.api_url, &secrets, &by, &by_hand).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    eventually_trace(local, &keys.elsewhere, "the answer by hand applied", |t| {
        t["record"]["state"] == "waiting{1}"
    })
    .await;
    let reminder = reminder_of(&forged(&keys.elsewhere, "reserve-stock", "stock", 1, false), 1);
    put_on(info, "stock", &reminder.to_string()).await;
    // Escalated to the leads: the step answered elsewhere, and one nobody answered yet (its task
    // waits on the stock queue).
    for key in [&keys.elsewhere, &keys.escalated] {
        let escalation = escalation_of(&forged(key, "reserve-stock", "stock", 1, false), 1, "leads");
        put_on(info, "leads", &escalation.to_string()).await;
    }
}

/// The story both workers must pass, one worker for each team.
async fn a_worker_answers_every_documented_answer(worker: Worker) {
    let keys = Keys::new(worker.prefix());
    let (local, dir) = saga_stack(&[]);
    let info = local.info();
    scene(&local, &info, &keys, &dir.path().join("workflows.yaml")).await;
    // The leads' worker first, so that the escalated step is still unanswered when it comes.
    let mut leads = worker.start(&local.info_path, "leads");
    let seen = leads
        .until("both escalations answered", |seen| {
            !about(seen, &keys.escalated).is_empty() && !about(seen, &keys.elsewhere).is_empty()
        })
        .await;
    escalations_answered_with_their_own_ids(&seen, &keys);
    eventually_trace(&local, &keys.escalated, "the lead's answer applied", |t| {
        t["record"]["state"] == "waiting{1}"
    })
    .await;
    let mut stock = worker.start(&local.info_path, "stock");
    let mut payments = worker.start(&local.info_path, "payments");

    let seen = stock
        .until("an answer for every task", |seen| {
            answers(&about(seen, &keys.unavailable)).last().is_some_and(|a| a.1 == "applied")
                && !about(seen, &keys.ok).is_empty()
                && !about(seen, &keys.cancelled).is_empty()
                && about(seen, &keys.twice).len() >= 2
                && about(seen, &keys.elsewhere).len() >= 2
                && !about(seen, &keys.escalated).is_empty()
        })
        .await;
    every_answer_as_documented(&seen, &keys);
    eventually_trace(&local, &keys.unavailable, "the 503'd answer applied", |t| {
        t["record"]["state"] == "waiting{1}"
    })
    .await;
    a_reminder_of_an_answered_task_is_a_duplicate(&info, &keys.ok, &mut stock).await;

    the_saga_s_compensations(&local, &info, &keys.ok, (&mut stock, &mut payments)).await;
    each_worker_saw_its_own_team_s_tasks_alone(&stock.seen, &payments.seen, &leads.seen);
    only_the_refused_message_is_left(&info).await;
    for (team, lines) in [("stock", &stock.seen), ("payments", &payments.seen), ("leads", &leads.seen)] {
        let text: Vec<_> = lines.iter().map(Value::to_string).collect();
        println!("{} {team} worker logged:\n{}", worker.prefix(), text.join("\n"));
    }
}

fn every_answer_as_documented(seen: &[Value], keys: &Keys) {
    let done = |answer: &str| (200, answer.to_owned(), "done".to_owned());
    // (A task published twice has its copy answered the same, as a duplicate.)
    let every = |key: &str, answer: &str| {
        let got = answers(&about(seen, key));
        !got.is_empty() && got.iter().all(|a| *a == done(answer))
    };
    assert!(every(&keys.ok, "applied"), "{seen:#?}");
    assert!(every(&keys.cancelled, "ignored"), "{seen:#?}");
    assert!(about(seen, &keys.cancelled).iter().all(|l| l["reason"] == "terminal"), "{seen:#?}");
    // The 503: called back again after Retry-After with the same webhook-id, then applied, the
    // task kept all the while: one receive, none nearer the dead-letter queue.
    let unavailable = about(seen, &keys.unavailable);
    assert_eq!(answers(&unavailable)[0], (503, "unavailable".into(), "retry".into()), "{seen:#?}");
    assert!(unavailable[0]["retry_after"].as_u64().is_some_and(|s| s > 0), "{seen:#?}");
    assert_eq!(answers(&unavailable).last(), Some(&done("applied")));
    assert!(unavailable.iter().all(|l| l["webhook_id"] == unavailable[0]["webhook_id"]));
    assert!(unavailable.iter().all(|l| l["receives"] == 1), "held, not received again: {seen:#?}");
    // The same task id twice: the first is buffered, the other refused.
    let mut twice = answers(&about(seen, &keys.twice));
    twice.sort();
    assert_eq!(
        twice[..2],
        [(202, "buffered".into(), "done".into()), (409, "idempotency_key_reused".into(), "refused".into())],
        "{seen:#?}"
    );
    // A step answered elsewhere: its task and its reminder, answered with the task's id, are
    // both ignored (the step passed), and deleted.
    assert!(every(&keys.elsewhere, "ignored"), "{seen:#?}");
    let elsewhere = about(seen, &keys.elsewhere);
    assert!(elsewhere.iter().all(|l| l["reason"] == "step_already_passed"), "{seen:#?}");
    let task_id = format!("order-review/{}/g1/reserve-stock", keys.elsewhere);
    assert!(elsewhere.iter().all(|l| l["webhook_id"] == task_id.as_str()), "{seen:#?}");
    assert!(
        elsewhere
            .iter()
            .any(|l| l["type"] == "baton.task.reminder" && l["task_id"] == format!("{task_id}/r1")),
        "{seen:#?}"
    );
    // A step the lead answered first: its task, answered with its own id, is ignored (the step
    // passed), and deleted.
    assert!(every(&keys.escalated, "ignored"), "{seen:#?}");
    let task_id = format!("order-review/{}/g1/reserve-stock", keys.escalated);
    assert!(
        about(seen, &keys.escalated).iter().all(|l| l["type"] == "baton.task.created"
            && l["webhook_id"] == task_id.as_str()
            && l["reason"] == "step_already_passed"),
        "{seen:#?}"
    );
}

/// The leads' worker took each escalation as the step's task, on its own queue, and called back
/// with the escalation's own id: `applied` for the step nobody had answered, `ignored` for the
/// step answered elsewhere; each deleted, on its first receive.
fn escalations_answered_with_their_own_ids(seen: &[Value], keys: &Keys) {
    let done = |answer: &str| (200, answer.to_owned(), "done".to_owned());
    for (key, answer) in [(&keys.escalated, "applied"), (&keys.elsewhere, "ignored")] {
        let lines = about(seen, key);
        assert_eq!(answers(&lines), [done(answer)], "{key}: {seen:#?}");
        let line = lines[0];
        let id = format!("order-review/{key}/g1/reserve-stock/e1");
        assert_eq!(line["type"], "baton.task.escalated", "{line}");
        assert_eq!(line["task_id"].as_str(), Some(id.as_str()), "{line}");
        assert_eq!(line["webhook_id"].as_str(), Some(id.as_str()), "the escalation's own id: {line}");
        assert_eq!(line["duplicate"].as_bool(), Some(false), "{line}");
        assert_eq!(line["receives"], 1, "{line}");
    }
    let elsewhere = about(seen, &keys.elsewhere);
    assert_eq!(elsewhere[0]["reason"], "step_already_passed", "{seen:#?}");
}

/// A reminder of the task of `key` the worker answered already (`applied`): the worker does the
/// work again and calls back with the task's id as the `webhook-id`, and baton answers as it did
/// the first time, a duplicate; the worker deletes it.
async fn a_reminder_of_an_answered_task_is_a_duplicate(info: &LocalInfo, key: &str, stock: &mut Lines) {
    let task = forged(key, "reserve-stock", "stock", 1, false);
    let task_id = task["id"].as_str().unwrap().to_owned();
    let first = stock.seen.iter().find(|l| l["task_id"] == task_id.as_str() && l["answer"] == "applied");
    let first = first.unwrap_or_else(|| panic!("the task {task_id} answered: {:#?}", stock.seen)).clone();
    assert_eq!(
        (first["webhook_id"].as_str(), first["duplicate"].as_bool()),
        (Some(task_id.as_str()), Some(false))
    );
    let message = put_on(info, "stock", &reminder_of(&task, 1).to_string()).await;
    let seen = stock
        .until("the reminder answered", |seen| seen.iter().any(|l| l["message_id"] == message.as_str()))
        .await;
    let line = seen.iter().find(|l| l["message_id"] == message.as_str()).unwrap();
    assert_eq!(answers(&[line]), [(200, "applied".into(), "done".into())], "{line}");
    assert_eq!(line["type"], "baton.task.reminder", "{line}");
    assert_eq!(line["task_id"].as_str(), Some(format!("{task_id}/r1").as_str()), "{line}");
    assert_eq!(line["webhook_id"].as_str(), Some(task_id.as_str()), "the reminded task's id: {line}");
    assert_eq!(line["duplicate"].as_bool(), Some(true), "{line}");
    // Deleted (the worker deletes before it logs `done`): only_the_refused_message_is_left.
}

/// The stock worker logged stock tasks only, the payments worker the refund only, the leads'
/// worker the escalations only.
fn each_worker_saw_its_own_team_s_tasks_alone(stock: &[Value], payments: &[Value], leads: &[Value]) {
    let ids = |lines: &[Value]| -> Vec<String> {
        lines.iter().filter_map(|l| l["task_id"].as_str().map(str::to_owned)).collect()
    };
    let (stock_ids, payment_ids) = (ids(stock), ids(payments));
    assert!(stock_ids.iter().all(|id| id.contains("/reserve-stock")), "{stock_ids:#?}");
    assert!(!payment_ids.is_empty(), "{payments:#?}");
    assert!(payment_ids.iter().all(|id| id.ends_with("/payment/undo")), "{payment_ids:#?}");
    let lead_ids = ids(leads);
    assert_eq!(lead_ids.len(), 2, "{leads:#?}");
    assert!(lead_ids.iter().all(|id| id.ends_with("/reserve-stock/e1")), "{lead_ids:#?}");
    assert!(stock.iter().chain(payments).all(|l| l["type"] != "baton.task.escalated"), "{stock:#?}");
}

/// Nothing left on the stock queue but the refused message, for the redrive (a task published
/// twice has its copy answered `duplicate` and deleted in a moment), which moves it to the
/// team's dead-letter queue after ten receives; nothing left on the payments queue, nor on the
/// leads' queue or its dead-letter queue.
async fn only_the_refused_message_is_left(info: &LocalInfo) {
    let sqs = sqs(info).await;
    let teams = [("stock", "TaskDLQStock"), ("payments", "TaskDLQPayments"), ("leads", "TaskDLQLeads")];
    for (queue, dlq) in teams {
        let redrive = sqs
            .get_queue_attributes()
            .queue_url(task_url(info, queue))
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .unwrap();
        let redrive =
            redrive.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy));
        let redrive: Value = serde_json::from_str(redrive.expect("a redrive policy")).unwrap();
        assert_eq!(redrive["maxReceiveCount"].to_string().trim_matches('"'), "10", "{redrive}");
        assert!(redrive["deadLetterTargetArn"].as_str().is_some_and(|a| a.contains(dlq)), "{redrive}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = (
            on_the_queue(&sqs, &task_url(info, "stock")).await,
            on_the_queue(&sqs, &task_url(info, "payments")).await,
            on_the_queue(&sqs, &task_url(info, "leads")).await,
            on_the_queue(&sqs, &info.queues.tasks["leads"].dlq).await,
        );
        if left == (1, 0, 0, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left:?} messages left on the stock, payments and leads queues and the leads' dead-letter \
             queue, not the refused one alone"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The messages on `queue`, visible or in flight.
async fn on_the_queue(sqs: &aws_sdk_sqs::Client, queue: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName::{
        All, ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible,
    };
    let attributes = sqs.get_queue_attributes().queue_url(queue).attribute_names(All).send().await.unwrap();
    let count = |name| attributes.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse::<u64>().ok());
    count(ApproximateNumberOfMessages).unwrap_or(0)
        + count(ApproximateNumberOfMessagesNotVisible).unwrap_or(0)
}

/// The saga fails at shipping: each team's worker answers its compensation task, last step first.
async fn the_saga_s_compensations(
    local: &Local,
    info: &LocalInfo,
    key: &str,
    (stock, payments): (&mut Lines, &mut Lines),
) {
    let secrets = Secrets::parse(&info.webhook_secret).unwrap();
    let step = |step: &str, extra: Value| {
        let mut body = json!({"workflow": "order-review", "key": key, "step": step});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let payment = step("payment", json!({"outcome": "succeeded", "data": {"payment_ref": "pay-1"}}));
    let (status, body) = send_callback(&info.api_url, &secrets, &format!("{key}-pay"), &payment).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    eventually_trace(local, key, "shipping waiting", |t| t["record"]["state"] == "waiting{2}").await;
    let shipping =
        step("shipping", json!({"outcome": "failed", "error": "NoCarrier", "cause": "no carrier"}));
    let (status, body) = send_callback(&info.api_url, &secrets, &format!("{key}-ship"), &shipping).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    let undone = |step: &'static str| {
        move |seen: &[Value]| {
            about(seen, key).iter().any(|l| {
                l["task_id"].as_str().is_some_and(|id| id.contains(&format!("/{step}/undo")))
                    && l["type"] == "baton.compensation.requested"
                    && l["answer"] == "applied"
            })
        }
    };
    payments.until("the refund applied", undone("payment")).await;
    stock.until("the stock released", undone("reserve-stock")).await;
    eventually_trace(local, key, "compensated", |t| t["record"]["state"] == "compensated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_worker_answers_every_documented_answer_against_baton_local() {
    a_worker_answers_every_documented_answer(Worker::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_answers_every_documented_answer_against_baton_local() {
    a_worker_answers_every_documented_answer(Worker::Rust).await;
}

// ---- reminders, parsed by each worker ------------------------------------------------------------

/// What a worker of each queue makes of each message body, as JSON: for a task it takes, its
/// type, its id, the webhook-id it calls back with and the callback's body; else
/// `{"refused": code}`.
fn python_parses(bodies: &[(&str, String)]) -> Vec<Value> {
    const SCRIPT: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import worker
verdicts = []
for queue, body in json.load(sys.stdin):
    try:
        kind, task, work = worker.parse_task(body, queue)
    except worker.NotMine as refusal:
        verdicts.append({"refused": refusal.code})
        continue
    verdicts.append({"type": kind, "task_id": task["task_id"], "webhook_id": worker.webhook_id(task),
                     "callback": worker.callback_body(task, *work(task))})
print(json.dumps(verdicts))
"#;
    use std::io::Write;
    let python = std::env::var("BATON_PYTHON")
        .unwrap_or_else(|_| root().join(".venv/bin/python").display().to_string());
    let mut child = std::process::Command::new(python)
        .args(["-c", SCRIPT])
        .arg(root().join("examples/python-worker"))
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    child.stdin.take().unwrap().write_all(json!(bodies).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rust_parses(bodies: &[(&str, String)]) -> Vec<Value> {
    use baton_example_worker::{callback_body, parse_task, work_for};
    let verdict = |(queue, body): &(&str, String)| match parse_task(body, queue) {
        Err(refusal) => json!({"refused": refusal.code}),
        Ok((kind, task)) => {
            let work = work_for(queue, &task).expect("the work parse_task found")(&task);
            json!({"type": kind, "task_id": task.task_id, "webhook_id": task.webhook_id(),
                "callback": callback_body(&task, &work)})
        }
    };
    bodies.iter().map(verdict).collect()
}

#[test]
fn both_workers_take_a_reminder_as_the_task_it_reminds_of_and_refuse_a_malformed_one() {
    let mut task = forged("k", "reserve-stock", "stock", 1, false);
    let task_id = "order-review/k/g1/reserve-stock";
    let reminder = reminder_of(&task, 2);
    let callback = json!({"workflow": "order-review", "key": "k", "step": "reserve-stock", "generation": 1,
        "attempt": 1, "outcome": "succeeded", "data": {"hold": "hold-k"}});
    let taken = |kind: &str, id: &str| json!({"type": kind, "task_id": id, "webhook_id": task_id, "callback": callback});
    let mut cases = vec![
        // The reminder: the reminded task's work and callback, with that task's id as webhook-id.
        (reminder.clone(), taken("baton.task.reminder", &format!("{task_id}/r2"))),
        (task.clone(), taken("baton.task.created", task_id)),
    ];
    // The task as baton publishes it now: a task's reminds and reminder are null.
    task["data"]["reminds"] = Value::Null;
    task["data"]["reminder"] = Value::Null;
    cases.push((task.clone(), taken("baton.task.created", task_id)));
    let refused = |code: &str| json!({"refused": code});
    let changed = |change: &dyn Fn(&mut Value)| {
        let mut changed = reminder.clone();
        change(&mut changed);
        changed
    };
    let malformed: [fn(&mut Value); 17] = [
        |r| _ = r["data"].as_object_mut().unwrap().remove("reminds"),
        |r| r["data"]["reminds"] = Value::Null,
        |r| r["data"]["reminds"] = json!(7),
        |r| {
            r["data"]["reminds"] = json!("");
            r["data"]["task_id"] = json!("/r2");
            r["id"] = json!("/r2");
        },
        |r| _ = r["data"].as_object_mut().unwrap().remove("reminder"),
        |r| r["data"]["reminder"] = json!(0),
        |r| r["data"]["reminder"] = json!(-2),
        |r| r["data"]["reminder"] = json!(2.5),
        |r| r["data"]["reminder"] = json!("2"),
        |r| r["data"]["reminder"] = json!(true),
        |r| r["data"]["reminder"] = json!(1), // its id says the second
        |r| r["id"] = json!("order-review/k/g1/reserve-stock"),
        |r| r["data"]["task_id"] = json!("order-review/k/g1/reserve-stock"),
        |r| r["data"]["compensation"] = json!(true),
        |r| _ = r["data"].as_object_mut().unwrap().remove("title"),
        |r| r["data"]["generation"] = json!("1"),
        |r| r["type"] = json!("baton.task.created"), // a task naming another
    ];
    cases.extend(malformed.into_iter().map(|change| (changed(&change), refused("malformed_task"))));
    cases.push((changed(&|r| r["data"]["queue"] = json!("payments")), refused("foreign_queue")));
    let shipping = reminder_of(&forged("k", "shipping", "stock", 1, false), 1);
    cases.push((shipping, refused("not_handled")));
    cases.push((changed(&|r| r["type"] = json!("baton.task.reminded")), refused("not_a_baton_task")));

    let cases: Vec<_> = cases.into_iter().map(|(body, expected)| ("stock", body, expected)).collect();
    both_workers_agree(&cases);
}

/// Each worker, of each case's queue, makes of its body what the case expects.
fn both_workers_agree(cases: &[(&str, Value, Value)]) {
    let bodies: Vec<(&str, String)> =
        cases.iter().map(|(queue, body, _)| (*queue, body.to_string())).collect();
    for (worker, verdicts) in [("python", python_parses(&bodies)), ("rust", rust_parses(&bodies))] {
        assert_eq!(verdicts.len(), cases.len(), "{worker}: {verdicts:#?}");
        for ((queue, body, expected), verdict) in cases.iter().zip(&verdicts) {
            assert_eq!(verdict, expected, "the {worker} worker of {queue}, for {body}");
        }
    }
}

/// Changes that make an escalation (of `order-review/k/g1/reserve-stock`, level 1) malformed.
const MALFORMED_ESCALATIONS: [fn(&mut Value); 20] = [
    |e| _ = e["data"].as_object_mut().unwrap().remove("escalates"),
    |e| e["data"]["escalates"] = Value::Null,
    |e| e["data"]["escalates"] = json!(7),
    |e| {
        e["data"]["escalates"] = json!("");
        e["data"]["task_id"] = json!("/e1");
        e["id"] = json!("/e1");
    },
    |e| _ = e["data"].as_object_mut().unwrap().remove("level"),
    |e| e["data"]["level"] = Value::Null,
    |e| e["data"]["level"] = json!(0),
    |e| e["data"]["level"] = json!(-1),
    |e| e["data"]["level"] = json!(1.5),
    |e| e["data"]["level"] = json!("1"),
    |e| e["data"]["level"] = json!(true),
    // Its id says the first.
    |e| e["data"]["level"] = json!(2),
    |e| {
        // The escalated task's id as its own.
        e["id"] = json!("order-review/k/g1/reserve-stock");
        e["data"]["task_id"] = json!("order-review/k/g1/reserve-stock");
    },
    |e| e["id"] = json!("order-review/k/g1/reserve-stock/e2"),
    |e| e["data"]["task_id"] = json!("order-review/k/g1/reserve-stock/r1"),
    |e| e["data"]["compensation"] = json!(true),
    |e| _ = e["data"].as_object_mut().unwrap().remove("title"),
    |e| e["data"]["attempt"] = json!("1"),
    // A reminder too.
    |e| e["data"]["reminds"] = json!("order-review/k/g1/reserve-stock"),
    // A task naming another.
    |e| e["type"] = json!("baton.task.created"),
];

#[test]
fn both_workers_take_an_escalation_on_their_own_queue_with_its_own_id_and_refuse_a_malformed_one() {
    let task = forged("k", "reserve-stock", "stock", 1, false);
    let task_id = "order-review/k/g1/reserve-stock";
    let escalation = escalation_of(&task, 1, "leads");
    let callback = json!({"workflow": "order-review", "key": "k", "step": "reserve-stock", "generation": 1,
        "attempt": 1, "outcome": "succeeded", "data": {"hold": "hold-k"}});
    let taken = |kind: &str, id: &str, webhook_id: &str| {
        json!({"type": kind, "task_id": id, "webhook_id": webhook_id,
            "callback": callback})
    };
    let (first, second) = (format!("{task_id}/e1"), format!("{task_id}/e2"));
    let mut cases = vec![
        // The leads' worker takes it as the task: the same work and callback, with the
        // escalation's own id as webhook-id (another input than the task's, so never a 409).
        ("leads", escalation.clone(), taken("baton.task.escalated", &first, &first)),
        ("leads", escalation_of(&task, 2, "leads"), taken("baton.task.escalated", &second, &second)),
    ];
    // A task and a reminder as baton publishes them now: their escalates and level are null.
    let mut nulled = task.clone();
    let mut reminder = reminder_of(&task, 1);
    for event in [&mut nulled, &mut reminder] {
        event["data"]["escalates"] = Value::Null;
        event["data"]["level"] = Value::Null;
    }
    cases.push(("stock", nulled, taken("baton.task.created", task_id, task_id)));
    cases.push(("stock", reminder.clone(), taken("baton.task.reminder", &format!("{task_id}/r1"), task_id)));
    let refused = |code: &str| json!({"refused": code});
    let changed = |change: &dyn Fn(&mut Value)| {
        let mut changed = escalation.clone();
        change(&mut changed);
        changed
    };
    cases.extend(MALFORMED_ESCALATIONS.map(|change| ("leads", changed(&change), refused("malformed_task"))));
    // A task or a reminder with a level is no task either.
    let mut levelled = task.clone();
    levelled["data"]["level"] = json!(1);
    cases.push(("stock", levelled, refused("malformed_task")));
    let mut escalating = reminder;
    escalating["data"]["escalates"] = json!(task_id);
    cases.push(("stock", escalating, refused("malformed_task")));
    // Its level's queue is the one it must name: not another team's, nor the task's own worker's.
    cases.push(("leads", changed(&|e| e["data"]["queue"] = json!("payments")), refused("foreign_queue")));
    cases.push(("stock", escalation.clone(), refused("foreign_queue")));
    let shipping = escalation_of(&forged("k", "shipping", "stock", 1, false), 1, "leads");
    cases.push(("leads", shipping, refused("not_handled")));
    cases.push((
        "leads",
        changed(&|e| e["type"] = json!("baton.task.escalation")),
        refused("not_a_baton_task"),
    ));
    both_workers_agree(&cases);
}

// ---- the attacks ---------------------------------------------------------------------------------

/// Floods `url` with unsigned requests until `stop`, as anyone may; counts its 429s.
fn flood(url: String, stop: Arc<AtomicBool>, throttled: Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if baton_tests::http::post(&url, &[], b"{}".to_vec()).await.status == 429 {
                throttled.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// Messages on the stock queue that are not the stock worker's tasks, each with the reason the
/// worker must give.
async fn garbage(info: &LocalInfo, key: &str) -> Vec<(String, &'static str)> {
    let mut wrong_type = forged(key, "reserve-stock", "stock", 1, false);
    wrong_type["data"]["generation"] = json!("1");
    let mut missing = forged(key, "reserve-stock", "stock", 1, false);
    missing["data"].as_object_mut().unwrap().remove("step");
    let bodies = [
        ("not json at all".to_owned(), "malformed_task"),
        (json!({"type": "order.placed", "data": {}}).to_string(), "not_a_baton_task"),
        (json!([1, 2]).to_string(), "not_a_baton_task"),
        (wrong_type.to_string(), "malformed_task"),
        (missing.to_string(), "malformed_task"),
        // Another team's task on this team's queue.
        (forged(key, "payment", "payments", 1, true).to_string(), "foreign_queue"),
        // A forged refund addressed to the stock team, which refunds nothing.
        (forged(key, "payment", "stock", 1, true).to_string(), "not_handled"),
    ];
    let mut sent = Vec::new();
    for (body, code) in bodies {
        sent.push((put_on(info, "stock", &body).await, code));
    }
    sent
}

/// The story of the attacks, for one worker.
async fn a_worker_withstands_the_attacks(worker: Worker) {
    let key = format!("{}-flood", worker.prefix());
    // A stage throttled to a request a second: a flood takes every token.
    let (local, _dir) =
        saga_stack(&["--parameter", "CallbackApiRateLimit=1", "--parameter", "CallbackApiBurstLimit=1"]);
    let info = local.info();
    orders(&local, &info, &[&key]).await;
    let garbage = garbage(&info, &key).await;
    let (stop, throttled) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let flooding = flood(format!("{}/v1/callbacks", info.api_url), stop.clone(), throttled.clone());
    while throttled.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lines = worker.start(&local.info_path, "stock");

    lines
        .until("three 429s", |seen| answers(&about(seen, &key)).iter().filter(|a| a.0 == 429).count() >= 3)
        .await;
    stop.store(true, Ordering::Relaxed);
    flooding.await.unwrap();
    // The worker takes one message at a time: the rest wait for the flood's task to settle.
    let seen = lines
        .until("the task applied after the flood, and a line for each message that is not a task", |seen| {
            let told = garbage.iter().all(|(id, _)| seen.iter().any(|l| l["message_id"] == id.as_str()));
            told && answers(&about(seen, &key)).last().is_some_and(|a| a.1 == "applied")
        })
        .await;
    none_of_them_acted_on(&seen, &garbage);
    // Every 429 was a transient answer: the task held (one receive), called back again, applied.
    let tries = about(&seen, &key);
    let (last, throttled) = tries.split_last().unwrap();
    assert!(
        throttled.iter().all(|l| (l["http"].as_u64(), l["action"].as_str()) == (Some(429), Some("retry"))),
        "{seen:#?}"
    );
    assert!(throttled.iter().all(|l| l["retry_after"].as_u64().is_some_and(|s| s >= 1)), "{seen:#?}");
    assert_eq!(answers(&[*last]), [(200, "applied".into(), "done".into())]);
    assert!(tries.iter().all(|l| l["receives"] == 1), "held, not received again: {seen:#?}");
    eventually_trace(&local, &key, "the stock held", |t| t["record"]["state"] == "waiting{1}").await;
    let dlq = info.queues.tasks["stock"].dlq.clone();
    assert_eq!(on_the_queue(&sqs(&info).await, &dlq).await, 0, "nothing in the dead-letter queue");

    a_redirect_is_never_followed(worker, &info).await;
}

/// Each message that is not the worker's task has one line saying why, and no callback.
fn none_of_them_acted_on(seen: &[Value], garbage: &[(String, &'static str)]) {
    for (id, code) in garbage {
        let told: Vec<_> = seen.iter().filter(|l| l["message_id"] == id.as_str()).collect();
        assert!(!told.is_empty(), "{id}: {seen:#?}");
        for line in told {
            assert_eq!(
                (line["answer"].as_str(), line["action"].as_str()),
                (Some(*code), Some("refused")),
                "{line}"
            );
            assert!(line["http"].is_null(), "no callback for what is not a task: {line}");
            assert!(line["message"].as_str().is_some_and(|m| !m.is_empty()), "{line}");
        }
    }
}

/// A callback URL that redirects to another host: the worker's request goes to the callback URL
/// alone, the 3xx is logged, and the task left for a later delivery.
async fn a_redirect_is_never_followed(worker: Worker, info: &LocalInfo) {
    let (thief, stolen) = http_server(|_| (200, vec![], r#"{"status": "applied"}"#.to_owned())).await;
    let target = format!("{thief}/v1/callbacks");
    let (redirector, _) =
        http_server(move |_| (302, vec![("location", target.clone())], String::new())).await;
    let dir = tempfile::tempdir().unwrap();
    let redirected = LocalInfo { api_url: redirector, ..info.clone() };
    let path = dir.path().join("local.json");
    redirected.save(&path).unwrap();
    let key = format!("{}-redirected", worker.prefix());
    let id = put_on(info, "payments", &forged(&key, "payment", "payments", 1, true).to_string()).await;
    let mut lines = worker.start(&path, "payments");
    let seen = lines.until("the redirect", |seen| seen.iter().any(|l| l["message_id"] == id.as_str())).await;
    let line = seen.iter().find(|l| l["message_id"] == id.as_str()).unwrap();
    assert_eq!(answers(&[line]), [(302, "redirect".into(), "later".into())], "{seen:#?}");
    assert_eq!(line["location"].as_str(), Some(format!("{thief}/v1/callbacks").as_str()), "{line}");
    assert!(stolen.lock().unwrap().is_empty(), "the other host got {:?}", stolen.lock().unwrap());
    let left = on_the_queue(&sqs(info).await, &task_url(info, "payments")).await;
    assert_eq!(left, 1, "the task is left for a later delivery, not deleted");
}

type Seen = Arc<std::sync::Mutex<Vec<Vec<(String, String)>>>>;

/// An HTTP server on 127.0.0.1 answering every request with `answer`; its URL, and the headers
/// of each request it got.
async fn http_server(
    answer: impl Fn(&axum::http::HeaderMap) -> (u16, Vec<(&'static str, String)>, String)
    + Clone
    + Send
    + Sync
    + 'static,
) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let handler = move |headers: axum::http::HeaderMap| {
        let (answer, record) = (answer.clone(), record.clone());
        async move {
            let pairs =
                headers.iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned())).collect();
            record.lock().unwrap().push(pairs);
            let (status, extra, body) = answer(&headers);
            let mut response = axum::response::Response::builder().status(status);
            for (name, value) in extra {
                response = response.header(name, value);
            }
            response.body(axum::body::Body::from(body)).unwrap()
        }
    };
    let router = axum::Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_worker_withstands_a_flood_forged_and_malformed_tasks_and_a_redirect() {
    a_worker_withstands_the_attacks(Worker::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_withstands_a_flood_forged_and_malformed_tasks_and_a_redirect() {
    a_worker_withstands_the_attacks(Worker::Rust).await;
}
