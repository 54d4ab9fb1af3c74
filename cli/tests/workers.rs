//! The task workers to copy (`examples/`), each against `baton local` as `make run` starts it:
//! the Python worker as a subprocess, the Rust worker's library in this process. The same story
//! for both. Tasks go out on the outbound queue; the worker answers them and acts on every
//! documented answer:
//! - `applied` (a step's task, and both compensations of a saga that fails at shipping);
//! - `503` with `Retry-After` (a fault on the record write, so the answer is lost), retried
//!   later with the same `webhook-id` and then applied;
//! - `ignored` (a task whose workflow was cancelled before the worker got to it);
//! - `202 buffered` and `409` (one task id delivered with two different answers: the first is
//!   kept early, the second is refused and left on the queue for its redrive).

use std::process::Stdio;
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

/// What the worker logged: one JSON value per handled message.
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

/// The keys of one run, apart from the other worker's.
struct Keys {
    ok: String,
    unavailable: String,
    cancelled: String,
    twice: String,
}

impl Keys {
    fn new(prefix: &str) -> Keys {
        Keys {
            ok: format!("{prefix}-ok"),
            unavailable: format!("{prefix}-503"),
            cancelled: format!("{prefix}-cancelled"),
            twice: format!("{prefix}-twice"),
        }
    }
}

/// Starts `baton local` with the saga workflow and sets the scene before any worker runs.
async fn scene(keys: &Keys) -> (Local, LocalInfo, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("workflows.yaml");
    std::fs::write(&config, SAGA).unwrap();
    let local = Local::start_with(&["--config", config.to_str().unwrap()]);
    let info = local.info();
    let sqs = aws_sdk_sqs::Client::new(&baton_local::emulator_sdk_config(&info.aws_endpoint).await);
    for key in [&keys.ok, &keys.unavailable, &keys.cancelled] {
        let placed = json!({"specversion": "1.0", "id": format!("evt-{key}"), "source": "shop",
            "type": "order.placed", "subject": key, "data": {"total": 2500}});
        sqs.send_message()
            .queue_url(&info.queues.intake)
            .message_body(placed.to_string())
            .send()
            .await
            .unwrap();
    }
    for key in [&keys.ok, &keys.unavailable, &keys.cancelled] {
        eventually_trace(&local, key, "the reserve-stock task out", |t| {
            t["record"]["state"] == "waiting{0}"
                && t["timeline"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|e| e["kind"] == "task_created" && e["published"] == true))
        })
        .await;
    }
    // Cancelled while its task waits on the queue.
    let cancel = std::process::Command::new(bin())
        .args(["cancel", "order-review", &keys.cancelled, "--reason", "customer withdrew", "--config"])
        .arg(&config)
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
        let task_id = format!("order-review/{}/1/reserve-stock", keys.twice);
        let event = json!({"specversion": "1.0", "id": task_id, "source": "baton", "type": "baton.task.created",
            "subject": keys.twice, "data": {"task_id": task_id, "workflow": "order-review", "key": keys.twice,
            "generation": generation, "step": "reserve-stock", "title": "Reserve stock", "queue": "stock",
            "attempt": 1, "previous_error": null, "compensation": false}});
        sqs.send_message()
            .queue_url(&info.queues.outbound)
            .message_body(event.to_string())
            .send()
            .await
            .unwrap();
    }
    (local, info, dir)
}

