//! Unit tests of `decide`, and the property test that drives the pure model through random
//! sequences of duplicates, reorderings, early callbacks and late events.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use proptest::prelude::*;
use serde_json::json;
use time::macros::datetime;

use super::*;
use crate::domain::ids::{EventId, TaskToken};
use crate::limits::{RESEND_RESUME_AFTER, RESTART_PENDING_AFTER};

const T0: OffsetDateTime = datetime!(2026-11-29 12:00 UTC);

fn plan(steps: &[&[&str]]) -> Plan {
    Plan {
        steps: steps.iter().map(|s| StepPlan::requiring(s)).collect(),
        on_restart: OnRestart::AfterTerminal,
        version: "v1".into(),
    }
}

/// `p` with steps `first..=last` a parallel group, those in `optional` optional.
fn with_group(p: Plan, (first, last): (u32, u32), optional: &[u32]) -> Plan {
    let mut p = p.grouped(first, last);
    for step in optional {
        p.steps[*step as usize].optional = true;
    }
    p
}

/// `p` with only the steps in `optional` optional.
fn with_optional(mut p: Plan, optional: &[u32]) -> Plan {
    for (i, s) in (0u32..).zip(p.steps.iter_mut()) {
        s.optional = optional.contains(&i);
    }
    p
}

/// `p` with each (step, attempts) declaring `compensate`.
fn with_compensation(mut p: Plan, compensations: &[(u32, u32)]) -> Plan {
    for (step, attempts) in compensations {
        p.steps[*step as usize].compensate = Some(*attempts);
    }
    p
}

/// `p` with `steps` retried by `retry`, each with `timeout` (and `heartbeat`).
fn with_retry(
    mut p: Plan,
    steps: &[u32],
    retry: Retry,
    (timeout, heartbeat): (std::time::Duration, Option<std::time::Duration>),
) -> Plan {
    for step in steps {
        let s = &mut p.steps[*step as usize];
        (s.retry, s.timeout, s.heartbeat) = (Some(retry), timeout, heartbeat);
    }
    p
}

fn names() -> (WorkflowName, CorrelationKey) {
    (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("order-1").unwrap())
}

fn eid(s: &str) -> EventId {
    EventId::parse(s).unwrap()
}

fn token(s: &str) -> TaskToken {
    TaskToken::parse(s).unwrap()
}

/// Decides at `T0`; `decide` itself asserts that its write follows the table ([`Write::follows`]).
fn run(plan: &Plan, record: Option<&Record>, input: &Input) -> Decision {
    let (w, k) = names();
    decide(plan, (&w, &k), record, input, T0)
}

/// The engine's mark that the resume `wait` owed went out, to the token the record holds for it.
fn resumed(r: &Record, wait: WaitId, delivered: bool) -> Input {
    let held = if wait.compensation {
        r.compensation.as_ref().and_then(|c| c.undo(wait.step)).and_then(|u| u.wait.token.clone())
    } else {
        r.wait(wait.step).and_then(|w| w.token.clone())
    };
    Input::Resumed { wait, token: held.unwrap_or_else(|| token("no-token")), delivered }
}

fn after(d: &Decision) -> Record {
    d.write.as_ref().expect("a write").to.clone()
}

fn started(plan: &Plan) -> Record {
    after(&run(plan, None, &Input::start(eid("evt-1"))))
}

fn ready(plan: &Plan, r: &Record, step: u32, tok: &str) -> Record {
    let input = Input::StepReady {
        generation: r.generation,
        step,
        token: token(tok),
        deadline: T0 + Duration::days(2),
    };
    after(&run(plan, Some(r), &input))
}

/// What the record's step wait holds, read as the record once kept it itself: the tests of a
/// step's rules read it so.
trait AtStep {
    fn token(&self) -> Option<TaskToken>;
    fn deadline(&self) -> Option<OffsetDateTime>;
    fn owed(&self) -> Option<Resume>;
    fn attempts(&self) -> Vec<FailedAttempt>;
    fn next_attempt_at(&self) -> Option<OffsetDateTime>;
    fn attempt(&self) -> u32;
    fn inputs(&self) -> Map<String, Value>;
}

impl AtStep for Record {
    fn token(&self) -> Option<TaskToken> {
        self.step_wait().and_then(|w| w.token.clone())
    }
    fn deadline(&self) -> Option<OffsetDateTime> {
        self.step_wait().and_then(|w| w.deadline)
    }
    fn owed(&self) -> Option<Resume> {
        self.step_wait().and_then(Wait::owed).cloned()
    }
    fn attempts(&self) -> Vec<FailedAttempt> {
        self.step_wait().map(|w| w.failed.clone()).unwrap_or_default()
    }
    fn next_attempt_at(&self) -> Option<OffsetDateTime> {
        self.step_wait().and_then(Wait::task_due)
    }
    fn attempt(&self) -> u32 {
        self.step_wait().map_or(1, Wait::attempt)
    }
    fn inputs(&self) -> Map<String, Value> {
        self.step_wait().map(|w| Map::clone(&w.inputs)).unwrap_or_default()
    }
}

/// The wait of `step` at the position the record is at.
fn wait_of(r: &Record, step: u32) -> &Wait {
    r.wait(step).unwrap_or_else(|| panic!("no wait of step {step}: {:?}", r.waits))
}

/// A step's (or branch's) wait, in generation 1 unless said.
fn wid(generation: u32, step: u32) -> WaitId {
    WaitId { generation, step, compensation: false }
}

/// The compensation of `step`'s wait.
fn uid(generation: u32, step: u32) -> WaitId {
    WaitId { generation, step, compensation: true }
}

/// The task of the first attempt of `wait`, as Step Functions reaches it.
fn create(wait: WaitId, attempt: u32) -> Effect {
    Effect::CreateTask { wait, attempt }
}

/// The task of `attempt` of the wait, its turn come: published (after a heartbeat on `beat`),
/// then marked out.
fn open(wait: WaitId, attempt: u32, beat: Option<&str>) -> Effect {
    Effect::OpenAttempt { wait, attempt, beat: beat.map(token) }
}

