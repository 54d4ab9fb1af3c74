//! Attacks on versioned workflows (config-version pinning): each drives the real use cases over
//! the simulated world, deploys `config_v2` (a step `fraud-check` inserted before `payment`) or
//! another config at a chosen moment, and asserts an invariant the feature promises.

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::State;
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, drive, lock};
use baton_sim::{CONFIG, Stack, config_v2};
use common::*;
use serde_json::json;
use time::Duration;

/// The review of `key` approved by a callback `id` to the functions deployed now (answered
/// 200), and its effects delivered.
fn approve(s: &Stack, key: &str, id: &str) {
    let a = callback(s, id, &review(key, json!({"decision": "ok"})));
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    settle(s);
}

fn applied_step(s: &Stack, key: &str, id: &str) -> Option<u32> {
    record(s, key).applied.iter().find(|a| a.id.as_str() == id).map(|a| a.step)
}

fn v2_index(step: &str) -> u32 {
    config_v2().workflow("review").unwrap().step_index(step).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Invariants 4/5: an input buffered before the record exists keeps the step index of the
// version that buffered it; a deploy before the start makes the record drain it at another
// step of its own version.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_payment_buffered_before_the_start_and_a_deploy_is_never_applied_to_another_step() {
    let s = stack();
    // A payment callback arrives before the order (version 1 running): buffered for step 1,
    // which is `payment` in version 1.
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p1"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    // Version 2 is deployed (fraud-check inserted at step 1, payment moved to step 2).
    s.deploy(config_v2());
    // The order arrives; the record starts on version 2; its review completes.
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    approve(&s, "k", "cb-review");
    let r = record(&s, "k");
    // The payment callback named `payment`: applied, it belongs to payment (step 2 in version
    // 2), never to fraud-check (step 1).
    assert_ne!(
        applied_step(&s, "k", "cb-pay"),
        Some(v2_index("fraud-check")),
        "the `payment` callback was applied to step fraud-check: record {} inputs {:?}",
        r.state,
        r.waits[0].inputs
    );
}

// The deploy window, the other way: the new callback function buffers an early payment under
// version 2's indexes; an old intake invocation still running version 1 starts the record.
#[test]
fn a_payment_buffered_by_the_new_functions_reaches_a_record_the_old_ones_started() {
    let s = stack();
    let old = s.live();
    let v1_machines = lock(&s.sfn).machines.clone();
    s.deploy(config_v2());
    let v2_machines = lock(&s.sfn).machines.clone();
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p1"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    // The start event is taken by an intake invocation still on version 1, before the state
    // machines' alias moved (its execution runs version 1's definition: this test is not about
    // which definition an execution starts on).
    lock(&s.sfn).machines = v1_machines;
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    deliver_with(&s, QueueId::Intake, &old.intake);
    lock(&s.sfn).machines = v2_machines;
    assert_eq!(record(&s, "k").config_version.as_str(), old.config.version.as_str());
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 0 });
    approve(&s, "k", "cb-review");
    let t = trace(&s, "k");
    let r = t.record.clone().unwrap();
    assert!(
        applied_step(&s, "k", "cb-pay").is_some(),
        "the buffered payment never reached the record's payment step: record {} (version 1), inbox {:?}",
        r.state,
        t.inbox.iter().map(|e| (e.id.as_str().to_owned(), e.step, e.status)).collect::<Vec<_>>()
    );
}

// A callback for a later generation is buffered under the current record's version; the later
// generation starts on the deployed one.
#[test]
fn a_callback_for_the_next_generation_buffered_before_a_deploy_reaches_its_named_step() {
    let s = stack();
    waiting_on_review(&s, "k");
    let mut body = payment("k", json!({"payment_ref": "p2"}));
    body["generation"] = json!(2);
    let a = callback(&s, "cb-pay-g2", &body);
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    // Generation 1 ends; version 2 is deployed; generation 2 starts on it.
    let wf = s.config.workflow("review").unwrap();
    let key = CorrelationKey::parse("k").unwrap();
    let input = baton_core::domain::lifecycle::Input::Cancel { reason: "operator".into() };
    drive(s.engine.submit(wf, &key, &input, s.world.now())).unwrap();
    s.deploy(config_v2());
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    let r = record(&s, "k");
    assert_eq!((r.generation, r.config_version.as_str()), (2, s.live().config.version.as_str()));
    approve(&s, "k", "cb-review-2");
    let r = record(&s, "k");
    assert_ne!(
        applied_step(&s, "k", "cb-pay-g2"),
        Some(v2_index("fraud-check")),
        "generation 2's `payment` callback was applied to fraud-check: record {} inputs {:?}",
        r.state,
        r.waits[0].inputs
    );
}