/// The story both workers must pass: `start` starts the worker and returns what it logs.
async fn a_worker_answers_every_documented_answer(prefix: &str, start: impl FnOnce(&Local) -> Lines) {
    let keys = Keys::new(prefix);
    let (local, info, _dir) = scene(&keys).await;
    let mut lines = start(&local);

    let seen = lines
        .until("an answer for every task", |seen| {
            answers(&about(seen, &keys.unavailable)).last().is_some_and(|a| a.1 == "applied")
                && !about(seen, &keys.ok).is_empty()
                && !about(seen, &keys.cancelled).is_empty()
                && about(seen, &keys.twice).len() >= 2
        })
        .await;
    let done = |answer: &str| (200, answer.to_owned(), "done".to_owned());
    // (A task published twice has its copy answered the same, as a duplicate.)
    let every = |key: &str, answer: &str| {
        let got = answers(&about(&seen, key));
        !got.is_empty() && got.iter().all(|a| *a == done(answer))
    };
    assert!(every(&keys.ok, "applied"), "{seen:#?}");
    assert!(every(&keys.cancelled, "ignored"), "{seen:#?}");
    assert!(about(&seen, &keys.cancelled).iter().all(|l| l["reason"] == "terminal"), "{seen:#?}");
    // The 503: made visible again after Retry-After, then answered with the same webhook-id.
    let unavailable = about(&seen, &keys.unavailable);
    assert_eq!(answers(&unavailable)[0], (503, "unavailable".into(), "retry".into()), "{seen:#?}");
    assert!(unavailable[0]["retry_after"].as_u64().is_some_and(|s| s > 0), "{seen:#?}");
    assert_eq!(answers(&unavailable).last(), Some(&done("applied")));
    assert!(unavailable.iter().all(|l| l["webhook_id"] == unavailable[0]["webhook_id"]));
    // The same task id twice: the first is buffered, the other refused.
    let mut twice = answers(&about(&seen, &keys.twice));
    twice.sort();
    assert_eq!(
        twice[..2],
        [(202, "buffered".into(), "done".into()), (409, "idempotency_key_reused".into(), "refused".into())],
        "{seen:#?}"
    );
    eventually_trace(&local, &keys.unavailable, "the 503'd answer applied", |t| {
        t["record"]["state"] == "waiting{1}"
    })
    .await;

    the_saga_s_compensations(&local, &info, &keys.ok, &mut lines).await;

    // Nothing left on the queue but the refused message, for the redrive (a task published twice
    // has its copy answered `duplicate` and deleted in a moment), which moves it to the outbound
    // dead-letter queue after ten receives.
    let sqs = aws_sdk_sqs::Client::new(&baton_local::emulator_sdk_config(&info.aws_endpoint).await);
    let redrive = sqs
        .get_queue_attributes()
        .queue_url(&info.queues.outbound)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap();
    let redrive =
        redrive.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy));
    let redrive: Value = serde_json::from_str(redrive.expect("a redrive policy")).unwrap();
    assert_eq!(redrive["maxReceiveCount"].to_string().trim_matches('"'), "10", "{redrive}");
    assert!(redrive["deadLetterTargetArn"].as_str().is_some_and(|a| a.contains("OutboundDLQ")), "{redrive}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = on_the_queue(&sqs, &info.queues.outbound).await;
        if left == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} messages left on the outbound queue, not the refused one alone"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{prefix} worker logged:\n{}",
        lines.seen.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
    );
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

/// The saga fails at shipping: the worker answers both compensation tasks, last step first.
async fn the_saga_s_compensations(local: &Local, info: &LocalInfo, key: &str, lines: &mut Lines) {
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
    let undone = |seen: &[Value], step: &str| {
        about(seen, key).iter().any(|l| {
            l["task_id"].as_str().is_some_and(|id| id.contains(&format!("/{step}/undo")))
                && l["type"] == "baton.compensation.requested"
                && l["answer"] == "applied"
        })
    };
    lines
        .until("both compensations applied", |seen| undone(seen, "payment") && undone(seen, "reserve-stock"))
        .await;
    eventually_trace(local, key, "compensated", |t| t["record"]["state"] == "compensated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_worker_answers_every_documented_answer_against_baton_local() {
    a_worker_answers_every_documented_answer("py", |local| {
        let python = std::env::var("BATON_PYTHON")
            .unwrap_or_else(|_| root().join(".venv/bin/python").display().to_string());
        let mut child = tokio::process::Command::new(python)
            .arg(root().join("examples/python-worker/worker.py"))
            .arg("--local")
            .arg(&local.info_path)
            .args(["--wait", "1"])
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
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_answers_every_documented_answer_against_baton_local() {
    a_worker_answers_every_documented_answer("rs", |local| {
        let settings = baton_example_worker::Settings::from_local(&local.info_path).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let worker = baton_example_worker::Worker::new(settings).await.unwrap();
            loop {
                for handled in worker.poll(1).await.unwrap() {
                    if tx.send(serde_json::to_value(handled).unwrap()).is_err() {
                        return;
                    }
                }
            }
        });
        Lines { rx, seen: Vec::new() }
    })
    .await;
}
