//! `baton trace --html` in a real browser: headless Chromium renders the page of a trace of every
//! kind, each made by driving a whole baton on the emulator (this process) as its users would,
//! and the DOM is held against the `baton.trace/v1` document `--json` prints for the same key.
//! Screenshots go to `target/screens/` (`make test` prints their paths).
//!
//! Needs the emulator and Chromium: `make test`, or `tools/with-emulator.sh cargo test -p
//! baton-cli --test browser` after `make tools`.

use std::path::{Path, PathBuf};

use baton_core::domain::lifecycle::{Record, State, Wait};
use baton_tests::browser::{Browser, Html, only_text, screens_dir, select, text, text_in};
use serde_json::{Value, json};

mod common;
use baton_tests::{SAGA, compensated};
use common::{CONFIG, Stack, placed, stack_with};

/// order-review with a review that times out after 2 seconds. (Its own stack: the template
/// declares a state machine for each workflow of the sample only.)
fn quick_timeout() -> String {
    CONFIG.replace("timeout: 1h\n      - name: payment", "timeout: 2s\n      - name: payment")
}

/// order-review with a review reminded of after 10 minutes and escalated to the leads after 20.
fn with_notices() -> String {
    CONFIG.replace(
        "timeout: 1h\n      - name: payment",
        "timeout: 1h\n        remind: { after: 10m }\n        escalate: [{ after: 20m, queue: leads }]\n      - name: payment",
    )
}

/// order-review with a review that retries (two attempts, a one-second backoff), then a
/// parallel group whose `fraud-check` branch retries the same way, and whose `address-check`
/// branch is optional.
fn with_retry() -> String {
    let group = "      - parallel:\n          name: checks\n          branches:\n            \
                 - name: fraud-check\n              task: { title: \"Fraud check {key}\", queue: fraud }\n              \
                 requires: [fraud_score]\n              timeout: 1h\n              retry: { attempts: 2, backoff: 1s }\n            \
                 - name: credit-check\n              requires: [credit_ok]\n              timeout: 1h\n            \
                 - name: address-check\n              requires: [address_ok]\n              timeout: 1h\n              \
                 optional: true\n";
    CONFIG.replace(
        "timeout: 1h\n      - name: payment",
        &format!("timeout: 1h\n        retry: {{ attempts: 2, backoff: 1s }}\n{group}      - name: payment"),
    )
}

fn callback(key: &str, step: &str, outcome: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": outcome, "data": data})
}

async fn answered(stack: &Stack, id: &str, body: &Value, status: u16) {
    let (got, answer) = stack.system.callback(id, body).await;
    assert_eq!(got, status, "{id}: {answer}");
}

async fn state_of(stack: &Stack, workflow: &str, key: &str, state: State) {
    stack
        .system
        .until(&format!("{workflow}/{key} {state}"), || async {
            stack.system.record(workflow, key).await.filter(|r| r.state == state).map(|_| ())
        })
        .await;
}

/// group-retried: the review approved, the group's `fraud-check` branch fails its first attempt,
/// and its second runs.
async fn retry_a_branch(stack: &Stack) {
    let (system, key) = (&stack.system, "group-retry-1");
    system.send_event(&placed(key)).await;
    state_of(stack, "order-review", key, State::Waiting { step: 0 }).await;
    let approve = callback(key, "manual-review", "succeeded", json!({"decision": "approve"}));
    answered(stack, "cb-group-retry-1-review", &approve, 200).await;
    let reached =
        |r: &Record| r.state == State::Waiting { step: 1 } && r.branches().all(|b| b.token.is_some());
    system.record_until("order-review", key, "every branch reached", reached).await;
    let mut down = callback(key, "fraud-check", "failed", json!({}));
    down["error"] = json!("ScorerDown");
    down["cause"] = json!("the fraud scorer did not answer");
    answered(stack, "cb-group-retry-1-fraud", &down, 200).await;
    let fraud = |r: &Record| r.wait(1).cloned().expect("the fraud-check branch");
    let r = system.record("order-review", key).await.expect("the record");
    let due = fraud(&r).task_due().expect("the branch's second attempt due");
    system.sweep(due.max(time::OffsetDateTime::now_utc())).await;
    system
        .record_until("order-review", key, "the branch's second attempt", |r| {
            fraud(r).attempt() == 2 && fraud(r).task_due().is_none()
        })
        .await;
    let shown = stack.baton(&["trace", "order-review", key]).await.ok();
    println!("baton trace of a parallel branch on its second attempt:\n{shown}");
    assert!(
        shown.contains("              attempt 1 failed ScorerDown (the fraud scorer did not answer) "),
        "{shown}"
    );
    assert!(shown.contains("              attempt 2 running\n"), "{shown}");
}