// ---------------------------------------------------------------------------------------------
// Invariants 1/3: a record pending on version 1 whose execution never started is restarted by
// the sweeper after a deploy: the execution runs version 2's definition, whose reports the
// record's version does not know.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_pending_record_restarted_by_the_sweeper_after_a_deploy_follows_the_definition_its_execution_runs() {
    let s = stack();
    // The record is written on version 1; StartExecution fails (the intake dies after the write).
    s.world.script("sfn.StartExecution", Fault::Before);
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    deliver(&s, QueueId::Intake);
    // Drop the redelivered start event, as if it went to the DLQ, so only the sweeper repairs.
    {
        let now = s.world.now() + Duration::hours(1);
        let mut sqs = lock(&s.sqs);
        for m in sqs.receive(QueueId::Intake, 10, now, &mut |_| 0) {
            sqs.delete(QueueId::Intake, &m.id, m.receipt);
        }
    }
    let r = record(&s, "k");
    assert_eq!((r.state, r.config_version.as_str()), (State::Pending, s.config.version.as_str()));
    s.deploy(config_v2());
    s.world.advance(Duration::minutes(5));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    // No step had happened: the record follows its execution, which runs version 2.
    let r = record(&s, "k");
    assert_eq!(
        (r.state, r.config_version.as_str()),
        (State::Waiting { step: 0 }, s.live().config.version.as_str())
    );
    finish(&s, "k", &["manual-review", "fraud-check", "payment"]);
}

/// Completes `steps` of `key` in order by callbacks through the deployed functions; the record
/// ends succeeded, with one resume per step and nothing dead-lettered.
fn finish(s: &Stack, key: &str, steps: &[&str]) {
    for (n, step) in steps.iter().enumerate() {
        let data = match *step {
            "manual-review" => json!({"decision": "ok"}),
            "fraud-check" => json!({"score": 1}),
            _ => json!({"payment_ref": "p"}),
        };
        let body =
            json!({"workflow": "review", "key": key, "step": step, "outcome": "succeeded", "data": data});
        let a = callback(s, &format!("cb-{key}-{step}"), &body);
        assert_eq!(a.status.as_u16(), 200, "{step}: {}", a.body);
        settle(s);
        let r = record(s, key);
        let next =
            if n + 1 == steps.len() { State::Succeeded } else { State::Waiting { step: n as u32 + 1 } };
        assert_eq!(r.state, next, "after {step}");
    }
    assert!(lock(&s.sqs).messages(QueueId::ProgressDlq).is_empty(), "no report was dead-lettered");
}

// ---------------------------------------------------------------------------------------------
// Invariant 6 and the rollout plan: a step renamed (classified `safe`) with the same
// `accepts_events`: domain events routed by the new config name the new step, which a record
// on the old version does not have.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_payment_event_reaches_a_version_1_record_after_a_rename_the_plan_calls_safe() {
    let s = stack();
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    let renamed =
        baton_core::domain::config::Config::parse(&CONFIG.replace("name: payment", "name: settlement"))
            .unwrap();
    let live = baton_core::use_cases::rollout::Live::count(&[baton_core::ports::store::RecordHead::of(
        &record(&s, "k"),
    )]);
    let plan = baton_core::use_cases::rollout::plan(&s.config, &renamed, &live);
    assert_eq!(plan.verdict, baton_core::use_cases::rollout::Class::Safe, "{:#?}", plan.changes);
    s.deploy(renamed);
    // The payment settles: the producer sends the same event type as always.
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    settle(&s);
    let t = trace(&s, "k");
    let r = t.record.clone().unwrap();
    assert!(
        r.applied.iter().any(|a| a.id.as_str() == "pay-1"),
        "rollout plan said {} for the rename, but the payment event never reached the version-1 \
         record waiting at payment: record {}, ledger {:?}, inbox {:?}",
        plan.verdict.as_str(),
        r.state,
        t.ledger.iter().map(|l| (l.input_id.clone(), l.reason.as_str())).collect::<Vec<_>>(),
        t.inbox.iter().map(|e| e.id.to_string()).collect::<Vec<_>>()
    );
}

