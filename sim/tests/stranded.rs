//! Attack tests of stranded records (lifecycle/stranded.rs, use_cases/sweeper.rs): the
//! sweeper's check of a long-overdue record's execution racing its late report, a compensation
//! stranded mid-chain, a run stranded after its step timed out, and `baton end`'s apply (the
//! record stranded, then ended as its execution ended, as cli/src/end.rs submits it) followed
//! by a restart. Driven through the real use cases over the simulated world.

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{Input, Kind, Outcome, Record, State, Undo};
use baton_core::limits::STRANDED_AFTER;
use baton_core::ports::store::WorkflowStore;
use baton_sim::sqs::QueueId;
use baton_sim::world::{World, drive, lock};
use baton_sim::{CONFIG, EPOCH, SAGA_WORKFLOW, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

/// One step that waits 10 minutes: its timeout ends the execution through its `Timed out` Fail
/// state.
const SOLO: &str = r#"
workflows:
  solo:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: wait, requires: [x], timeout: 10m }
"#;

fn solo(traced: bool) -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(World::new(43, start, traced), None, SOLO, Default::default())
}

/// `solo/key` waiting, then its step timed out in Step Functions (the report on the queue).
fn timed_out_in_step_functions(s: &Stack, key: &str) {
    send(s, &event(&format!("start-{key}"), "order.placed", key, json!({})));
    settle(s);
    assert_eq!(load(s, "solo", key).state, State::Waiting { step: 0 });
    s.world.advance(Duration::minutes(11));
    s.fire_timers();
}

fn load(s: &Stack, workflow: &str, key: &str) -> Record {
    s.record(workflow, key).expect("the record")
}

fn ledger_reasons(s: &Stack, workflow: &str, key: &str) -> Vec<String> {
    let w = s.config.workflow(workflow).unwrap();
    let trace = drive(s.memory.trace(&w.name, &CorrelationKey::parse(key).unwrap())).unwrap();
    trace.ledger.iter().map(|l| format!("{}:{}", l.input_id, l.reason.as_str())).collect()
}

/// Takes every visible progress message off the queue for good: reports lost.
fn lose_progress(s: &Stack) -> Vec<String> {
    let now = s.world.now();
    let mut sqs = lock(&s.sqs);
    let batch = sqs.receive(QueueId::Progress, 100, now, &mut |_| 0);
    for m in &batch {
        sqs.delete(QueueId::Progress, &m.id, m.receipt);
    }
    batch.into_iter().map(|m| m.body).collect()
}

/// What `baton end WORKFLOW KEY --apply` does (cli/src/end.rs `apply`): the execution's status
/// as Step Functions describes it, the record stranded if it is not, then ended so.
fn baton_end(s: &Stack, workflow: &str, key: &str) -> String {
    let engine = s.live().engine.clone();
    let w = engine.config.workflow(workflow).unwrap().clone();
    let r = load(s, workflow, key);
    let arn = engine.execution_arn(&w, &r.key, r.generation);
    let (status, error) = match drive(engine.orchestrator.describe(&arn)) {
        Ok(info) => (info.status.as_str().to_owned(), info.error),
        Err(_) => (baton_core::domain::lifecycle::NOT_FOUND.to_owned(), None),
    };
    let now = s.world.now();
    if r.state.kind() != Kind::Stranded {
        let gone =
            Input::ExecutionGone { generation: r.generation, status: status.clone(), error: error.clone() };
        drive(engine.submit(&w, &r.key, &gone, now)).unwrap();
    }
    let end =
        Input::End { generation: r.generation, status: status.clone(), error, reason: "by hand".into() };
    let outcome = drive(engine.submit(&w, &r.key, &end, now)).unwrap().outcome();
    assert_eq!(outcome, Outcome::Applied, "baton end was refused");
    status
}

/// Invariant 7 (a step that misses its deadline ends the workflow `timed_out`) through a lost
/// report: review's manual-review step goes its heartbeat without a beat, Step Functions times
/// it out and ends the execution (its `Timed out` Fail state: status FAILED, error
/// `baton.StepTimedOut`), and the timed_out report is lost. Ordering: timeout, report lost,
/// the sweeper strands the record past STRANDED_AFTER, `baton end` ends it as its execution
/// ended. It must end `timed_out`, as the report would have ended it, not `failed`.
#[test]
fn a_run_whose_step_timed_out_and_whose_report_was_lost_ends_timed_out() {
    let s = solo(false);
    timed_out_in_step_functions(&s, "t");
    let lost = lose_progress(&s);
    assert!(lost.iter().any(|b| b.contains("timed_out")), "{lost:?}");
    let r = load(&s, "solo", "t");
    let w = s.config.workflow("solo").unwrap();
    let arn = s.engine.execution_arn(w, &r.key, r.generation);
    s.world.set_now(r.waits[0].deadline.unwrap() + STRANDED_AFTER + Duration::minutes(15));
    let report = drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(load(&s, "solo", "t").state.kind(), Kind::Stranded, "{report:?}");
    let status = baton_end(&s, "solo", "t");
    let failure = lock(&s.sfn).executions[&arn].failure.clone();
    let r = load(&s, "solo", "t");
    assert_eq!(
        r.state,
        State::TimedOut,
        "the step missed its deadline, yet the record ended {} (its execution: {status}, {failure:?})",
        r.state
    );
}

