//! Attack tests of the sweeper's lists (ports/store DueList: `work#<state>` apart from
//! `record#<state>`): owed work of every kind goes out on time whatever else is listed, and a
//! record that stops owing work leaves the work list. Driven through the real use cases over
//! the simulated world.

mod common;

use baton_core::domain::lifecycle::{Kind, Record, State};
use baton_core::ports::store::{DueList, WorkflowStore};
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, World, drive, lock};
use baton_sim::{CONFIG, EPOCH, RETRY_WORKFLOW, SAGA_WORKFLOW, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const CROWD_YAML: &str = r#"
workflows:
  crowd:
    start: { when: { type: ["crowd.placed"] }, key: /subject }
    steps:
      - { name: wait, requires: [x], timeout: 10m }
      - { name: after, requires: [later], timeout: 10m }
  pay:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: approve, requires: [ok], timeout: 1h }
      - { name: ship, requires: [tracking], timeout: 1h }
"#;

/// How many records of the crowd: more than a sweep takes from one list (`BATCH`, 100).
const CROWD: usize = 150;

fn drain(s: &Stack) {
    for _ in 0..10_000 {
        let busy =
            [QueueId::Intake, QueueId::Progress].iter().any(|q| lock(&s.sqs).any_visible(*q, s.world.now()));
        if !busy {
            return;
        }
        deliver(s, QueueId::Intake);
        deliver(s, QueueId::Progress);
    }
}

fn load(s: &Stack, workflow: &str, key: &str) -> Record {
    s.record(workflow, key).expect("the record")
}

fn applied(a: &baton_core::use_cases::callback::Answer, what: &str) {
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{what}: {}", a.body);
}

/// Invariant 4 (each owed resume is delivered): a resume Step Functions did not take (its send
/// failed) is owed by its record, which waits on `work#advancing`, and the sweeper re-sends it
/// a grace later. Ordering: 150 records' executions are stopped from the console while they
/// wait; their workers' callbacks then arrive, each record moves to `advancing` and its resume
/// finds its token gone (no step_ready will ever come); then one healthy record's callback is
/// applied, but its SendTaskSuccess fails. The healthy record's resume must go out at the first
/// sweep after the grace, whatever the stuck advancing records ahead of it on the same list
/// (the promise of the lists: "however many of those there are, owed work goes out on time").
#[test]
fn a_resume_owed_goes_out_on_time_past_a_crowd_of_advancing_records_whose_executions_were_stopped() {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let s = Stack::with_config(World::new(17, start, false), None, CROWD_YAML, Default::default());
    for i in 0..CROWD {
        send(&s, &event(&format!("c-{i}"), "crowd.placed", &format!("c{i}"), json!({})));
    }
    drain(&s);
    for arn in running_executions(&s, "crowd") {
        drive(s.engine.orchestrator.stop_execution(&arn, "Console", "stopped by hand")).unwrap();
    }
    s.world.advance(Duration::minutes(1));
    for i in 0..CROWD {
        let body = json!({"workflow": "crowd", "key": format!("c{i}"), "step": "wait", "outcome": "succeeded",
            "data": {"x": 1}});
        applied(&callback(&s, &format!("cb-c{i}"), &body), "a crowd callback");
    }
    assert_eq!(load(&s, "crowd", "c0").state, State::Advancing { step: 0 });
    // The healthy record: its callback applied, its resume's send failing once.
    s.world.advance(Duration::seconds(5));
    send(&s, &event("p-start", "order.placed", "p", json!({})));
    drain(&s);
    assert_eq!(load(&s, "pay", "p").state, State::Waiting { step: 0 });
    s.world.script("sfn.SendTaskSuccess", Fault::Before);
    let body = json!({"workflow": "pay", "key": "p", "step": "approve", "outcome": "succeeded", "data": {"ok": true}});
    applied(&callback(&s, "cb-p", &body), "the healthy record's callback");
    assert_eq!(load(&s, "pay", "p").state, State::Advancing { step: 0 }, "its resume is owed");
    // The first sweep after the grace re-sends it.
    s.world.advance(baton_core::limits::RESEND_RESUME_AFTER + Duration::seconds(30));
    let report = drive(s.live().sweeper.run_once(s.world.now()));
    drain(&s);
    assert_eq!(
        load(&s, "pay", "p").state,
        State::Waiting { step: 1 },
        "the owed resume did not go out: the sweep ({report:?}) took its batch from {CROWD} advancing records whose executions are gone, re-sending resumes to dead tokens"
    );
}

fn due_on(s: &Stack, list: DueList) -> Vec<String> {
    let far = s.world.now() + Duration::days(30);
    drive(s.memory.due(list, far, 10_000))
        .unwrap()
        .iter()
        .map(|r| format!("{}/{}", r.workflow, r.key))
        .collect()
}

fn work(kind: Kind) -> DueList {
    DueList { kind, work: true }
}

fn watched(kind: Kind) -> DueList {
    DueList { kind, work: false }
}