// The same without a crash: an intake invocation on version 1 writes the record, and the deploy
// lands before its StartExecution (the alias has moved by then).
#[test]
fn a_start_paused_across_a_deploy_follows_the_definition_its_execution_runs() {
    let s = traced();
    let old = s.live();
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    let now = s.world.now();
    let batch = lock(&s.sqs).receive(QueueId::Intake, 1, now, &mut |_| 0);
    let mut intake = std::pin::pin!(old.intake.handle(baton_sim::sqs::event(&batch)));
    run_until(&s.world, &mut intake, "ddb.PutItem(record)");
    s.deploy(config_v2());
    let _ = drive(intake);
    lock(&s.sqs).delete(QueueId::Intake, &batch[0].id, batch[0].receipt);
    assert_eq!(record(&s, "k").config_version.as_str(), old.config.version.as_str());
    settle(&s);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    finish(&s, "k", &["manual-review", "fraud-check", "payment"]);
}

// ---------------------------------------------------------------------------------------------
// Invariant 5: operator replay of a ledgered input reads its step in the record's CURRENT
// version, though it was ledgered against an earlier generation on another version.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_ledgered_payment_replayed_after_a_restart_on_a_new_version_is_not_applied_to_another_step() {
    let s = stack();
    waiting_on_review(&s, "k");
    let wf = s.config.workflow("review").unwrap();
    let key = CorrelationKey::parse("k").unwrap();
    let cancel = baton_core::domain::lifecycle::Input::Cancel { reason: "operator".into() };
    drive(s.engine.submit(wf, &key, &cancel, s.world.now())).unwrap();
    // A late payment callback: ignored (terminal), ledgered with its step as version 1 numbers it.
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p1"})));
    assert_eq!(a.body["reason"], "terminal", "{}", a.body);
    // Version 2 is deployed; a new order opens generation 2 on it; its review completes.
    s.deploy(config_v2());
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    approve(&s, "k", "cb-review-2");
    assert_eq!(record(&s, "k").state, State::Waiting { step: v2_index("fraud-check") });
    // The operator replays the ledgered payment.
    let entry = trace(&s, "k").ledger.into_iter().find(|l| l.input_id == "cb-pay").unwrap();
    let engine = s.live().engine.clone();
    let line = drive(baton_core::use_cases::replay::plan_ledger(&engine, &entry, s.world.now())).unwrap();
    let applied = drive(baton_core::use_cases::replay::apply_line(&engine, &line, s.world.now())).unwrap();
    let r = record(&s, "k");
    assert_ne!(
        applied_step(&s, "k", "cb-pay"),
        Some(v2_index("fraud-check")),
        "the replayed `payment` callback (planned {} / {:?}: {:?}) went to fraud-check: record {} inputs {:?}",
        line.classification,
        line.targets.iter().map(|t| (&t.effect, t.config_version.clone())).collect::<Vec<_>>(),
        applied,
        r.state,
        r.waits[0].inputs
    );
}

// The mirror of the paused start: the new functions are live before the alias has moved (no
// ordering between them in template.yaml): a version-2 record gets a version-1 execution, and
// follows it.
#[test]
fn a_record_started_before_the_alias_moved_follows_the_definition_its_execution_runs() {
    let s = stack();
    // Version 1 has been running (and is registered).
    waiting_on_review(&s, "other");
    let v1_machines = lock(&s.sfn).machines.clone();
    s.deploy(config_v2());
    let v2_machines = lock(&s.sfn).machines.clone();
    lock(&s.sfn).machines = v1_machines;
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    let live = s.live();
    deliver_with(&s, QueueId::Intake, &live.intake);
    lock(&s.sfn).machines = v2_machines;
    assert_eq!(record(&s, "k").config_version.as_str(), live.config.version.as_str());
    settle(&s);
    assert_eq!(record(&s, "k").config_version.as_str(), s.config.version.as_str());
    finish(&s, "k", &["manual-review", "payment"]);
}

// ---------------------------------------------------------------------------------------------
// Probes that held.
// ---------------------------------------------------------------------------------------------

