//! One test per defect that outside review found and the simulation never generated, until its
//! world had what they need (a heartbeat on retried steps, deploys that renumber compensable
//! steps, crowds, records near the item limit, a clock per function, Step Functions' own sends
//! failing). Each drives the real use cases over the simulated world to the defect, placed
//! exactly, and asserts what the product promises: each fails until the defect is fixed in
//! `shared/core`.

mod common;

use baton_core::domain::ids::{CorrelationKey, EventId, WorkflowName};
use baton_core::domain::lifecycle::{
    FailedAttempt, Input, Record, Role, Source, State, StepOutcome, Wait, WaitOutcome, WaitStatus, decide,
};
use baton_core::ports::orchestrator::ExecutionStatus;
use baton_core::ports::store::WorkflowStore;
use baton_sim::sqs::QueueId;
use baton_sim::world::{Fault, World, drive, lock};
use baton_sim::{CONFIG, EPOCH, SAGA_WORKFLOW, SagaChange, Skews, Stack};
use common::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

fn stack_with(yaml: &str, skews: Skews) -> Stack {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    Stack::with_config(World::new(7, start, false), None, yaml, skews)
}

fn record_of(s: &Stack, workflow: &str, key: &str) -> Record {
    s.record(workflow, key).expect("the record")
}

fn start(s: &Stack, key: &str) {
    send(s, &event(&format!("start-{key}"), "order.placed", key, json!({})));
    settle(s);
}

fn published(s: &Stack, id: &str) -> bool {
    lock(&s.publisher.log).iter().any(|p| p.task.id == id)
}

/// Fires Step Functions' timers at `at`, and delivers what they report.
fn at(s: &Stack, at: OffsetDateTime) {
    s.world.set_now(at);
    s.fire_timers();
    settle(s);
}

const HEARTBEAT: &str = r#"  hb:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 30m
        heartbeat: 10m
        retry: { attempts: 2, backoff: 4m }
"#;

#[test]
fn a_retried_step_with_a_heartbeat_is_not_timed_out_by_step_functions_between_its_attempts() {
    // Given a step (timeout 30m, heartbeat 10m, 2 attempts, 4m backoff) that `baton validate`
    // accepts (3 attempts, whose second wait is 8m, it now refuses: 8m and the sweep's 2m reach
    // the heartbeat), whose first attempt fails at minute 7
    let s = stack_with(&format!("{CONFIG}{HEARTBEAT}"), Skews::default());
    let t0 = s.world.now();
    start(&s, "k");
    assert!(published(&s, "hb/k/g1/verify"));
    s.world.set_now(t0 + Duration::minutes(7));
    let failed = json!({"workflow": "hb", "key": "k", "step": "verify", "outcome": "failed", "data": {},
        "error": "WorkerDown", "cause": "attempt 1 failed", "attempt": 1, "generation": 1});
    let answer = callback(&s, "fail-1", &failed);
    assert_eq!(answer.body["status"], "applied", "{}", answer.body);
    // When minute 10 comes, with attempt 2 due at minute 11
    at(&s, t0 + Duration::minutes(10));
    // Then Step Functions has not timed the step out: it still waits, with an attempt left
    let r = record_of(&s, "hb", "k");
    assert_eq!(r.state, State::Waiting { step: 0 }, "the step was timed out between its attempts");
    // And attempt 2's task goes out at minute 11
    s.world.set_now(t0 + Duration::minutes(11) + Duration::seconds(1));
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    assert!(published(&s, "hb/k/g1/verify/a2"), "attempt 2's task never went out");
}

/// A saga waiting at its group's compensations (`charge` and `points` both completed), with
/// their tasks out.
fn compensating_at_the_group(s: &Stack) {
    start(s, "k");
    let saga = |step: &str, outcome: &str, data: Value| {
        let mut body =
            json!({"workflow": "saga", "key": "k", "step": step, "outcome": outcome, "data": data});
        if outcome == "failed" {
            body["error"] = json!("NoCarrier");
            body["cause"] = json!("no carrier takes it");
        }
        body
    };
    callback(s, "reserve", &saga("reserve", "succeeded", json!({"hold": "h"})));
    settle(s);
    callback(s, "charge", &saga("charge", "succeeded", json!({"charge_ref": "c"})));
    callback(s, "points", &saga("points", "succeeded", json!({"points": 10})));
    settle(s);
    settle(s);
    assert_eq!(record_of(s, "saga", "k").state, State::Waiting { step: 3 }, "ship waits");
    callback(s, "ship", &saga("ship", "failed", json!({})));
    settle(s);
    settle(s);
    assert!(published(s, "saga/k/g1/charge/undo") && published(s, "saga/k/g1/points/undo"));
}