/// A success owed to the wait's token `tok`.
fn resume_ok(wait: WaitId, tok: &str, output: serde_json::Value, mark: Mark) -> Effect {
    Effect::Resume { wait, token: token(tok), resume: Resume::Success { output }, mark }
}

/// A failure owed to the wait's token `tok`.
fn resume_failed(wait: WaitId, tok: &str, (error, cause): (&str, &str), mark: Mark) -> Effect {
    Effect::Resume {
        wait,
        token: token(tok),
        resume: Resume::Failure { error: error.into(), cause: cause.into() },
        mark,
    }
}

/// Whether `effects` fail the token `tok`, whatever for.
/// The successes `d` owes a token: resumes and answers alike.
fn success_resumes(d: &Decision) -> usize {
    d.effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Resume { resume: Resume::Success { .. }, .. }
                    | Effect::Answer { resume: Resume::Success { .. }, .. }
            )
        })
        .count()
}

fn fails(effects: &[Effect], tok: &str) -> bool {
    effects.iter().any(|e| {
        matches!(e, Effect::Answer { token: t, resume: Resume::Failure { .. } }
            | Effect::Resume { token: t, resume: Resume::Failure { .. }, .. } if t == &token(tok))
    })
}

fn callback(id: &str, step: u32, outcome: StepOutcome, data: serde_json::Value) -> Input {
    let serde_json::Value::Object(data) = data else { panic!("data must be an object") };
    Input::StepInput {
        id: eid(id),
        hash: format!("h-{id}"),
        source: Source::Callback,
        step,
        outcome,
        data,
        generation: None,
        attempt: None,
    }
}

#[test]
fn given_no_record_when_a_start_event_arrives_then_a_pending_record_and_one_execution_are_owed() {
    let p = plan(&[&["decision"]]);
    let d = run(&p, None, &Input::start(eid("evt-1")));
    assert_eq!(d.outcome, Outcome::Applied);
    let w = d.write.as_ref().unwrap();
    assert_eq!(
        (w.from, w.expected_version, w.to.state, w.to.generation, w.to.version),
        (None, None, State::Pending, 1, 1)
    );
    assert_eq!(d.effects, vec![Effect::StartExecution { generation: 1 }]);
}

#[test]
fn given_a_pending_record_when_its_start_event_is_redelivered_then_it_is_a_duplicate_that_restarts_idempotently()
 {
    let p = plan(&[&["decision"]]);
    let r = started(&p);
    let d = run(&p, Some(&r), &Input::start(eid("evt-1")));
    assert_eq!(d.outcome, Outcome::Duplicate);
    assert!(d.write.is_none());
    assert_eq!(d.effects, vec![Effect::StartExecution { generation: 1 }]);
}

#[test]
fn given_a_running_workflow_when_another_start_event_arrives_then_it_is_ignored_and_ledgered() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let d = run(&p, Some(&r), &Input::start(eid("evt-2")));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::AlreadyRunning));
    assert_eq!(d.effects, vec![Effect::Ledger { reason: IgnoreReason::AlreadyRunning }]);
}

#[test]
fn given_pending_when_step_ready_arrives_then_waiting_with_token_task_and_drain() {
    let p = plan(&[&["decision"]]);
    let r = started(&p);
    let input =
        Input::StepReady { generation: 1, step: 0, token: token("tok-0"), deadline: T0 + Duration::days(2) };
    let d = run(&p, Some(&r), &input);
    assert_eq!(d.outcome, Outcome::Applied);
    let to = after(&d);
    assert_eq!(to.state, State::Waiting { step: 0 });
    assert_eq!(wait_of(&to, 0).token, Some(token("tok-0")));
    assert_eq!(wait_of(&to, 0).deadline, Some(T0 + Duration::days(2)));
    assert_eq!(d.effects, vec![create(wid(1, 0), 1), Effect::DrainInbox { generation: 1, step: 0 }]);

    // Redelivered: a duplicate that re-runs the idempotent effects, with no write.
    let again = run(&p, Some(&to), &input);
    assert_eq!(again.outcome, Outcome::Duplicate);
    assert!(again.write.is_none());
    assert_eq!(again.effects, d.effects);
}

#[test]
fn given_two_required_inputs_when_they_arrive_separately_then_the_step_advances_once_after_the_second() {
    let p = plan(&[&["decision", "reviewer"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");

    let first =
        run(&p, Some(&r), &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "approve"})));
    assert_eq!(first.outcome, Outcome::Applied);
    let r1 = after(&first);
    assert_eq!(r1.state, State::Waiting { step: 0 });
    assert!(first.effects.is_empty(), "no resume yet: {:?}", first.effects);

    let second = run(&p, Some(&r1), &callback("cb-2", 0, StepOutcome::Succeeded, json!({"reviewer": "ann"})));
    let r2 = after(&second);
    let audit: Vec<(Option<&str>, &str, Cause, Option<&str>)> =
        r2.history.iter().map(|a| (a.from.as_deref(), &*a.to, a.cause, a.cause_id.as_deref())).collect();
    assert_eq!(
        audit,
        [
            (None, "pending", Cause::Start, Some("evt-1")),
            (Some("pending"), "waiting{0}", Cause::StepReady, None),
            (Some("waiting{0}"), "waiting{0}", Cause::Merge, Some("cb-1")),
            (Some("waiting{0}"), "advancing{0}", Cause::Complete, Some("cb-2")),
        ]
    );
    assert_eq!(r2.state, State::Advancing { step: 0 });
    assert_eq!(
        second.effects,
        vec![resume_ok(wid(1, 0), "tok-0", json!({"decision": "approve", "reviewer": "ann"}), Mark::IfGone)]
    );

    // A third input for the advanced step is ignored; the completing one again re-sends the resume.
    let third =
        run(&p, Some(&r2), &callback("cb-3", 0, StepOutcome::Succeeded, json!({"decision": "reject"})));
    assert_eq!(third.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced));
    let same = callback("cb-2", 0, StepOutcome::Succeeded, json!({"reviewer": "ann"}));
    let twin = run(&p, Some(&r2), &same);
    assert_eq!((twin.outcome, twin.effects.len()), (Outcome::Duplicate, 0), "a twin in flight sends nothing");
    let (w, k) = names();
    let retry = decide(&p, (&w, &k), Some(&r2), &same, T0 + RESEND_RESUME_AFTER);
    assert_eq!(retry.outcome, Outcome::Duplicate);
    assert_eq!(retry.effects, second.effects, "a retry after the grace period re-sends the owed resume");
    // The partial one again is a plain duplicate: it caused no resume.
    let partial_again =
        run(&p, Some(&r2), &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "approve"})));
    assert_eq!((partial_again.outcome, partial_again.effects.len()), (Outcome::Duplicate, 0));
}