/// A callback by a name both versions have, at different indexes, reaches the record's step; a
/// name only the other version has is refused 404 `unknown_step`; the version-1 execution's
/// reports are read in version 1 by the version-2 functions.
#[test]
fn probe_callbacks_and_reports_for_a_version_1_record_after_a_deploy() {
    let s = stack();
    waiting_on_review(&s, "k");
    s.deploy(config_v2());
    let a = callback(
        &s,
        "cb-fraud",
        &json!({"workflow": "review", "key": "k", "step": "fraud-check",
        "outcome": "succeeded", "data": {"score": 1}}),
    );
    assert_eq!((a.status.as_u16(), a.body["error"].as_str()), (404, Some("unknown_step")), "{}", a.body);
    approve(&s, "k", "cb-review");
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p"})));
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    settle(&s);
    assert_eq!(applied_step(&s, "k", "cb-pay"), Some(1));
    assert_eq!(record(&s, "k").state, State::Succeeded);
    assert!(lock(&s.sqs).messages(QueueId::ProgressDlq).is_empty());
    // The fraud-check refusal was not applied anywhere.
    assert!(applied_step(&s, "k", "cb-fraud").is_none());
}

/// A payment event buffered (record on version 1, waiting at review) and drained by a version-2 progress
/// function lands on payment; a version-2 record's fraud-check callback, handled by a
/// version-1 function (the deploy window), reaches fraud-check.
#[test]
fn probe_old_and_new_functions_side_by_side() {
    let s = stack();
    let old = s.live();
    waiting_on_review(&s, "k");
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    deliver(&s, QueueId::Intake);
    s.deploy(config_v2());
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    settle(&s);
    assert_eq!(applied_step(&s, "k", "pay-1"), Some(1));
    // A version-2 record; the old callback function takes a fraud-check callback for it.
    send(&s, &event("start-j", "order.placed", "j", json!({})));
    settle(&s);
    approve(&s, "j", "cb-review-j");
    let a = callback_with(
        &s,
        &old.callbacks,
        "cb-fraud-j",
        &json!({"workflow": "review", "key": "j",
        "step": "fraud-check", "outcome": "succeeded", "data": {"score": 1}}),
    );
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    settle(&s);
    assert_eq!(applied_step(&s, "j", "cb-fraud-j"), Some(v2_index("fraud-check")));
    assert_eq!(record(&s, "j").state, State::Waiting { step: v2_index("payment") });
}

// A step's `accepts_events` is read through the record's own version: after a deploy changes
// the events payment takes, a record on the old version still takes the old ones (and not the
// new ones), and a record on the new version the new ones.
#[test]
fn domain_events_are_read_through_the_records_own_version() {
    let s = stack();
    waiting_on_review(&s, "old");
    callback(&s, "cb-review-old", &review("old", json!({"decision": "ok"})));
    settle(&s);
    assert_eq!(record(&s, "old").state, State::Waiting { step: 1 });
    let changed = baton_core::domain::config::Config::parse(&CONFIG.replace(
        "accepts_events: { type: [\"payment.settled\", \"order.note\"] }",
        "accepts_events: { type: [\"payment.captured\"] }",
    ))
    .unwrap();
    assert_ne!(changed.version, s.config.version, "the pattern changed");
    s.deploy(changed);
    // The new version's event is not the old record's.
    send(&s, &event("captured-old", "payment.captured", "old", json!({"payment_ref": "c"})));
    settle(&s);
    assert!(
        applied_step(&s, "old", "captured-old").is_none(),
        "payment.captured reached a record whose version does not take it"
    );
    assert_eq!(record(&s, "old").state, State::Waiting { step: 1 });
    // The old version's event is.
    send(&s, &event("settled-old", "payment.settled", "old", json!({"payment_ref": "s"})));
    settle(&s);
    assert_eq!(applied_step(&s, "old", "settled-old"), Some(1));
    assert_eq!(record(&s, "old").state, State::Succeeded);
    // A record on the new version takes the new event, not the old one.
    send(&s, &event("start-new", "order.placed", "new", json!({})));
    settle(&s);
    approve(&s, "new", "cb-review-new");
    send(&s, &event("settled-new", "payment.settled", "new", json!({"payment_ref": "s"})));
    settle(&s);
    assert!(
        applied_step(&s, "new", "settled-new").is_none(),
        "payment.settled reached a record whose version does not take it"
    );
    send(&s, &event("captured-new", "payment.captured", "new", json!({"payment_ref": "c"})));
    settle(&s);
    assert_eq!(record(&s, "new").state, State::Succeeded);
}