#[test]
fn an_acknowledgement_after_a_deploy_that_inserts_a_step_acknowledges_the_compensation_it_names() {
    // Given a saga compensating `charge` (1) and `points` (2)
    let yaml = format!("{CONFIG}{SAGA_WORKFLOW}");
    let s = stack_with(&yaml, Skews::default());
    compensating_at_the_group(&s);
    // When a deploy inserts a step before them, and charge's worker acknowledges its task
    s.deploy(baton_sim::config_v2_with(&yaml, SagaChange::InsertFirst));
    let ack = json!({"workflow": "saga", "key": "k", "step": "charge", "outcome": "succeeded",
        "compensation": true, "generation": 1, "attempt": 1});
    let answer = callback(&s, "ack-charge", &ack);
    assert_eq!(answer.body["status"], "applied", "{}", answer.body);
    // Then it is charge's compensation that is acknowledged, and points' still waits
    let r = record_of(&s, "saga", "k");
    let undo = |step: u32| r.compensation.as_ref().unwrap().undo(step).unwrap().wait.outcome();
    assert_eq!(
        (undo(1), undo(2)),
        (Some(WaitOutcome::Succeeded), None),
        "charge's acknowledgement was taken for another step's (charge is 1, points 2 in the record's version)"
    );
}

const STUCK: &str = r#"  stuck:
    start:
      when: { type: ["member.joined"] }
      key: /subject
    steps:
      - name: greet
        requires: [greeted]
        timeout: 2m
"#;

#[test]
fn a_hundred_records_whose_executions_were_stopped_outside_baton_do_not_keep_a_next_attempt_from_going_out() {
    // Given a hundred records waiting past their deadlines, their executions stopped from the
    // console (Step Functions will never report them)
    let s = stack_with(&format!("{CONFIG}{}{STUCK}", baton_sim::RETRY_WORKFLOW), Skews::default());
    let t0 = s.world.now();
    for i in 0..100 {
        send(&s, &event(&format!("join-s{i}"), "member.joined", &format!("s{i}"), json!({})));
    }
    settle(&s);
    settle(&s);
    {
        let mut model = lock(&s.sfn);
        let running: Vec<String> = model
            .executions
            .values()
            .filter(|e| e.arn.contains(":sim-stuck:") && e.status == ExecutionStatus::Running)
            .map(|e| e.arn.clone())
            .collect();
        assert_eq!(running.len(), 100);
        for arn in running {
            model.stop(&arn, ("Console", "stopped from the console"), t0).unwrap();
        }
    }
    s.world.set_now(t0 + Duration::minutes(5));
    drive(s.sweeper.run_once(s.world.now())).unwrap();
    // And a retried step whose first attempt failed, its next attempt due 30 s later
    start(&s, "k");
    let failed = json!({"workflow": "retried", "key": "k", "step": "verify", "outcome": "failed", "data": {},
        "error": "WorkerDown", "cause": "attempt 1 failed", "attempt": 1, "generation": 1});
    assert_eq!(callback(&s, "fail-1", &failed).body["status"], "applied");
    // When the sweeper runs once it is due, and again
    for minutes in [1, 2] {
        s.world.set_now(t0 + Duration::minutes(5 + minutes));
        drive(s.sweeper.run_once(s.world.now())).unwrap();
    }
    // Then the next attempt's task went out, whatever else is in the table
    assert!(
        published(&s, "retried/k/g1/verify/a2"),
        "the sweeper's batch of waiting records is full of records that owe nothing: the due attempt never goes out"
    );
}