/// degraded: the group's optional `address-check` branch fails, the others succeed, and the
/// payment completes the run without it.
async fn degrade_a_group(stack: &Stack) {
    let key = "degraded-1";
    stack.system.send_event(&placed(key)).await;
    state_of(stack, "order-review", key, State::Waiting { step: 0 }).await;
    let approve = callback(key, "manual-review", "succeeded", json!({"decision": "approve"}));
    answered(stack, "cb-degraded-1-review", &approve, 200).await;
    let reached =
        |r: &Record| r.state == State::Waiting { step: 1 } && r.branches().all(|b| b.token.is_some());
    stack.system.record_until("order-review", key, "every branch reached", reached).await;
    let mut unknown = callback(key, "address-check", "failed", json!({}));
    unknown["error"] = json!("AddressUnknown");
    unknown["cause"] = json!("the address service does not know the street");
    answered(stack, "cb-degraded-1-address", &unknown, 200).await;
    answered(
        stack,
        "cb-degraded-1-fraud",
        &callback(key, "fraud-check", "succeeded", json!({"fraud_score": 3})),
        200,
    )
    .await;
    answered(
        stack,
        "cb-degraded-1-credit",
        &callback(key, "credit-check", "succeeded", json!({"credit_ok": true})),
        200,
    )
    .await;
    state_of(stack, "order-review", key, State::Waiting { step: 4 }).await;
    let paid = callback(key, "payment", "succeeded", json!({"payment_ref": "pay-d"}));
    answered(stack, "cb-degraded-1-paid", &paid, 200).await;
    state_of(stack, "order-review", key, State::Degraded).await;
}

