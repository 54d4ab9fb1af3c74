//! Attacks on the drain lease (commit d13cf73): a drain's claim records `drained_at`, the entry
//! is due for the sweeper `DRAIN_LEASE` later (its expiry if sooner), the sweeper finishes a
//! drain that died, and skips an entry listed early that was given back since. Each test drives
//! the real use cases over the simulated world and asserts one invariant of the inbox.

mod common;

use baton_core::domain::ids::{CorrelationKey, payload_hash};
use baton_core::domain::lifecycle::{Input, State};
use baton_core::limits::DRAIN_LEASE;
use baton_core::ports::store::{Claim, DrainTarget, InboxClaim, InboxEntry, InboxStatus, WorkflowStore};
use baton_sim::Stack;
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, drive};
use common::*;
use serde_json::json;
use time::{Duration, OffsetDateTime};

fn key() -> CorrelationKey {
    CorrelationKey::parse("k").unwrap()
}

fn entry_of(s: &Stack, id: &str) -> InboxEntry {
    trace(s, "k").inbox.into_iter().find(|e| e.id.as_str() == id).expect("the inbox entry")
}

/// A drain (whose invocation then dies) takes `id` into (generation, step) at `at`.
fn drain_and_die(s: &Stack, id: &str, generation: u32, step: u32, at: OffsetDateTime) {
    let e = entry_of(s, id);
    let drain = InboxClaim::Drain(DrainTarget { generation, step }, at);
    assert!(drain.held(&drive(s.memory.claim(&e, &drain)).unwrap()), "the drain that dies takes {id}");
}

fn cancel(s: &Stack) {
    let wf = s.config.workflow("review").unwrap();
    drive(s.engine.submit(wf, &key(), &Input::Cancel { reason: "operator".into() }, s.world.now())).unwrap();
}

fn listed(s: &Stack, at: OffsetDateTime) -> Vec<String> {
    drive(s.memory.expired_buffers(at, 100)).unwrap().into_iter().map(|e| e.id.to_string()).collect()
}

fn applications(s: &Stack, id: &str) -> usize {
    record(s, "k").history.iter().filter(|h| h.cause_id.as_deref() == Some(id)).count()
}

// ---------------------------------------------------------------------------------------------
// Invariant 2 (and 5): a buffered input is never ledgered buffer_expired before its expiry.
// Interleaving: a drain took cb-x (generation 1) and died; generation 1 is cancelled and
// generation 2 waits. Past the drain's lease two sweeps run at once (a sweep may run 60 s, the
// schedule fires every minute). Sweep 1 reads the entry (draining: the guard lets it through)
// and pauses before its Expire claim. Sweep 2 finishes the drain: generation 1 has ended and
// nothing was applied, so it gives the entry back (Undrain: buffered, due at its expiry). Sweep 1's
// Expire claim then lands on a *buffered* entry an hour before its expiry; the guard was checked
// on the read before, not in the claim's condition.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_entry_given_back_between_a_sweeps_read_and_its_expire_claim_is_not_expired_before_its_time() {
    let s = traced();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-x", payload_hash(b"x"), json!({"note": "x"}));
    let expires_at = entry_of(&s, "cb-x").expires_at;
    drain_and_die(&s, "cb-x", 1, 0, s.world.now());
    cancel(&s);
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    assert_eq!((record(&s, "k").generation, record(&s, "k").state), (2, State::Waiting { step: 0 }));
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    let now = s.world.now();
    assert!(now < expires_at);
    // Sweep 1: lists cb-x (lease passed), reads it (draining), stops before its Expire claim.
    let mut first = std::pin::pin!(s.sweeper.run_once(now));
    run_until(&s.world, &mut first, "ddb.UpdateItem(inbox claim)");
    // Sweep 2 finishes the dead drain: generation 1 ended, nothing applied: given back.
    let _ = drive(s.sweeper.run_once(now));
    assert_eq!(entry_of(&s, "cb-x").status, InboxStatus::Buffered, "given back by sweep 2");
    let _ = drive(first);
    let t = trace(&s, "k");
    let e = t.inbox.iter().find(|e| e.id.as_str() == "cb-x").unwrap();
    assert!(
        !ledgered(&s, "k", "cb-x", "buffer_expired") && e.status != InboxStatus::Expired,
        "cb-x was expired at {now} (status {:?}, ledger {:?}), though it expires at {expires_at}",
        e.status,
        t.ledger.iter().filter(|l| l.input_id == "cb-x").map(|l| l.reason.as_str()).collect::<Vec<_>>()
    );
}