// Round 2: a second attack on the fixes.
// ---------------------------------------------------------------------------------------------

/// A record written Pending on the first config; its StartExecution failed; `next` is deployed
/// and the sweeper starts the execution on it. The execution's first step_ready is left in the
/// progress queue (undelivered): the record is still Pending on the first version.
fn pending_on_v1_running_next(s: &Stack, key: &str, next: baton_core::domain::config::Config) {
    s.world.script("sfn.StartExecution", Fault::Before);
    send(s, &event(&format!("start-{key}"), "order.placed", key, json!({})));
    deliver(s, QueueId::Intake);
    {
        let now = s.world.now() + Duration::hours(1);
        let mut sqs = lock(&s.sqs);
        for m in sqs.receive(QueueId::Intake, 10, now, &mut |_| 0) {
            sqs.delete(QueueId::Intake, &m.id, m.receipt);
        }
    }
    let r = record(s, key);
    assert_eq!((r.state, r.config_version.as_str()), (State::Pending, s.config.version.as_str()));
    s.deploy(next);
    s.world.advance(Duration::minutes(5));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(!lock(&s.sqs).messages(QueueId::Progress).is_empty(), "the new execution's step_ready is queued");
    assert_eq!(record(s, key).state, State::Pending);
}

/// Where an input id ended: applied (step), inbox entries (step name, status), ledger reasons,
/// dead-lettered intake messages containing it.
fn whereabouts(s: &Stack, key: &str, id: &str) -> String {
    let t = trace(s, key);
    let r = t.record.clone().unwrap();
    let applied: Vec<_> =
        r.applied.iter().filter(|a| a.id.as_str() == id).map(|a| (a.step, a.generation)).collect();
    let inbox: Vec<_> =
        t.inbox.iter().filter(|e| e.id.as_str() == id).map(|e| (e.step_name.clone(), e.status)).collect();
    let ledger: Vec<_> = t.ledger.iter().filter(|l| l.input_id == id).map(|l| l.reason.as_str()).collect();
    let dlq = lock(&s.sqs).messages(QueueId::IntakeDlq).iter().filter(|m| m.body.contains(id)).count();
    format!(
        "record {} (config {:?}) applied {applied:?}, inbox {inbox:?}, ledger {ledger:?}, intake DLQ {dlq}",
        r.state, r.config_version
    )
}

fn classified_somewhere(s: &Stack, key: &str, id: &str) -> bool {
    let t = trace(s, key);
    let r = t.record.clone().unwrap();
    r.applied.iter().any(|a| a.id.as_str() == id)
        || t.inbox.iter().any(|e| e.id.as_str() == id)
        || t.ledger.iter().any(|l| l.input_id == id)
        || lock(&s.sqs).messages(QueueId::IntakeDlq).iter().any(|m| m.body.contains(id))
}

/// The first config with payment taking `payment.captured` instead of `payment.settled`.
fn captured_config() -> baton_core::domain::config::Config {
    baton_core::domain::config::Config::parse(&CONFIG.replace(
        "accepts_events: { type: [\"payment.settled\", \"order.note\"] }",
        "accepts_events: { type: [\"payment.captured\"] }",
    ))
    .unwrap()
}

// Invariant 6 (and 1): an event arriving while the record is Pending on version 1, whose
// execution runs version 2 (taken only by version 2's payment), is not decided while the
// record's version is unsettled: it is retried through the queue, and once the first step
// report has moved the record to version 2, version 2's reading buffers it for payment.
#[test]
fn r2_an_event_for_the_version_the_pending_record_moves_to_waits_for_the_version_to_settle() {
    let s = stack();
    pending_on_v1_running_next(&s, "k", captured_config());
    send(&s, &event("cap-1", "payment.captured", "k", json!({"payment_ref": "c1"})));
    let live = s.live();
    deliver_with(&s, QueueId::Intake, &live.intake);
    assert_eq!(lock(&s.sqs).messages(QueueId::Intake).len(), 1, "retried, not decided while pending");
    deliver_with(&s, QueueId::Progress, &live.progress);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    s.world.advance(baton_sim::sqs::VISIBILITY);
    settle(&s);
    approve(&s, "k", "cb-review");
    assert_eq!(applied_step(&s, "k", "cap-1"), Some(1), "{}", whereabouts(&s, "k", "cap-1"));
    assert_eq!(record(&s, "k").state, State::Succeeded);
}