/// What each kind of trace must show: the state label, and the step highlighted (`None`: none).
struct Case {
    name: &'static str,
    workflow: &'static str,
    key: &'static str,
    state: &'static str,
    current: Option<&'static str>,
    /// The states the execution went through before the current one, marked passed.
    passed: &'static [&'static str],
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "a browser scenario reads as one story, step by step")]
async fn browser_trace_pages_of_every_kind_show_their_whole_document() {
    let browser = Browser::find();
    let stack = stack_with(CONFIG).await;
    let system = &stack.system;
    let approve = || json!({"decision": "approve"});

    // succeeded: both steps done by callbacks.
    system.send_event(&placed("ok-1")).await;
    state_of(&stack, "order-review", "ok-1", State::Waiting { step: 0 }).await;
    answered(&stack, "cb-ok-1-review", &callback("ok-1", "manual-review", "succeeded", approve()), 200).await;
    state_of(&stack, "order-review", "ok-1", State::Waiting { step: 1 }).await;
    let paid = callback("ok-1", "payment", "succeeded", json!({"payment_ref": "pay-1"}));
    answered(&stack, "cb-ok-1-paid", &paid, 200).await;
    state_of(&stack, "order-review", "ok-1", State::Succeeded).await;

    // failed: the review fails the step.
    system.send_event(&placed("bad-1")).await;
    state_of(&stack, "order-review", "bad-1", State::Waiting { step: 0 }).await;
    let mut rejected = callback("bad-1", "manual-review", "failed", json!({}));
    rejected["error"] = json!("Rejected");
    rejected["cause"] = json!("the reviewer refused the order");
    answered(&stack, "cb-bad-1", &rejected, 200).await;
    state_of(&stack, "order-review", "bad-1", State::Failed).await;

    // compensated: shipping fails after reserve-stock and payment completed; both are undone.
    let saga = stack_with(SAGA).await;
    compensated(&saga.system, "undo-1").await;

    // timed_out: nobody answers within the review's 2 seconds.
    assert_ne!(quick_timeout(), CONFIG, "the review's timeout is shortened");
    let quick = stack_with(&quick_timeout()).await;
    quick.system.send_event(&placed("slow-1")).await;
    state_of(&quick, "order-review", "slow-1", State::TimedOut).await;

    // retried: the review's first attempt fails, its second runs.
    assert_ne!(with_retry(), CONFIG, "the review retries");
    let retried = stack_with(&with_retry()).await;
    retried.system.send_event(&placed("retry-1")).await;
    state_of(&retried, "order-review", "retry-1", State::Waiting { step: 0 }).await;
    let mut unavailable = callback("retry-1", "manual-review", "failed", json!({}));
    unavailable["error"] = json!("ReviewerUnavailable");
    unavailable["cause"] = json!("the reviewer's system timed out");
    answered(&retried, "cb-retry-1-first", &unavailable, 200).await;
    let due = retried
        .system
        .record("order-review", "retry-1")
        .await
        .and_then(|r| r.step_wait().and_then(Wait::task_due));
    retried.system.sweep(due.expect("a second attempt due").max(time::OffsetDateTime::now_utc())).await;
    retried
        .system
        .until("retry-1's second attempt", || async {
            let r = retried.system.record("order-review", "retry-1").await?;
            let w = r.step_wait()?;
            (w.attempt() == 2 && w.task_due().is_none()).then_some(())
        })
        .await;

    let shown = retried.baton(&["trace", "order-review", "retry-1"]).await.ok();
    println!("baton trace of a step on its second attempt:\n{shown}");
    assert!(
        shown.contains("  attempts  1 failed ReviewerUnavailable (the reviewer's system timed out) "),
        "{shown}"
    );
    assert!(shown.contains("            2 running\n"), "{shown}");
    retry_a_branch(&retried).await;
    degrade_a_group(&retried).await;

    // escalated: the review's reminder and its first level are behind it (a sweep half an hour
    // on): the page shows who was asked when.
    assert_ne!(with_notices(), CONFIG, "the review is reminded and escalated");
    let asked = stack_with(&with_notices()).await;
    asked.system.send_event(&placed("asked-1")).await;
    state_of(&asked, "order-review", "asked-1", State::Waiting { step: 0 }).await;
    asked.system.sweep(time::OffsetDateTime::now_utc() + time::Duration::minutes(30)).await;
    asked
        .system
        .until("asked-1's reminder and level behind it", || async {
            let r = asked.system.record("order-review", "asked-1").await?;
            (r.step_wait()?.notified == 2).then_some(())
        })
        .await;

    // cancelled: by an operator, while the review waits.
    system.send_event(&placed("stop-1")).await;
    state_of(&stack, "order-review", "stop-1", State::Waiting { step: 0 }).await;
    stack.baton(&["cancel", "order-review", "stop-1", "--reason", "customer withdrew"]).await.ok();
    state_of(&stack, "order-review", "stop-1", State::Cancelled).await;

    // Only early callbacks, no record: nothing started this key yet.
    answered(
        &stack,
        "cb-early-only",
        &callback("early-only-1", "manual-review", "succeeded", approve()),
        202,
    )
    .await;

    // Several generations: one run to the end, then a second start.
    system.send_event(&placed("again-1")).await;
    state_of(&stack, "order-review", "again-1", State::Waiting { step: 0 }).await;
    stack.baton(&["cancel", "order-review", "again-1", "--reason", "first run withdrawn"]).await.ok();
    state_of(&stack, "order-review", "again-1", State::Cancelled).await;
    let second = json!({"specversion": "1.0", "id": "placed-again-1-second", "source": "shop", "type": "order.placed",
        "subject": "again-1", "data": {"total": 2000}});
    system.send_event(&second.to_string()).await;
    system
        .until("again-1 in its second generation", || async {
            system
                .record("order-review", "again-1")
                .await
                .filter(|r| r.generation == 2 && r.state == State::Waiting { step: 0 })
                .map(|_| ())
        })
        .await;

    // Early callbacks, a duplicate and a late ignored callback: the review arrives before the
    // order (buffered, then applied when the step waits), and again, byte for byte (answered
    // from its receipt); the shop sends the order twice under two ids (the second is ignored,
    // already running); the payment completes it; a late review correction is ignored.
    let early = callback("story-1", "manual-review", "succeeded", approve());
    answered(&stack, "cb-story-1-review", &early, 202).await;
    let (status, again) = system.callback("cb-story-1-review", &early).await;
    assert_eq!(
        (status, again["status"].as_str(), again["duplicate"].as_bool()),
        (200, Some("buffered"), Some(true)),
        "{again}"
    );
    system.send_event(&placed("story-1")).await;
    state_of(&stack, "order-review", "story-1", State::Waiting { step: 1 }).await;
    let twice = json!({"specversion": "1.0", "id": "placed-story-1-resent", "source": "shop", "type": "order.placed",
        "subject": "story-1", "data": {"total": 2000}});
    system.send_event(&twice.to_string()).await;
    let paid = callback("story-1", "payment", "succeeded", json!({"payment_ref": "pay-9"}));
    answered(&stack, "cb-story-1-paid", &paid, 200).await;
    state_of(&stack, "order-review", "story-1", State::Succeeded).await;
    let late = callback("story-1", "manual-review", "succeeded", json!({"decision": "reject"}));
    let (status, answer) = system.callback("cb-story-1-late", &late).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("ignored")), "{answer}");
    system
        .until("the second order.placed ledgered", || async {
            let trace = stack.baton(&["trace", "order-review", "story-1", "--json"]).await.json();
            let timeline = trace["timeline"].as_array().cloned().unwrap_or_default();
            timeline.iter().any(|e| e["reason"] == "already_running").then_some(())
        })
        .await;

    let cases = [
        Case {
            name: "succeeded",
            workflow: "order-review",
            key: "ok-1",
            state: "succeeded",
            current: Some("Report succeeded"),
            passed: &["manual-review", "payment"],
        },
        Case {
            name: "failed",
            workflow: "order-review",
            key: "bad-1",
            state: "failed",
            current: Some("Failed"),
            passed: &["manual-review", "Report failed"],
        },
        Case {
            name: "timed-out",
            workflow: "order-review",
            key: "slow-1",
            state: "timed_out",
            current: Some("Timed out"),
            passed: &["manual-review", "Report timed out"],
        },
        Case {
            name: "retried",
            workflow: "order-review",
            key: "retry-1",
            state: "waiting{0}",
            current: Some("manual-review"),
            passed: &[],
        },
        Case {
            name: "group-retried",
            workflow: "order-review",
            key: "group-retry-1",
            state: "waiting{1}",
            current: Some("checks"),
            passed: &["manual-review"],
        },
        Case {
            name: "degraded",
            workflow: "order-review",
            key: "degraded-1",
            state: "degraded",
            current: Some("Report succeeded"),
            passed: &["manual-review", "checks", "payment"],
        },
        Case {
            name: "compensated",
            workflow: "order-review",
            key: "undo-1",
            state: "compensated",
            current: Some("Compensation ended"),
            passed: &[
                "reserve-stock",
                "payment",
                "shipping",
                "Undo payment",
                "Undo reserve-stock",
                "Report compensation ended",
            ],
        },
        Case {
            name: "escalated",
            workflow: "order-review",
            key: "asked-1",
            state: "waiting{0}",
            current: Some("manual-review"),
            passed: &[],
        },
        Case {
            name: "cancelled",
            workflow: "order-review",
            key: "stop-1",
            state: "cancelled",
            current: Some("manual-review"),
            passed: &[],
        },
        Case {
            name: "early-only",
            workflow: "order-review",
            key: "early-only-1",
            state: "none",
            current: None,
            passed: &[],
        },
        Case {
            name: "generations",
            workflow: "order-review",
            key: "again-1",
            state: "waiting{0}",
            current: Some("manual-review"),
            passed: &[],
        },
        Case {
            name: "early-duplicate-late",
            workflow: "order-review",
            key: "story-1",
            state: "succeeded",
            current: Some("Report succeeded"),
            passed: &["manual-review", "payment"],
        },
    ];
    let screens = screens_dir();
    for case in &cases {
        let stack = match case.name {
            "timed-out" => &quick,
            "retried" | "group-retried" | "degraded" => &retried,
            "compensated" => &saga,
            "escalated" => &asked,
            _ => &stack,
        };
        // A state machine reports the end, then ends: the page is drawn once the execution has.
        let doc = stack
            .system
            .until(&format!("{}'s execution to close", case.key), || async {
                let doc = stack.baton(&["trace", case.workflow, case.key, "--json"]).await.json();
                let terminal = doc["record"]["terminal"] == true;
                let running = doc["executions"]
                    .as_array()
                    .and_then(|e| e.last())
                    .is_some_and(|e| e["status"] == "RUNNING");
                (!terminal || !running).then_some(doc)
            })
            .await;
        let file = screens.join(format!("trace-{}.html", case.name));
        let out =
            stack.baton(&["trace", case.workflow, case.key, "--html", &file.display().to_string()]).await;
        out.ok();
        assert!(out.stderr().contains(&format!("wrote {}", file.display())), "{}", out.stderr());
        check_trace_page(&browser, &file, &doc, case);
        // The page as it opens: the header, the overview and the executions.
        for width in [1280, 800] {
            let png = screens.join(format!("trace-{}-{width}.png", case.name));
            browser.screenshot(&url(&file), &png, width, 1000);
            println!("screenshot: {}", png.display());
        }
    }

    // The story's details: the early review's receipt, with the answer its sender got, and
    // what it is tied to.
    let doc = stack.baton(&["trace", "order-review", "story-1", "--json"]).await.json();
    let timeline = doc["timeline"].as_array().unwrap();
    let receipt =
        timeline.iter().position(|e| e["kind"] == "receipt" && e["input_id"] == "cb-story-1-review").unwrap();
    let file = screens.join("trace-early-duplicate-late.html");
    let dom = browser.dom(&format!("{}#entry-{receipt}", url(&file)), 1280);
    // The same callback sent again, answered from the receipt, is counted there.
    assert_eq!(timeline[receipt]["repeats"], 1, "{}", timeline[receipt]);
    assert!(timeline[receipt]["last_repeat_at"].is_string(), "{}", timeline[receipt]);
    let shown = only_text(&dom, &format!(".entry[data-index=\"{receipt}\"]"));
    assert!(shown.contains("answered 202 buffered, sent again once"), "{shown}");
    let details = only_text(&dom, "#details");
    assert!(details.contains("The answer the sender got (HTTP 202)"), "{details}");
    assert!(details.contains("\"status\": \"buffered\""), "{details}");
    let related = select(&dom, "#details .related-list li").iter().map(text).collect::<Vec<_>>();
    assert!(related.iter().any(|r| r.contains("input cb-story-1-review caused advancing{0}")), "{related:?}");
    let inbox = timeline
        .iter()
        .position(|e| e["kind"] == "buffered" && e["input_id"] == "cb-story-1-review")
        .unwrap();
    let dom = browser.dom(&format!("{}#entry-{inbox}", url(&file)), 1280);
    let related = select(&dom, "#details .related-list li").iter().map(text).collect::<Vec<_>>();
    assert!(
        related.iter().any(|r| r.contains("early input applied when its step began waiting")),
        "{related:?}"
    );
    let marked = select(&dom, ".entry.related");
    assert!(!marked.is_empty(), "the entries it is tied to are marked in the timeline");
    // The transition that completed the review, and the execution event where its resume moved
    // the execution on.
    let completed = timeline
        .iter()
        .position(|e| e["kind"] == "transition" && e["cause"] == "complete" && e["to"] == "advancing{0}")
        .unwrap();
    let dom = browser.dom(&format!("{}#entry-{completed}", url(&file)), 1280);
    let related = select(&dom, "#details .related-list li").iter().map(text).collect::<Vec<_>>();
    assert!(related.iter().any(|r| r.contains("the resume moved the execution on")), "{related:?}");
    let resumed = timeline
        .iter()
        .enumerate()
        .skip(completed)
        .find(|(_, e)| e["kind"] == "execution_event" && e["event_type"] == "TaskSucceeded")
        .map(|(i, _)| i)
        .unwrap();
    let tied = select(&dom, &format!(".entry.related[data-index=\"{resumed}\"]"));
    assert_eq!(tied.len(), 1, "the execution's TaskSucceeded is marked as tied to it");
    quick.system.stop().await;
    asked.system.stop().await;
    retried.system.stop().await;
    stack.system.stop().await;
}

