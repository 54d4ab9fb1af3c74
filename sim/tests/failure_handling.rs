//! Bugs an adversarial review found in baton's failure handling, one test each: each drives the
//! real use cases over the simulated world, places one fault or one interleaving exactly, and
//! asserts an invariant baton promises. Each failed before its fix; the `probe_` tests are
//! attacks that baton withstood, kept as regression tests.

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{Input, State};
use baton_core::ports::store::InboxStatus;
use baton_sim::Stack;
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, drive, lock};
use common::*;
use serde_json::json;
use time::Duration;

// ---------------------------------------------------------------------------------------------
// Invariant 8: a generation-1 input drained late is applied to generation 2.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_drain_paused_across_a_restart_never_applies_a_generation_1_input_to_generation_2() {
    let s = traced();
    waiting_on_review(&s, "k");
    // Generation 1's payment arrives early: buffered for step 1, generation 1.
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    deliver(&s, QueueId::Intake);
    assert_eq!(trace(&s, "k").inbox[0].generation, 1);
    // The review completes; Step Functions reports payment's step_ready (generation 1).
    callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    let batch = take_progress(&s, "\"payment\"");
    let mut progress = std::pin::pin!(s.progress.handle(baton_sim::sqs::event(&batch)));
    // The progress invocation writes waiting{1}, lists the inbox (pay-1, generation 1), and is
    // slow before it applies the entry.
    run_until(&s.world, &mut progress, "ddb.Query(inbox)");
    run_until(&s.world, &mut progress, "ddb.GetItem(record)");
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    // Meanwhile: the operator cancels generation 1, a new order opens generation 2, whose
    // review completes and whose payment step waits (its own drain rightly skips pay-1).
    let wf = s.config.workflow("review").unwrap();
    let key = CorrelationKey::parse("k").unwrap();
    drive(s.engine.submit(wf, &key, &Input::Cancel { reason: "operator".into() }, s.world.now())).unwrap();
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    callback(&s, "cb-g2", &review("k", json!({"decision": "ok"})));
    settle(&s);
    let r = record(&s, "k");
    assert_eq!((r.generation, r.state), (2, State::Waiting { step: 1 }));
    // The slow generation-1 drain goes on.
    let _ = drive(progress);
    let r = record(&s, "k");
    assert_eq!(
        (r.generation, r.state),
        (2, State::Waiting { step: 1 }),
        "generation 1's buffered payment moved generation 2 (inputs {:?}, applied {:?})",
        r.waits[0].inputs,
        r.applied.iter().map(|a| (a.id.as_str(), a.generation)).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: a drain racing the sweeper's expiry applies an input that was ledgered expired.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_input_expired_by_the_sweeper_is_not_applied_by_a_drain_that_listed_it_before() {
    let s = traced();
    // A payment callback arrives before the order: buffered (expires in 2 h).
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    let expiry = trace(&s, "k").inbox[0].expires_at;
    // The order comes just before the buffer expires; its review completes.
    s.world.set_now(expiry - Duration::seconds(60));
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    let batch = take_progress(&s, "\"payment\"");
    let mut progress = std::pin::pin!(s.progress.handle(baton_sim::sqs::event(&batch)));
    // The payment step waits; its drain lists cb-pay, still buffered, then is slow.
    run_until(&s.world, &mut progress, "ddb.Query(inbox)");
    run_until(&s.world, &mut progress, "ddb.GetItem(record)");
    // The buffer expires while its step waits: the sweeper drains it rather than expire it.
    s.world.advance(Duration::seconds(90));
    let report = drive(s.sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(report.expired, 0, "expired from under its waiting step");
    let _ = drive(progress);
    let t = trace(&s, "k");
    let ledgered_expired =
        t.ledger.iter().any(|l| l.input_id == "cb-pay" && l.reason.as_str() == "buffer_expired");
    let applied = t.record.as_ref().unwrap().applied.iter().any(|a| a.id.as_str() == "cb-pay");
    assert!(
        !(ledgered_expired && applied),
        "cb-pay is both ledgered buffer_expired (inbox {:?}) and applied to the record ({})",
        t.inbox[0].status,
        t.record.as_ref().unwrap().state
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 6: the step starts waiting while the sweeper expires its input. The sweeper read
// the record before (its step did not wait), and ledgers the input expired after the step's
// drain applied it: one input, two classifications (README's known limit until this test).
// ---------------------------------------------------------------------------------------------

#[test]
fn a_step_that_starts_waiting_inside_the_sweeps_expiry_leaves_its_input_one_classification() {
    let s = traced();
    // A payment callback arrives before the order: buffered for step 1.
    let a = callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    let expiry = trace(&s, "k").inbox[0].expires_at;
    // The order comes just before the buffer expires; its review completes, and payment's
    // step_ready waits in the progress queue.
    s.world.set_now(expiry - Duration::seconds(60));
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    // Past the expiry, the sweeper reads the record (advancing past the review: payment does
    // not wait) and is slow before it ledgers the input.
    s.world.set_now(expiry + Duration::seconds(1));
    let mut sweep = std::pin::pin!(s.sweeper.run_once(s.world.now()));
    run_until(&s.world, &mut sweep, "ddb.PutItem(ledger)");
    // Meanwhile payment waits, and its drain applies the buffered input.
    deliver(&s, QueueId::Progress);
    let _ = drive(sweep);
    settle(&s);
    let t = trace(&s, "k");
    let applied = t.record.as_ref().unwrap().applied.iter().any(|a| a.id.as_str() == "cb-pay");
    let expired = ledgered(&s, "k", "cb-pay", "buffer_expired");
    assert!(
        applied != expired,
        "cb-pay: applied {applied}, ledgered buffer_expired {expired} (inbox {:?}, record {})",
        t.inbox.iter().map(|e| e.status).collect::<Vec<_>>(),
        t.record.as_ref().unwrap().state
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: the sweeper settles an expired buffer, then ledgers it; a failure in between
// leaves it expired without its ledger entry, for good.
// ---------------------------------------------------------------------------------------------

fn expired_entry_setup(s: &Stack) {
    let a = callback(s, "cb-early", &review("k", json!({"decision": "ok"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    let expiry = trace(s, "k").inbox[0].expires_at;
    s.world.set_now(expiry + Duration::seconds(1));
}

fn has_expired_ledger(s: &Stack) -> bool {
    ledgered(s, "k", "cb-early", "buffer_expired")
}

#[test]
fn a_sweep_that_fails_between_settling_and_ledgering_an_expired_buffer_is_finished_by_the_next() {
    let s = stack();
    expired_entry_setup(&s);
    // The settle lands; the ledger write fails (or the sweeper dies right after the settle).
    s.world.script("ddb.PutItem(ledger)", Fault::Before);
    assert!(drive(s.sweeper.run_once(s.world.now())).is_err());
    // The next sweeps run without faults: the failed sweep still holds the expiry until its
    // lease runs out (a sweep that reads the record again could decide otherwise: InboxClaim),
    // and the first sweep after that finishes it.
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
    }
    assert!(!has_expired_ledger(&s), "taken over inside the holder's lease");
    s.world.advance(baton_core::limits::EXPIRY_LEASE);
    let _ = drive(s.sweeper.run_once(s.world.now()));
    assert!(
        has_expired_ledger(&s),
        "the expired input has no ledger entry: inbox {:?}, ledger {:?}",
        trace(&s, "k").inbox.iter().map(|e| e.status).collect::<Vec<_>>(),
        trace(&s, "k").ledger
    );
}

#[test]
fn a_lost_answer_to_the_expiry_settle_still_ledgers_the_expired_buffer() {
    let s = stack();
    expired_entry_setup(&s);
    // The settle lands, but its answer is lost (a timeout).
    s.world.script("ddb.UpdateItem(inbox)", Fault::After);
    assert!(drive(s.sweeper.run_once(s.world.now())).is_err());
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
    }
    assert!(has_expired_ledger(&s), "the expired input has no ledger entry");
}

#[test]
fn an_sdk_retried_expiry_settle_still_ledgers_the_expired_buffer() {
    let s = stack();
    expired_entry_setup(&s);
    // The settle lands; the SDK's retry finds it settled (condition failed, ALL_OLD: expired).
    s.world.script("ddb.UpdateItem(inbox)", Fault::Retried);
    let _ = drive(s.sweeper.run_once(s.world.now()));
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
    }
    assert!(has_expired_ledger(&s), "the expired input has no ledger entry");
}

#[test]
fn an_expired_buffer_whose_ledger_write_failed_does_not_vanish_when_ttl_deletes_it() {
    let s = stack();
    expired_entry_setup(&s);
    s.world.script("ddb.PutItem(ledger)", Fault::Before);
    let _ = drive(s.sweeper.run_once(s.world.now()));
    // The sweeper keeps running for weeks; then TTL deletes the inbox entry.
    for _ in 0..31 {
        s.world.advance(Duration::days(1));
        let _ = drive(s.sweeper.run_once(s.world.now()));
    }
    s.memory.reap_expired(s.world.now(), &mut || true);
    let t = trace(&s, "k");
    assert!(
        !t.inbox.is_empty() || !t.ledger.is_empty(),
        "cb-early (answered 202 buffered) left no trace at all: no inbox entry, no ledger entry"
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 4/7: a drained input that was ignored is settled "applied".
// ---------------------------------------------------------------------------------------------

#[test]
fn a_drained_input_that_was_ignored_is_not_marked_applied() {
    let s = stack();
    waiting_on_review(&s, "k");
    // Two payments arrive early for the same step; the first will complete it.
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    send(&s, &event("pay-2", "payment.settled", "k", json!({"payment_ref": "p2"})));
    deliver(&s, QueueId::Intake);
    assert_eq!(trace(&s, "k").inbox.len(), 2);
    callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    settle(&s);
    let t = trace(&s, "k");
    let r = t.record.as_ref().unwrap();
    let pay2 = t.inbox.iter().find(|e| e.id.as_str() == "pay-2").unwrap();
    let ignored = t.ledger.iter().find(|l| l.input_id == "pay-2");
    assert!(!r.applied.iter().any(|a| a.id.as_str() == "pay-2"), "the record took pay-2 too");
    assert_eq!(
        pay2.status,
        InboxStatus::Ignored,
        "pay-2 changed nothing; the ledger says {:?}",
        ignored.map(|l| l.reason.as_str())
    );
    assert!(ignored.is_some(), "and the ledger says why");
}

// ---------------------------------------------------------------------------------------------
// Invariant 14: the record's bounded lists can still push it past 400 KB.
// ---------------------------------------------------------------------------------------------

#[test]
fn long_event_ids_in_the_history_cannot_push_the_record_past_400_kb() {
    let s = stack();
    waiting_on_review(&s, "k");
    // Event ids may be 256 printable characters: 4-byte ones make each about 1 KB. Partial
    // review notes (no decision yet) merge into step 0, one history entry each.
    let long_id = |i: usize| format!("{}{i:06}", "\u{1D54F}".repeat(250));
    for i in 0..200 {
        send(&s, &event(&long_id(i), "review.done", "k", json!({format!("n{i}"): 1})));
        deliver(&s, QueueId::Intake);
    }
    assert_eq!(record(&s, "k").state, State::Waiting { step: 0 });
    assert!(lock(&s.violations).is_empty(), "{:?}", lock(&s.violations));
    // The deciding review carries a large attachment, within the step's input limit.
    let blob = "x".repeat(110 * 1024);
    send(&s, &event("rev-final", "review.done", "k", json!({"decision": "ok", "blob": blob})));
    deliver(&s, QueueId::Intake);
    let size = baton_aws::dynamodb::record_size(&record(&s, "k"));
    let violations = lock(&s.violations).clone();
    assert!(violations.is_empty(), "record at {size} bytes; {violations:?}");
    assert_eq!(record(&s, "k").state, State::Advancing { step: 0 }, "the step can never advance");
}

// ---------------------------------------------------------------------------------------------
// Invariant 5/7: answers to callbacks refused by the engine are not stored, and retries answer
// otherwise.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_callback_refused_413_gets_413_again_not_a_different_answer() {
    let s = stack();
    waiting_on_review(&s, "k");
    for n in 0..2 {
        let a = callback(
            &s,
            &format!("cb-big-{n}"),
            &review("k", json!({format!("part{n}"): "x".repeat(60 * 1024)})),
        );
        assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    }
    let body = review("k", json!({"part2": "x".repeat(60 * 1024)}));
    let first = callback(&s, "cb-big-2", &body);
    assert_eq!(first.status.as_u16(), 413, "{}", first.body);
    // The sender's HTTP client retries the same request (a lost response, a duplicate send).
    let again = callback(&s, "cb-big-2", &body);
    s.world.advance(baton_core::limits::RECEIPT_LEASE + Duration::seconds(1));
    let later = callback(&s, "cb-big-2", &body);
    assert_eq!(
        (again.status.as_u16(), later.status.as_u16()),
        (413, 413),
        "the same request got {} {} and then {} {}",
        again.status,
        again.body,
        later.status,
        later.body
    );
}

#[test]
fn a_callback_refused_409_by_the_record_is_not_answered_applied_on_a_retry() {
    let s = stack();
    waiting_on_review(&s, "k");
    let a = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!(a.status.as_u16(), 200);
    settle(&s);
    // A week later the receipt has expired and TTL deleted it; the record still remembers
    // cb-1. A sender reuses cb-1 with another payload: refused by the record.
    s.world.advance(baton_core::use_cases::callback::RECEIPT_TTL + Duration::days(1));
    s.memory.reap_expired(s.world.now(), &mut || true);
    let other = review("k", json!({"decision": "reject"}));
    let refused = callback(&s, "cb-1", &other);
    assert_eq!(refused.status.as_u16(), 409, "{}", refused.body);
    // The same request again, after the lease.
    s.world.advance(baton_core::limits::RECEIPT_LEASE + Duration::seconds(1));
    let retry = callback(&s, "cb-1", &other);
    assert_eq!(
        retry.status.as_u16(),
        409,
        "the refused payload is now answered {} {}",
        retry.status,
        retry.body
    );
}

#[test]
fn a_callback_whose_id_is_held_by_an_expired_entry_is_not_answered_buffered() {
    let s = stack();
    expired_entry_setup(&s);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    assert!(has_expired_ledger(&s));
    // A week on, the receipt is gone: the same id again, once with the same payload and once
    // with another. Neither is buffered (the entry holding the id has expired).
    s.world.advance(baton_core::use_cases::callback::RECEIPT_TTL + Duration::hours(1));
    s.memory.reap_expired(s.world.now(), &mut || true);
    let same = callback(&s, "cb-early", &review("k", json!({"decision": "ok"})));
    assert_eq!(
        (same.status.as_u16(), same.body["status"].as_str(), same.body["reason"].as_str()),
        (200, Some("ignored"), Some("buffer_expired")),
        "{}",
        same.body
    );
    s.world.advance(baton_core::use_cases::callback::RECEIPT_TTL + Duration::hours(1));
    s.memory.reap_expired(s.world.now(), &mut || true);
    assert_eq!(trace(&s, "k").inbox.len(), 1, "the inbox entry is kept 30 days past its expiry");
    let other = callback(&s, "cb-early", &review("k", json!({"decision": "changed"})));
    assert_eq!(other.status.as_u16(), 409, "answered {} while refused: {}", other.status, other.body);
    assert!(ledgered(&s, "k", "cb-early", "idempotency_key_reused"));
}

#[test]
fn a_progress_report_whose_heartbeat_failed_is_not_answered_applied_and_its_retry_beats() {
    let s = stack();
    waiting_on_review(&s, "k");
    // manual-review has a 10-minute heartbeat. The report's heartbeat fails before it lands.
    let report = json!({"workflow": "review", "key": "k", "step": "manual-review", "outcome": "in_progress", "data": {"note": "half way"}});
    s.world.script("sfn.SendTaskHeartbeat", Fault::Before);
    let first = callback(&s, "cb-hb", &report);
    assert_eq!(
        (first.status.as_u16(), first.body["maybe_applied"].as_bool()),
        (503, Some(true)),
        "answered as if the heartbeat had been sent: {}",
        first.body
    );
    // The sender retries after Retry-After: this time the heartbeat goes out.
    s.world.advance(Duration::seconds(i64::from(first.retry_after.expect("Retry-After"))));
    let retry = callback(&s, "cb-hb", &report);
    assert_eq!(retry.status.as_u16(), 200, "{}", retry.body);
    // Ten minutes after the step started waiting, it is alive: the retry's heartbeat renewed it.
    s.world.advance(
        Duration::minutes(10) - Duration::seconds(i64::from(first.retry_after.unwrap()))
            + Duration::seconds(5),
    );
    s.fire_timers();
    settle(&s);
    assert_eq!(
        record(&s, "k").state,
        State::Waiting { step: 0 },
        "the step timed out: no heartbeat reached it"
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 13: a cancel whose stop failed can no longer be finished once a restart opened the
// next generation.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_cancel_whose_stop_failed_still_ends_its_execution() {
    let s = stack();
    waiting_on_review(&s, "k");
    let wf = s.config.workflow("review").unwrap();
    let key = CorrelationKey::parse("k").unwrap();
    let cancel = Input::Cancel { reason: "operator".into() };
    s.world.script("sfn.StopExecution", Fault::Before);
    assert!(drive(s.engine.submit(wf, &key, &cancel, s.world.now())).is_err());
    assert_eq!(record(&s, "k").state, State::Cancelled);
    // A new order opens generation 2 before the operator retries; the retry now concerns
    // generation 2 (and stops it), and the sweeper runs.
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    assert_eq!(record(&s, "k").generation, 2);
    let _ = drive(s.engine.submit(wf, &key, &cancel, s.world.now()));
    let _ = drive(s.sweeper.run_once(s.world.now() + Duration::minutes(5)));
    settle(&s);
    let running = running_executions(&s, "review-k-g1");
    assert!(running.is_empty(), "the cancelled generation-1 execution still runs: {running:?}");
}

// ---------------------------------------------------------------------------------------------
// Invariant 12: a failing task publish blocks the drain of the same step_ready.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failing_task_publish_does_not_keep_a_buffered_input_from_its_waiting_step() {
    let s = stack();
    waiting_on_review(&s, "k");
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    deliver(&s, QueueId::Intake);
    callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    // The outbound queue is down for a while: every publish fails.
    for _ in 0..5 {
        s.world.script("sqs.SendMessage(outbound)", Fault::Before);
    }
    for _ in 0..5 {
        deliver(&s, QueueId::Progress);
        s.world.advance(baton_sim::sqs::VISIBILITY + Duration::seconds(1));
    }
    let t = trace(&s, "k");
    let dead = lock(&s.sqs).messages(QueueId::ProgressDlq).len();
    assert_eq!(t.record.as_ref().unwrap().generation, 1);
    assert_ne!(
        t.inbox[0].status,
        InboxStatus::Buffered,
        "the payment step waited ({}) for 15 minutes with its input buffered beside it; the \
         step_ready that owes the drain is dead-lettered ({dead} in the progress DLQ)",
        t.record.as_ref().unwrap().state
    );
}

// ---------------------------------------------------------------------------------------------
// Probes that hold (kept as passing tests).
// ---------------------------------------------------------------------------------------------

#[test]
fn probe_an_sdk_retried_completing_write_resumes_once_and_answers_applied() {
    let s = stack();
    waiting_on_review(&s, "k");
    s.world.script("ddb.PutItem(record)", Fault::Retried);
    let a = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{}", a.body);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    let accepted = lock(&s.sfn).resumes.iter().filter(|r| r.accepted).count();
    assert_eq!(accepted, 1);
}

#[test]
fn probe_a_lost_answer_to_the_step_ready_write_still_publishes_the_task_and_drains() {
    let s = stack();
    waiting_on_review(&s, "k");
    send(&s, &event("pay-1", "payment.settled", "k", json!({"payment_ref": "p1"})));
    deliver(&s, QueueId::Intake);
    callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    s.world.script("ddb.PutItem(record)", Fault::After);
    deliver(&s, QueueId::Progress);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    s.world.advance(baton_sim::sqs::VISIBILITY + Duration::seconds(1));
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Succeeded);
    let published = lock(&s.publisher.log).iter().filter(|p| p.task.id.ends_with("/payment")).count();
    assert_eq!(published, 1);
}

#[test]
fn probe_a_lost_receipt_put_answer_is_503_maybe_applied_and_the_retry_applies_once() {
    let s = stack();
    waiting_on_review(&s, "k");
    s.world.script("ddb.PutItem(receipt)", Fault::After);
    let a = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!((a.status.as_u16(), a.body["maybe_applied"].as_bool()), (503, Some(true)), "{}", a.body);
    let twin = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!(twin.body["error"].as_str(), Some("in_progress"));
    s.world.advance(baton_core::limits::RECEIPT_LEASE + Duration::seconds(1));
    let retry = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!(
        (retry.status.as_u16(), retry.body["status"].as_str()),
        (200, Some("applied")),
        "{}",
        retry.body
    );
    let again = callback(&s, "cb-1", &review("k", json!({"decision": "ok"})));
    assert_eq!(again.body["state"], retry.body["state"]);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
}

#[test]
fn probe_a_cancel_whose_write_answer_was_lost_is_finished_by_the_second_cancel() {
    let s = stack();
    waiting_on_review(&s, "k");
    let wf = s.config.workflow("review").unwrap();
    let key = CorrelationKey::parse("k").unwrap();
    let cancel = Input::Cancel { reason: "operator".into() };
    s.world.script("ddb.PutItem(record)", Fault::After);
    assert!(drive(s.engine.submit(wf, &key, &cancel, s.world.now())).is_err());
    drive(s.engine.submit(wf, &key, &cancel, s.world.now())).unwrap();
    assert!(running_executions(&s, "review-k-g1").is_empty());
    assert_eq!(record(&s, "k").state, State::Cancelled);
}
