//! `baton local` as a user runs it: a subprocess, driven only through public surfaces (an SQS
//! send to the intake queue, signed HTTP callbacks, `baton trace --json`), then stopped with
//! SIGINT. It starts its own emulator, so it needs the pinned tools in `.venv` (`make tools`).

use std::time::{Duration, Instant};

use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::webhook::Secrets;
use baton_tests::http::send_callback;
use serde_json::{Value, json};

mod local_stack;
use local_stack::{Local, eventually_trace, root, transitions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn baton_local_runs_a_whole_workflow_through_its_public_surfaces_and_stops_cleanly() {
    let mut local = Local::start();
    let info = local.info();
    let sdk = baton_local::emulator_sdk_config(&info.aws_endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let secrets = Secrets::parse(&info.webhook_secret).unwrap();
    let callback = |id: &'static str, body: Value| {
        let (url, secrets) = (info.api_url.clone(), &secrets);
        async move { send_callback(&url, secrets, id, &body).await }
    };
    let key = "order-2001";

    // Start, and a duplicate start (the same event delivered twice).
    let placed = json!({"specversion": "1.0", "id": "evt-2001", "source": "shop", "type": "order.placed",
        "subject": key, "data": {"total": 2500}})
    .to_string();
    for _ in 0..2 {
        sqs.send_message().queue_url(&info.queues.intake).message_body(&placed).send().await.unwrap();
    }
    // The step waits, then its task goes out.
    let published = |t: &Value| {
        t["timeline"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["kind"] == "task_created" && e["published"] == true))
    };
    let t = eventually_trace(&local, key, "waiting on the first step, with its task", |t| {
        t["record"]["state"] == "waiting{0}" && published(t)
    })
    .await;
    assert_eq!(t["schema"], "baton.trace/v1");
    assert_eq!(t["record"]["generation"], 1);
    assert_eq!(transitions(&t), ["pending", "waiting{0}"], "one start for two deliveries");
    assert_eq!(t["executions"].as_array().unwrap().len(), 1);
    // The record's `by_due` entry is on its key's shard, as `make run` writes it (docs/DATA_MODEL.md).
    let pk = format!("WF#order-review#{key}");
    let item = aws_sdk_dynamodb::Client::new(&sdk)
        .get_item()
        .table_name(&info.table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.clone()))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("RECORD".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the record item");
    let shard = baton_aws::dynamodb::due_shard(&pk, baton_aws::dynamodb::DEFAULT_DUE_SHARDS);
    assert_eq!(item["due_kind"].as_s().unwrap(), &format!("record#waiting#{shard}"));

    // An early callback: the payment step is not waiting yet.
    let (status, body) = callback(
        "cb-pay",
        json!({"workflow": "order-review", "key": key, "step": "payment", "outcome": "succeeded", "data": {"payment_ref": "pay-9"}}),
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (202, Some("buffered")), "{body}");
    let t = local.trace(key);
    let buffered: Vec<&Value> =
        t["timeline"].as_array().unwrap().iter().filter(|e| e["kind"] == "buffered").collect();
    assert_eq!(buffered.len(), 1);
    assert_eq!(
        (buffered[0]["step_name"].as_str(), buffered[0]["status"].as_str()),
        (Some("payment"), Some("buffered"))
    );

    // The review completes step 0; step 1 waits and its buffered input completes it.
    let (status, body) = callback(
        "cb-review",
        json!({"workflow": "order-review", "key": key, "step": "manual-review", "outcome": "succeeded", "data": {"decision": "approve"}}),
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    // Succeeded, its execution closed after its last report, and the early input's entry
    // settled after it was applied.
    let t = eventually_trace(&local, key, "succeeded", |t| {
        t["record"]["state"] == "succeeded"
            && t["executions"][0]["status"] == "SUCCEEDED"
            && t["timeline"]
                .as_array()
                .is_some_and(|l| l.iter().any(|e| e["kind"] == "buffered" && e["status"] == "applied"))
    })
    .await;
    assert_eq!(
        transitions(&t),
        ["pending", "waiting{0}", "advancing{0}", "waiting{1}", "advancing{1}", "succeeded"],
        "a two-step completion"
    );
    let inbox: Vec<&Value> =
        t["timeline"].as_array().unwrap().iter().filter(|e| e["kind"] == "buffered").collect();
    assert_eq!(inbox[0]["status"], "applied");
    assert_eq!(t["executions"][0]["status"], "SUCCEEDED");

    // A late callback is ignored, with a ledger entry.
    let (status, body) = callback(
        "cb-late",
        json!({"workflow": "order-review", "key": key, "step": "manual-review", "outcome": "succeeded", "data": {"decision": "reject"}}),
    )
    .await;
    assert_eq!(
        (status, body["status"].as_str(), body["reason"].as_str()),
        (200, Some("ignored"), Some("terminal"))
    );
    let t = local.trace(key);
    let ignored: Vec<&Value> =
        t["timeline"].as_array().unwrap().iter().filter(|e| e["kind"] == "ignored").collect();
    assert_eq!(ignored.len(), 1, "{t:#}");
    assert_eq!(
        (ignored[0]["reason"].as_str(), ignored[0]["input_id"].as_str()),
        (Some("terminal"), Some("cb-late"))
    );
    assert_eq!(t["record"]["state"], "succeeded", "a terminal record never changes");

    // Ctrl-C stops baton and the emulator it started.
    let endpoint = info.aws_endpoint.clone();
    assert!(local.interrupt(Duration::from_secs(60)), "baton local did not stop on SIGINT");
    assert!(!local.info_path.exists(), "local.json is removed on the way out");
    let reachable = std::net::TcpStream::connect(endpoint.trim_start_matches("http://")).is_ok();
    assert!(!reachable, "the emulator it started is stopped");
}

/// A workflow change rolled out on a running `baton local`, as an operator does it: the
/// records in flight are counted and the change classified by `baton rollout plan` beforehand
/// (the real binary, against the stack's table), then the config file is deployed again
/// (SIGHUP). The records in flight finish on version 1 with one resume per step; a new start
/// runs version 2; `baton trace` names each record's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn a_workflow_change_is_planned_against_the_live_records_then_deployed_and_the_records_in_flight_finish_on_their_version()
 {
    let v1 = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 1h
      - name: payment
        requires: [payment_ref]
        timeout: 1h
"#;
    let v2 = v1.replace("name: manual-review", "name: risk-review").replace(
        "      - name: payment",
        "      - name: fraud-check\n        requires: [score]\n        timeout: 1h\n      - name: payment",
    );
    let appended = format!("{v1}      - name: archive\n        requires: [archived]\n        timeout: 1h\n");
    let rekeyed = v1.replace("key: /subject", "key: /data/order");
    let removed = v1.replace("order-review:", "other-review:");
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let deployed = file("workflows.yaml", v1);
    let (v1_version, v2_version) = (
        baton_core::domain::config::Config::parse(v1).unwrap().version,
        baton_core::domain::config::Config::parse(&v2).unwrap().version,
    );
    let local = Local::start_with(&["--config", deployed.to_str().unwrap()]);
    let info = local.info();
    let sdk = baton_local::emulator_sdk_config(&info.aws_endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let secrets = Secrets::parse(&info.webhook_secret).unwrap();
    let callback = |key: &str, step: &str, data: Value| {
        let (url, secrets) = (info.api_url.clone(), &secrets);
        let id = format!("cb-{key}-{step}");
        let body = json!({"workflow": "order-review", "key": key, "step": step, "outcome": "succeeded", "data": data});
        async move { send_callback(&url, secrets, &id, &body).await }
    };
    let start = |key: &str| {
        let body = json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "shop",
            "type": "order.placed", "subject": key, "data": {}})
        .to_string();
        let (sqs, url) = (sqs.clone(), info.queues.intake.clone());
        async move { sqs.send_message().queue_url(url).message_body(body).send().await.unwrap() }
    };
    let state_is = |key: &'static str, state: &'static str| {
        let local = &local;
        async move {
            eventually_trace(local, key, state, |t| {
                t["record"]["state"] == state
                    && (state == "succeeded" || !t["record"]["token_fingerprint"].is_null())
            })
            .await
        }
    };

    // Version 1: two orders wait on the review, one was reviewed and waits on payment.
    for key in ["k-a", "k-b", "k-c"] {
        start(key).await;
    }
    for key in ["k-a", "k-b"] {
        state_is(key, "waiting{0}").await;
    }
    state_is("k-c", "waiting{0}").await;
    let (status, body) = callback("k-c", "manual-review", json!({"decision": "approve"})).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{body}");
    state_is("k-c", "waiting{1}").await;

    // The plans, before any deploy, counted from the stack's table.
    let (code, out) = local.rollout_plan(&file("v2.yaml", &v2));
    println!("{out}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("step_renamed") && out.contains("step_inserted"), "{out}");
    assert!(out.contains(&format!("live: 2 record(s) waiting{{0}} on {v1_version}")), "{out}");
    assert!(out.contains(&format!("live: 1 record(s) waiting{{1}} on {v1_version}")), "{out}");
    assert!(out.contains(&format!("live records: order-review on {v1_version}: 3\n")), "{out}");
    assert!(out.ends_with("verdict: safe (exit 0)\n"), "{out}");
    let (code, out) = local.rollout_plan(&file("appended.yaml", &appended));
    println!("{out}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("step_appended"), "{out}");
    let (code, out) = local.rollout_plan(&file("removed.yaml", &removed));
    println!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("breaking") && out.contains("workflow_removed"), "{out}");
    assert!(out.contains(&format!("live: 2 record(s) waiting{{0}} on {v1_version}")), "{out}");
    let (code, out) = local.rollout_plan(&file("rekeyed.yaml", &rekeyed));
    println!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("breaking") && out.contains("key_changed"), "{out}");

    // The deploy: the file changes, SIGHUP.
    std::fs::write(&deployed, &v2).unwrap();
    let reloaded = local.reload();
    assert!(reloaded.contains(&v2_version), "{reloaded}");

    // The records in flight finish on version 1: the review under its old name, then payment,
    // with no fraud check.
    for key in ["k-a", "k-b"] {
        let (status, body) = callback(key, "manual-review", json!({"decision": "approve"})).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{key}: {body}");
        state_is(key, "waiting{1}").await;
    }
    for key in ["k-a", "k-b", "k-c"] {
        let (status, body) = callback(key, "payment", json!({"payment_ref": format!("pay-{key}")})).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{key}: {body}");
    }
    for key in ["k-a", "k-b", "k-c"] {
        let t = state_is(key, "succeeded").await;
        assert_eq!(t["record"]["config_version"], v1_version.as_str(), "{key} finished on version 1");
        assert_eq!(
            transitions(&t),
            ["pending", "waiting{0}", "advancing{0}", "waiting{1}", "advancing{1}", "succeeded"]
        );
        let resumes = t["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["source"] == "execution" && e["event_type"] == "TaskSucceeded")
            .filter(|e| e["detail"].as_str().is_some_and(|d| d.ends_with(".waitForTaskToken")))
            .count();
        assert_eq!(resumes, 2, "{key}: exactly one resume per step");
    }

    // A new start follows version 2, and its trace says so.
    start("k-new").await;
    let t = state_is("k-new", "waiting{0}").await;
    assert_eq!(t["record"]["config_version"], v2_version.as_str());
    for (step, data, next) in [
        ("risk-review", json!({"decision": "approve"}), "waiting{1}"),
        ("fraud-check", json!({"score": 3}), "waiting{2}"),
        ("payment", json!({"payment_ref": "pay-new"}), "succeeded"),
    ] {
        let (status, body) = callback("k-new", step, data).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{step}: {body}");
        state_is("k-new", next).await;
    }
}

/// The console `baton local` serves, in headless Chromium: the overview's counts, waits and
/// recent records with the search, the tasks owed, a record's page (the trace view), and the dead-letter
/// queues' replay plans, with nothing on any page that acts. Screenshots in target/screens/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn browser_the_console_shows_the_local_stack_and_has_nothing_that_acts() {
    use baton_tests::browser::{Browser, Html, only_text, screens_dir, select, text};
    let browser = Browser::find();
    let local = Local::start();
    let info = local.info();
    let console = info.console_url.clone().expect("local.json names the console");
    assert!(console.starts_with("http://127.0.0.1:"), "{console}");
    let line = local.wait_for_line("console", Duration::from_secs(5));
    assert!(line.contains(&console) && line.contains("read-only"), "{line}");
    let sdk = baton_local::emulator_sdk_config(&info.aws_endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let secrets = Secrets::parse(&info.webhook_secret).unwrap();

    // One order waiting on its review, one key with only an early callback, and a poison event.
    let placed = json!({"specversion": "1.0", "id": "evt-c1", "source": "shop", "type": "order.placed",
        "subject": "order-c1", "data": {"total": 2500}});
    sqs.send_message().queue_url(&info.queues.intake).message_body(placed.to_string()).send().await.unwrap();
    let early = json!({"workflow": "order-review", "key": "order-c2", "step": "manual-review",
        "outcome": "succeeded", "data": {"decision": "approve"}});
    let (status, body) = send_callback(&info.api_url, &secrets, "cb-c2", &early).await;
    assert_eq!(status, 202, "{body}");
    sqs.send_message().queue_url(&info.queues.intake).message_body("not an event").send().await.unwrap();
    // Settled: waiting, its task published, the execution parked on the token.
    let settled = |t: &Value| {
        let timeline = t["timeline"].as_array().cloned().unwrap_or_default();
        t["record"]["state"] == "waiting{0}"
            && timeline.iter().any(|e| e["kind"] == "task_created" && e["published"] == true)
            && timeline.iter().any(|e| e["event_type"] == "TaskSubmitted")
    };
    let trace = eventually_trace(&local, "order-c1", "waiting on the review, settled", settled).await;
    // And a review an hour past its deadline, written into the stack's table.
    let config =
        baton_core::domain::config::Config::load(&root().join(baton_core::domain::config::DEFAULT_PATH))
            .unwrap();
    let table = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), info.table.clone());
    let deadline = baton_tests::overdue_record(&table, &config.workflows[0], "order-late").await;

    let screens = screens_dir();
    let shot = |name: &str, url: &str, width: u32, height: u32| {
        let png = screens.join(format!("{name}.png"));
        browser.screenshot(url, &png, width, height);
        println!("screenshot: {}", png.display());
    };
    // Read at 800 px: nothing wider than the window (the page records its own scroll width).
    let fits = |url: &str, page: &str| {
        let dom = browser.dom(url, 800);
        let widest: u32 = select(&dom, "body[data-scroll-width]")
            .first()
            .and_then(|b| b.value().attr("data-scroll-width"))
            .and_then(|w| w.parse().ok())
            .unwrap_or(u32::MAX);
        assert!(widest <= 800, "{page}: {widest} px wide in an 800 px window");
    };
    let nothing_acts = |dom: &Html, page: &str| {
        assert!(select(dom, "button").is_empty(), "{page}: no button");
        for form in select(dom, "form") {
            assert_eq!(form.value().attr("method"), Some("get"), "{page}: a form only searches");
        }
    };

    // The overview.
    let dom = browser.dom(&console, 1280);
    assert_eq!(only_text(&dom, "#counts tr[data-state=waiting] .count"), "2");
    assert_eq!(only_text(&dom, "#counts tr[data-state=succeeded] .count"), "0");
    assert_eq!(only_text(&dom, "#total"), "2");
    // Only the late review: the one within its deadline is not listed.
    let overdue: Vec<String> = select(&dom, "#overdue td").iter().map(text).collect();
    let deadline = deadline.format(&time::format_description::well_known::Rfc3339).unwrap();
    assert_eq!(overdue[..4], ["order-review", "order-late", "manual-review", deadline.as_str()]);
    assert!(overdue.len() == 5 && overdue[4].starts_with("1h "), "one row, overdue by an hour: {overdue:?}");
    let link = select(&dom, "#overdue a");
    assert_eq!(link[0].value().attr("href"), Some("/record?workflow=order-review&key=order-late"));
    let recent: Vec<String> = select(&dom, "#recent tr[data-key]")
        .iter()
        .map(|r| r.value().attr("data-key").unwrap().to_owned())
        .collect();
    assert_eq!(
        recent,
        ["order-late", "order-c1"],
        "records, the latest first, not keys with only early callbacks"
    );
    assert!(only_text(&dom, "#recent tr[data-key=order-c1]").contains("waiting"));
    nothing_acts(&dom, "overview");
    fits(&console, "overview");
    shot("console-overview-1280", &console, 1280, 900);
    shot("console-overview-800", &console, 800, 900);
    let dom = browser.dom(&format!("{console}?q=order-c9"), 1280);
    assert_eq!(select(&dom, "#recent-none").len(), 1, "a search that matches nothing says so");
    let dom = browser.dom(&format!("{console}?q=order-c1"), 1280);
    assert_eq!(select(&dom, "#recent tr[data-key]").len(), 1);

    // The tasks owed: both reviews on the risk-review queue, the late one first; only it past
    // its deadline.
    let owes = format!("{console}owes");
    let dom = browser.dom(&owes, 1280);
    let owed = |dom: &Html| -> Vec<String> {
        select(dom, "table.owed[data-queue=risk-review] tr[data-key]")
            .iter()
            .map(|r| r.value().attr("data-key").unwrap().to_owned())
            .collect()
    };
    assert_eq!(owed(&dom), ["order-late", "order-c1"], "the oldest task first");
    assert_eq!(only_text(&dom, "#owed-count"), "2");
    assert!(only_text(&dom, "tr[data-key=order-late]").contains("(overdue)"));
    nothing_acts(&dom, "tasks owed");
    fits(&owes, "tasks owed");
    shot("console-owes-800", &owes, 800, 900);
    let dom = browser.dom(&format!("{owes}?overdue=true"), 1280);
    assert_eq!(owed(&dom), ["order-late"]);
    let dom = browser.dom(&format!("{owes}?queue=payments"), 1280);
    assert_eq!(select(&dom, "#owed-none").len(), 1, "nothing owed on another queue says so");

    // A record's page is the trace view of that record.
    let page = format!("{console}record?workflow=order-review&key=order-c1");
    let dom = browser.dom(&page, 800);
    let state = select(&dom, "#state [data-state]");
    assert_eq!(state[0].value().attr("data-state"), Some("waiting{0}"));
    assert_eq!(select(&dom, ".entry").len(), trace["timeline"].as_array().unwrap().len());
    let current: Vec<&str> = select(&dom, ".graph-state[data-status=current]")
        .iter()
        .map(|s| s.value().attr("data-name").unwrap())
        .collect();
    assert_eq!(current, ["manual-review"]);
    nothing_acts(&dom, "record");
    fits(&page, "record");
    shot("console-record-800", &page, 800, 1600);
    let dom = browser.dom(&format!("{console}record?workflow=order-review&key=order-c2"), 1280);
    assert_eq!(select(&dom, "#state [data-state=none]").len(), 1, "a key with only an early callback");
    assert_eq!(select(&dom, ".entry[data-lane=inbox]").len(), 1);

    // A key that no path segment could carry, and an id named like an object property.
    let odd = json!({"workflow": "order-review", "key": "..", "step": "manual-review",
        "outcome": "succeeded", "data": {"decision": "approve"}});
    let (status, body) = send_callback(&info.api_url, &secrets, "constructor", &odd).await;
    assert_eq!(status, 202, "{body}");
    let dom = browser.dom(&format!("{console}record?workflow=order-review&key=.."), 1280);
    assert_eq!(select(&dom, "body[data-rendered=true]").len(), 1, "the page of key \"..\" draws");
    assert_eq!(select(&dom, ".entry[data-lane=inbox]").len(), 1);
    // Only requests addressed to the console are answered (no DNS rebinding).
    let port = console.trim_start_matches("http://127.0.0.1:").trim_end_matches('/');
    let raw = |request: &str| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        write!(stream, "{request}").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let status_line = |host: &str| {
        let answer = raw(&format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        answer.lines().next().unwrap_or_default().to_owned()
    };
    assert!(status_line(&format!("127.0.0.1:{port}")).contains(" 200 "));
    assert!(status_line("rebound.example:80").contains(" 421 "), "another host is refused");
    let bad = status_line(&format!("localhost:{port}"));
    assert!(bad.contains(" 200 "), "{bad}");

    // Every answer carries the policy the pages above drew under.
    let answer = raw(&format!("GET /dlq HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"));
    let head = answer.split("\r\n\r\n").next().unwrap_or_default().to_ascii_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'self'") && head.contains("nosniff"),
        "{head}"
    );
    assert!(!answer.contains("data-class"), "the page itself plans nothing: planning is a POST");
    // Planning receives the messages: a cross-site form (no console header) or another site's
    // script (its Origin) cannot ask for it.
    let form = raw(&format!(
        "POST /dlq/plan HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ));
    assert!(form.starts_with("HTTP/1.1 403"), "{form}");
    let script = raw(&format!(
        "POST /dlq/plan HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: https://evil.example\r\nx-baton-console: plan\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ));
    assert!(script.starts_with("HTTP/1.1 403") && !script.contains("data-class"), "{script}");
    let get = raw(&format!("GET /dlq/plan HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"));
    assert!(get.starts_with("HTTP/1.1 405"), "{get}");

    // The dead-letter queues: the poison event, planned as the dry run plans it (the page's
    // script asks the console, under the policy).
    let dlq = format!("{console}dlq");
    let deadline = Instant::now() + Duration::from_secs(90);
    let dom = loop {
        let dom = browser.dom(&dlq, 1280);
        if !select(&dom, "table.plan[data-queue=intake] tr[data-class]").is_empty() {
            break dom;
        }
        assert!(Instant::now() < deadline, "the poison event never showed on the intake DLQ's plan");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(select(&dom, "body[data-planned=true]").len(), 1);
    let rows = select(&dom, "table.plan[data-queue=intake] tr[data-class]");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].value().attr("data-class"), Some("needs-human"));
    assert!(text(&rows[0]).contains("needs-human"), "the class in words: {}", text(&rows[0]));
    assert_eq!(select(&dom, "p[data-queue=progress]").len(), 1, "the progress DLQ is empty");
    nothing_acts(&dom, "dlq");
    fits(&dlq, "dlq");
    shot("console-dlq-1280", &dlq, 1280, 700);
    shot("console-dlq-800", &dlq, 800, 700);
    // Planning left the message where it was, visible again.
    let dom = browser.dom(&dlq, 1280);
    assert_eq!(
        select(&dom, "table.plan[data-queue=intake] tr[data-class]").len(),
        1,
        "nothing was taken off the queue"
    );
}
