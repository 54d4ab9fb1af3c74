//! The test harness: how integration and end-to-end tests reach the local AWS emulator.
//!
//! `make test` starts `tools/emulator.py` (moto with DynamoDB serialized and Step Functions
//! execution on) on a free loopback port and exports `BATON_TEST_ENDPOINT`. Tests build the real
//! AWS SDK clients against it: no hand-written mocks of AWS. Each test names its own resources
//! with [`unique_name`], so tests run in parallel without seeing each other's data.
//!
//! The clients retry and time out exactly as the deployed functions' do
//! (`baton_aws::sdk::sdk_loader`): a test is a client like any other, and a slow or failed
//! answer from the emulator is handled as production handles one from AWS.

pub mod browser;
pub mod calls;
pub mod cost;
pub mod functions;
pub mod http;
pub mod lifecycle_fixtures;
pub mod logs;
pub mod stack;
pub mod system;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_config::SdkConfig;

/// The variable `make test` sets to the emulator's URL.
pub const ENDPOINT_VAR: &str = "BATON_TEST_ENDPOINT";

/// A running emulator, reached over loopback.
#[derive(Debug, Clone)]
pub struct Emulator {
    pub endpoint: String,
}

impl Emulator {
    /// The emulator `make test` started.
    ///
    /// # Panics
    /// When `BATON_TEST_ENDPOINT` is unset: these tests need the emulator, and skipping them
    /// silently would report a green run that tested nothing.
    pub fn from_env() -> Emulator {
        match std::env::var(ENDPOINT_VAR) {
            Ok(endpoint) if !endpoint.is_empty() => Emulator { endpoint },
            _ => panic!(
                "{ENDPOINT_VAR} is not set. Run the emulator tests through `make test`, or \
                 start one with `tools/with-emulator.sh cargo test ...`"
            ),
        }
    }

    /// SDK configuration for the emulator: fixed region and credentials, production's retries.
    pub async fn sdk_config(&self) -> SdkConfig {
        baton_local::emulator_sdk_config(&self.endpoint).await
    }

    /// Adds a fault rule to the emulator (`tools/emulator.py`, "Faults on request") and returns
    /// its id. Scope it with `match` to this test's own resources: the emulator is shared.
    pub async fn inject(&self, rule: serde_json::Value) -> u64 {
        let reply =
            http::post(&format!("{}/_baton/faults", self.endpoint), &[], rule.to_string().into_bytes()).await;
        assert_eq!(reply.status, 200, "fault rule refused: {}", reply.body);
        reply.body["id"].as_u64().expect("a rule id")
    }

    /// Retires the fault rule `id`: it fires no more (other tests' rules are left alone).
    pub async fn retire(&self, id: u64) {
        let reply = http::delete(&format!("{}/_baton/faults?id={id}", self.endpoint)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    /// How often the fault rule `id` has fired.
    pub async fn fault_hits(&self, id: u64) -> u64 {
        let reply = http::get(&format!("{}/_baton/faults", self.endpoint)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body["rules"]
            .as_array()
            .and_then(|rules| rules.iter().find(|r| r["id"] == id))
            .and_then(|r| r["hits"].as_u64())
            .unwrap_or_else(|| panic!("no fault rule {id}: {}", reply.body))
    }
}

/// A name no other test in this run (or an earlier run on the same emulator) uses:
/// `prefix-<pid>-<time>-<counter>`, within the 80 characters SQS allows.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() % 1_000_000_000)
        .unwrap_or_default();
    format!("{prefix}-{}-{micros}-{n}", std::process::id())
}

/// Path of a file under `tests/fixtures/`.
pub fn fixture_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
}

/// A DynamoDB store on a table of its own, created as template.yaml declares it.
pub async fn dynamo_store(emulator: &Emulator) -> baton_aws::dynamodb::DynamoDbStore {
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let store = baton_aws::dynamodb::DynamoDbStore::new(client, unique_name("baton-test"));
    if let Err(e) = store.create_table().await {
        panic!("cannot create the test table: {e:?}");
    }
    store
}

/// Writes a record of `workflow` for `key`, waiting on its first step with a deadline that passed
/// an hour ago, through the lifecycle and `store` as the handlers would (nothing times it out:
/// it has no execution, and the sweeper leaves waits to Step Functions). Returns the deadline,
/// to the microsecond the store keeps.
pub async fn overdue_record(
    store: &dyn baton_core::ports::store::WorkflowStore,
    workflow: &baton_core::domain::config::Workflow,
    key: &str,
) -> time::OffsetDateTime {
    use baton_core::domain::ids::{CorrelationKey, EventId, TaskToken};
    use baton_core::domain::lifecycle::{Input, decide};
    use baton_core::ports::store::Applied;
    let (w, k) = (&workflow.name, CorrelationKey::parse(key).expect("a valid key"));
    let plan = workflow.plan();
    let now = time::OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(now.nanosecond() / 1000 * 1000).expect("microseconds");
    let start = Input::start(EventId::parse(format!("late-{key}")).expect("an event id"));
    let pending = decide(&plan, (w, &k), None, &start, now).write.expect("a start writes");
    assert_eq!(store.apply(&pending).await.expect("the start's write"), Applied::Written);
    let deadline = now - time::Duration::hours(1);
    let token = TaskToken::parse(format!("late-token-{key}")).expect("a token");
    let ready = Input::StepReady { generation: 1, step: 0, token, deadline };
    let waiting = decide(&plan, (w, &k), Some(&pending.to), &ready, now).write.expect("step_ready writes");
    assert_eq!(store.apply(&waiting).await.expect("step_ready's write"), Applied::Written);
    deadline
}

/// The two-step order-review workflow most end-to-end tests run: a start pattern with a
/// threshold, a manual review with a task, then a payment. Steps wait an hour.
pub const ORDER_REVIEW: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"], data: { total: [{ numeric: [">=", 1000] }] } }
      key: /subject
    on_restart: after_terminal
    steps:
      - name: manual-review
        task: { title: "Review order {key}", queue: risk-review }
        requires: [decision]
        timeout: 1h
      - name: payment
        requires: [payment_ref]
        timeout: 1h
"#;

/// An `order.placed` event that starts [`ORDER_REVIEW`] for `key` (its total is over the
/// threshold), as an SQS body.
pub fn order_placed(key: &str) -> String {
    serde_json::json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "shop",
        "type": "order.placed", "subject": key, "data": {"total": 5000}})
    .to_string()
}

