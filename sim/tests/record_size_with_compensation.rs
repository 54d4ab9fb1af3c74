//! Attack test of the record's size bound and cuts (`fit_item_limit`, engine.rs) with
//! compensation: every compensation's failed attempts and the acknowledgements it remembers
//! live in the record's one DynamoDB item (400 KB), beside the failed step's inputs. Driven
//! through the real use cases over the simulated world, whose store refuses an item over 400 KB
//! as DynamoDB does.

mod common;

use baton_aws::dynamodb::record_size;
use baton_core::domain::lifecycle::{Record, State};
use baton_sim::world::{World, drive, lock};
use baton_sim::{EPOCH, Stack};
use common::*;
use serde_json::json;
use time::{Duration, OffsetDateTime};

/// How many steps declare `compensate` (each with the most attempts, 10).
const STEPS: usize = 40;

fn yaml() -> String {
    let mut steps = String::new();
    for i in 0..STEPS {
        steps += &format!(
            "      - name: s{i}\n        requires: [v{i}]\n        timeout: 10m\n        compensate: {{ task: {{ title: \"Undo s{i} {{key}}\", queue: undo }}, timeout: 1h, attempts: 10 }}\n"
        );
    }
    steps += "      - name: ship\n        requires: [a, b, tracking]\n        timeout: 1h\n";
    format!(
        "workflows:\n  long:\n    start: {{ when: {{ type: [\"order.placed\"] }}, key: /subject }}\n    steps:\n{steps}"
    )
}

fn load(s: &Stack) -> Record {
    s.record("long", "k").expect("the record")
}

/// A `webhook-id` of the most characters a sender may choose (256), each one JSON escapes to
/// two bytes: the record keeps it as the sender chose it.
fn long_id(tag: &str) -> String {
    format!("{tag}-{}", "\"".repeat(256 - tag.len() - 1))
}

/// Invariant 6 and 8 (nothing is lost; `applied` means it took effect): a run that completed 40
/// steps declaring `compensate` (10 attempts each) fails with its last step's inputs near their
/// 128 KiB; every compensation then fails all 10 of its attempts, each acknowledgement sent
/// under a 256-character `webhook-id`. Every acknowledgement must be applied and the workflow
/// end `compensation_failed`: the record, trimmed (`fit_item_limit`), must stay within its 400
/// KB item on every write, or an acknowledgement could never be applied again.
#[test]
fn a_long_compensation_whose_every_attempt_failed_stays_within_its_item() {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let s = Stack::with_config(World::new(47, start, false), None, &yaml(), Default::default());
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    for i in 0..STEPS {
        let body = json!({"workflow": "long", "key": "k", "step": format!("s{i}"), "outcome": "succeeded",
            "data": {format!("v{i}"): i}});
        let a = callback(&s, &long_id(&format!("s{i}")), &body);
        assert_eq!(a.body["status"].as_str(), Some("applied"), "s{i}: {}", a.body);
        settle(&s);
    }
    for (field, fill) in [("a", "x"), ("b", "y")] {
        let body = json!({"workflow": "long", "key": "k", "step": "ship", "outcome": "succeeded",
            "data": {field: fill.repeat(60_000)}});
        let a = callback(&s, &long_id(&format!("ship-{field}")), &body);
        assert_eq!(a.body["status"].as_str(), Some("applied"), "{}", a.body);
    }
    let failed = json!({"workflow": "long", "key": "k", "step": "ship", "outcome": "failed",
        "error": "NoCarrier", "cause": "no carrier today"});
    assert_eq!(callback(&s, &long_id("ship-failed"), &failed).body["status"].as_str(), Some("applied"));
    settle(&s);
    assert_eq!(load(&s).state, State::Compensating);
    let mut largest = 0;
    for i in (0..STEPS).rev() {
        for attempt in 1..=10u32 {
            let body = json!({"workflow": "long", "key": "k", "step": format!("s{i}"), "outcome": "failed",
                "compensation": true, "generation": 1, "attempt": attempt,
                "error": "UndoRefused", "cause": "the ledger refused the reversal"});
            let id = long_id(&format!("u{i}a{attempt}"));
            let a = callback(&s, &id, &body);
            let size = record_size(&load(&s));
            largest = largest.max(size);
            assert_eq!(
                (a.status.as_u16(), a.body["status"].as_str()),
                (200, Some("applied")),
                "s{i}'s compensation, attempt {attempt}: {}; the record is {size} bytes; violations: {:?}",
                a.body,
                lock(&s.violations)
            );
            s.world.advance(Duration::seconds(1));
            let _ = drive(s.live().sweeper.run_once(s.world.now()));
            settle(&s);
        }
    }
    let r = load(&s);
    assert_eq!(r.state, State::CompensationFailed, "{:?}", r.history.last());
    assert!(lock(&s.violations).is_empty(), "{:?}", lock(&s.violations));
    assert!(largest <= 400 * 1024, "{largest}");
}
