//! What one sender can make a key's ledger cost, on the emulator: the real callback API and
//! functions, the DynamoDB store, and `baton replay`'s planning.
//!
//! A key's ledger keeps an entry per (reason, input id): a sender with the webhook secret makes
//! one per callback it sends to an ended record (found by review: 32 ignored callbacks, each
//! kept whole, grew one key's trace from 15 KB to 1 MB). An entry keeps its input whole up to
//! `LEDGER_DETAIL_KEPT` bytes of JSON, so that replay can re-deliver it; a larger one keeps
//! its kind, id, step, outcome (the error and the start of the cause) and payload hash in place
//! of its data, and replay says why it cannot re-deliver it.

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{IgnoreReason, Input, State};
use baton_core::ports::store::{LEDGER_DETAIL_KEPT, SUMMARIZED};
use baton_core::use_cases::replay::{self, Classification};
use baton_tests::logs::captured;
use baton_tests::system::{System, start_system};
use serde_json::{Value, json};

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 1h
"#;

async fn cancelled(system: &System, key: &str) {
    let engine = system.engine();
    let event = json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "test",
        "type": "order.placed", "subject": key, "data": {}});
    system.send_event(&event.to_string()).await;
    system
        .until(&format!("{key} waiting"), || async {
            system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step: 0 })
        })
        .await;
    let wf = engine.config.workflow("order-review").unwrap();
    let k = CorrelationKey::parse(key).unwrap();
    engine.submit(wf, &k, &Input::Cancel { reason: "test".into() }, engine.now()).await.unwrap();
}

fn callback(key: &str, outcome: Value) -> Value {
    let mut body = json!({"workflow": "order-review", "key": key, "step": "manual-review"});
    body.as_object_mut().unwrap().extend(outcome.as_object().unwrap().clone());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_callbacks_are_ledgered_whole_only_up_to_a_size_and_replay_says_why_not_past_it() {
    captured();
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    let key = "k-flood";
    cancelled(&system, key).await;

    // A small callback to the ended record, then 32 of 30 KB each, then a failure with a long
    // cause: each is ignored (`terminal`) and ledgered.
    let small = callback(key, json!({"outcome": "succeeded", "data": {"decision": "late"}}));
    assert_eq!(system.callback("cb-small", &small).await.0, 200);
    let blob = "x".repeat(30 * 1024);
    for i in 0..32 {
        let big = callback(key, json!({"outcome": "succeeded", "data": {"decision": "late", "blob": blob}}));
        let (status, body) = system.callback(&format!("cb-big-{i:02}"), &big).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("ignored")), "{body}");
    }
    let cause = "y".repeat(20_000);
    let failed = callback(key, json!({"outcome": "failed", "error": "Rejected", "cause": cause}));
    assert_eq!(system.callback("cb-cause", &failed).await.0, 200);

    let wf = engine.config.workflow("order-review").unwrap();
    let trace = engine.store.trace(&wf.name, &CorrelationKey::parse(key).unwrap()).await.unwrap();
    let entry = |id: &str| {
        trace
            .ledger
            .iter()
            .find(|l| l.input_id == id && l.reason == IgnoreReason::Terminal)
            .unwrap_or_else(|| panic!("{id} is ledgered: {:?}", trace.ledger))
    };
    let size = |v: &Value| serde_json::to_string(v).unwrap().len();
    assert_eq!(trace.ledger.len(), 34, "one entry per input id");
    for l in &trace.ledger {
        assert!(size(&l.detail) <= LEDGER_DETAIL_KEPT, "{}: {} bytes", l.input_id, size(&l.detail));
    }
    let details: usize = trace.ledger.iter().map(|l| size(&l.detail)).sum();
    assert!(details < 34 * 1024, "the key's ledger details: {details} bytes, not about 1 MB");

    // The small one is kept whole, and replays as before (a noop: the record has ended).
    assert_eq!(entry("cb-small").detail["data"], json!({"decision": "late"}));
    let line = replay::plan_ledger(&engine, entry("cb-small"), engine.now()).await.unwrap();
    assert_eq!(line.classification, Classification::Noop, "{line:#?}");

    // A big one keeps what an operator reads: its kind, id, step, and its payload's hash (the
    // receipt's), with its size in place of its data.
    let big = entry("cb-big-07");
    let receipt = trace.receipts.iter().find(|r| r.id.as_str() == "cb-big-07").expect("its receipt");
    assert_eq!(big.detail["hash"].as_str(), Some(receipt.hash.as_str()), "{}", big.detail);
    assert_eq!(
        (big.detail["kind"].as_str(), big.detail["id"].as_str()),
        (Some("step_input"), Some("cb-big-07"))
    );
    assert!(big.detail.get("data").is_none(), "{}", big.detail);
    let bytes = big.detail[SUMMARIZED]["bytes"].as_u64().expect("its size");
    assert!(bytes > 30 * 1024, "{bytes}");
    let line = replay::plan_ledger(&engine, big, engine.now()).await.unwrap();
    assert_eq!(line.classification, Classification::NeedsHuman, "{line:#?}");
    let note = line.note.as_deref().unwrap_or_default();
    assert!(note.contains("cannot be re-delivered") && note.contains(&format!("{bytes} bytes")), "{note}");
    assert!(note.contains(&receipt.hash) && note.contains("ask its sender"), "{note}");

    // A failure keeps its error, and the start of its cause.
    let outcome = &entry("cb-cause").detail["outcome"];
    assert_eq!(outcome["error"], "Rejected", "{outcome}");
    assert_eq!(outcome["cause"].as_str().map(str::len), Some(512), "{outcome}");
    system.stop().await;
}