// The mirror: an event only version 1 takes, arriving while the record is Pending on version 1
// but running version 2, is not buffered under version 1's reading: once the record is on
// version 2, it is read there, takes no step, and is done with, never applied.
#[test]
fn r2_an_event_only_the_old_version_takes_is_not_applied_once_the_record_runs_the_new_one() {
    let s = stack();
    pending_on_v1_running_next(&s, "k", captured_config());
    send(&s, &event("set-1", "payment.settled", "k", json!({"payment_ref": "s1"})));
    let live = s.live();
    deliver_with(&s, QueueId::Intake, &live.intake);
    assert_eq!(lock(&s.sqs).messages(QueueId::Intake).len(), 1, "retried, not decided while pending");
    deliver_with(&s, QueueId::Progress, &live.progress);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    approve(&s, "k", "cb-review");
    s.world.advance(baton_sim::sqs::VISIBILITY);
    settle(&s);
    assert!(lock(&s.sqs).messages(QueueId::Intake).is_empty(), "done with, not retried forever");
    assert!(
        applied_step(&s, "k", "set-1").is_none(),
        "payment.settled was applied to a record whose version's payment takes only payment.captured: {}",
        whereabouts(&s, "k", "set-1")
    );
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
}

// Invariant 6: a warm intake function of the old deployment read the registered versions before
// the deploy; an event for a record started on the new version is skipped in its own version,
// and then read in the record's version, which it reads from the table then.
#[test]
fn r2_an_old_warm_intake_reads_an_event_for_a_record_on_the_new_version_in_that_version() {
    let s = stack();
    let old = s.live();
    // The old functions have handled an event (their list of versions is read: only v1).
    send(&s, &event("start-other", "order.placed", "other", json!({})));
    deliver_with(&s, QueueId::Intake, &old.intake);
    s.deploy(config_v2());
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    settle(&s);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    assert_eq!(record(&s, "k").state, State::Waiting { step: 0 });
    // The payment event is taken by an old invocation (the deploy window).
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    deliver_with(&s, QueueId::Intake, &old.intake);
    assert!(lock(&s.sqs).messages(QueueId::Intake).is_empty(), "the event was taken (Done)");
    assert!(
        classified_somewhere(&s, "k", "pay-1"),
        "the payment event is classified nowhere: {}",
        whereabouts(&s, "k", "pay-1")
    );
}

// The version switch landing while an event is being read: the invocation that saw the record
// pending fails the message, and its redelivery reads the record on its settled version.
#[test]
fn r2_a_repin_while_an_event_is_read_does_not_lose_it() {
    let s = traced();
    pending_on_v1_running_next(&s, "k", config_v2());
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    let live = s.live();
    let now = s.world.now();
    let batch = lock(&s.sqs).receive(QueueId::Intake, 1, now, &mut |_| 0);
    let mut intake = std::pin::pin!(live.intake.handle(baton_sim::sqs::event(&batch)));
    run_until(&s.world, &mut intake, "ddb.GetItem(record)");
    deliver_with(&s, QueueId::Progress, &live.progress);
    assert_eq!(record(&s, "k").config_version.as_str(), live.config.version.as_str());
    let response = drive(intake);
    if response.batch_item_failures.is_empty() {
        lock(&s.sqs).delete(QueueId::Intake, &batch[0].id, batch[0].receipt);
    }
    s.world.advance(baton_sim::sqs::VISIBILITY);
    settle(&s);
    assert!(
        classified_somewhere(&s, "k", "pay-1"),
        "the payment event is classified nowhere: {}",
        whereabouts(&s, "k", "pay-1")
    );
}

