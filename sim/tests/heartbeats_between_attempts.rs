//! Attack tests of the heartbeats baton sends between a retried step's attempts (baton beats as
//! an attempt fails and as the next attempt's task goes out), when SendTaskHeartbeat itself
//! fails. Driven through the real use cases over the simulated Step Functions, which times a
//! task out when its `HeartbeatSeconds` pass without a beat.

mod common;

use baton_core::domain::lifecycle::{Record, State};
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, World, drive, lock};
use baton_sim::{EPOCH, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

/// A retried step with a heartbeat: 10 minutes, and a 7-minute backoff (7 + 2 < 10: valid).
const YAML: &str = r#"
workflows:
  beat:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 2h
        heartbeat: 10m
        retry: { attempts: 2, backoff: 7m }
"#;

fn stack() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(World::new(23, start, false), None, YAML, Default::default())
}

fn load(s: &Stack) -> Record {
    s.record("beat", "b").expect("the record")
}

fn body(outcome: &str, attempt: u32) -> Value {
    let mut b = json!({"workflow": "beat", "key": "b", "step": "verify", "outcome": outcome, "generation": 1,
        "attempt": attempt});
    match outcome {
        "failed" => {
            b["error"] = json!("Unreachable");
            b["cause"] = json!("the scanner timed out");
        }
        "succeeded" => b["data"] = json!({"verdict": "ok"}),
        _ => {}
    }
    b
}

/// When Step Functions times the step out for want of a heartbeat.
fn beat_deadline(s: &Stack) -> Option<OffsetDateTime> {
    let model = lock(&s.sfn);
    model
        .executions
        .values()
        .find(|e| e.arn.contains("beat"))
        .and_then(|e| e.wait.as_ref())
        .and_then(|w| w.beat_deadline)
}

/// Lets `by` pass a minute at a time as the deployed stack does: Step Functions' timers fire,
/// the reports are delivered, and the sweeper runs every minute.
fn pass(s: &Stack, by: Duration) {
    let until = s.world.now() + by;
    while s.world.now() < until {
        s.world.advance(Duration::minutes(1));
        s.fire_timers();
        let _ = drive(s.live().sweeper.run_once(s.world.now()));
        settle(s);
    }
}

/// Invariant 7 (the step is kept alive across its backoff; it times out only when its
/// worker goes silent): the heartbeat baton sends as the next attempt's task goes out fails
/// (SendTaskHeartbeat is unavailable for that one call); the task was published and marked all
/// the same, and nothing owed the beat again. Now the attempt is marked out only once its beat
/// landed: the next sweep opens it again (the beat, the task found published, the mark). Ordering: attempt 1 fails a minute in (beaten:
/// the heartbeat runs to 11 minutes), the sweep at 8 minutes opens attempt 2 with its beat
/// failing, and attempt 2's worker beats 4 minutes after its task went out (well within its
/// 10-minute heartbeat). The step must still be waiting for that beat, not timed out at 11
/// minutes.
#[test]
fn a_heartbeat_that_failed_as_the_next_attempt_went_out_is_sent_again_before_the_step_times_out() {
    let s = stack();
    send(&s, &event("start-b", "order.placed", "b", json!({})));
    settle(&s);
    assert_eq!(load(&s).state, State::Waiting { step: 0 });
    s.world.advance(Duration::minutes(1));
    let a = callback(&s, "b-fail-1", &body("failed", 1));
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{}", a.body);
    let due = load(&s).waits[0].task_due().expect("attempt 2 is due");
    let beaten_to = beat_deadline(&s).expect("a heartbeat deadline");
    s.world.set_now(due);
    s.world.script("sfn.SendTaskHeartbeat", Fault::Before);
    let _ = drive(s.live().sweeper.run_once(s.world.now()));
    let out = s.world.now();
    assert!(lock(&s.publisher.log).iter().any(|p| p.task.attempt == 2), "attempt 2 went out");
    // Its beat failed: it is not marked out, so the next sweep opens it again, beat first.
    assert_eq!(load(&s).waits[0].task_due(), Some(due), "attempt 2 marked out though its beat failed");
    // Attempt 2's worker beats 4 minutes after its task went out.
    pass(&s, Duration::minutes(4));
    let beat = callback(&s, "b-beat-2", &body("in_progress", 2));
    let r = load(&s);
    assert_eq!(
        (r.state, beat.body["status"].as_str()),
        (State::Waiting { step: 0 }, Some("applied")),
        "the step was timed out at {beaten_to} (the beat as attempt 1 failed), {} after attempt 2's task went out at {out}: the beat that failed then was never sent again; the worker's beat was answered {}",
        beaten_to - out,
        beat.body
    );
}

/// Invariant 8 and 7 (held): the heartbeat baton sends as an attempt fails fails; nothing else
/// owes it, so the failure's sender is told 503 (`maybe_applied`), and its retry with the same
/// id, once the receipt's lease has passed, is answered as the first attempt earned (`applied`)
/// and beats again, so the step is kept alive across its backoff.
#[test]
fn held_a_heartbeat_that_failed_as_an_attempt_failed_is_answered_503_and_its_retry_beats_again() {
    let s = stack();
    send(&s, &event("start-b", "order.placed", "b", json!({})));
    settle(&s);
    s.world.advance(Duration::minutes(8));
    s.world.script("sfn.SendTaskHeartbeat", Fault::Before);
    let first = callback(&s, "b-fail-1", &body("failed", 1));
    assert_eq!(
        (first.status.as_u16(), first.body["maybe_applied"].as_bool()),
        (503, Some(true)),
        "{}",
        first.body
    );
    let wait = first.retry_after.expect("Retry-After") as i64;
    let before = beat_deadline(&s).expect("a heartbeat deadline");
    s.world.advance(Duration::seconds(wait));
    let again = callback(&s, "b-fail-1", &body("failed", 1));
    assert_eq!(
        (again.status.as_u16(), again.body["status"].as_str()),
        (200, Some("applied")),
        "{}",
        again.body
    );
    let after = beat_deadline(&s).expect("a heartbeat deadline");
    assert!(after > before, "the retry beat again: {before} -> {after}");
    assert_eq!(load(&s).waits[0].failed.len(), 1, "one failure, one attempt used");
    // Then attempt 2 goes out with its beat, and its success ends the step.
    let due = load(&s).waits[0].task_due().expect("attempt 2 is due");
    s.world.set_now(due);
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    let ok = callback(&s, "b-ok-2", &body("succeeded", 2));
    assert_eq!(ok.body["status"].as_str(), Some("applied"), "{}", ok.body);
    deliver(&s, QueueId::Progress);
    assert!(load(&s).state.is_terminal() || load(&s).state == State::Advancing { step: 0 });
}