#[test]
fn given_an_applied_input_when_the_same_id_comes_with_another_payload_then_it_is_rejected() {
    let p = plan(&[&["decision", "reviewer"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let r1 = after(&run(
        &p,
        Some(&r),
        &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "approve"})),
    ));
    let mut other = callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "reject"}));
    if let Input::StepInput { hash, .. } = &mut other {
        *hash = "h-other".into();
    }
    let d = run(&p, Some(&r1), &other);
    assert_eq!(d.outcome, Outcome::Rejected(RejectReason::IdempotencyKeyReused));
    assert!(d.write.is_none());
    assert_eq!(
        d.effects,
        [Effect::Ledger { reason: IgnoreReason::IdempotencyKeyReused }],
        "the refused input is ledgered: a trace an operator can find"
    );
}

#[test]
fn given_a_callback_applied_when_an_event_with_the_same_id_feeds_the_step_then_it_is_another_input() {
    // Given a callback "shared-1" applied to a step that needs two inputs
    let p = plan(&[&["decision", "reviewer"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let r1 = after(&run(
        &p,
        Some(&r),
        &callback("shared-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"})),
    ));
    // When a domain event whose id happens to be the same text brings the other input
    let mut event = callback("shared-1", 0, StepOutcome::Succeeded, json!({"reviewer": "ann"}));
    if let Input::StepInput { hash, source, .. } = &mut event {
        (*hash, *source) = ("h-event".into(), Source::Event);
    }
    let d = run(&p, Some(&r1), &event);
    // Then it is applied: ids from the two sources are chosen by different parties
    assert_eq!(d.outcome, Outcome::Applied);
}

#[test]
fn given_an_applied_input_the_record_keeps_its_hash_fingerprint_and_tells_repeats_from_conflicts_by_it() {
    let p = plan(&[&["decision", "reviewer"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let with_hash = |hash: &str| {
        let mut input = callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "approve"}));
        if let Input::StepInput { hash: h, .. } = &mut input {
            *h = hash.to_owned();
        }
        input
    };
    let full = crate::domain::ids::payload_hash(b"approve");
    let r1 = after(&run(&p, Some(&r), &with_hash(&full)));
    assert_eq!(r1.applied[0].hash, full[..16], "64 bits are kept, not 256");
    assert_eq!(run(&p, Some(&r1), &with_hash(&full)).outcome, Outcome::Duplicate);
    let other = crate::domain::ids::payload_hash(b"reject");
    let d = run(&p, Some(&r1), &with_hash(&other));
    assert_eq!(d.outcome, Outcome::Rejected(RejectReason::IdempotencyKeyReused));
}

#[test]
fn given_no_record_or_pending_when_a_callback_arrives_then_it_is_buffered() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let early = callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"}));
    assert_eq!(run(&p, None, &early).effects, vec![Effect::Buffer { generation: 1, step: 0 }]);
    let r = started(&p);
    assert_eq!(run(&p, Some(&r), &early).outcome, Outcome::Buffered);
    // A callback for a later step than the one waiting is buffered too.
    let r = ready(&p, &r, 0, "tok-0");
    let later = callback("cb-2", 1, StepOutcome::Succeeded, json!({"payment_ref": "p"}));
    assert_eq!(run(&p, Some(&r), &later).effects, vec![Effect::Buffer { generation: 1, step: 1 }]);
}

#[test]
fn given_a_callback_for_an_unknown_step_then_it_is_rejected() {
    let p = plan(&[&["decision"]]);
    let d = run(&p, None, &callback("cb-1", 5, StepOutcome::Succeeded, json!({})));
    assert_eq!(d.outcome, Outcome::Rejected(RejectReason::UnknownStep));
}

#[test]
fn given_a_failed_outcome_then_a_failure_resume_is_owed() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let failed = StepOutcome::Failed { error: "Rejected".into(), cause: "fraud".into(), retryable: true };
    let d = run(&p, Some(&r), &callback("cb-1", 0, failed, json!({})));
    assert_eq!(after(&d).state, State::Advancing { step: 0 });
    assert_eq!(d.effects, vec![resume_failed(wid(1, 0), "tok-0", ("Rejected", "fraud"), Mark::IfGone)]);
}

#[test]
fn given_in_progress_then_data_merges_and_a_heartbeat_is_sent() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let d = run(&p, Some(&r), &callback("cb-1", 0, StepOutcome::InProgress, json!({"note": "looking"})));
    let to = after(&d);
    assert_eq!(to.state, State::Waiting { step: 0 });
    assert_eq!(wait_of(&to, 0).inputs.get("note"), Some(&json!("looking")));
    assert_eq!(d.effects, vec![Effect::SendTaskHeartbeat { token: token("tok-0") }]);
}