// The same window in its smallest form: any give-back (Undrain: a drain's drain_one that found
// its step no longer waiting, or a concurrent sweep's finish_drain) landing between the sweep's
// fresh read and its Expire claim. The claim's condition does not say "past its expiry".
#[test]
fn an_entry_undrained_by_a_drain_during_a_sweeps_lease_pass_is_not_expired_before_its_time() {
    let s = traced();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-y", payload_hash(b"y"), json!({"note": "y"}));
    let expires_at = entry_of(&s, "cb-y").expires_at;
    drain_and_die(&s, "cb-y", 1, 0, s.world.now());
    cancel(&s);
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    let now = s.world.now();
    let mut sweep = std::pin::pin!(s.sweeper.run_once(now));
    run_until(&s.world, &mut sweep, "ddb.UpdateItem(inbox claim)");
    let e = entry_of(&s, "cb-y");
    assert_eq!(drive(s.memory.claim(&e, &InboxClaim::Undrain)).unwrap(), Claim::Acquired);
    let _ = drive(sweep);
    assert!(
        !ledgered(&s, "k", "cb-y", "buffer_expired"),
        "cb-y ledgered buffer_expired at {now}, its expiry is {expires_at} (status {:?})",
        entry_of(&s, "cb-y").status
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 5: an entry given back is not finished or expired early because of a stale due time,
// even when the index still shows the drained copy.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_entry_given_back_and_listed_early_by_a_lagging_index_is_left_alone() {
    let s = stack();
    s.memory.set_index_lag(10_000, |max| max);
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-z", payload_hash(b"z"), json!({"note": "z"}));
    drain_and_die(&s, "cb-z", 1, 0, s.world.now());
    s.memory.catch_up_index();
    // Given back (its step stopped waiting): cancelled, then the drain's retry undrains.
    cancel(&s);
    let e = entry_of(&s, "cb-z");
    drive(s.memory.claim(&e, &InboxClaim::Undrain)).unwrap();
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    assert_eq!(listed(&s, s.world.now()), ["cb-z"], "the lagging index still lists the drained copy");
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
    }
    let e = entry_of(&s, "cb-z");
    assert_eq!(e.status, InboxStatus::Buffered, "given back: left for its expiry");
    assert!(!ledgered(&s, "k", "cb-z", "buffer_expired"));
    // At its expiry it is expired, once.
    s.memory.catch_up_index();
    s.world.set_now(e.expires_at);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(entry_of(&s, "cb-z").status, InboxStatus::Expired);
    assert!(ledgered(&s, "k", "cb-z", "buffer_expired"));
}