/// A record at a group of twelve branches, each with nine failed attempts whose error and cause
/// are Step Functions' longest (the cause kept to its first 512 characters).
fn wide_record() -> Record {
    let plan = baton_core::domain::lifecycle::Plan::line(vec![Vec::new()]);
    let (w, k) = (WorkflowName::parse("wide").unwrap(), CorrelationKey::parse("k").unwrap());
    let now = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let start = Input::start(EventId::parse("e").unwrap());
    let mut r = decide(&plan, (&w, &k), None, &start, now).write.unwrap().to;
    r.state = State::Waiting { step: 0 };
    r.waits = (0..12)
        .map(|step| Wait {
            step,
            role: Role::Branch,
            token: Some(baton_core::domain::ids::TaskToken::parse(format!("tok-{step}")).unwrap()),
            deadline: Some(now),
            inputs: Default::default(),
            notified: 0,
            notice_at: None,
            status: WaitStatus::TaskDue { at: now },
            failed: (1..=9)
                .map(|attempt| FailedAttempt {
                    attempt,
                    error: "E".repeat(256),
                    cause: "c".repeat(512),
                    input: EventId::parse(format!("wk:wide/k/g1/w{step}/a{attempt}:failed")).unwrap(),
                    source: Source::Callback,
                    at: now,
                })
                .collect(),
        })
        .collect();
    r
}

#[test]
fn the_cheap_bound_of_a_records_size_is_at_least_its_size_with_branches_and_attempts() {
    let r = wide_record();
    let size = baton_aws::dynamodb::record_size(&r);
    let bound = baton_core::ports::store::limits::record_size_bound(&r);
    assert!(
        bound >= size,
        "the record is {size} bytes, but its cheap bound says {bound}: the engine never measures it, nor trims it"
    );
}

#[test]
fn the_simulated_dynamodb_refuses_a_record_over_400_kb_that_the_cheap_bound_lets_pass() {
    // (The simulation's own store, as DynamoDB: a check of the world, not of the product.)
    let s = stack();
    let mut r = wide_record();
    r.state = State::Pending;
    for b in &mut r.waits {
        b.status = WaitStatus::Owed {
            outcome: baton_core::domain::lifecycle::WaitOutcome::Failed,
            resume: baton_core::domain::lifecycle::Resume::Failure {
                error: "E".repeat(256),
                cause: "c".repeat(32_768),
            },
            since: r.created_at,
        };
    }
    let size = baton_aws::dynamodb::record_size(&r);
    assert!(size > baton_aws::dynamodb::MAX_ITEM_BYTES);
    let write = baton_core::domain::lifecycle::Write {
        cause: baton_core::domain::lifecycle::Cause::Start,
        from: None,
        expected_version: None,
        to: r,
    };
    let refused = drive(s.memory.apply(&write));
    assert!(
        matches!(refused, Err(baton_core::ports::store::StoreError::Rejected { .. })),
        "a record of {size} bytes was kept: {refused:?}"
    );
}