#[test]
fn a_two_of_three_step_completes_once_on_the_second_distinct_approval() {
    let mut p = plan(&[&[]]);
    p.step_mut(0).unwrap().requires =
        Requires { of: vec!["ann".into(), "bob".into(), "cy".into()], at_least: 2 };
    let approve =
        |r: &Record, id: &str, data| run(&p, Some(r), &callback(id, 0, StepOutcome::Succeeded, data));
    let r = ready(&p, &started(&p), 0, "tok-0");
    // ann approves, then again under another id: one approval, counted once.
    let r = after(&approve(&r, "cb-ann", json!({"ann": "yes"})));
    let r = after(&approve(&r, "cb-ann-again", json!({"ann": "yes, again"})));
    assert_eq!(r.state, State::Waiting { step: 0 });
    // bob withdraws (null), and an input not in the list arrives: neither counts.
    let r = after(&approve(&r, "cb-bob", json!({"bob": null, "note": "later"})));
    assert_eq!(r.state, State::Waiting { step: 0 });
    // cy approves: two of three, the step completes, once.
    let d = approve(&r, "cb-cy", json!({"cy": "yes"}));
    let r = after(&d);
    assert_eq!(r.state, State::Advancing { step: 0 });
    let resumes = d
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::Resume { resume: Resume::Success { .. }, .. }))
        .count();
    assert_eq!(resumes, 1, "{:?}", d.effects);
    // bob approves after: answered as for a step already advanced, and ledgered.
    let late = approve(&r, "cb-bob-yes", json!({"bob": "yes"}));
    assert!(
        matches!(late.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced)),
        "{:?}",
        late.outcome
    );
    assert!(late.effects.iter().any(|e| matches!(e, Effect::Ledger { .. })), "{:?}", late.effects);
}

#[test]
fn an_any_of_step_completes_on_the_first_of_its_list() {
    let mut p = plan(&[&[]]);
    p.step_mut(0).unwrap().requires = Requires { of: vec!["legal".into(), "compliance".into()], at_least: 1 };
    let r = ready(&p, &started(&p), 0, "tok-0");
    let d = run(&p, Some(&r), &callback("cb-c", 0, StepOutcome::Succeeded, json!({"compliance": "ok"})));
    assert_eq!(after(&d).state, State::Advancing { step: 0 });
}

#[test]
fn given_a_terminal_record_then_late_inputs_are_ignored_and_ledgered_and_step_ready_fails_its_token() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let r = after(&run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::TimedOut }));
    assert_eq!(r.state, State::TimedOut);

    let late = run(&p, Some(&r), &callback("cb-9", 0, StepOutcome::Succeeded, json!({"decision": "x"})));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::Terminal));
    assert_eq!(late.effects, vec![Effect::Ledger { reason: IgnoreReason::Terminal }]);

    let stray = Input::StepReady { generation: 1, step: 0, token: token("tok-x"), deadline: T0 };
    let d = run(&p, Some(&r), &stray);
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::Terminal));
    assert!(fails(&d.effects, "tok-x"));

    let again = run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::TimedOut });
    assert_eq!(again.outcome, Outcome::Duplicate);
    let other = run(
        &p,
        Some(&r),
        &Input::Finished { generation: 1, finish: Finish::Failed { error: "e".into(), cause: "c".into() } },
    );
    assert_eq!(other.outcome, Outcome::Ignored(IgnoreReason::Terminal));
}

#[test]
fn given_success_reported_before_the_last_step_advanced_then_it_is_out_of_order() {
    let p = plan(&[&["a"], &["b"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let d = run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded });
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
    assert!(d.write.is_none());
}

#[test]
fn given_a_terminal_record_when_a_new_start_arrives_then_on_restart_decides() {
    let mut p = plan(&[&["decision"]]);
    let r = started(&p);
    let r = after(&run(&p, Some(&r), &Input::Cancel { reason: "test".into() }));

    let d = run(&p, Some(&r), &Input::start(eid("evt-2")));
    let to = after(&d);
    assert_eq!((to.state, to.generation, to.version), (State::Pending, 2, r.version + 1));
    assert_eq!(d.effects, vec![Effect::StartExecution { generation: 2 }]);
    // The first generation's start event, redelivered, must not open a third generation.
    assert_eq!(run(&p, Some(&r), &Input::start(eid("evt-1"))).outcome, Outcome::Duplicate);

    p.on_restart = OnRestart::Never;
    let d = run(&p, Some(&r), &Input::start(eid("evt-2")));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::RestartNotAllowed));
    assert_eq!(d.effects, vec![Effect::Ledger { reason: IgnoreReason::RestartNotAllowed }]);
}

#[test]
fn given_an_old_generation_when_its_reports_arrive_then_they_are_stale() {
    let p = plan(&[&["decision"]]);
    let r = started(&p);
    let r = after(&run(&p, Some(&r), &Input::Cancel { reason: "test".into() }));
    let r = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    let d = run(&p, Some(&r), &Input::Finished { generation: 1, finish: Finish::TimedOut });
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::StaleGeneration));
    let stray = Input::StepReady { generation: 1, step: 0, token: token("old"), deadline: T0 };
    assert!(fails(&run(&p, Some(&r), &stray).effects, "old"));
}

/// Found by the simulation (seed 25220): an input for generation 1, applied there, is
/// retried after a restart. It is the same input again, not a stale one: its sender was told
/// `applied` the first time and must hear the same.
#[test]
fn given_an_input_applied_in_an_earlier_generation_when_it_comes_again_then_it_is_a_duplicate() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let for_g1 = |id: &str| {
        let mut input = callback(id, 0, StepOutcome::InProgress, json!({"note": 1}));
        if let Input::StepInput { generation, .. } = &mut input {
            *generation = Some(1);
        }
        input
    };
    let r = after(&run(&p, Some(&r), &for_g1("cb-1")));
    let r = after(&run(&p, Some(&r), &Input::Cancel { reason: "test".into() }));
    let r = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    assert_eq!(run(&p, Some(&r), &for_g1("cb-1")).outcome, Outcome::Duplicate);
    let unseen = run(&p, Some(&r), &for_g1("cb-2"));
    assert_eq!(unseen.outcome, Outcome::Ignored(IgnoreReason::StaleGeneration));
}

