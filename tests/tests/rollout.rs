//! Versioned workflows on a running stack on the emulator: the functions register their config
//! version in the table, records keep the version they started on, `baton rollout plan` reads
//! the deployed config and counts the live records, and after a deploy that inserts a step and
//! renames one, the records in flight finish on their version while new starts follow the new
//! one.
//!
//! Needs the emulator: `tools/with-emulator.sh cargo test -p baton-tests --test rollout`.

use baton_core::domain::config::Config;
use baton_core::domain::lifecycle::{Record, State};
use baton_core::use_cases::rollout::{self, Class, RolloutPlan};
use baton_tests::logs::captured;
use baton_tests::system::{System, start_system};
use serde_json::{Value, json};

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

/// Version 2: a step inserted before payment, and manual-review renamed.
fn v2_yaml() -> String {
    V1.replace("name: manual-review", "name: risk-review").replace(
        "      - name: payment",
        "      - name: fraud-check\n        requires: [score]\n        timeout: 1h\n      - name: payment",
    )
}

async fn record_is(system: &System, key: &str, what: &str, want: impl Fn(&Record) -> bool) -> Record {
    system
        .until(&format!("{key} {what}"), || async {
            system.record("order-review", key).await.filter(|r| want(r))
        })
        .await
}

async fn start(system: &System, key: &str) -> Record {
    let body = json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "test",
        "type": "order.placed", "subject": key, "data": {}});
    system.send_event(&body.to_string()).await;
    record_is(system, key, "waiting{0}", |r| r.state == State::Waiting { step: 0 }).await
}

/// Sends a callback completing `step` of `key` with `data`; returns (status, body).
async fn complete(system: &System, key: &str, step: &str, data: Value) -> (u16, Value) {
    let id = format!("cb-{key}-{step}");
    let body =
        json!({"workflow": "order-review", "key": key, "step": step, "outcome": "succeeded", "data": data});
    system.callback(&id, &body).await
}

/// Completes `step` and waits until the record waits at `next` (or succeeded, for `None`).
async fn advance(system: &System, key: &str, step: &str, data: Value, next: Option<u32>) {
    let (status, body) = complete(system, key, step, data).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("applied")), "{key} {step}: {body}");
    match next {
        Some(n) => {
            record_is(system, key, &format!("waiting{{{n}}}"), |r| r.state == State::Waiting { step: n })
                .await
        }
        None => record_is(system, key, "succeeded", |r| r.state == State::Succeeded).await,
    };
}

/// The state machine version the `live` alias routes executions to.
async fn alias_version(system: &System) -> String {
    let alias = format!("{}:live", system.state_machine_arn("order-review"));
    let described = system.sfn.describe_state_machine_alias().state_machine_alias_arn(&alias).send().await;
    let routes =
        described.unwrap_or_else(|e| panic!("{alias}: {e:?}")).routing_configuration.unwrap_or_default();
    assert_eq!(routes.len(), 1, "{routes:?}");
    routes[0].state_machine_version_arn().rsplit(':').next().unwrap_or_default().to_owned()
}