/// A reviewer's callback completing [`ORDER_REVIEW`]'s `manual-review` step for `key` with
/// `decision`.
pub fn approval(key: &str, decision: &str) -> serde_json::Value {
    serde_json::json!({"workflow": "order-review", "key": key, "step": "manual-review",
        "outcome": "succeeded", "data": {"decision": decision}})
}

/// A workflow whose first two steps declare `compensate` (payment with 2 attempts), and a third
/// that can fail after them (the CLI's compensation and browser tests, `make cost`).
pub const SAGA: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: reserve-stock
        task: { title: "Reserve stock for {key}", queue: stock }
        requires: [hold]
        timeout: 1h
        compensate:
          task: { title: "Release stock for {key}", queue: stock }
          timeout: 1h
      - name: payment
        requires: [payment_ref]
        timeout: 7d
        compensate:
          task: { title: "Refund payment for {key}", queue: payments }
          timeout: 3d
          attempts: 2
      - name: shipping
        requires: [tracking]
        timeout: 5d
"#;

/// Runs `key` of [`SAGA`] to `compensated`: reserve-stock and payment complete, shipping
/// fails, and both compensations are acknowledged, payment's first.
pub async fn compensated(system: &crate::system::System, key: &str) {
    use baton_core::domain::lifecycle::State;
    use serde_json::{Value, json};
    let wait = |state: State| async move {
        system.record_until("order-review", key, &format!("{key} in {state}"), |r| r.state == state).await
    };
    let body = |step: &str, extra: Value| {
        let mut body = json!({"workflow": "order-review", "key": key, "step": step});
        if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
            b.extend(extra);
        }
        body
    };
    system.send_event(&order_placed(key)).await;
    let steps = [
        ("reserve-stock", json!({"outcome": "succeeded", "data": {"hold": "h-1"}})),
        ("payment", json!({"outcome": "succeeded", "data": {"payment_ref": "pay-1"}})),
        ("shipping", json!({"outcome": "failed", "error": "NoCarrier", "cause": "no carrier takes it"})),
    ];
    for (i, (step, extra)) in (0..).zip(steps) {
        wait(State::Waiting { step: i }).await;
        system.answered(&format!("{key}-{step}"), body(step, extra), (200, "applied")).await;
    }
    for (index, step) in [(1, "payment"), (0, "reserve-stock")] {
        system
            .record_until("order-review", key, &format!("{step}'s compensation task is out"), |r| {
                // As a worker answers: once the task is out (its mark follows the publish).
                let out = |u: &baton_core::domain::lifecycle::Undo| u.waits() && u.wait.task_due().is_none();
                r.compensation.as_ref().is_some_and(|c| c.undos.iter().any(|u| u.step() == index && out(u)))
            })
            .await;
        let ack = json!({"outcome": "succeeded", "compensation": true});
        system.answered(&format!("{key}-undo-{step}"), body(step, ack), (200, "applied")).await;
    }
    wait(State::Compensated).await;
}