/// The overview holds the document: a row per step, group, branch and compensation in the
/// graph's order, each in its state; every task and input that names one marked on its row; the
/// timeline with Step Functions' events folded under their state; and no word broken.
fn check_overview(dom: &Html, doc: &Value, what: &str) {
    let broken =
        select(dom, "body").first().and_then(|b| b.value().attr("data-broken-words")).map(str::to_owned);
    assert_eq!(broken.as_deref(), Some("[]"), "{what}: words broken across lines");
    let Some(states) = doc["graph"]["states"].as_array() else {
        return assert_eq!(select(dom, ".ov-row").len(), 0, "{what}");
    };
    let record = &doc["record"];
    let undos = record["compensation"]["steps"].as_array().cloned().unwrap_or_default();
    let mut expected: Vec<(String, String)> = Vec::new();
    for s in states {
        let name = s["name"].as_str().unwrap_or_default();
        if let Some(u) = undos.iter().find(|u| name.strip_prefix("Undo ") == u["name"].as_str()) {
            expected.push((name.to_owned(), u["state"].as_str().unwrap_or_default().to_owned()));
        } else if let Some(branches) = s["branches"].as_array().filter(|b| !b.is_empty()) {
            expected.push((name.to_owned(), String::new()));
            for g in branches {
                let branch = g["start_at"].as_str().unwrap_or_default();
                let state = record["branches"].as_array().into_iter().flatten().find(|b| b["name"] == branch);
                let missed = record["missed"].as_array().into_iter().flatten().any(|m| m == branch);
                let state = state.and_then(|b| b["state"].as_str()).or(missed.then_some("missed"));
                expected.push((branch.to_owned(), state.unwrap_or_default().to_owned()));
            }
        } else if s["step"].is_u64() && s["type"] == "Task" {
            expected.push((name.to_owned(), step_state(doc, s["step"].as_u64().unwrap_or_default())));
        }
    }
    let rows = select(dom, ".ov-row");
    let shown: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.value().attr("data-row").unwrap_or_default().to_owned(),
                r.value().attr("data-state").unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(shown.len(), expected.len(), "{what}: a row per step, branch and compensation: {shown:?}");
    for ((name, state), (row, drawn)) in expected.iter().zip(&shown) {
        assert_eq!(name, row, "{what}: the rows in the graph's order");
        assert!(state.is_empty() || state == drawn, "{what}: {name} is {state}, drawn {drawn}");
    }
    // Every input that names a step, and every task, on a row.
    let timeline = doc["timeline"].as_array().cloned().unwrap_or_default();
    let generation = record["generation"].as_u64();
    let this_run = |e: &Value| e["generation"].as_u64().is_none() || e["generation"].as_u64() == generation;
    let inputs = timeline
        .iter()
        .filter(|e| {
            this_run(e)
                && (e["answer"]["step"].is_string() && e["kind"] == "receipt" || e["kind"] == "buffered")
        })
        .count();
    let tasks = timeline.iter().filter(|e| this_run(e) && e["kind"] == "task_created").count();
    let sum =
        |attr: &str| rows.iter().filter_map(|r| r.value().attr(attr)?.parse::<usize>().ok()).sum::<usize>();
    if record.is_object() {
        assert_eq!(
            (sum("data-inputs"), sum("data-tasks")),
            (inputs, tasks),
            "{what}: inputs and tasks marked"
        );
    }
    // Step Functions' per-state events folded under their state: fewer rows than entries.
    let folded = select(dom, "details.fold .entry");
    assert!(folded.iter().all(|e| e.value().attr("data-kind") == Some("execution_event")), "{what}");
    let events = timeline.iter().filter(|e| e["kind"] == "execution_event").count();
    let row_heads = select(dom, ".timeline .time[role=rowheader]").len();
    assert_eq!(row_heads + folded.len(), timeline.len(), "{what}: each entry a row, or folded under one");
    if events > 2 {
        assert!(!folded.is_empty(), "{what}: the execution's events folded");
    }
}