// Undrain clears the lease in the store itself: due at the expiry again, not at the lease.
#[test]
fn an_undrained_entry_is_due_at_its_expiry_not_at_the_old_lease() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-u", payload_hash(b"u"), json!({"note": "u"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-u", 1, 0, t0);
    let e = entry_of(&s, "cb-u");
    drive(s.memory.claim(&e, &InboxClaim::Undrain)).unwrap();
    let e = entry_of(&s, "cb-u");
    assert_eq!((e.drained_at, e.drain_target, e.due_at()), (None, None, e.expires_at));
    assert!(listed(&s, t0 + DRAIN_LEASE + Duration::seconds(1)).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Invariant 1: a drain that applied the input and died before settling it, then a restart
// (generation 2 waits at the same step) before the lease passes: the sweeper settles it applied,
// never applies it to generation 2, never ledgers it.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_drain_that_applied_and_died_then_a_restart_inside_the_lease_is_settled_applied() {
    let s = stack();
    let a = callback(&s, "cb-note", &review("k", json!({"note": "early"})));
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    send(&s, &event("start-k", "order.placed", "k", json!({})));
    deliver(&s, QueueId::Intake);
    // The step_ready's drain applies cb-note; its settle fails (the invocation dies after).
    s.world.script("ddb.UpdateItem(inbox)", Fault::Before);
    deliver(&s, QueueId::Progress);
    let t = trace(&s, "k");
    assert!(t.record.as_ref().unwrap().applied.iter().any(|a| a.id.as_str() == "cb-note"));
    assert_eq!(entry_of(&s, "cb-note").status, InboxStatus::Draining);
    // Generation 1 ends and generation 2 waits at the same step, inside the lease.
    cancel(&s);
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    deliver(&s, QueueId::Intake);
    deliver(&s, QueueId::Progress);
    assert_eq!((record(&s, "k").generation, record(&s, "k").state), (2, State::Waiting { step: 0 }));
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
        settle(&s);
    }
    let r = record(&s, "k");
    let gens: Vec<_> =
        r.history.iter().filter(|h| h.cause_id.as_deref() == Some("cb-note")).map(|h| h.generation).collect();
    assert_eq!(gens, [1], "cb-note applied once, to generation 1");
    let e = entry_of(&s, "cb-note");
    assert_eq!(e.status, InboxStatus::Applied);
    assert!(trace(&s, "k").ledger.iter().all(|l| l.input_id != "cb-note"), "applied, not ledgered");
}

// ---------------------------------------------------------------------------------------------
// Invariant 1/2: a drain that died before applying, then generation 1 cancelled and generation 2
// waiting at the same step: the sweeper at the lease gives it back (never into generation 2),
// and it is expired only at its expiry.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_dead_drain_of_a_cancelled_generation_is_given_back_and_expires_only_at_its_expiry() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-c", payload_hash(b"c"), json!({"decision": "ok"}));
    let expires_at = entry_of(&s, "cb-c").expires_at;
    drain_and_die(&s, "cb-c", 1, 0, s.world.now());
    cancel(&s);
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
        settle(&s);
    }
    assert_eq!(applications(&s, "cb-c"), 0, "never applied to generation 2");
    assert_eq!(record(&s, "k").state, State::Waiting { step: 0 });
    let e = entry_of(&s, "cb-c");
    assert!(e.status == InboxStatus::Buffered || e.status == InboxStatus::Ignored, "{:?}", e.status);
    assert!(!ledgered(&s, "k", "cb-c", "buffer_expired"), "not expired before {expires_at}");
    s.world.set_now(expires_at + Duration::seconds(1));
    let _ = drive(s.sweeper.run_once(s.world.now()));
    assert!(entry_of(&s, "cb-c").status.is_final());
    assert_eq!(applications(&s, "cb-c"), 0);
}

// ---------------------------------------------------------------------------------------------
// Invariant 1: a drain that died holding cb-a while another input completed the step: the
// sweeper's finish does not apply cb-a to the next step, nor twice.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_dead_drain_whose_step_was_completed_by_another_input_does_not_apply_it_elsewhere() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-a", payload_hash(b"a"), json!({"decision": "reject"}));
    drain_and_die(&s, "cb-a", 1, 0, s.world.now());
    let a = callback(&s, "cb-b", &review("k", json!({"decision": "ok"})));
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    s.world.advance(DRAIN_LEASE + Duration::seconds(1));
    for _ in 0..3 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
        settle(&s);
    }
    assert_eq!(applications(&s, "cb-a"), 0, "cb-a applied after its step passed");
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    let e = entry_of(&s, "cb-a");
    assert!(e.status.is_final(), "finished, not left draining: {:?}", e.status);
    assert!(!(e.status == InboxStatus::Applied && ledgered(&s, "k", "cb-a", "buffer_expired")));
}