/// Invariant 5 and 6 (held): the sweeper's check of an overdue record's execution races the
/// record's late report. Ordering: the step times out, its report waits on the queue (not yet
/// delivered) past STRANDED_AFTER; the sweep describes the execution (closed long ago), and the
/// report is delivered before the sweep submits ExecutionGone. The report wins: the record
/// ends `timed_out`, nothing is stranded, and the late ExecutionGone writes nothing.
#[test]
fn held_a_late_report_landing_while_the_sweeper_checks_the_execution_wins() {
    let s = solo(true);
    timed_out_in_step_functions(&s, "race");
    let deadline = load(&s, "solo", "race").waits[0].deadline.unwrap();
    s.world.set_now(deadline + STRANDED_AFTER + Duration::minutes(15));
    let sweeper = s.live().sweeper.clone();
    let now = s.world.now();
    let mut sweep = std::pin::pin!(sweeper.run_once(now));
    run_until(&s.world, &mut sweep, "sfn.DescribeExecution");
    settle(&s);
    assert_eq!(load(&s, "solo", "race").state, State::TimedOut, "the report landed");
    let report = drive(sweep).unwrap();
    assert_eq!(report.stranded, 0, "{report:?}");
    assert_eq!(load(&s, "solo", "race").state, State::TimedOut);
}

fn saga_stack() -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(
        World::new(41, start, false),
        None,
        &format!("{CONFIG}{SAGA_WORKFLOW}"),
        Default::default(),
    )
}

fn saga(key: &str, step: &str, outcome: &str, data: Value) -> Value {
    let mut b = json!({"workflow": "saga", "key": key, "step": step, "outcome": outcome, "data": data});
    if outcome == "failed" {
        b["error"] = json!("NoCarrier");
        b["cause"] = json!("no carrier today");
    }
    b
}

fn undo(key: &str, step: &str, outcome: &str, attempt: u32) -> Value {
    let mut b = json!({"workflow": "saga", "key": key, "step": step, "outcome": outcome, "compensation": true,
        "generation": 1, "attempt": attempt});
    if outcome == "failed" {
        b["error"] = json!("BankDown");
        b["cause"] = json!("the bank did not answer");
    }
    b
}

fn ok(s: &Stack, id: &str, body: &Value) {
    let a = callback(s, id, body);
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{id}: {}", a.body);
    settle(s);
}

/// Saga `key` compensating: reserve, charge and points done, ship failed; charge's and points'
/// compensations reached.
fn compensating(s: &Stack, key: &str) {
    send(s, &event(&format!("start-{key}"), "order.placed", key, json!({})));
    settle(s);
    ok(s, &format!("{key}-hold"), &saga(key, "reserve", "succeeded", json!({"hold": "h"})));
    ok(s, &format!("{key}-charge"), &saga(key, "charge", "succeeded", json!({"charge_ref": "c"})));
    ok(s, &format!("{key}-points"), &saga(key, "points", "succeeded", json!({"points": 4})));
    ok(s, &format!("{key}-ship"), &saga(key, "ship", "failed", json!({})));
    assert_eq!(load(s, "saga", key).state, State::Compensating);
}

/// Invariant 5, 6 and 4 (held): a compensating record whose execution is stopped from the
/// console mid-chain, with charge's compensation acknowledged and points' still waiting, is
/// stranded by the sweeper once long overdue; a late acknowledgement is ledgered `stranded`;
/// `baton end` ends it `compensation_failed` (points and reserve stay undone); then a new start
/// event runs generation 2 to the end, and generation 1's leftovers never reach it.
#[test]
fn held_a_compensation_stranded_mid_chain_is_ended_and_a_restart_runs_clean() {
    let s = saga_stack();
    compensating(&s, "k");
    ok(&s, "k-undo-charge", &undo("k", "charge", "succeeded", 1));
    let r = load(&s, "saga", "k");
    let w = s.config.workflow("saga").unwrap();
    let arn = s.engine.execution_arn(w, &r.key, r.generation);
    drive(s.engine.orchestrator.stop_execution(&arn, "Console", "stopped by hand")).unwrap();
    let due = r.due_at();
    s.world.set_now(due.max(s.world.now()) + STRANDED_AFTER + Duration::minutes(15));
    let report = drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(load(&s, "saga", "k").state.kind(), Kind::Stranded, "{report:?}");
    let late = callback(&s, "k-undo-points", &undo("k", "points", "succeeded", 1));
    assert_eq!(late.body["reason"].as_str(), Some("stranded"), "{}", late.body);
    assert!(ledger_reasons(&s, "saga", "k").contains(&"k-undo-points:stranded".to_owned()));
    assert_eq!(baton_end(&s, "saga", "k"), "ABORTED");
    let ended = load(&s, "saga", "k");
    assert_eq!(ended.state, State::CompensationFailed);
    let undone: Vec<u32> = ended.compensation.as_ref().unwrap().undone().map(Undo::step).collect();
    assert!(!undone.is_empty() && !undone.contains(&w.step_index("charge").unwrap()), "{undone:?}");
    // A new start runs generation 2, and generation 1's late acknowledgement is stale.
    send(&s, &event("start-k-2", "order.placed", "k", json!({})));
    settle(&s);
    let g2 = load(&s, "saga", "k");
    assert_eq!((g2.generation, g2.state), (2, State::Waiting { step: 0 }), "{:?}", g2.history.last());
    let stale = callback(&s, "k-undo-reserve-old", &undo("k", "reserve", "succeeded", 1));
    assert_eq!(stale.body["status"].as_str(), Some("ignored"), "{}", stale.body);
    assert_eq!(load(&s, "saga", "k").state, State::Waiting { step: 0 });
    let mut hold = saga("k", "reserve", "succeeded", json!({"hold": "h2"}));
    hold["generation"] = json!(2);
    ok(&s, "k2-hold", &hold);
    assert_eq!(load(&s, "saga", "k").state, State::Waiting { step: 1 });
    let running: Vec<String> = running_executions(&s, "saga");
    assert_eq!(running.len(), 1, "one execution runs, generation 2's: {running:?}");
}