#[test]
fn given_an_input_for_a_later_step_of_a_stale_run_then_its_application_to_an_earlier_step_is_no_repeat() {
    // An event fed step 0 of generation 1, and was buffered for step 1 too; the run was cancelled
    // and restarted before step 1 waited. Drained now, for step 1 of generation 1, it is stale:
    // that run never applied it to step 1.
    let p = plan(&[&["decision"], &["note"]]);
    let r = ready(&p, &started(&p), 0, "t0");
    let r = after(&run(&p, Some(&r), &callback("note-1", 0, StepOutcome::Succeeded, json!({"decision": 1}))));
    let r = after(&run(&p, Some(&r), &Input::Cancel { reason: "test".into() }));
    let r = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    let mut for_step_1 = callback("note-1", 1, StepOutcome::Succeeded, json!({"note": 1}));
    if let Input::StepInput { generation, .. } = &mut for_step_1 {
        *generation = Some(1);
    }
    assert_eq!(run(&p, Some(&r), &for_step_1).outcome, Outcome::Ignored(IgnoreReason::StaleGeneration));
}

#[test]
fn given_a_waiting_step_when_cancelled_then_the_execution_is_stopped() {
    let p = plan(&[&["decision"]]);
    let r = ready(&p, &started(&p), 0, "tok-0");
    let d = run(&p, Some(&r), &Input::Cancel { reason: "customer withdrew".into() });
    assert_eq!(after(&d).state, State::Cancelled);
    assert_eq!(
        d.effects,
        vec![
            Effect::StopExecution { generation: 1, cause: "customer withdrew".into() },
            Effect::fail(&token("tok-0"), "baton.Cancelled", "customer withdrew"),
        ]
    );
    assert_eq!(
        run(&p, Some(&after(&d)), &Input::Cancel { reason: "again".into() }).outcome,
        Outcome::Duplicate
    );
}

#[test]
fn given_owed_work_when_the_sweeper_ticks_late_enough_then_it_is_owed_again() {
    let p = plan(&[&["decision"]]);
    let (w, k) = names();
    let pending = started(&p);
    assert_eq!(
        decide(&p, (&w, &k), Some(&pending), &Input::Tick, T0).outcome,
        Outcome::Ignored(IgnoreReason::NothingOwed)
    );
    let late = decide(&p, (&w, &k), Some(&pending), &Input::Tick, T0 + RESTART_PENDING_AFTER);
    assert_eq!(late.effects, vec![Effect::StartExecution { generation: 1 }]);

    let r = ready(&p, &pending, 0, "tok-0");
    let adv = after(&run(&p, Some(&r), &callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": 1}))));
    let tick = decide(&p, (&w, &k), Some(&adv), &Input::Tick, T0 + RESEND_RESUME_AFTER);
    assert!(matches!(
        tick.effects.as_slice(),
        [Effect::Resume { resume: Resume::Success { .. }, mark: Mark::IfGone, .. }]
    ));
    assert!(tick.write.is_none(), "the sweeper re-sends; it never writes state");
}

#[test]
fn the_table_answers_conditions_for_each_target() {
    assert_eq!(allowed_prior(Kind::Pending, Cause::Start), vec![None]);
    assert_eq!(
        allowed_prior(Kind::Pending, Cause::Restart),
        Kind::TERMINAL.iter().map(|k| Some(*k)).collect::<Vec<_>>()
    );
    assert_eq!(allowed_prior(Kind::Advancing, Cause::Complete), vec![Some(Kind::Waiting)]);
    assert!(allowed_prior(Kind::Waiting, Cause::Cancel).is_empty());
    // No row leaves a terminal state except the restart into a new generation.
    for row in TRANSITIONS {
        if row.from.is_some_and(Kind::is_terminal) {
            assert_eq!(row.cause, Cause::Restart, "{row:?}");
        }
    }
    assert!(is_allowed(Some(State::Advancing { step: 0 }), State::Waiting { step: 1 }, Cause::StepReady));
    // Forward only; how far (one step, or past a parallel group's branches) is the plan's, which
    // `decide` keeps.
    assert!(is_allowed(Some(State::Advancing { step: 0 }), State::Waiting { step: 3 }, Cause::StepReady));
    assert!(!is_allowed(Some(State::Advancing { step: 1 }), State::Waiting { step: 1 }, Cause::StepReady));
    assert!(!is_allowed(Some(State::Waiting { step: 0 }), State::Waiting { step: 1 }, Cause::Merge));
    assert!(!is_allowed(Some(State::Succeeded), State::Failed, Cause::ReportFailed));
}

#[test]
fn states_round_trip_through_their_stored_parts() {
    for s in [
        State::Pending,
        State::Waiting { step: 3 },
        State::Advancing { step: 0 },
        State::Succeeded,
        State::Failed,
        State::TimedOut,
        State::Cancelled,
    ] {
        assert_eq!(State::from_parts(s.kind(), s.step()), Some(s));
        assert_eq!(Kind::parse(s.kind().as_str()), Some(s.kind()));
    }
    assert_eq!(State::from_parts(Kind::Waiting, None), None);
}

// ---------------------------------------------------------------------------------------------
// The property test: a pure model of baton, Step Functions and the queues.

/// One thing the world does next.
#[derive(Debug, Clone)]
enum Action {
    /// A start event (one of three ids) arrives; ids repeat, so this is redelivery too.
    Start(u8),
    /// A callback (one of six ids) for a step, with an outcome and some inputs.
    Callback {
        id: u8,
        step: u8,
        outcome: u8,
        keys: u8,
    },
    /// The next queued progress message is delivered (`skip` reorders: pick a later one).
    Progress {
        skip: u8,
    },
    /// An already delivered progress message is delivered again.
    RedeliverProgress(u8),
    /// An earlier callback is delivered again, same id and payload.
    RedeliverCallback(u8),
    /// The parked step misses its deadline.
    Timeout,
    Cancel,
    /// A new config version is deployed in mid-flight: a step appended, the last one removed,
    /// or the first one's `requires` changed.
    Deploy(u8),
    /// Time passes and the sweeper runs.
    Tick,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0u8..3).prop_map(Action::Start),
        5 => (0u8..6, 0u8..3, 0u8..10, 0u8..8).prop_map(|(id, step, outcome, keys)| Action::Callback { id, step, outcome, keys }),
        6 => (0u8..3).prop_map(|skip| Action::Progress { skip }),
        2 => any::<u8>().prop_map(Action::RedeliverProgress),
        2 => any::<u8>().prop_map(Action::RedeliverCallback),
        1 => Just(Action::Timeout),
        1 => Just(Action::Cancel),
        1 => Just(Action::Tick),
        1 => any::<u8>().prop_map(Action::Deploy),
    ]
}

