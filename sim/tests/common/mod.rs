//! What the simulation's regression and attack tests share: a simulated stack, and the use
//! cases driven by hand (events, deliveries, callbacks, reads of the store).

#![allow(dead_code)] // each test file uses its own part

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::State;
use baton_core::ports::orchestrator::ExecutionStatus;
use baton_core::ports::store::WorkflowStore;
use baton_core::use_cases::callback::Answer;
use baton_sim::sqs::QueueId;
use baton_sim::world::{World, drive, lock};
use baton_sim::{EPOCH, SECRET, Stack};
use serde_json::{Value, json};
use time::OffsetDateTime;

pub fn stack() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::new(World::new(7, start, false), None)
}

/// A stack whose world keeps its log, so `run_until` can pause a use case at a port call.
pub fn traced() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::new(World::new(7, start, true), None)
}

pub fn event(id: &str, kind: &str, key: &str, data: Value) -> String {
    json!({"specversion": "1.0", "id": id, "source": "t", "type": kind, "subject": key, "data": data})
        .to_string()
}

pub fn send(s: &Stack, body: &str) {
    let now = s.world.now();
    lock(&s.sqs).send(QueueId::Intake, body.to_owned(), Default::default(), now);
}

/// Delivers `queue` through the functions deployed now.
pub fn deliver(s: &Stack, queue: QueueId) {
    let live = s.live();
    let handler = match queue {
        QueueId::Intake => live.intake.clone(),
        _ => live.progress.clone(),
    };
    deliver_with(s, queue, &handler);
}

/// Delivers `queue` through `handler` (a chosen deployment's function).
pub fn deliver_with(
    s: &Stack,
    queue: QueueId,
    handler: &std::sync::Arc<dyn baton_core::use_cases::batch::SqsHandler>,
) {
    for _ in 0..1000 {
        let now = s.world.now();
        let batch = lock(&s.sqs).receive(queue, 1, now, &mut |_| 0);
        let Some(m) = batch.first() else { return };
        let response = drive(handler.handle(baton_sim::sqs::event(&batch)));
        if response.batch_item_failures.is_empty() {
            lock(&s.sqs).delete(queue, &m.id, m.receipt);
        }
    }
}

pub fn settle(s: &Stack) {
    for _ in 0..5 {
        deliver(s, QueueId::Intake);
        deliver(s, QueueId::Progress);
    }
}

/// A signed callback to the functions deployed now.
pub fn callback(s: &Stack, id: &str, body: &Value) -> Answer {
    callback_with(s, &s.live().callbacks, id, body)
}

/// A signed callback to a chosen deployment's callback function.
pub fn callback_with(
    s: &Stack,
    callbacks: &baton_core::use_cases::callback::Callbacks,
    id: &str,
    body: &Value,
) -> Answer {
    let (headers, text) = signed(s, id, body);
    drive(callbacks.handle(&headers, text.as_bytes()))
}

/// The Standard Webhooks headers and body of a callback, signed now.
pub fn signed(s: &Stack, id: &str, body: &Value) -> (http::HeaderMap, String) {
    let text = body.to_string();
    let now = s.world.now().unix_timestamp();
    let secrets = baton_core::domain::webhook::Secrets::parse(SECRET).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
    headers.insert("webhook-signature", secrets.sign(id, now, text.as_bytes()).parse().unwrap());
    (headers, text)
}

pub fn review(key: &str, data: Value) -> Value {
    json!({"workflow": "review", "key": key, "step": "manual-review", "outcome": "succeeded", "data": data})
}

pub fn payment(key: &str, data: Value) -> Value {
    json!({"workflow": "review", "key": key, "step": "payment", "outcome": "succeeded", "data": data})
}

pub fn record(s: &Stack, key: &str) -> baton_core::domain::lifecycle::Record {
    s.record("review", key).expect("the record")
}

pub fn trace(s: &Stack, key: &str) -> baton_core::ports::store::Trace {
    let w = s.config.workflow("review").unwrap();
    drive(s.memory.trace(&w.name, &CorrelationKey::parse(key).unwrap())).unwrap()
}

pub fn waiting_on_review(s: &Stack, key: &str) {
    send(s, &event(&format!("start-{key}"), "order.placed", key, json!({})));
    settle(s);
    assert_eq!(record(s, key).state, State::Waiting { step: 0 });
}

pub fn run_until<F: std::future::Future>(world: &World, future: &mut std::pin::Pin<&mut F>, op: &str) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..10_000 {
        assert!(future.as_mut().poll(&mut cx).is_pending(), "finished before reaching {op}");
        if lock(&world.log).last().is_some_and(|l| l.ends_with(op)) {
            return;
        }
    }
    panic!("never reached {op}");
}

/// Takes the one visible progress message whose body contains `needle` (left in flight).
pub fn take_progress(s: &Stack, needle: &str) -> Vec<baton_sim::sqs::Message> {
    let now = s.world.now();
    let mut sqs = lock(&s.sqs);
    let all = sqs.messages(QueueId::Progress).to_vec();
    let target = all.iter().find(|m| m.body.contains(needle)).expect("the progress message").id.clone();
    let batch = sqs.receive(QueueId::Progress, 10, now, &mut |_| 0);
    let mine: Vec<_> = batch.iter().filter(|m| m.id == target).cloned().collect();
    // Release the others (make them visible again) by deleting and re-sending them.
    for m in batch.iter().filter(|m| m.id != target) {
        sqs.delete(QueueId::Progress, &m.id, m.receipt);
        sqs.send(QueueId::Progress, m.body.clone(), Default::default(), now);
    }
    assert_eq!(mine.len(), 1);
    mine
}

pub fn running_executions(s: &Stack, needle: &str) -> Vec<String> {
    lock(&s.sfn)
        .executions
        .values()
        .filter(|e| e.status == ExecutionStatus::Running && e.arn.contains(needle))
        .map(|e| e.arn.clone())
        .collect()
}

/// Whether `key`'s ledger holds `input_id` for `reason`.
pub fn ledgered(s: &Stack, key: &str, input_id: &str, reason: &str) -> bool {
    trace(s, key).ledger.iter().any(|l| l.input_id == input_id && l.reason.as_str() == reason)
}

/// Puts a copy of a review callback into k's inbox for step 0 of generation 1, as if a
/// redelivery had buffered it behind a direct application; it expires in an hour.
pub fn buffer_review_copy(s: &Stack, id: &str, hash: String, data: Value) {
    let wf = s.config.workflow("review").unwrap();
    let copy = baton_core::domain::lifecycle::Input::StepInput {
        id: baton_core::domain::ids::EventId::parse(id).unwrap(),
        hash,
        source: baton_core::domain::lifecycle::Source::Callback,
        step: 0,
        outcome: baton_core::domain::lifecycle::StepOutcome::Succeeded,
        data: data.as_object().unwrap().clone(),
        generation: Some(1),
        attempt: None,
    };
    let now = s.world.now();
    let entry = baton_core::ports::store::InboxEntry {
        workflow: wf.name.clone(),
        key: CorrelationKey::parse("k").unwrap(),
        step: 0,
        step_name: wf.steps[0].name.to_string(),
        config_version: wf.config_version.clone(),
        id: baton_core::domain::ids::EventId::parse(id).unwrap(),
        generation: 1,
        arrived_at: now,
        input: serde_json::to_value(&copy).unwrap(),
        status: baton_core::ports::store::InboxStatus::Buffered,
        expires_at: now + time::Duration::hours(1),
        expiry_hold: None,
        drain_target: None,
        drained_at: None,
        callback_key: false,
    };
    drive(s.memory.buffer(&entry)).unwrap();
}