#[test]
fn a_wide_retried_group_with_long_error_texts_never_decides_a_write_dynamodb_refuses() {
    // Given a group of twelve retried branches (ten attempts each) whose attempts all fail
    // with Step Functions' longest texts, Step Functions throttling the task calls as their last
    // attempts fail
    let s = stack_with(&format!("{CONFIG}{}", baton_sim::wide_workflow()), Skews::default());
    start(&s, "k");
    settle(&s);
    let wf = s.config.workflow("wide").unwrap().clone();
    let key = CorrelationKey::parse("k").unwrap();
    let fail = |step: u32, attempt: u32| Input::StepInput {
        id: EventId::parse(format!("fail-w{step}-a{attempt}")).unwrap(),
        hash: format!("h{step}-{attempt}"),
        source: Source::Callback,
        step,
        outcome: StepOutcome::Failed { error: "E".repeat(256), cause: "c".repeat(32_768), retryable: true },
        data: Default::default(),
        generation: Some(1),
        attempt: Some(attempt),
    };
    for attempt in 1..=10 {
        if attempt == 10 {
            *lock(&s.world.throttle_spell) =
                Some((s.world.now(), s.world.now() + Duration::hours(1), "sfn.SendTask"));
        }
        // (The optional branches first: the required one's last failure fails the group.)
        for step in (1..12).chain([0]) {
            let _ = drive(s.engine.submit(&wf, &key, &fail(step, attempt), s.world.now()));
        }
        // Each next attempt fails once its task is out (its backoff passed, the sweeper opened it).
        let r = record_of(&s, "wide", "k");
        if let Some(due) = r.waits.iter().filter_map(Wait::task_due).max() {
            s.world.set_now(due + Duration::seconds(1));
            for _ in 0..3 {
                let _ = drive(s.sweeper.run_once(s.world.now()));
            }
        }
    }
    let r = record_of(&s, "wide", "k");
    assert!(r.waits.iter().all(|b| b.failed.len() == 9), "every branch ran its ten attempts");
    // Then no write baton decided was over DynamoDB's 400 KB
    let refused: Vec<String> =
        lock(&s.violations).iter().filter(|v| v.starts_with("[record_fits_its_item]")).cloned().collect();
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[test]
fn a_worker_answering_its_task_at_once_is_not_ignored_for_the_clocks_skew() {
    // Given the callback function's clock 0.4 s behind the world's, the sweeper's 0.4 s ahead
    let skews = Skews {
        callback: Duration::milliseconds(-400),
        sweeper: Duration::milliseconds(400),
        ..Skews::default()
    };
    let s = stack_with(&format!("{CONFIG}{}", baton_sim::RETRY_WORKFLOW), skews);
    start(&s, "k");
    let failed = json!({"workflow": "retried", "key": "k", "step": "verify", "outcome": "failed", "data": {},
        "error": "WorkerDown", "cause": "attempt 1 failed", "attempt": 1, "generation": 1});
    assert_eq!(callback(&s, "fail-1", &failed).body["status"], "applied");
    let due = record_of(&s, "retried", "k").wait(0).and_then(Wait::task_due).unwrap();
    // When the sweeper publishes attempt 2's task as its own clock passes the due time (its
    // mark on the record fails: the task is out, the record does not know yet)
    s.world.set_now(due - Duration::milliseconds(300));
    s.world.script("ddb.PutItem(record)", Fault::Before);
    let _ = drive(s.sweeper.run_once(s.sweeper.now()));
    assert!(published(&s, "retried/k/g1/verify/a2"));
    // And its worker answers at once, naming the attempt of the task it received
    let ok = json!({"workflow": "retried", "key": "k", "step": "verify", "outcome": "succeeded",
        "data": {"verdict": "ok"}, "attempt": 2, "generation": 1});
    let answer = callback(&s, "ok-2", &ok);
    // Then the answer is not ignored as out of order (a final 200: the worker would never send
    // it again, and the step would wait to its deadline): its task is not marked out, so its
    // sender is asked to retry in a second, and its retry once the sweeper has marked the task
    // is taken
    assert_eq!((answer.status.as_u16(), answer.retry_after), (503, Some(1)), "{}", answer.body);
    s.world.advance(Duration::minutes(1));
    let _ = drive(s.sweeper.run_once(s.sweeper.now()));
    let again = callback(&s, "ok-2", &ok);
    assert_eq!(again.body["status"], "applied", "{}", again.body);
}

#[test]
fn a_transient_failure_of_step_functions_own_step_ready_send_does_not_fail_the_run() {
    // Given Step Functions' send of the first step's step_ready failing once
    let s = stack();
    lock(&s.sfn).send_faults.next = 1;
    let t0 = s.world.now();
    start(&s, "k");
    // When time passes (a retry's interval)
    at(&s, t0 + Duration::seconds(10));
    // Then the step waits: the run was not failed for a blip of SQS
    let r = record(&s, "k");
    assert_eq!(r.state, State::Waiting { step: 0 }, "a transient send failure ended the run: {}", r.state);
}

#[test]
fn a_transient_failure_of_the_final_reports_send_still_ends_the_record() {
    // Given a review whose payment completes it, and Step Functions' send of its final report
    // failing once
    let s = stack();
    waiting_on_review(&s, "k");
    callback(&s, "cb-review", &review("k", json!({"decision": "ok"})));
    settle(&s);
    assert_eq!(record(&s, "k").state, State::Waiting { step: 1 });
    lock(&s.sfn).send_faults.next = 1;
    callback(&s, "cb-pay", &payment("k", json!({"payment_ref": "p"})));
    settle(&s);
    // When time passes, and the sweeper runs
    let t0 = s.world.now();
    for minutes in [1, 5, 30] {
        at(&s, t0 + Duration::minutes(minutes));
        drive(s.sweeper.run_once(s.world.now())).unwrap();
        deliver(&s, QueueId::Progress);
    }
    // Then the record has ended: succeeded, as its execution did before its report was lost
    let r = record(&s, "k");
    assert_eq!(r.state, State::Succeeded, "the record waits for a report that will never come: {}", r.state);
}