const KEYS: [&str; 3] = ["a", "b", "c"];

/// All of one or two inputs, or any one of two.
fn requires() -> impl Strategy<Value = Requires> {
    (prop::sample::subsequence(KEYS.to_vec(), 1..=2), any::<bool>()).prop_map(|(v, any)| {
        let of: Vec<String> = v.into_iter().map(String::from).collect();
        Requires { at_least: if any { 1 } else { of.len() }, of }
    })
}

/// One Step Functions execution, as far as the model needs it.
#[derive(Debug, Default)]
struct Execution {
    /// How many steps its definition has: its config version's, fixed when it started.
    steps: u32,
    /// The step it is parked on, and that step's token.
    parked: Option<(u32, TaskToken)>,
    done: bool,
    /// Tokens that were resumed, and how many times in effect.
    resumed: HashMap<String, u32>,
}

struct World {
    /// The deployed config's plan: new starts follow it.
    plan: Plan,
    /// Every deployed plan, by version: a live record is decided on its own.
    plans: HashMap<String, Plan>,
    record: Option<Record>,
    now: OffsetDateTime,
    executions: BTreeMap<u32, Execution>,
    progress: VecDeque<Input>,
    delivered_progress: Vec<Input>,
    delivered_callbacks: Vec<Input>,
    inbox: Vec<(u32, u32, Input)>,
    /// (generation, step) → how many times it advanced.
    advanced: HashMap<(u32, u32), u32>,
    /// Inputs buffered, by id, and whether a drain has classified them since.
    buffered: HashSet<String>,
    /// When each token's resume was first sent.
    first_sent: HashMap<String, OffsetDateTime>,
}

impl World {
    fn decide_and_apply(&mut self, input: &Input) -> Decision {
        let (w, k) = names();
        let prior = self.record.clone();
        // As the engine pins: a live record on its own version; a new start on the deployed one.
        let plan = match (&prior, input) {
            (Some(r), Input::Start { .. }) if r.state.is_terminal() => self.plan.clone(),
            (Some(r), _) => self.plans[r.config_version.as_str()].clone(),
            (None, _) => self.plan.clone(),
        };
        let d = decide(&plan, (&w, &k), prior.as_ref(), input, self.now);
        self.check(prior.as_ref(), input, &d);
        if let Some(w) = &d.write {
            // A generation keeps the config version it started on; a new one takes the deployed.
            match prior.as_ref().filter(|p| p.generation == w.to.generation) {
                Some(p) => assert_eq!(w.to.config_version, p.config_version, "a generation changed version"),
                None => {
                    assert_eq!(w.to.config_version, self.plan.version, "a new generation on an old version")
                }
            }
            let own = &self.plans[w.to.config_version.as_str()];
            if let Some(step) = w.to.state.step() {
                assert!((step as usize) < own.steps.len(), "step {step} past its version's steps");
            }
            // A step advances on what its own version requires, whatever was deployed since.
            if let (Some(State::Waiting { step }), State::Advancing { .. }, Some(Resume::Success { .. })) =
                (w.from, w.to.state, w.to.step_wait().and_then(Wait::owed))
            {
                let inputs = &wait_of(&w.to, step).inputs;
                let requires = &own.steps[step as usize].requires;
                assert!(requires.met(inputs), "step {step} advanced on {inputs:?}, short of {requires}");
            }
        }
        // A report for a step its own version has is never refused as unknown.
        if let (Some(r), Input::StepReady { step, .. }) = (&prior, input) {
            let own = &self.plans[r.config_version.as_str()];
            if (*step as usize) < own.steps.len() {
                assert_ne!(
                    d.outcome,
                    Outcome::Rejected(RejectReason::UnknownStep),
                    "step {step} of its own version refused"
                );
            }
        }
        if let Some(write) = &d.write {
            self.record = Some(write.to.clone());
        }
        for effect in d.effects.clone() {
            self.carry_out(effect, input);
        }
        d
    }