fn retried_body(key: &str, step: &str, outcome: &str, attempt: u32) -> Value {
    let mut b = json!({"workflow": "retried", "key": key, "step": step, "outcome": outcome, "generation": 1,
        "attempt": attempt});
    if outcome == "failed" {
        b["error"] = json!("Unreachable");
        b["cause"] = json!("the scanner timed out");
    } else {
        b["data"] = json!({"verdict": "ok"});
    }
    b
}

/// Invariant 4 and 7 (held): each kind of owed work puts its record on its state's work list,
/// and the record leaves it once nothing is owed: a retried step's next attempt (until its task
/// is marked out), a branch's owed resume (until it is delivered), and a compensation's next
/// attempt (until its task is marked out). Ordering: each owed, then the sweep that carries it
/// out, then the lists read.
#[test]
fn held_a_record_that_stops_owing_work_leaves_the_work_list() {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let s = Stack::with_config(
        World::new(19, start, false),
        None,
        &format!("{CONFIG}{RETRY_WORKFLOW}{SAGA_WORKFLOW}"),
        Default::default(),
    );
    send(&s, &event("start-r", "order.placed", "r", json!({})));
    drain(&s);
    // A retried step's next attempt.
    applied(&callback(&s, "r-fail-1", &retried_body("r", "verify", "failed", 1)), "verify's failure");
    assert!(due_on(&s, work(Kind::Waiting)).contains(&"retried/r".to_owned()), "the next attempt is work");
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(
        !due_on(&s, work(Kind::Waiting)).contains(&"retried/r".to_owned()),
        "its task is out: no more work"
    );
    assert!(due_on(&s, watched(Kind::Waiting)).contains(&"retried/r".to_owned()), "its deadline is watched");
    // A branch's owed resume: scan's success, its send failing once.
    applied(&callback(&s, "r-ok-2", &retried_body("r", "verify", "succeeded", 2)), "verify's attempt 2");
    drain(&s);
    let r = load(&s, "retried", "r");
    assert_eq!(r.state, State::Waiting { step: 1 }, "{:?}", r.waits);
    s.world.script("sfn.SendTaskSuccess", Fault::Before);
    let scan = json!({"workflow": "retried", "key": "r", "step": "scan", "outcome": "succeeded", "generation": 1,
        "data": {"verdict": "clean"}});
    applied(&callback(&s, "r-scan", &scan), "scan's success");
    assert!(due_on(&s, work(Kind::Waiting)).contains(&"retried/r".to_owned()), "scan's resume is owed");
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(
        !due_on(&s, work(Kind::Waiting)).contains(&"retried/r".to_owned()),
        "scan's resume went out: no more work"
    );
    a_compensations_next_attempt_leaves_the_work_list_once_out(&s);
}

/// The last part of the test before: a compensation's next attempt, on the work list until its
/// task is out.
fn a_compensations_next_attempt_leaves_the_work_list_once_out(s: &Stack) {
    send(s, &event("start-k", "order.placed", "k", json!({})));
    drain(s);
    let saga = |step: &str, outcome: &str, data: Value| {
        let mut b = json!({"workflow": "saga", "key": "k", "step": step, "outcome": outcome, "data": data});
        if outcome == "failed" {
            b["error"] = json!("NoCarrier");
            b["cause"] = json!("no carrier today");
        }
        b
    };
    applied(&callback(s, "k-hold", &saga("reserve", "succeeded", json!({"hold": "h"}))), "reserve");
    drain(s);
    applied(&callback(s, "k-charge", &saga("charge", "succeeded", json!({"charge_ref": "c"}))), "charge");
    applied(&callback(s, "k-points", &saga("points", "succeeded", json!({"points": 3}))), "points");
    drain(s);
    applied(&callback(s, "k-ship", &saga("ship", "failed", json!({}))), "ship's failure");
    drain(s);
    let k = load(s, "saga", "k");
    assert_eq!(k.state, State::Compensating, "{:?}", k.history.last());
    let refused = json!({"workflow": "saga", "key": "k", "step": "reserve", "outcome": "failed", "compensation": true,
        "generation": 1, "attempt": 1, "error": "StockDown", "cause": "the warehouse is closed"});
    // Reserve's compensation is the last of the chain: acknowledge the group's first.
    for step in ["charge", "points"] {
        let ok = json!({"workflow": "saga", "key": "k", "step": step, "outcome": "succeeded", "compensation": true,
            "generation": 1, "attempt": 1});
        applied(&callback(s, &format!("k-undo-{step}"), &ok), step);
    }
    drain(s);
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    drain(s);
    applied(&callback(s, "k-undo-reserve-1", &refused), "reserve's compensation, attempt 1");
    assert!(due_on(s, work(Kind::Compensating)).contains(&"saga/k".to_owned()), "attempt 2 is work");
    s.world.advance(Duration::seconds(31));
    drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert!(
        !due_on(s, work(Kind::Compensating)).contains(&"saga/k".to_owned()),
        "attempt 2's task is out, nothing is owed: {:?}",
        load(s, "saga", "k").compensation
    );
    assert!(due_on(s, watched(Kind::Compensating)).contains(&"saga/k".to_owned()));
}
