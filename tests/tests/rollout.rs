//! `baton rollout plan` against a running stack on the emulator: the functions register their
//! config version in the table at start, records keep the version they started on, and the plan
//! reads the deployed config and counts the live records from the table, as the CLI does.
//!
//! Needs the emulator: `tools/with-emulator.sh cargo test -p baton-tests --test rollout`.

use baton::config::Config;
use baton::lifecycle::State;
use baton::rollout::{self, Class, RolloutPlan};
use baton_tests::logs::captured;
use baton_tests::system::{System, start_system};
use serde_json::json;

const V1: &str = r#"
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

async fn wait_waiting(system: &System, key: &str) {
    system
        .until(&format!("{key} waiting{{0}}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step: 0 })
        })
        .await;
}

/// (kind, class, live records touched) per change.
fn summary(plan: &RolloutPlan) -> Vec<(&'static str, Class, u64)> {
    plan.changes.iter().map(|c| (c.kind, c.class, c.touches.iter().map(|t| t.records).sum())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_reads_the_deployed_version_and_counts_the_live_records_it_would_break() {
    captured();
    let system = start_system(V1).await;
    let engine = system.engine();
    let v1 = Config::parse(V1).unwrap();
    for key in ["k-a", "k-b"] {
        let body = json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "test",
            "type": "order.placed", "subject": key, "data": {}});
        system.send_event(&body.to_string()).await;
        wait_waiting(&system, key).await;
        let record = system.record("order-review", key).await.unwrap();
        assert_eq!(
            record.config_version.as_deref(),
            Some(v1.version.as_str()),
            "the record keeps its version"
        );
    }

    let (deployed, version) = rollout::deployed(&*engine.store).await.unwrap().expect("registered at start");
    assert_eq!(version, v1.version);
    assert_eq!(deployed.version, v1.version, "the registered canonical form parses to the same version");
    let live = rollout::count_live(&*engine.store, engine.now()).await.unwrap();

    // A step inserted before payment, and manual-review renamed: both break the two records.
    let v2 = V1.replace("name: manual-review", "name: risk-review").replace(
        "      - name: payment",
        "      - name: fraud-check\n        timeout: 1h\n      - name: payment",
    );
    let plan = rollout::plan(&deployed, &Config::parse(&v2).unwrap(), &live);
    assert_eq!(summary(&plan), [("step_renamed", Class::Breaking, 2), ("step_inserted", Class::Breaking, 2)]);
    assert_eq!(plan.changes[0].touches[0].state, "waiting{0}");
    assert_eq!(plan.changes[0].touches[0].version, v1.version);

    // An appended step breaks them too: their executions run the two-step definition.
    let appended = format!("{V1}      - name: archive\n        timeout: 1h\n");
    let plan = rollout::plan(&deployed, &Config::parse(&appended).unwrap(), &live);
    assert_eq!(summary(&plan), [("step_appended", Class::Breaking, 2)]);

    // The workflow removed while it has live records; a changed key pointer.
    let removed = "workflows:\n  other:\n    start: { when: { type: [\"x\"] }, key: /subject }\n    steps:\n      - name: s\n        timeout: 1h\n";
    let plan = rollout::plan(&deployed, &Config::parse(removed).unwrap(), &live);
    assert_eq!(
        summary(&plan),
        [("workflow_removed", Class::Breaking, 2), ("workflow_added", Class::Safe, 0)]
    );
    let rekeyed = V1.replace("key: /subject", "key: /data/order");
    let plan = rollout::plan(&deployed, &Config::parse(&rekeyed).unwrap(), &live);
    assert_eq!(plan.verdict, Class::Breaking);
    assert_eq!(summary(&plan)[0].0, "key_changed");

    // A longer timeout is safe whatever is live.
    let slower = V1.replacen("timeout: 1h", "timeout: 2h", 1);
    let plan = rollout::plan(&deployed, &Config::parse(&slower).unwrap(), &live);
    assert_eq!(plan.verdict, Class::Safe, "{:?}", summary(&plan));
    system.stop().await;
}