    /// The invariants (1), (4), (5), (6) of docs/ARCHITECTURE.md, checked on every decision.
    fn check(&mut self, prior: Option<&Record>, input: &Input, d: &Decision) {
        if let Some(w) = &d.write {
            // (1) only allowed transitions, from the state and version actually stored.
            assert!(
                is_allowed(w.from, w.to.state, w.cause),
                "not in the table: {:?} -> {} ({:?})",
                w.from,
                w.to.state,
                w.cause
            );
            assert_eq!(w.from, prior.map(|r| r.state));
            assert_eq!(w.expected_version, prior.map(|r| r.version));
            assert_eq!(w.to.version, prior.map_or(1, |r| r.version + 1));
            // Every transition leaves its audit entry in the same write.
            let audit = w.to.history.last().expect("an audit entry");
            assert_eq!(
                (audit.from.as_deref().map(str::to_owned), audit.to.to_string(), audit.cause, audit.version),
                (w.from.map(|s| s.to_string()), w.to.state.to_string(), w.cause, w.to.version)
            );
            assert_eq!(audit.cause_id.as_deref(), input.id().map(|id| id.as_str()));
            // (5) a terminal record changes only by opening a new generation.
            if let Some(p) = prior.filter(|p| p.state.is_terminal()) {
                assert_eq!(w.cause, Cause::Restart);
                assert_eq!(w.to.generation, p.generation + 1);
                assert_eq!(self.plan.on_restart, OnRestart::AfterTerminal);
            }
            // (4) each step advances at most once per generation.
            if let State::Advancing { step } = w.to.state
                && w.from != Some(w.to.state)
            {
                let n = self.advanced.entry((w.to.generation, step)).or_default();
                *n += 1;
                assert_eq!(*n, 1, "step {step} of generation {} advanced twice", w.to.generation);
            }
        }
        // (6) every input is classified; an ignored input from outside is ledgered.
        match d.outcome {
            Outcome::Ignored(reason) if !matches!(input, Input::Tick) => {
                assert!(
                    d.effects.contains(&Effect::Ledger { reason }),
                    "{input:?} ignored ({reason:?}) without a ledger entry"
                );
            }
            Outcome::Buffered => {
                assert!(
                    d.effects.iter().any(|e| matches!(e, Effect::Buffer { .. })),
                    "buffered without an inbox entry"
                );
                assert!(d.write.is_none());
            }
            Outcome::Applied => {
                assert!(
                    d.write.is_some() || matches!(input, Input::Tick),
                    "applied {input:?} without a write"
                )
            }
            Outcome::Duplicate | Outcome::Rejected(_) | Outcome::Ignored(_) => {
                assert!(d.write.is_none(), "{:?} must not write", d.outcome)
            }
        }
    }

