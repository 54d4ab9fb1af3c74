//! The lifecycle inputs the store tests write with: a two-step plan, fixed names and clock, and
//! task tokens as long as AWS's (`tests/tests/store_contract.rs`, `tests/tests/token_item_reads.rs`).

use baton_core::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
use baton_core::domain::lifecycle::{
    Decision, Input, OnRestart, Plan, Record, Role, Source, StepOutcome, StepPlan, Wait, WaitStatus, Write,
    decide,
};
use time::OffsetDateTime;

/// The tests' epoch, in whole seconds: DynamoDB timestamps keep microseconds.
pub fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_796_000_000).unwrap()
}

/// `order-review`'s two steps, with a config version: every record written here carries it, so
/// reading it back equal shows it round-trips.
pub fn plan() -> Plan {
    Plan {
        steps: vec![StepPlan::requiring(&["decision"]), StepPlan::requiring(&["payment_ref"])],
        on_restart: OnRestart::AfterTerminal,
        version: "v0123456789ab".into(),
    }
}

/// `order-review` and the correlation key `key`.
pub fn names(key: &str) -> (WorkflowName, CorrelationKey) {
    (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse(key).unwrap())
}

/// A callback `id` to `step` with `data` (an object).
pub fn step_input(id: &str, step: u32, data: serde_json::Value) -> Input {
    let serde_json::Value::Object(data) = data else { panic!("object") };
    Input::StepInput {
        id: EventId::parse(id).unwrap(),
        hash: format!("hash-{id}"),
        source: Source::Callback,
        step,
        outcome: StepOutcome::Succeeded,
        data,
        generation: None,
        attempt: None,
    }
}

/// [`decide`] for `key` on [`plan`].
pub fn decide_at(key: &str, record: Option<&Record>, input: &Input, now: OffsetDateTime) -> Decision {
    let (w, k) = names(key);
    decide(&plan(), (&w, &k), record, input, now)
}

/// The token of the step `r` is at, as the store keeps it (out of line when long).
pub fn token_of(r: &Record) -> Option<&TaskToken> {
    r.step_wait().and_then(|w| w.token.as_ref())
}

/// `r` with its step's token set to `token` (a step wait added when it has none): writes the
/// lifecycle never makes, which the stores must still round-trip.
pub fn set_token(r: &mut Record, token: Option<TaskToken>) {
    if r.step_wait().is_none() {
        let step = r.state.step().unwrap_or(0);
        r.waits = vec![Wait { status: WaitStatus::Open, ..Wait::unreached(step, Role::Step) }];
    }
    r.waits[0].token = token;
}

/// `r` as it reads once its step's token item expired.
pub fn without_token(r: &Record) -> Record {
    let mut r = r.clone();
    r.waits.iter_mut().filter(|w| w.role == Role::Step).for_each(|w| w.token = None);
    r
}

/// The write `d` makes.
pub fn write_of(d: Decision) -> Write {
    d.write.expect("the decision writes")
}

/// A task token as long as the API allows (2,048 characters), canonical base64 as AWS's look.
pub fn aws_length_token(seed: u8) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = (0..1536u32).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