/// A forward step's state as the record's transitions say: how it left its wait, or where it
/// stands (what the overview draws for it).
fn step_state(doc: &Value, step: u64) -> String {
    let record = &doc["record"];
    if record["terminal"] == false && record["step"].as_u64() == Some(step) {
        return record["state"].as_str().unwrap_or_default().split('{').next().unwrap_or_default().to_owned();
    }
    let waiting = format!("waiting{{{step}}}");
    let left = doc["timeline"].as_array().into_iter().flatten().find_map(|e| {
        let leaves = e["kind"] == "transition" && e["from"] == waiting.as_str() && e["to"] != e["from"];
        let state = match e["cause"].as_str()? {
            "complete" => "succeeded",
            "fail_step" | "report_failed" => "failed",
            "report_timed_out" => "timed_out",
            "cancel" => "cancelled",
            _ => return None,
        };
        leaves.then_some(state)
    });
    left.unwrap_or_default().to_owned()
}

fn url(file: &Path) -> String {
    format!("file://{}", file.display())
}

/// The page shows the document: its state, every timeline entry in its lane, the step
/// highlighted, labels beside colours, and nothing wider than an 800-pixel window.
#[expect(clippy::too_many_lines, reason = "a browser scenario reads as one story, step by step")]
fn check_trace_page(browser: &Browser, file: &PathBuf, doc: &Value, case: &Case) {
    let html = std::fs::read_to_string(file).unwrap();
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "{}: fetches nothing", case.name);
    for width in [1280, 800] {
        // With the full timeline open (an entry selected), so that every word on the page is drawn.
        let dom = browser.dom(&format!("{}#entry-0", url(file)), width);
        let what = format!("{} at {width} px", case.name);
        check_overview(&dom, doc, &what);
        assert_eq!(select(&dom, "body[data-rendered=true]").len(), 1, "{what}: the script ran to the end");
        let state = select(&dom, "#state [data-state]");
        assert_eq!(state.len(), 1, "{what}");
        assert_eq!(state[0].value().attr("data-state"), Some(case.state), "{what}");
        if case.state != "none" {
            assert!(
                text(&state[0]).starts_with(case.state),
                "{what}: the state in words: {}",
                text(&state[0])
            );
            assert_eq!(only_text(&dom, "#generation"), doc["record"]["generation"].to_string(), "{what}");
        }
        // A retried step: each failed attempt, and the one running.
        let failed = doc["record"]["failed_attempts"].as_array().map_or(0, Vec::len);
        let attempts = select(&dom, "#attempts .attempt");
        assert_eq!(attempts.len(), if failed == 0 { 0 } else { failed + 1 }, "{what}: every attempt shown");
        for (a, shown) in doc["record"]["failed_attempts"].as_array().into_iter().flatten().zip(&attempts) {
            let error = a["error"].as_str().unwrap_or_default();
            assert!(
                text(shown).contains(error),
                "{what}: attempt {} with its error: {}",
                a["attempt"],
                text(shown)
            );
        }
        if case.name == "retried" {
            assert_eq!(failed, 1, "{what}");
            assert!(attempts.last().is_some_and(|a| text(a) == "2 running"), "{what}");
        }
        // Who was asked when: the task on its queue, then each reminder and level behind it.
        let again = doc["record"]["asked"]["again"].as_array().cloned().unwrap_or_default();
        let rows = select(&dom, "#asked div");
        assert_eq!(rows.len(), if again.is_empty() { 0 } else { again.len() + 1 }, "{what}: who was asked");
        for (n, row) in again.iter().zip(rows.iter().skip(1)) {
            let queue = n["queue"].as_str().unwrap_or_default();
            assert!(text(row).contains(queue), "{what}: {n} shown as {}", text(row));
        }
        if case.name == "escalated" {
            assert!(text(&rows[0]).ends_with("risk-review the task"), "{what}: {}", text(&rows[0]));
            assert!(text(&rows[1]).ends_with("risk-review reminder 1"), "{what}: {}", text(&rows[1]));
            assert!(text(&rows[2]).ends_with("leads level 1"), "{what}: {}", text(&rows[2]));
        }
        // A retried branch: the same, in its box of the graph.
        for b in doc["record"]["branches"].as_array().into_iter().flatten() {
            let name = b["name"].as_str().unwrap_or_default();
            let failed = b["failed_attempts"].as_array().map_or(0, Vec::len);
            let shown = select(&dom, &format!(".graph-branch[data-name=\"{name}\"] .attempt"));
            assert_eq!(
                shown.len(),
                if failed == 0 { 0 } else { failed + 1 },
                "{what}: {name}'s attempts shown"
            );
            if case.name == "group-retried" && name == "fraud-check" {
                assert!(text(&shown[0]).starts_with("1 failed ScorerDown"), "{what}: {}", text(&shown[0]));
                assert_eq!(shown.last().map(text).as_deref(), Some("2 running"), "{what}");
            }
        }
        // A compensation: each step of its plan with its state, and each compensation's state
        // in the graph.
        let undos = doc["record"]["compensation"]["steps"].as_array().cloned().unwrap_or_default();
        let shown = select(&dom, "#compensation .undo");
        assert_eq!(shown.len(), undos.len(), "{what}: every step of the plan shown");
        for (u, s) in undos.iter().zip(&shown) {
            assert_eq!(s.value().attr("data-state"), u["state"].as_str(), "{what}: {u}");
            let undo = format!(".graph-state[data-name=\"Undo {}\"]", u["name"].as_str().unwrap_or_default());
            if u["state"] != "skipped" {
                let drawn = select(&dom, &undo);
                assert_eq!(
                    drawn.first().and_then(|d| d.value().attr("data-undo")),
                    u["state"].as_str(),
                    "{what}: {undo}"
                );
            }
        }
        if case.name == "compensated" {
            assert_eq!(shown.len(), 2, "{what}");
            assert!(only_text(&dom, "#compensation").contains("after the run failed (NoCarrier)"), "{what}");
        }
        let timeline = doc["timeline"].as_array().unwrap();
        let entries = select(&dom, ".entry");
        assert_eq!(entries.len(), timeline.len(), "{what}: one entry per timeline entry");
        for (i, entry) in timeline.iter().enumerate() {
            let shown = select(&dom, &format!(".entry[data-index=\"{i}\"]"));
            assert_eq!(shown.len(), 1, "{what}: entry {i} ({entry})");
            let lane = shown[0].value().attr("data-lane");
            assert_eq!(lane, entry["source"].as_str(), "{what}: entry {i} in its source's lane");
            assert_eq!(shown[0].value().attr("data-kind"), entry["kind"].as_str(), "{what}: entry {i}");
        }
        for lane in ["record", "execution", "task", "receipt", "inbox", "ledger"] {
            let expected = timeline.iter().filter(|e| e["source"] == lane).count();
            assert_eq!(
                select(&dom, &format!(".entry[data-lane={lane}]")).len(),
                expected,
                "{what}: lane {lane}"
            );
            assert_eq!(
                select(&dom, &format!(".lane-head[data-lane={lane}]")).len(),
                1,
                "{what}: lane {lane} named"
            );
        }
        let current: Vec<String> = select(&dom, ".graph-state[data-status=current]")
            .iter()
            .map(|s| s.value().attr("data-name").unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            current,
            case.current.map(|c| vec![c.to_owned()]).unwrap_or_default(),
            "{what}: the step highlighted"
        );
        let passed: Vec<String> = select(&dom, ".graph-state[data-status=passed]")
            .iter()
            .map(|s| s.value().attr("data-name").unwrap_or_default().to_owned())
            .collect();
        assert_eq!(passed, case.passed, "{what}: the states passed are marked so");
        let states = select(&dom, ".graph-state");
        assert_eq!(
            states.len(),
            doc["graph"]["states"].as_array().map_or(0, Vec::len),
            "{what}: every state drawn"
        );
        for s in &states {
            let label = text_in(s, ":scope > .status-label");
            assert!(
                ["(current)", "(passed)", "(not reached)", "(ended here)"].contains(&label.as_str()),
                "{what}: each state says where it stands in words, not colour alone: {label}"
            );
        }
        let widest: u32 = select(&dom, "body")
            .first()
            .and_then(|b| b.value().attr("data-scroll-width"))
            .and_then(|w| w.parse().ok())
            .unwrap_or(u32::MAX);
        assert!(widest <= width, "{what}: the page is {widest} px wide in a {width} px window");
    }
}
