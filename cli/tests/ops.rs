//! `baton send`, `callback`, `trace`, `status` and `owes`, run as an operator runs them: the real binary,
//! pointed by `--local` at a whole baton running on the emulator (in this test process), exactly
//! as `make run` leaves `.baton/local.json` behind.
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p baton-cli`.

use std::time::Duration;

use baton_core::domain::lifecycle::State;
use baton_tests::system::{System, eventually};
use serde_json::json;
use time::OffsetDateTime;

const WAIT: Duration = Duration::from_secs(90);

mod common;
use common::{Run, TARGET_VARS, placed, stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_starts_a_workflow_refuses_an_invalid_event_and_status_counts_it() {
    let stack = stack().await;

    // Given an event built from flags
    let run = stack
        .baton(&["send", "--type", "order.placed", "--subject", "k1", "--data", r#"{"total": 1500}"#])
        .await;
    // Then both ids are printed and the workflow starts and waits on its first step
    let out = run.ok();
    assert!(out.contains("event id:   evt-") && out.contains("message id: "), "{out}");
    stack.state_is("k1", State::Waiting { step: 0 }).await;

    // Given a file whose event lacks `type`, it is refused before sending, naming the field
    let bad = stack.path("bad.json");
    std::fs::write(&bad, r#"{"specversion": "1.0", "id": "e-1", "source": "shop", "subject": "k9"}"#)
        .unwrap();
    let run = stack.baton(&["send", bad.to_str().unwrap()]).await;
    assert_eq!(run.code(), Some(1), "{}", run.stdout());
    assert!(run.stderr().contains("`type`") && run.stderr().contains("not sent"), "{}", run.stderr());

    // Given a valid event in a file, it is sent as written
    let good = stack.path("good.json");
    std::fs::write(&good, placed("k2")).unwrap();
    assert!(stack.baton(&["send", good.to_str().unwrap()]).await.ok().contains("event id:   placed-k2"));
    stack.state_is("k2", State::Waiting { step: 0 }).await;

    // And given a record waiting an hour past its deadline
    let late = overdue_record(&stack.system, "k-late").await;

    // When status is asked
    let status = stack.baton(&["status", "--json"]).await.json();
    // Then the waiting records are counted and the late one is listed with its step's name
    assert_eq!(status["schema"], "baton.status/v2");
    assert_eq!(status["counts"]["waiting"], 3, "{status}");
    assert_eq!(status["total"], 3, "{status}");
    assert_eq!((status["counted_up_to"].as_u64(), &status["more_than"]), (Some(1_000), &json!([])));
    let overdue = status["overdue"].as_array().unwrap();
    assert_eq!(overdue.len(), 1, "{status}");
    assert_eq!(
        (overdue[0]["key"].as_str(), overdue[0]["step_name"].as_str()),
        (Some("k-late"), Some("manual-review"))
    );
    assert!(overdue[0]["overdue_seconds"].as_i64().unwrap() >= 3600, "{status}");
    assert_eq!(overdue[0]["deadline"].as_str(), Some(late.as_str()));

    let table = stack.baton(&["status"]).await.ok();
    assert!(table.contains("  waiting              3\n"), "{table}");
    // And counted up to a bound below what a state holds, it says "more than"
    let bounded = stack.baton(&["status", "--count-up-to", "2"]).await.ok();
    assert!(bounded.contains("  waiting              more than 2\n"), "{bounded}");
    assert!(bounded.contains("  total                more than 2\n"), "{bounded}");
    assert!(table.lines().any(|l| l.contains("order-review  k-late  manual-review")), "{table}");

    // When the tasks owed are asked: each waiting review's task, on its queue, oldest first
    let owes = stack.baton(&["owes", "--json"]).await.json();
    assert_eq!(
        (owes["schema"].as_str(), owes["more_than"].as_bool()),
        (Some("baton.owes/v1"), Some(false)),
        "{owes}"
    );
    let tasks = owes["tasks"].as_array().unwrap();
    let keys: Vec<&str> = tasks.iter().filter_map(|t| t["key"].as_str()).collect();
    assert_eq!(keys.len(), 3, "{owes}");
    assert_eq!(keys[0], "k-late", "out the longest: {owes}");
    assert!(tasks.iter().all(|t| t["queue"] == "risk-review" && t["step_name"] == "manual-review"), "{owes}");
    // And only the one past its deadline, with --overdue; none on another queue
    let overdue = stack.baton(&["owes", "--overdue", "--json"]).await.json();
    let keys: Vec<&str> =
        overdue["tasks"].as_array().unwrap().iter().filter_map(|t| t["key"].as_str()).collect();
    assert_eq!(keys, ["k-late"], "{overdue}");
    let other = stack.baton(&["owes", "--queue", "payments"]).await.ok();
    assert!(other.starts_with("tasks owed (table ") && other.contains(", queue payments): 0\n"), "{other}");
    let table = stack.baton(&["owes"]).await.ok();
    assert!(table.contains("\nqueue risk-review\n"), "{table}");
    assert!(
        table.lines().any(|l| l.contains("order-review  k-late  manual-review") && l.ends_with("(overdue)")),
        "{table}"
    );
    // And read up to a bound below what the waiting list holds, it says "more than"
    let bounded = stack.baton(&["owes", "--up-to", "2", "--json"]).await.json();
    assert_eq!(
        (bounded["more_than"].as_bool(), bounded["tasks"].as_array().map(Vec::len)),
        (Some(true), Some(2)),
        "{bounded}"
    );
    stack.system.stop().await;
}

/// A record waiting on step 0 whose deadline passed an hour ago. Returns the deadline as `status
/// --json` shows it.
async fn overdue_record(system: &System, key: &str) -> String {
    let deadline = baton_tests::overdue_record(&system.store, &system.config.workflows[0], key).await;
    deadline.format(&time::format_description::well_known::Rfc3339).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn callbacks_are_signed_and_answered_and_trace_tells_the_whole_story() {
    let stack = stack().await;
    stack.system.send_event(&placed("k1")).await;
    stack.state_is("k1", State::Waiting { step: 0 }).await;

    // When a callback completes the first step
    let args = [
        "callback",
        "--workflow",
        "order-review",
        "--key",
        "k1",
        "--step",
        "manual-review",
        "--data",
        r#"{"decision": "approve"}"#,
        "--id",
        "cb-k1",
    ];
    let out = stack.baton(&args).await.ok();
    // Then it was applied
    assert!(out.contains("webhook-id: cb-k1\nHTTP 200\n"), "{out}");
    assert!(out.contains(r#""status": "applied""#), "{out}");
    // And the same callback again gets the first answer, marked duplicate
    let again = stack.baton(&args).await.ok();
    assert!(again.contains("HTTP 200") && again.contains(r#""duplicate": true"#), "{again}");
    // And the same id with another payload is refused, with a non-zero exit
    let mut reused = args;
    reused[8] = r#"{"decision": "reject"}"#;
    let run = stack.baton(&reused).await;
    assert_eq!(run.code(), Some(1));
    assert!(
        run.stdout().contains("HTTP 409") && run.stdout().contains("idempotency_key_reused"),
        "{}",
        run.stdout()
    );
    stack.state_is("k1", State::Waiting { step: 1 }).await;

    // When the record is traced as JSON
    let trace = stack.baton(&["trace", "order-review", "k1", "--json"]).await.json();
    // Then it follows baton.trace/v1, with the record, transitions in order, the task, the receipt
    // and the execution's history
    assert_eq!(trace["schema"], "baton.trace/v1");
    assert_eq!((trace["workflow"].as_str(), trace["key"].as_str()), (Some("order-review"), Some("k1")));
    let record = &trace["record"];
    assert_eq!(
        (record["state"].as_str(), record["step_name"].as_str()),
        (Some("waiting{1}"), Some("payment"))
    );
    assert_eq!(record["generation"], 1);
    assert!(record["token_fingerprint"].as_str().is_some_and(|f| f.starts_with("tok-")), "{record}");
    let timeline = trace["timeline"].as_array().unwrap();
    let of = |source: &str| timeline.iter().filter(|e| e["source"] == source).collect::<Vec<_>>();
    let causes: Vec<&str> = of("record").iter().map(|e| e["cause"].as_str().unwrap()).collect();
    assert_eq!(causes, ["start", "step_ready", "complete", "step_ready"]);
    assert_eq!(of("record")[2]["cause_id"], "cb-k1");
    let tasks = of("task");
    assert_eq!(tasks.len(), 1, "{trace}");
    assert_eq!(
        (tasks[0]["kind"].as_str(), tasks[0]["step_name"].as_str()),
        (Some("task_created"), Some("manual-review"))
    );
    let receipts = of("receipt");
    assert_eq!(receipts.len(), 1, "{trace}");
    assert_eq!(
        (
            receipts[0]["input_id"].as_str(),
            receipts[0]["http_status"].as_u64(),
            receipts[0]["answer_status"].as_str()
        ),
        (Some("cb-k1"), Some(200), Some("applied"))
    );
    let execution = &trace["executions"][0];
    assert_eq!((execution["generation"].as_u64(), execution["status"].as_str()), (Some(1), Some("RUNNING")));
    assert!(!execution["history"].as_array().unwrap().is_empty(), "{execution}");
    assert!(of("execution").iter().any(|e| e["event_type"] == "ExecutionStarted"), "{trace}");
    let times: Vec<&str> = timeline.iter().map(|e| e["at"].as_str().unwrap()).collect();
    let parsed: Vec<OffsetDateTime> = times
        .iter()
        .map(|t| OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).unwrap())
        .collect();
    assert!(parsed.windows(2).all(|w| w[0] <= w[1]), "the timeline is in time order: {times:?}");
    assert!(!trace.to_string().contains(&token_of(&stack.system, "k1").await), "never the token");

    // And the table form shows the same transitions, in the same order
    let table = stack.baton(&["trace", "order-review", "k1"]).await.ok();
    let transitions: Vec<&str> =
        table.lines().filter(|l| l.split_whitespace().nth(1) == Some("record")).collect();
    let expected = [
        "(new) -> pending",
        "pending -> waiting{0}",
        "waiting{0} -> advancing{0}",
        "advancing{0} -> waiting{1}",
    ];
    assert_eq!(transitions.len(), expected.len(), "{table}");
    for (line, want) in transitions.iter().zip(expected) {
        assert!(line.contains(want), "{line} should show {want}\n{table}");
    }
    assert!(table.contains("  state     waiting{1} (payment), generation 1"), "{table}");

    // When nothing at all is stored for a key, trace says so and exits 1
    let run = stack.baton(&["trace", "order-review", "nobody"]).await;
    assert_eq!(run.code(), Some(1));
    assert!(run.stderr().contains("no such workflow record"), "{}", run.stderr());

    // When a callback arrives before its start event, it is buffered (202, exit 0) and traced
    let early = [
        "callback",
        "--workflow",
        "order-review",
        "--key",
        "k-early",
        "--step",
        "manual-review",
        "--data",
        r#"{"decision": "approve"}"#,
    ];
    let out = stack.baton(&early).await.ok();
    assert!(out.contains("HTTP 202") && out.contains(r#""status": "buffered""#), "{out}");
    let trace = stack.baton(&["trace", "order-review", "k-early", "--json"]).await.json();
    assert!(trace["record"].is_null(), "{trace}");
    let sources: Vec<&str> =
        trace["timeline"].as_array().unwrap().iter().map(|e| e["source"].as_str().unwrap()).collect();
    assert!(sources.contains(&"inbox") && sources.contains(&"receipt"), "{trace}");
    assert_eq!(trace["executions"], json!([]));
    stack.system.stop().await;
}

/// The record's live task token, read from the store, to prove it never reaches the output.
async fn token_of(system: &System, key: &str) -> String {
    let record = system.record("order-review", key).await.expect("the record");
    let token = record.step_wait().and_then(|w| w.token.clone());
    token.expect("a waiting record has a token").expose().to_owned()
}

#[tokio::test]
async fn without_a_local_file_or_flags_the_missing_value_is_named() {
    // No emulator needed: the command fails before any request.
    let dir = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"));
    command.args(["status"]).current_dir(dir.path());
    for var in TARGET_VARS {
        command.env_remove(var);
    }
    let run = Run(command.output().await.unwrap());
    assert_eq!(run.code(), Some(1));
    let err = run.stderr();
    for part in ["--table", "BATON_TABLE", "make run", ".baton/local.json"] {
        assert!(err.contains(part), "{err}");
    }
    assert!(!dir.path().join(".baton").exists(), "nothing is written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_plans_saves_and_applies_a_plan_skipping_what_moved_since() {
    let stack = stack().await;
    stack.system.to_intake_dlq(&placed("k-replay")).await;
    let plan_file = stack.path("plan.json");
    let dry = stack.baton(&["replay", "--dlq", "intake", "--save", plan_file.to_str().unwrap()]).await;
    let out = dry.ok();
    assert!(out.contains("safe") && out.contains("absent -> pending"), "{out}");
    assert!(dry.stderr().contains("dry run"), "{}", dry.stderr());
    assert!(stack.system.record("order-review", "k-replay").await.is_none(), "a dry run changes nothing");

    // The record appears through the normal path before the plan is applied.
    stack.system.send_event(&placed("k-replay")).await;
    stack.state_is("k-replay", State::Waiting { step: 0 }).await;
    let applied = stack
        .baton(&["replay", "--dlq", "intake", "--apply", "--plan", plan_file.to_str().unwrap()])
        .await
        .ok();
    assert!(applied.contains("skipped: order-review/k-replay moved since planning"), "{applied}");
    assert!(applied.contains("summary: applied 0, skipped 1"), "{applied}");

    // Planned afresh, the same message is now a duplicate: noop, removed from the DLQ.
    let again = stack.baton(&["replay", "--dlq", "intake", "--apply"]).await.ok();
    assert!(again.contains("summary: applied 0, skipped 0, needs-human 0, noop removed 1"), "{again}");
    assert!(stack.system.drain_queue("IntakeDLQ").await.is_empty());
    stack.system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_refuses_messages_that_need_a_person_unless_forced_and_logs_who_forced() {
    let stack = stack().await;
    stack.system.to_intake_dlq(&placed("k-redrive")).await;
    stack.system.to_intake_dlq("{ not json").await;
    let refused = stack.baton(&["redrive", "--dlq", "intake", "--apply"]).await;
    assert_eq!(refused.code(), Some(1));
    assert!(refused.stderr().contains("1 message(s) need a person"), "{}", refused.stderr());
    assert_eq!(stack.system.queue_depth("IntakeDLQ").await, 2, "nothing moved");

    let forced = stack.baton(&["redrive", "--dlq", "intake", "--apply", "--force"]).await;
    assert!(forced.ok().contains("moved 2 message(s)"), "{}", forced.stdout());
    assert!(forced.stderr().contains("\"event\":\"forced_redrive\""), "{}", forced.stderr());
    assert!(forced.stderr().contains("\"user\""), "{}", forced.stderr());
    // The safe one starts its workflow through the normal intake path; the poison one is
    // dead-lettered again by intake, with its reason.
    stack.state_is("k-redrive", State::Waiting { step: 0 }).await;
    let back = eventually("the poison message back in the DLQ", WAIT, || async {
        let all = stack.system.drain_queue("IntakeDLQ").await;
        (all.len() == 1).then_some(all)
    })
    .await;
    assert_eq!(back[0].body(), Some("{ not json"));
    stack.system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_moves_a_waiting_record_to_cancelled_once() {
    let stack = stack().await;
    stack.system.send_event(&placed("k-cancel")).await;
    stack.state_is("k-cancel", State::Waiting { step: 0 }).await;
    let out =
        stack.baton(&["cancel", "order-review", "k-cancel", "--reason", "customer withdrew"]).await.ok();
    assert!(out.contains("cancelled order-review k-cancel"), "{out}");
    stack.state_is("k-cancel", State::Cancelled).await;
    let again = stack.baton(&["cancel", "order-review", "k-cancel", "--reason", "twice"]).await.ok();
    assert!(again.contains("already cancelled"), "{again}");
    let missing = stack.baton(&["cancel", "order-review", "k-nobody", "--reason", "x"]).await;
    assert_eq!(missing.code(), Some(1));
    assert!(missing.stderr().contains("no such workflow record"), "{}", missing.stderr());
    stack.system.stop().await;
}

/// A reason longer than StopExecution and SendTaskFailure take would make every stop fail: it
/// is refused before anything is written, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reason_longer_than_step_functions_takes_is_refused_before_any_write() {
    let stack = stack().await;
    stack.system.send_event(&placed("k-long")).await;
    stack.state_is("k-long", State::Waiting { step: 0 }).await;
    let reason = "r".repeat(32_769);
    let refused = stack.baton(&["cancel", "order-review", "k-long", "--reason", &reason]).await;
    assert_eq!(refused.code(), Some(1));
    assert!(refused.stderr().contains("at most 32768"), "{}", refused.stderr());
    stack.state_is("k-long", State::Waiting { step: 0 }).await;
    stack.system.stop().await;
}

/// Generation 1 was cancelled before its execution ever started; generation 2 is pending and
/// its execution has not started either (the writes, then a "crash" before any effect). The
/// trace shows the record and its transitions, and leaves the never-started executions out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_leaves_out_executions_that_never_started() {
    use baton_core::domain::lifecycle::{Input, decide};
    let stack = stack().await;
    let engine = stack.system.engine();
    let workflow = engine.config.workflow("order-review").unwrap();
    let key = baton_core::domain::ids::CorrelationKey::parse("k-nostart").unwrap();
    let mut record = None;
    for input in [
        Input::start(baton_core::domain::ids::EventId::parse("evt-a").unwrap()),
        Input::Cancel { reason: "before it started".into() },
        Input::start(baton_core::domain::ids::EventId::parse("evt-b").unwrap()),
    ] {
        let d = decide(&workflow.plan(), (&workflow.name, &key), record.as_ref(), &input, engine.now());
        let write = d.write.expect("a write");
        assert_eq!(engine.store.apply(&write).await.unwrap(), baton_core::ports::store::Applied::Written);
        record = Some(write.to);
    }
    let t = stack.baton(&["trace", "order-review", "k-nostart", "--json"]).await.json();
    assert_eq!(t["record"]["generation"], 2);
    assert_eq!(t["record"]["state"], "pending");
    let to: Vec<&str> = t["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "transition")
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(to, ["pending", "cancelled", "pending"]);
    assert_eq!(t["executions"], json!([]), "no execution was ever started");
    stack.system.stop().await;
}