    fn carry_out(&mut self, effect: Effect, input: &Input) {
        match effect {
            Effect::StartExecution { generation } => {
                if let std::collections::btree_map::Entry::Vacant(slot) = self.executions.entry(generation) {
                    let token = TaskToken::parse(format!("g{generation}-s0")).unwrap();
                    let version = self.record.as_ref().map(|r| r.config_version.clone());
                    let steps = self.plans[version.as_deref().expect("a record")].steps.len() as u32;
                    slot.insert(Execution { steps, parked: Some((0, token.clone())), ..Default::default() });
                    self.progress.push_back(Input::StepReady {
                        generation,
                        step: 0,
                        token,
                        deadline: self.now + Duration::days(1),
                    });
                }
            }
            Effect::Resume { wait, token, resume, mark } => {
                self.check_resend(&token);
                self.resume(&token, matches!(resume, Resume::Success { .. }));
                if mark == Mark::Always {
                    self.decide_and_apply(&Input::Resumed { wait, token, delivered: true });
                }
            }
            Effect::Answer { token, resume } => self.resume(&token, matches!(resume, Resume::Success { .. })),
            Effect::StopExecution { generation, .. } => {
                if let Some(e) = self.executions.get_mut(&generation) {
                    e.parked = None;
                    e.done = true;
                }
            }
            Effect::Buffer { generation, step } => {
                if let Some(id) = input.id() {
                    self.buffered.insert(id.to_string());
                }
                self.inbox.push((generation, step, input.clone()));
            }
            Effect::DrainInbox { generation, step } => {
                let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.inbox)
                    .into_iter()
                    .partition(|(g, s, _)| *s == step && *g == generation);
                self.inbox = rest;
                for (_, _, entry) in due {
                    let d = self.decide_and_apply(&entry);
                    assert_ne!(
                        d.outcome,
                        Outcome::Buffered,
                        "a drained entry for its own waiting step must not buffer again"
                    );
                    if let Some(id) = entry.id() {
                        self.buffered.remove(id.as_str());
                    }
                }
            }
            Effect::CreateTask { .. }
            | Effect::OpenAttempt { .. }
            | Effect::Remind { .. }
            | Effect::Escalate { .. }
            | Effect::SendTaskHeartbeat { .. }
            | Effect::Ledger { .. } => {}
        }
    }

    /// (4) An owed resume is sent once; it is sent again only after the grace period, when the
    /// first sender may have crashed. A twin in flight never sends a second one.
    fn check_resend(&mut self, token: &TaskToken) {
        match self.first_sent.get(token.expose()) {
            None => {
                self.first_sent.insert(token.expose().to_owned(), self.now);
            }
            Some(first) => assert!(
                self.now - *first >= RESEND_RESUME_AFTER,
                "resume for {token:?} sent again {} after the first",
                self.now - *first
            ),
        }
    }

    /// Step Functions' side of a resume: only the parked token of a running execution counts.
    fn resume(&mut self, token: &TaskToken, success: bool) {
        let now = self.now;
        for (generation, e) in self.executions.iter_mut() {
            let steps = e.steps;
            let Some((step, parked)) = e.parked.clone() else { continue };
            if &parked != token || e.done {
                continue;
            }
            *e.resumed.entry(token.expose().to_owned()).or_default() += 1;
            assert_eq!(e.resumed[token.expose()], 1, "a token resumed twice in effect");
            e.parked = None;
            let generation = *generation;
            if !success {
                e.done = true;
                self.progress.push_back(Input::Finished {
                    generation,
                    finish: Finish::Failed { error: "e".into(), cause: "c".into() },
                });
            } else if step + 1 < steps {
                let next = TaskToken::parse(format!("g{generation}-s{}", step + 1)).unwrap();
                e.parked = Some((step + 1, next.clone()));
                self.progress.push_back(Input::StepReady {
                    generation,
                    step: step + 1,
                    token: next,
                    deadline: now + Duration::days(1),
                });
            } else {
                e.done = true;
                self.progress.push_back(Input::Finished { generation, finish: Finish::Succeeded });
            }
            return;
        }
    }

    #[expect(clippy::too_many_lines, reason = "the model's one match over every action it can take")]
    fn act(&mut self, action: &Action) {
        self.now += Duration::seconds(1);
        match action {
            Action::Start(n) => {
                self.decide_and_apply(&Input::start(eid(&format!("evt-{n}"))));
            }
            Action::Callback { id, step, outcome, keys } => {
                let outcome = match outcome {
                    0 => {
                        StepOutcome::Failed { error: "Rejected".into(), cause: "no".into(), retryable: true }
                    }
                    1 => StepOutcome::InProgress,
                    _ => StepOutcome::Succeeded,
                };
                let data: Map<String, Value> = KEYS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| keys & (1 << i) != 0)
                    .map(|(_, k)| (k.to_string(), json!(format!("{k}-{id}"))))
                    .collect();
                // The payload hash is a function of the payload, so a reused id with other data
                // is a conflict, exactly as the receipts see it.
                let hash = format!("{step}:{outcome:?}:{data:?}");
                let input = Input::StepInput {
                    id: eid(&format!("cb-{id}")),
                    hash,
                    source: Source::Callback,
                    step: u32::from(*step),
                    outcome,
                    data,
                    generation: None,
                    attempt: None,
                };
                self.delivered_callbacks.push(input.clone());
                self.decide_and_apply(&input);
            }
            Action::Progress { skip } => {
                if self.progress.is_empty() {
                    return;
                }
                let i = usize::from(*skip) % self.progress.len();
                if let Some(msg) = self.progress.remove(i) {
                    self.delivered_progress.push(msg.clone());
                    self.decide_and_apply(&msg);
                }
            }
            Action::RedeliverProgress(n) => {
                if !self.delivered_progress.is_empty() {
                    let msg =
                        self.delivered_progress[usize::from(*n) % self.delivered_progress.len()].clone();
                    self.decide_and_apply(&msg);
                }
            }
            Action::RedeliverCallback(n) => {
                if !self.delivered_callbacks.is_empty() {
                    let msg =
                        self.delivered_callbacks[usize::from(*n) % self.delivered_callbacks.len()].clone();
                    self.decide_and_apply(&msg);
                }
            }
            Action::Timeout => {
                for (generation, e) in self.executions.iter_mut() {
                    if e.parked.take().is_some() && !e.done {
                        e.done = true;
                        self.progress
                            .push_back(Input::Finished { generation: *generation, finish: Finish::TimedOut });
                    }
                }
            }
            Action::Cancel => {
                self.decide_and_apply(&Input::Cancel { reason: "operator".into() });
            }
            Action::Tick => {
                self.now += RESEND_RESUME_AFTER.max(RESTART_PENDING_AFTER);
                self.decide_and_apply(&Input::Tick);
            }
            Action::Deploy(n) => {
                let mut steps = self.plan.steps.clone();
                match n % 3 {
                    0 => steps.push(StepPlan::requiring(&["a"])),
                    1 if steps.len() > 1 => drop(steps.pop()),
                    _ => steps[0] = StepPlan::requiring(&["b", "c"]),
                }
                let version = format!("v-prop-{}", self.plans.len());
                self.plan = Plan { steps, version: version.clone(), ..self.plan.clone() };
                self.plans.insert(version, self.plan.clone());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn lifecycle_invariants_hold_under_duplicates_reordering_early_and_late_inputs_and_deploys(
        steps in prop::collection::vec(requires(), 1..=3),
        never in any::<bool>(),
        actions in prop::collection::vec(action(), 1..60),
    ) {
        let on_restart = if never { OnRestart::Never } else { OnRestart::AfterTerminal };
        let steps = steps.into_iter().map(|requires| StepPlan { requires, ..StepPlan::default() }).collect();
        let plan = Plan { steps, on_restart, version: "v-prop".into() };
        let mut world = World {
            plans: HashMap::from([("v-prop".to_owned(), plan.clone())]),
            plan,
            record: None,
            now: T0,
            executions: BTreeMap::new(),
            progress: VecDeque::new(),
            delivered_progress: Vec::new(),
            delivered_callbacks: Vec::new(),
            inbox: Vec::new(),
            advanced: HashMap::new(),
            buffered: HashSet::new(),
            first_sent: HashMap::new(),
        };
        for a in &actions {
            world.act(a);
        }
        // Nothing is lost: every buffered input is still in the inbox (to be applied or to
        // expire) or was classified by a drain.
        let in_inbox: HashSet<String> = world.inbox.iter().filter_map(|(_, _, i)| i.id().map(|id| id.to_string())).collect();
        for id in &world.buffered {
            prop_assert!(in_inbox.contains(id), "buffered input {id} vanished");
        }
    }
}

/// `Write::follows`, which `decide` asserts: a write decide makes follows from the record it
/// read; one that skips a version, starts from another state or crosses to another record
/// does not.
#[test]
fn a_write_follows_from_the_record_read_and_a_tampered_one_does_not() {
    let p = plan(&[&["approved"]]);
    let created = run(&p, None, &Input::start(eid("evt-1"))).write.expect("a write");
    assert!(created.follows(None));
    let pending = created.to.clone();
    let input =
        Input::StepReady { generation: 1, step: 0, token: token("tok-1"), deadline: T0 + Duration::days(2) };
    let write = run(&p, Some(&pending), &input).write.expect("a write");
    assert!(write.follows(Some(&pending)));
    let skipped = Write { to: Record { version: write.to.version + 1, ..write.to.clone() }, ..write.clone() };
    assert!(!skipped.follows(Some(&pending)), "a version skipped");
    assert!(!write.follows(None), "read absent, written as from pending");
    let other = Record { key: CorrelationKey::parse("order-2").unwrap(), ..pending.clone() };
    assert!(!write.follows(Some(&other)), "another record");
    let backwards = Write { cause: Cause::Restart, ..write.clone() };
    assert!(!backwards.follows(Some(&pending)), "pending -> waiting is no restart");
}

/// A small deterministic generator (xorshift) for the random walks of the race tests.
struct Rng(u64);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

mod branch_retry_races;
mod compensation;
mod compensation_races;
mod features_meet;
mod group;
mod group_races;
mod quorum_races;
mod reminders;
mod repark;
mod retry;
mod retry_races;
mod stranded;
mod timer;
mod timer_notice_races;
mod until_races;
mod wait_races;
