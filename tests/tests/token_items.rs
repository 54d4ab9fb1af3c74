//! End to end, on the emulator: task tokens kept in items of their own (docs/DATA_MODEL.md, "A
//! long task token lives in an item of its own").
//!
//! AWS's tokens are longer than `TOKEN_INLINE_MAX`; the emulator's are UUIDs, shorter. So the
//! functions here run with `BATON_TOKEN_INLINE_MAX=0`, which keeps every token in its own item:
//! the path AWS's tokens take, through the real state machine, the functions, the callback API
//! and the sweeper.

use aws_sdk_dynamodb::types::AttributeValue;
use baton_aws::dynamodb::{DynamoDbStore, TOKEN_SK_PREFIX, token_sk};
use baton_core::domain::lifecycle::{self, Input, State};
use baton_core::ports::store::{Applied, WorkflowStore};
use baton_tests::logs::captured;
use baton_tests::system::{System, start_system_env};
use baton_tests::{Emulator, ORDER_REVIEW, order_placed};
use serde_json::{Value, json};

const EVERY_TOKEN_IN_ITS_ITEM: [(&str, &str); 1] = [("BATON_TOKEN_INLINE_MAX", "0")];

fn callback(key: &str, step: &str, data: Value) -> Value {
    json!({"workflow": "order-review", "key": key, "step": step, "outcome": "succeeded", "data": data})
}

async fn state_is(system: &System, key: &str, state: State) -> lifecycle::Record {
    system
        .until(&format!("{key} {state:?}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == state)
        })
        .await
}

/// The items of `key`'s partition whose sort key starts with `prefix`, as stored.
async fn items(
    system: &System,
    key: &str,
    prefix: &str,
) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let client = aws_sdk_dynamodb::Client::new(&Emulator::from_env().sdk_config().await);
    client
        .query()
        .table_name(system.store.table())
        .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
        .expression_attribute_values(":pk", AttributeValue::S(format!("WF#order-review#{key}")))
        .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("query the partition")
        .items
        .unwrap_or_default()
}

/// A workflow runs to success with each step's token in its own item: the waiting record keeps
/// only its reference, the callback's resume reads the token from the item and is sent once, a
/// repeated callback gets the first answer, and each step put one token item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_token_in_its_own_item_a_workflow_runs_and_resumes_once_a_step() {
    captured();
    let system = start_system_env(ORDER_REVIEW, &EVERY_TOKEN_IN_ITS_ITEM).await;
    system.send_event(&order_placed("k-items")).await;
    let waiting = state_is(&system, "k-items", State::Waiting { step: 0 }).await;
    let token = waiting.waits[0].token.clone().expect("a waiting record has its token");
    let records = items(&system, "k-items", "RECORD").await;
    let stored = &records[0];
    assert_eq!(stored.get("token_sk").and_then(|v| v.as_s().ok()), Some(&token_sk(&waiting, &token)));
    assert!(!stored.contains_key("token"), "the token is not in the record: {stored:?}");
    let tokens = items(&system, "k-items", TOKEN_SK_PREFIX).await;
    assert_eq!(tokens.len(), 1, "the first step's token item");
    assert_eq!(tokens[0].get("token").and_then(|v| v.as_s().ok()), Some(&token.expose().to_owned()));

    let review = callback("k-items", "manual-review", json!({"decision": "approve"}));
    let (status, first) = system.callback("cb-review", &review).await;
    assert_eq!((status, first["state"].as_str()), (200, Some("advancing{0}")), "{first}");
    let (status, mut again) = system.callback("cb-review", &review).await;
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)), "{again}");
    again["duplicate"] = json!(false);
    assert_eq!(again, first, "a repeated callback gets the first answer");
    state_is(&system, "k-items", State::Waiting { step: 1 }).await;
    let paid = callback("k-items", "payment", json!({"payment_ref": "pay-77"}));
    assert_eq!(system.callback("cb-paid", &paid).await.0, 200);
    state_is(&system, "k-items", State::Succeeded).await;
    system.execution_ended("order-review", "SUCCEEDED").await;
    assert_eq!(system.resumes("order-review", "k-items").await, 2, "one resume a step");
    assert_eq!(items(&system, "k-items", TOKEN_SK_PREFIX).await.len(), 2, "one token item a step");
    system.stop().await;
}

/// A crash between the advancing write and its resume: the sweeper re-sends the resume owed with
/// the token it reads from the token item, exactly once. The write is made by a store that has
/// never seen the token item, which puts it again before the record (idempotent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_resends_an_owed_resume_with_the_token_from_its_item() {
    captured();
    let system = start_system_env(ORDER_REVIEW, &EVERY_TOKEN_IN_ITS_ITEM).await;
    system.send_event(&order_placed("k-owed")).await;
    let waiting = state_is(&system, "k-owed", State::Waiting { step: 0 }).await;

    let engine = system.engine();
    let workflow = engine.config.workflow("order-review").expect("the workflow");
    let input = Input::StepInput {
        id: baton_core::domain::ids::EventId::parse("cb-owed").unwrap(),
        hash: "h".into(),
        source: lifecycle::Source::Callback,
        step: 0,
        outcome: lifecycle::StepOutcome::Succeeded,
        data: json!({"decision": "ok"}).as_object().unwrap().clone(),
        generation: None,
        attempt: None,
    };
    let decision = lifecycle::decide(
        &workflow.plan(),
        (&waiting.workflow, &waiting.key),
        Some(&waiting),
        &input,
        engine.now(),
    );
    let write = decision.write.expect("the step completes");
    let client = aws_sdk_dynamodb::Client::new(&Emulator::from_env().sdk_config().await);
    let crashed = DynamoDbStore::new(client, system.store.table()).with_token_inline_max(0);
    assert_eq!(crashed.apply(&write).await.unwrap(), Applied::Written);
    assert_eq!(write.to.state, State::Advancing { step: 0 });
    let stored = &items(&system, "k-owed", "RECORD").await[0];
    let waits = stored.get("waits").and_then(|v| v.as_s().ok()).expect("the step's wait");
    assert!(waits.contains(r#""w":"owed""#), "the resume is owed: {waits}");
    assert!(stored.contains_key("token_sk") && !stored.contains_key("token"));

    let later = write.to.updated_at + baton_core::limits::RESEND_RESUME_AFTER + time::Duration::seconds(1);
    let report = system.sweep(later).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    state_is(&system, "k-owed", State::Waiting { step: 1 }).await;
    assert_eq!(system.resumes("order-review", "k-owed").await, 1, "exactly one resume");
    assert_eq!(system.sweep(later + time::Duration::minutes(5)).await.repaired, 0, "nothing owed after");
    system.stop().await;
}