/// (kind, class, live records touched) per change.
fn summary(plan: &RolloutPlan) -> Vec<(&'static str, Class, u64)> {
    plan.changes.iter().map(|c| (c.kind, c.class, c.touches.iter().map(|t| t.records).sum())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_in_flight_finish_on_their_version_and_new_starts_follow_the_deployed_one() {
    captured();
    let mut system = start_system(V1).await;
    let (v1, v2) = (Config::parse(V1).unwrap(), Config::parse(&v2_yaml()).unwrap());

    // Three records on version 1: two wait for the review, one was reviewed and waits for payment.
    for key in ["k-a", "k-b", "k-c"] {
        let record = start(&system, key).await;
        assert_eq!(record.config_version, v1.version, "the record keeps its version");
    }
    advance(&system, "k-c", "manual-review", json!({"decision": "approve"}), Some(1)).await;

    // The plan, before the deploy: read from the table, as `baton rollout plan` does.
    let store = &*system.engine().store;
    let (deployed, version) = rollout::deployed(store).await.unwrap().expect("registered at start");
    assert_eq!((version.as_str(), deployed.version.as_str()), (v1.version.as_str(), v1.version.as_str()));
    let live = rollout::count_live(store, system.engine().now()).await.unwrap();
    let plan = rollout::plan(&deployed, &v2, &live);
    assert_eq!(summary(&plan), [("step_renamed", Class::Safe, 3), ("step_inserted", Class::Safe, 3)]);
    assert_eq!(plan.verdict, Class::Safe, "in-flight records finish on version 1");
    let touched: Vec<(&str, &str, u64)> =
        plan.changes[0].touches.iter().map(|t| (t.version.as_str(), t.state.as_str(), t.records)).collect();
    assert_eq!(touched, [(v1.version.as_str(), "waiting{0}", 2), (v1.version.as_str(), "waiting{1}", 1)]);
    // What stays breaking with pinning: the workflow removed while it has live records, and a
    // changed key pointer. Both exit 1 in the CLI (verdict breaking).
    let removed = "workflows:\n  other:\n    start: { when: { type: [\"x\"] }, key: /subject }\n    steps:\n      - name: s\n        timeout: 1h\n";
    let plan = rollout::plan(&deployed, &Config::parse(removed).unwrap(), &live);
    assert_eq!(
        summary(&plan),
        [("workflow_removed", Class::Breaking, 3), ("workflow_added", Class::Safe, 0)]
    );
    let rekeyed = V1.replace("key: /subject", "key: /data/order");
    let plan = rollout::plan(&deployed, &Config::parse(&rekeyed).unwrap(), &live);
    assert_eq!((plan.verdict, summary(&plan)[0].0), (Class::Breaking, "key_changed"));

    // The deploy: state machines updated (a version published, the alias executions start
    // through moved to it), functions restarted on version 2.
    assert_eq!(alias_version(&system).await, "1");
    system.deploy(&v2_yaml()).await;
    assert_eq!(alias_version(&system).await, "2", "the deploy published the new definition");
    let registered: Vec<String> =
        system.engine().store.configs().await.unwrap().into_iter().map(|c| c.version).collect();
    assert_eq!(registered, [v1.version.clone(), v2.version.clone()], "both versions stay readable");

    // A new start follows version 2: its first step is risk-review, and the old name is refused.
    let fresh = start(&system, "k-new").await;
    assert_eq!(fresh.config_version, v2.version);
    let (status, body) = complete(&system, "k-new", "manual-review", json!({"decision": "approve"})).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("unknown_step")), "{body}");

    // The records in flight finish on version 1: the review under its old name, then payment,
    // with no fraud check; the one at payment just pays.
    for key in ["k-a", "k-b"] {
        let (status, body) = complete(&system, key, "risk-review", json!({"decision": "approve"})).await;
        assert_eq!((status, body["error"].as_str()), (404, Some("unknown_step")), "{key}: {body}");
        advance(&system, key, "manual-review", json!({"decision": "approve"}), Some(1)).await;
    }
    // k-c's payment is applied, and every attempt of its resume fails: the resume is owed on
    // version 1. The sweeper, started on version 2, reads version 1 from the table and re-sends
    // it (what its role must allow: a Query of the registered configs).
    let emulator = baton_tests::Emulator::from_env();
    let attempts = baton_aws::sdk::SDK_MAX_ATTEMPTS;
    let rule = emulator
        .inject(json!({"operation": "AWSStepFunctions.SendTaskSuccess", "match": ["pay-k-c"],
            "times": attempts, "status": 500, "code": "InternalServerError"}))
        .await;
    let (status, body) = complete(&system, "k-c", "payment", json!({"payment_ref": "pay-k-c"})).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("advancing{1}")), "{body}");
    assert_eq!(emulator.fault_hits(rule).await, u64::from(attempts), "every attempt of the resume failed");
    let owed = system.record("order-review", "k-c").await.expect("k-c");
    assert_eq!(owed.state, State::Advancing { step: 1 }, "the resume is owed");
    let at = owed.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1);
    assert_eq!(system.sweep(at).await.repaired, 1, "the sweeper re-sent the owed resume");
    record_is(&system, "k-c", "succeeded", |r| r.state == State::Succeeded).await;
    for key in ["k-a", "k-b"] {
        advance(&system, key, "payment", json!({"payment_ref": format!("pay-{key}")}), None).await;
    }
    for key in ["k-a", "k-b", "k-c"] {
        let record = system.record("order-review", key).await.unwrap();
        assert_eq!(record.config_version, v1.version, "{key} stays on version 1");
        assert_eq!(system.resumes("order-review", key).await, 2, "{key}: exactly one resume per step");
    }

    // The new record runs version 2's three steps.
    advance(&system, "k-new", "risk-review", json!({"decision": "approve"}), Some(1)).await;
    advance(&system, "k-new", "fraud-check", json!({"score": 3}), Some(2)).await;
    advance(&system, "k-new", "payment", json!({"payment_ref": "pay-new"}), None).await;
    assert_eq!(system.resumes("order-review", "k-new").await, 3, "one resume per step of version 2");
    assert_eq!(system.queue_depth("ProgressDLQ").await, 0, "no report was dead-lettered");
    system.stop().await;
}