// ---------------------------------------------------------------------------------------------
// Invariant 3: the lease is renewed by a later drain's claim; the first drain's lease passing
// does not list the entry, the second's does; and once listed it is applied (no lost wake-up).
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_drains_claim_renews_the_lease_and_the_input_is_still_applied() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-r", payload_hash(b"r"), json!({"decision": "ok"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-r", 1, 0, t0);
    s.world.advance(Duration::seconds(90));
    drain_and_die(&s, "cb-r", 1, 0, s.world.now());
    assert!(
        listed(&s, t0 + DRAIN_LEASE + Duration::seconds(1)).is_empty(),
        "inside the second drain's lease"
    );
    let due = t0 + Duration::seconds(90) + DRAIN_LEASE;
    assert_eq!(listed(&s, due), ["cb-r"]);
    s.world.set_now(due);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    assert_eq!(applications(&s, "cb-r"), 1);
    assert_eq!(entry_of(&s, "cb-r").status, InboxStatus::Applied);
}

// ---------------------------------------------------------------------------------------------
// Invariant 3 at the boundary: a lease that would outlast the expiry: due at the expiry, and the
// sweeper then finishes the drain (applies it), never expires it beside its waiting step.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_drain_that_died_just_before_the_expiry_is_finished_at_the_expiry_not_expired() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-e", payload_hash(b"e"), json!({"decision": "ok"}));
    let expires_at = entry_of(&s, "cb-e").expires_at;
    // The step still waits (no timeout report from Step Functions is delivered here).
    s.world.set_now(expires_at - Duration::seconds(30));
    drain_and_die(&s, "cb-e", 1, 0, s.world.now());
    assert_eq!(entry_of(&s, "cb-e").due_at(), expires_at);
    assert!(listed(&s, expires_at - Duration::seconds(1)).is_empty());
    assert_eq!(listed(&s, expires_at), ["cb-e"]);
    s.world.set_now(expires_at);
    let _ = drive(s.sweeper.run_once(s.world.now()));
    settle(&s);
    let applied = applications(&s, "cb-e") > 0;
    let expired = ledgered(&s, "k", "cb-e", "buffer_expired");
    assert!(!(applied && expired), "applied and ledgered expired");
}

// The boundary itself: one second inside the lease the sweeper leaves it, at the lease it
// finishes it (applied once).
#[test]
fn the_sweeper_at_the_exact_lease_boundary_applies_once() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-l", payload_hash(b"l"), json!({"decision": "ok"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-l", 1, 0, t0);
    s.world.set_now(t0 + DRAIN_LEASE - Duration::seconds(1));
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(entry_of(&s, "cb-l").status, InboxStatus::Draining);
    s.world.set_now(t0 + DRAIN_LEASE);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    assert_eq!(applications(&s, "cb-l"), 1);
    assert_eq!(entry_of(&s, "cb-l").status, InboxStatus::Applied);
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: a drain still alive (paused before its record write, past the lease as the
// lagging index or a stale claim time says) and the sweeper finishing it at once: applied once,
// settled applied, nothing ledgered.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_live_drain_and_the_sweeper_finishing_it_apply_the_input_once() {
    let s = traced();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-live", payload_hash(b"live"), json!({"decision": "ok"}));
    let wf = s.config.workflow("review").unwrap().clone();
    let k = key();
    let t0 = s.world.now();
    let mut live = std::pin::pin!(s.engine.drain(&wf, &k, 1, 0, t0));
    run_until(&s.world, &mut live, "ddb.PutItem(record)");
    assert_eq!(entry_of(&s, "cb-live").status, InboxStatus::Draining);
    s.world.set_now(t0 + DRAIN_LEASE);
    let _ = drive(s.sweeper.run_once(s.world.now()));
    let _ = drive(live);
    settle(&s);
    for _ in 0..2 {
        let _ = drive(s.sweeper.run_once(s.world.now()));
        settle(&s);
    }
    assert_eq!(applications(&s, "cb-live"), 1, "applied once");
    assert_eq!(entry_of(&s, "cb-live").status, InboxStatus::Applied);
    assert!(trace(&s, "k").ledger.iter().all(|l| l.input_id != "cb-live"));
}