// Invariant 6: the record remembers applied inputs by step index; a redelivered event that a
// generation on version 1 applied to payment (index 1) is, in the next generation on version 2
// (payment is index 2), still a duplicate: an input of an earlier generation is a repeat
// whatever its step. Without the deploy it is a duplicate too (the control below).
#[test]
fn r2_an_event_applied_in_generation_1_is_a_duplicate_in_generation_2_on_a_new_version() {
    let s = stack();
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    settle(&s);
    let pay = event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"}));
    send(&s, &pay);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Succeeded);
    s.deploy(config_v2());
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    assert_eq!(record(&s, "k").generation, 2);
    finish_until_payment_v2(&s);
    // The producer's late redelivery of pay-1.
    send(&s, &pay);
    settle(&s);
    let r = record(&s, "k");
    let times = r.applied.iter().filter(|a| a.id.as_str() == "pay-1").count();
    assert_eq!(
        times,
        1,
        "pay-1 applied {times} times (generation 1 and 2): record {} applied {:?}",
        r.state,
        r.applied.iter().map(|a| (a.id.to_string(), a.step, a.generation)).collect::<Vec<_>>()
    );
}

fn finish_until_payment_v2(s: &Stack) {
    approve(s, "k", "cb-review-2");
    let body = json!({"workflow": "review", "key": "k", "step": "fraud-check", "outcome": "succeeded", "data": {"score": 1}});
    let a = callback(s, "cb-fraud-2", &body);
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    settle(s);
    assert_eq!(record(s, "k").state, State::Waiting { step: v2_index("payment") });
}

#[test]
fn r2_control_without_a_deploy_the_late_redelivery_is_a_duplicate() {
    let s = stack();
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    settle(&s);
    let pay = event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"}));
    send(&s, &pay);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Succeeded);
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    callback(&s, "cb-review-2", &review("k", json!({"decision": "ok"})));
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    send(&s, &pay);
    settle(&s);
    let r = record(&s, "k");
    assert_eq!(r.applied.iter().filter(|a| a.id.as_str() == "pay-1").count(), 1);
    assert_eq!(r.state, State::Waiting { step: 1 });
}

// Probe: a callback buffered under a step name the record's version loses at the re-pin
// (renamed) is expired by the sweeper with a ledger entry, never applied elsewhere.
#[test]
fn r2_probe_a_callback_buffered_under_a_name_the_repinned_version_lacks_expires_ledgered() {
    let s = stack();
    let renamed =
        baton_core::domain::config::Config::parse(&CONFIG.replace("name: payment", "name: settlement"))
            .unwrap();
    pending_on_v1_running_next(&s, "k", renamed);
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p1"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    settle(&s);
    assert_eq!(record(&s, "k").config_version.as_str(), s.live().config.version.as_str());
    approve(&s, "k", "cb-review");
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    s.world.advance(Duration::days(2));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(applied_step(&s, "k", "cb-pay").is_none());
    assert!(ledgered(&s, "k", "cb-pay", "buffer_expired"), "{}", whereabouts(&s, "k", "cb-pay"));
}

// Every report the generated definitions send names its config version: one without it is
// malformed, dead-lettered with its reason like any other, and moves nothing.
#[test]
fn a_report_without_a_config_version_is_dead_lettered_as_malformed() {
    let s = stack();
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    // The execution's step_ready for payment waits in the queue: taken, and sent again without
    // `config_version`.
    let now = s.world.now();
    let taken = lock(&s.sqs).receive(QueueId::Progress, 10, now, &mut |_| 0);
    let ready = taken.iter().find(|m| m.body.contains("step_ready")).expect("the payment step_ready");
    let mut unnamed: serde_json::Value = serde_json::from_str(&ready.body).unwrap();
    unnamed.as_object_mut().unwrap().remove("config_version");
    for m in &taken {
        lock(&s.sqs).delete(QueueId::Progress, &m.id, m.receipt);
    }
    let before = record(&s, "k");
    lock(&s.sqs).send(QueueId::Progress, unnamed.to_string(), Default::default(), now);
    settle(&s);
    let dead = lock(&s.sqs).messages(QueueId::ProgressDlq).to_vec();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let attribute = |name: &str| dead[0].attributes.get(name).map(String::as_str);
    assert_eq!(attribute(baton_core::ports::dead_letters::REASON_ATTRIBUTE), Some("malformed_report"));
    let detail = attribute(baton_core::ports::dead_letters::DETAIL_ATTRIBUTE).unwrap_or_default();
    assert!(detail.contains("config_version"), "{detail}");
    assert_eq!(dead[0].body, unnamed.to_string(), "the body as it came");
    let after = record(&s, "k");
    assert_eq!((after.state, after.version), (before.state, before.version), "the record did not move");
}