// The sweeper finishing a drain that renewed its claim (lease not passed on the table), listed
// from a lagging index copy of the first claim: the fresh copy's lease is not checked. Still,
// the outcome must be right: applied once.
#[test]
fn a_renewed_drain_listed_from_a_lagging_index_is_applied_once() {
    let s = traced();
    s.memory.set_index_lag(10_000, |max| max);
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-lag", payload_hash(b"lag"), json!({"decision": "ok"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-lag", 1, 0, t0);
    s.memory.catch_up_index();
    s.world.set_now(t0 + DRAIN_LEASE - Duration::seconds(10));
    let wf = s.config.workflow("review").unwrap().clone();
    let k = key();
    let mut live = std::pin::pin!(s.engine.drain(&wf, &k, 1, 0, s.world.now()));
    run_until(&s.world, &mut live, "ddb.PutItem(record)");
    assert_eq!(entry_of(&s, "cb-lag").drained_at, Some(s.world.now()));
    s.world.set_now(t0 + DRAIN_LEASE);
    assert_eq!(listed(&s, s.world.now()), ["cb-lag"], "listed from the first claim's copy");
    let _ = drive(s.sweeper.run_once(s.world.now()));
    let _ = drive(live);
    settle(&s);
    assert_eq!(applications(&s, "cb-lag"), 1);
    assert_eq!(entry_of(&s, "cb-lag").status, InboxStatus::Applied);
}

// ---------------------------------------------------------------------------------------------
// Invariant 3: the sweeper's finish of a dead drain fails once (its record write), and the next
// sweep past the renewed lease applies it: no lost wake-up.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failed_finish_is_retried_past_the_renewed_lease() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-f", payload_hash(b"f"), json!({"decision": "ok"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-f", 1, 0, t0);
    s.world.set_now(t0 + DRAIN_LEASE);
    s.world.script("ddb.PutItem(record)", Fault::Before);
    assert!(drive(s.sweeper.run_once(s.world.now())).is_err());
    assert_eq!(applications(&s, "cb-f"), 0);
    assert_eq!(entry_of(&s, "cb-f").status, InboxStatus::Draining);
    s.world.advance(DRAIN_LEASE);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    assert_eq!(applications(&s, "cb-f"), 1);
    assert_eq!(entry_of(&s, "cb-f").status, InboxStatus::Applied);
}

// ---------------------------------------------------------------------------------------------
// Invariant 6: a settled entry is never claimed again: later sweeps (at the lease, at the
// expiry) leave an applied entry as it is.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_settled_entry_is_never_claimed_again_by_later_sweeps() {
    let s = stack();
    waiting_on_review(&s, "k");
    buffer_review_copy(&s, "cb-s", payload_hash(b"s"), json!({"decision": "ok"}));
    let t0 = s.world.now();
    drain_and_die(&s, "cb-s", 1, 0, t0);
    s.world.set_now(t0 + DRAIN_LEASE);
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    settle(&s);
    let settled = entry_of(&s, "cb-s");
    assert_eq!(settled.status, InboxStatus::Applied);
    for at in [t0 + DRAIN_LEASE * 2, settled.expires_at, settled.expires_at + Duration::minutes(10)] {
        s.world.set_now(at);
        let _ = drive(s.sweeper.run_once(s.world.now()));
        settle(&s);
    }
    // A drain's claim on it is refused.
    let drain = InboxClaim::Drain(DrainTarget { generation: 1, step: 0 }, s.world.now());
    assert!(!drain.held(&drive(s.memory.claim(&settled, &drain)).unwrap()));
    assert_eq!(entry_of(&s, "cb-s"), settled, "a settled entry changed");
    assert_eq!(applications(&s, "cb-s"), 1);
    assert!(trace(&s, "k").ledger.iter().all(|l| l.input_id != "cb-s"));
}
