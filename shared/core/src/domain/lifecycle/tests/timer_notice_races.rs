//! An attack on timer steps and reminders (found five defects, fixed with it) (lifecycle/tick.rs `wake` and `remind`, step_ready.rs
//! `reached`, wait.rs `Sleeping`, `notified`, `notice_at`): targeted orderings, plans that the
//! config refuses but the lifecycle is handed anyway, and a random walk over a plan where timers,
//! reminders, retry, a group with an optional branch, compensation, restarts, reparks, cancels
//! and the stranded path meet. Each test names the invariant of the brief it holds the code to:
//!
//! 1. A timer ends once, never before its time, never after a cancel; nothing but the sweeper's
//!    Tick, a cancel, Step Functions' reports or a newer token moves it; no input completes it.
//! 2. A reminder goes out only with the write that claims it, while the step's wait is open and
//!    the record waits; never before its time, never more than `times`, never a count twice.
//! 3. Every write keeps `Wait::agrees()` (decide's debug assertion).
//! 4. Combinations.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::retry::at;
use super::*;

const MIN: fn(i64) -> Duration = Duration::minutes;

fn std_secs(s: u64) -> std::time::Duration {
    std::time::Duration::from_secs(s)
}

/// Runs `f`, turning a panic (decide's debug assertion) into its message.
fn no_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".into())
    })
}

fn step_ready(generation: u32, step: u32, tok: &str, deadline: OffsetDateTime) -> Input {
    Input::StepReady { generation, step, token: token(tok), deadline }
}

fn then(r: &Record, d: &Decision) -> Record {
    d.write.as_ref().map_or_else(|| r.clone(), |w| w.to.clone())
}

// ---------------------------------------------------------------------------------------------
// Plans the config refuses, handed to the lifecycle anyway: it must stay within its own tables
// (no panic), and do something sane.

/// A group of two required branches: the timer (0: 1h, timeout 1h15m) and review (1), then
/// payment (2). validate refuses a timer on a branch.
fn timer_on_a_branch() -> Plan {
    let mut p = with_group(plan(&[&[], &["decision"], &["payment_ref"]]), (0, 1), &[]);
    p.steps[0].timer = Some(Timer::After(std_secs(3600)));
    p.steps[0].timeout = std_secs(3600 + 15 * 60);
    p.steps[1].timeout = std_secs(86_400);
    p
}

/// Invariant 3 and 4 (a plan with a timer on a branch, which validate refuses: the lifecycle
/// still keeps its tables). Sequence: start; step_ready(branch 0, the timer, entered T0);
/// step_ready(branch 1); Tick at T0+1h (the timer's time, its sibling still open).
/// Expected: the Tick either wakes the branch with a write the tables allow, or does nothing.
#[test]
fn a_timer_branch_woken_while_its_sibling_waits_keeps_the_tables() {
    let p = timer_on_a_branch();
    let r = started(&p);
    let r = after(&at(&p, Some(&r), &step_ready(1, 0, "b0", T0 + MIN(75)), T0));
    let r = after(&at(&p, Some(&r), &step_ready(1, 1, "b1", T0 + Duration::days(1)), T0));
    assert!(matches!(wait_of(&r, 0).status, WaitStatus::Sleeping { .. }), "{:?}", r.waits);
    let tick = no_panic(|| at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1)));
    let d = tick.unwrap_or_else(|m| {
        panic!("the Tick that wakes a timer branch while its sibling waits panicked in decide: {m}")
    });
    if let Some(w) = &d.write {
        assert!(w.follows(Some(&r)), "{d:?}");
    }
}

/// Invariant 3 (a plan with both `timer` and `remind` on a step, which validate refuses).
/// Sequence: start; step_ready(the timer). Expected: a write that agrees (no reminder due on a
/// sleeping wait), not decide's assertion.
#[test]
fn a_timer_step_whose_plan_also_reminds_is_reached_within_the_tables() {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(Timer::After(std_secs(3600)));
    p.steps[0].timeout = std_secs(3600 + 15 * 60);
    p.steps[0].remind = Some(Remind { after: std_secs(600), every: std_secs(600), times: 2 });
    let r = started(&p);
    let d = no_panic(|| at(&p, Some(&r), &step_ready(1, 0, "t0", T0 + MIN(75)), T0))
        .unwrap_or_else(|m| panic!("reaching a timer whose plan reminds panicked in decide: {m}"));
    let to = after(&d);
    assert!(wait_of(&to, 0).agrees(), "{:?}", to.waits);
}

/// Invariant 2 and 4 (a plan with `remind` on a branch, which validate refuses): the branch's
/// wait is given a reminder time, so the record owes the sweeper work, but `remind` looks only at
/// a step's wait: the sweeper lists it as due at every sweep for ever and never finds it owes
/// anything. Sequence: start; step_ready(branch 0); step_ready(branch 1); Tick at T0+2h.
/// Expected: either the reminder goes out, or the record does not owe work it will never do.
#[test]
fn a_reminded_branch_never_owes_the_sweeper_work_it_will_not_do() {
    let mut p = with_group(plan(&[&["a"], &["b"], &["payment_ref"]]), (0, 1), &[]);
    for s in [0, 1] {
        p.steps[s].timeout = std_secs(86_400);
    }
    p.steps[0].remind = Some(Remind { after: std_secs(3600), every: std_secs(3600), times: 2 });
    let r = started(&p);
    let r = after(&at(&p, Some(&r), &step_ready(1, 0, "b0", T0 + Duration::days(1)), T0));
    let r = after(&at(&p, Some(&r), &step_ready(1, 1, "b1", T0 + Duration::days(1)), T0));
    let now = T0 + Duration::hours(2);
    let d = at(&p, Some(&r), &Input::Tick, now);
    let reminded = d.effects.iter().any(|e| matches!(e, Effect::Remind { .. }));
    let r2 = then(&r, &d);
    assert!(
        reminded || !(r2.owes_work() && r2.due_at() <= now),
        "the record owes work due at {} that no Tick does (waits: {:?}; tick: {d:?})",
        r2.due_at(),
        r2.waits
    );
}

/// Invariant 1 (an input can never complete a timer step, and one naming it is refused):
/// on_step_input refuses an input naming a timer step (`UnknownStep`) for any record, but with no
/// record yet the same input is buffered for generation 1. No drain will ever take it (a timer
/// drains nothing): it sits in the inbox until it expires. Expected: refused as with a record.
#[test]
fn an_input_naming_a_timer_step_before_the_record_exists_is_refused_as_after() {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].timer = Some(Timer::After(std_secs(3600)));
    p.steps[0].timeout = std_secs(3600 + 15 * 60);
    let input = callback("cb-early", 0, StepOutcome::Succeeded, json!({}));
    let pending = started(&p);
    assert_eq!(run(&p, Some(&pending), &input).outcome, Outcome::Rejected(RejectReason::UnknownStep));
    let d = run(&p, None, &input);
    assert_eq!(
        d.outcome,
        Outcome::Rejected(RejectReason::UnknownStep),
        "with no record yet an input for the timer step is not refused: {d:?}"
    );
}

/// Invariant 4 (compensation: a timer step has nothing to undo, and the compensation plan skips
/// it), for a plan whose timer declares `compensate` (validate refuses it: "nothing to undo"):
/// the lifecycle's plan still runs a compensation for the timer. Sequence: start; step_ready(0,
/// the timer); Tick at its time (woken); step_ready(1); review fails; compensation plan.
/// Expected: the timer skipped in the plan.
#[test]
fn the_compensation_plan_never_runs_a_timer_even_one_that_declares_compensate() {
    let mut p = plan(&[&[], &["decision"]]);
    p.steps[0].timer = Some(Timer::After(std_secs(3600)));
    p.steps[0].timeout = std_secs(3600 + 15 * 60);
    p.steps[0].compensate = Some(2);
    p.steps[1].timeout = std_secs(86_400);
    let r = after(&at(&p, Some(&started(&p)), &step_ready(1, 0, "t0", T0 + MIN(75)), T0));
    let r = after(&at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1)));
    let r = after(&at(&p, Some(&r), &step_ready(1, 1, "t1", T0 + Duration::days(1)), T0 + MIN(61)));
    let undos = compensation_plan(&p, &r);
    let timer = undos.iter().find(|u| u.step() == 0).expect("the timer in the plan");
    assert!(timer.skip.is_some(), "a timer step is planned to be undone: {undos:?}");
}

/// Invariant 4: validate refuses every plan the tests above hand the lifecycle anyway: a timer on
/// a branch, `remind` on a branch, and `remind` or `compensate` on a timer step. Passes.
#[test]
fn held_validate_refuses_timers_and_reminders_where_the_lifecycle_cannot_keep_them() {
    let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: t1, timer: { after: 1h }, remind: { after: 10m } }
      - { name: t2, timer: { after: 1h }, compensate: { task: { title: "U", queue: q }, timeout: 1h } }
      - parallel:
          name: g
          branches:
            - { name: b1, timer: { after: 1h } }
            - { name: b2, task: { title: "T", queue: q }, requires: [x], timeout: 1d, remind: { after: 1h } }
"#;
    let errors: Vec<String> = match crate::domain::config::Config::parse(yaml) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.0.iter().map(|e| e.path.clone()).collect(),
    };
    for path in [
        "workflows.wf.steps[0].remind",
        "workflows.wf.steps[1].compensate",
        "workflows.wf.steps[2].parallel.branches[0].timer",
        "workflows.wf.steps[2].parallel.branches[1].remind",
    ] {
        assert!(errors.iter().any(|e| e == path), "{path} not refused: {errors:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Targeted orderings on plans validate accepts (each a property worth keeping; they pass).

/// A timer (1: 1h, timeout 1h15m) after review (0, compensate), then payment (2, reminded 1h
/// after, every 1h, 2 times, timeout 1d).
fn saga_with_timer() -> Plan {
    let mut p = plan(&[&["decision"], &[], &["payment_ref"]]);
    p.steps[0].timeout = std_secs(86_400);
    p.steps[0].compensate = Some(2);
    p.steps[1].timer = Some(Timer::After(std_secs(3600)));
    p.steps[1].timeout = std_secs(3600 + 15 * 60);
    p.steps[2].timeout = std_secs(86_400);
    p.steps[2].remind = Some(Remind { after: std_secs(3600), every: std_secs(3600), times: 2 });
    p
}

/// Review done at T0 (entered T0), the timer entered at T0+1m.
fn sleeping(p: &Plan) -> Record {
    let r = after(&at(p, Some(&started(p)), &step_ready(1, 0, "t0", T0 + Duration::days(1)), T0));
    let r = after(&at(
        p,
        Some(&r),
        &callback("cb-0", 0, StepOutcome::Succeeded, json!({"decision": "ok"})),
        T0 + MIN(1),
    ));
    after(&at(p, Some(&r), &step_ready(1, 1, "t1", T0 + MIN(1) + MIN(75)), T0 + MIN(1)))
}

/// Invariant 1 and 4: `cancel --compensate` during a timer closes it and fails its token into
/// the chain; the compensation plan lists the timer as nothing (not completed, nothing declared);
/// a Tick at its time wakes nothing. Passes.
#[test]
fn held_cancel_with_compensate_during_a_timer_closes_it_and_fails_its_token() {
    let p = saga_with_timer();
    let r = sleeping(&p);
    let d = at(&p, Some(&r), &Input::CancelCompensate { reason: "stop".into() }, T0 + MIN(30));
    let to = after(&d);
    assert_eq!(to.state, State::Compensating);
    assert_eq!(wait_of(&to, 1).outcome(), Some(WaitOutcome::Closed));
    assert!(fails(&d.effects, "t1"), "{:?}", d.effects);
    let undos = &to.compensation.as_ref().unwrap().undos;
    assert!(undos.iter().all(|u| u.step() != 1), "{undos:?}");
    let tick = at(&p, Some(&to), &Input::Tick, T0 + MIN(61));
    assert!(tick.write.is_none() && !tick.effects.iter().any(|e| matches!(e, Effect::Resume { .. })));
}

/// Invariant 4: a completed timer is in the compensation plan as not declared (skipped), never
/// run, and the chain's run of review's compensation goes on. Passes.
#[test]
fn held_a_completed_timer_is_skipped_by_the_compensation_plan() {
    let p = saga_with_timer();
    let r = sleeping(&p);
    let r = after(&at(&p, Some(&r), &Input::Tick, T0 + MIN(61)));
    let r = after(&at(&p, Some(&r), &step_ready(1, 2, "t2", T0 + MIN(62) + Duration::days(1)), T0 + MIN(62)));
    let undos = compensation_plan(&p, &r);
    let of = |s: u32| undos.iter().find(|u| u.step() == s).map(|u| u.skip);
    assert_eq!(of(1), Some(Some(SkipReason::NotDeclared)), "{undos:?}");
    assert_eq!(of(0), Some(None));
}

/// Invariant 1 (the stranded path): the execution found gone during a timer closes it, and no
/// Tick wakes it afterwards; `baton end` then ends the run. Passes.
#[test]
fn held_a_timer_stranded_never_wakes() {
    let p = saga_with_timer();
    let r = sleeping(&p);
    let gone = Input::ExecutionGone { generation: 1, status: "ABORTED".into(), error: None };
    let r = after(&at(&p, Some(&r), &gone, T0 + MIN(20)));
    assert_eq!(wait_of(&r, 1).outcome(), Some(WaitOutcome::Closed));
    assert!(!r.owes_work());
    let tick = at(&p, Some(&r), &Input::Tick, T0 + MIN(61));
    assert!(tick.write.is_none() && tick.effects.is_empty(), "{tick:?}");
}

/// Invariant 1: a timer reported late (its report sat in the queue past its `after`, not past
/// its deadline) wakes at the first Tick; exactly at its deadline, never. Passes.
#[test]
fn held_a_timer_reported_late_wakes_at_the_next_tick_but_never_at_its_deadline() {
    let p = saga_with_timer();
    let r = after(&at(&p, Some(&started(&p)), &step_ready(1, 0, "t0", T0 + Duration::days(1)), T0));
    let r =
        after(&at(&p, Some(&r), &callback("cb-0", 0, StepOutcome::Succeeded, json!({"decision": 1})), T0));
    // Entered at T0, reported at T0+70m: past its hour, before its deadline (T0+75m).
    let r = after(&at(&p, Some(&r), &step_ready(1, 1, "t1", T0 + MIN(75)), T0 + MIN(70)));
    let at_deadline = at(&p, Some(&r), &Input::Tick, T0 + MIN(75));
    assert!(at_deadline.write.is_none(), "{at_deadline:?}");
    let woke = at(&p, Some(&r), &Input::Tick, T0 + MIN(70));
    assert_eq!(after(&woke).state, State::Advancing { step: 1 });
}

/// Invariant 1: an older report of the timer (an earlier deadline, another token) neither moves
/// its time nor takes its token; a newer one keeps its time. Passes.
#[test]
fn held_an_older_report_of_a_timer_moves_nothing() {
    let p = saga_with_timer();
    let r = sleeping(&p);
    let older = at(&p, Some(&r), &step_ready(1, 1, "t1-old", T0 + MIN(70)), T0 + MIN(2));
    assert!(older.write.is_none(), "{older:?}");
    let newer = after(&at(&p, Some(&r), &step_ready(1, 1, "t1-new", T0 + MIN(80)), T0 + MIN(5)));
    assert_eq!(wait_of(&newer, 1).status, WaitStatus::Sleeping { until: T0 + MIN(61) });
    let woke = at(&p, Some(&newer), &Input::Tick, T0 + MIN(61));
    assert_eq!(woke.effects, vec![resume_ok(wid(1, 1), "t1-new", json!({}), Mark::IfGone)]);
}

/// Invariant 1 (other generations, replays): after a restart, the old generation's timer report
/// is failed as stale, a callback for the timer naming any generation is refused, and the new
/// generation's timer sleeps its own hour. Passes.
#[test]
fn held_a_restart_gives_the_timer_a_new_sleep_and_refuses_the_old_ones() {
    let p = saga_with_timer();
    let r = sleeping(&p);
    let cancelled = after(&at(&p, Some(&r), &Input::Cancel { reason: "x".into() }, T0 + MIN(10)));
    let r2 = after(&at(&p, Some(&cancelled), &Input::start(eid("evt-2")), T0 + MIN(20)));
    assert_eq!(r2.generation, 2);
    let stale = at(&p, Some(&r2), &step_ready(1, 1, "t1-b", T0 + MIN(90)), T0 + MIN(21));
    assert!(stale.write.is_none() && fails(&stale.effects, "t1-b"));
    for g in [None, Some(1), Some(2), Some(3)] {
        let mut cb = callback("cb-t", 1, StepOutcome::Succeeded, json!({}));
        if let Input::StepInput { generation, .. } = &mut cb {
            *generation = g;
        }
        let d = at(&p, Some(&r2), &cb, T0 + MIN(22));
        assert_eq!(d.outcome, Outcome::Rejected(RejectReason::UnknownStep), "generation {g:?}");
    }
}

/// Invariant 2: reminders after a group's optional branch was left behind (`position::left`)
/// count from the reminded step's own entry. Passes.
#[test]
fn held_a_reminded_step_opened_past_a_left_group_counts_from_its_own_entry() {
    let mut p = with_group(plan(&[&["a"], &["b"], &["x"]]), (0, 1), &[1]);
    for s in 0..3 {
        p.steps[s].timeout = std_secs(86_400);
    }
    p.steps[2].remind = Some(Remind { after: std_secs(3600), every: std_secs(3600), times: 1 });
    let r = after(&at(&p, Some(&started(&p)), &step_ready(1, 0, "b0", T0 + Duration::days(1)), T0));
    let r = after(&at(&p, Some(&r), &step_ready(1, 1, "b1", T0 + Duration::days(1)), T0));
    let r = after(&at(&p, Some(&r), &callback("cb-a", 0, StepOutcome::Succeeded, json!({"a": 1})), T0));
    // Step Functions left the group (its optional branch ended without baton) and entered x at +2h.
    let entered = T0 + Duration::hours(2);
    let r = after(&at(&p, Some(&r), &step_ready(1, 2, "t2", entered + Duration::days(1)), entered));
    assert_eq!(wait_of(&r, 2).notice_at, Some(entered + Duration::hours(1)));
    let early = at(&p, Some(&r), &Input::Tick, entered + MIN(59));
    assert!(!early.effects.iter().any(|e| matches!(e, Effect::Remind { .. })));
}

/// Invariant 2: a reminder due exactly at the step's deadline does not go out. Passes.
#[test]
fn held_no_reminder_at_or_past_the_deadline() {
    let mut p = plan(&[&["x"]]);
    p.steps[0].timeout = std_secs(3 * 3600);
    p.steps[0].remind = Some(Remind { after: std_secs(3600), every: std_secs(2 * 3600), times: 3 });
    let r = after(&at(&p, Some(&started(&p)), &step_ready(1, 0, "t0", T0 + Duration::hours(3)), T0));
    let r = after(&at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(1)));
    assert_eq!(wait_of(&r, 0).notice_at, Some(T0 + Duration::hours(3)));
    let d = at(&p, Some(&r), &Input::Tick, T0 + Duration::hours(3));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::Remind { .. })), "{d:?}");
}

// ---------------------------------------------------------------------------------------------
// A random walk: every input kind, at a moving clock, against a plan where everything meets.

/// review (0: remind 10m/15m x3, retry 3 x 5m, compensate, timeout 2h), cool-off (1: timer 1h,
/// timeout 1h15m), the group of fraud (2, required, compensate) and credit (3, optional),
/// settle (4: timer 30m, timeout 45m), payment (5: remind 20m/20m x2, timeout 3h).
fn walk_plan() -> Plan {
    let mut p = with_group(plan(&[&["decision"], &[], &["a"], &["b"], &[], &["x"]]), (2, 3), &[3]);
    let s = &mut p.steps;
    s[0].timeout = std_secs(2 * 3600);
    s[0].remind = Some(Remind { after: std_secs(600), every: std_secs(900), times: 3 });
    s[0].retry = Some(Retry { attempts: 3, backoff: std_secs(300) });
    s[0].compensate = Some(2);
    s[1].timer = Some(Timer::After(std_secs(3600)));
    s[1].timeout = std_secs(3600 + 15 * 60);
    s[2].timeout = std_secs(2 * 3600);
    s[2].compensate = Some(1);
    s[3].timeout = std_secs(2 * 3600);
    s[4].timer = Some(Timer::After(std_secs(1800)));
    s[4].timeout = std_secs(45 * 60);
    s[5].timeout = std_secs(3 * 3600);
    s[5].remind = Some(Remind { after: std_secs(1200), every: std_secs(1200), times: 2 });
    p
}

/// cool-off (0: timer 1h, timeout 1h15m), review (1: remind 5m/5m x10, retry 4 x 2m with a
/// heartbeat, compensate, timeout 1h), the group of fraud (2, optional) and credit (3, required,
/// compensate), settle (4: timer 20m, timeout 25m), last.
fn walk_plan_timers_first_and_last() -> Plan {
    let mut p = with_group(plan(&[&[], &["decision"], &["a"], &["b"], &[]]), (2, 3), &[2]);
    let s = &mut p.steps;
    s[0].timer = Some(Timer::After(std_secs(3600)));
    s[0].timeout = std_secs(3600 + 15 * 60);
    s[1].timeout = std_secs(3600);
    s[1].heartbeat = Some(std_secs(600));
    s[1].remind = Some(Remind { after: std_secs(300), every: std_secs(300), times: 10 });
    s[1].retry = Some(Retry { attempts: 4, backoff: std_secs(120) });
    s[1].compensate = Some(3);
    s[2].timeout = std_secs(3600);
    s[3].timeout = std_secs(3600);
    s[3].compensate = Some(1);
    s[4].timer = Some(Timer::After(std_secs(1200)));
    s[4].timeout = std_secs(25 * 60);
    p
}

/// The walk's plans: each with its steps' input names, its compensated steps and its optional
/// branch.
fn walk_plans(seed: u64) -> (Plan, Vec<&'static str>, Vec<u32>, u32) {
    if seed.is_multiple_of(2) {
        (walk_plan(), vec!["decision", "", "a", "b", "", "x"], vec![0, 2], 3)
    } else {
        (walk_plan_timers_first_and_last(), vec!["", "decision", "a", "b", ""], vec![1, 3], 2)
    }
}

struct Walk {
    p: Plan,
    keys: Vec<&'static str>,
    undo: Vec<u32>,
    optional: u32,
    r: Option<Record>,
    now: OffsetDateTime,
    rng: Rng,
    log: Vec<String>,
    /// Every step_ready sent: (generation, step, token, deadline).
    reports: Vec<(u32, u32, String, OffsetDateTime)>,
    tokens: u32,
    events: u32,
    /// When Step Functions first entered each (generation, step) the record reached.
    entered: HashMap<(u32, u32), OffsetDateTime>,
    /// The reminders published: (generation, step, count).
    reminders: HashSet<(u32, u32, u32)>,
    last_count: HashMap<(u32, u32), u32>,
    /// The timers woken: (generation, step).
    woken: HashSet<(u32, u32)>,
    /// The clock of the function deciding the current input: the walk's, give or take
    /// [`crate::limits::MAX_CLOCK_SKEW`].
    at: OffsetDateTime,
}

impl Walk {
    fn new(seed: u64) -> Walk {
        let (p, keys, undo, optional) = walk_plans(seed);
        Walk {
            p,
            keys,
            undo,
            optional,
            r: None,
            now: T0,
            rng: Rng::seeded(seed),
            log: Vec::new(),
            reports: Vec::new(),
            tokens: 0,
            events: 1,
            entered: HashMap::new(),
            reminders: HashSet::new(),
            last_count: HashMap::new(),
            woken: HashSet::new(),
            at: T0,
        }
    }

    fn generation(&self) -> u32 {
        self.r.as_ref().map_or(1, |r| r.generation)
    }

    fn timeout(&self, step: u32) -> Duration {
        Duration::try_from(self.p.steps[step as usize].timeout).unwrap()
    }

    /// A step Step Functions might report now: the next position's, the one the record is at,
    /// a sibling branch, or any.
    fn some_step(&mut self) -> u32 {
        let current = self.r.as_ref().and_then(|r| r.state.step());
        let next = match self.r.as_ref().map(|r| r.state) {
            None | Some(State::Pending) => Some(0),
            Some(State::Advancing { step } | State::Waiting { step }) => self.p.next_position(step),
            _ => None,
        }
        .filter(|s| self.p.has(*s));
        match self.rng.below(10) {
            0..=4 => next.or(current).unwrap_or(0),
            5..=6 => current.unwrap_or(0),
            7 => match current {
                Some(c) if self.p.group_of(c).is_some() => c + 1,
                Some(c) => c,
                None => 0,
            },
            _ => self.rng.below(self.p.steps.len()) as u32,
        }
    }

    #[expect(clippy::too_many_lines, reason = "the walk's one match over every kind of input it draws")]
    fn input(&mut self) -> Input {
        if self.rng.below(100) < 45
            && let Some(input) = self.progress()
        {
            return input;
        }
        let g = self.generation();
        let mut roll = self.rng.below(100);
        // What ends a run is rarer than the rest, so that walks go deep.
        if matches!(roll, 77..=82 | 87..=93) && self.rng.below(4) != 0 {
            roll = 0;
        }
        match roll {
            0..=24 => Input::Tick,
            25..=39 => {
                let step = self.some_step();
                let gen_ = if self.rng.below(12) == 0 { g.saturating_sub(1).max(1) } else { g };
                self.tokens += 1;
                let tok = format!("g{gen_}s{step}n{}", self.tokens);
                let delay = Duration::seconds(self.rng.below(90) as i64);
                let deadline = self.now - delay + self.timeout(step);
                self.reports.push((gen_, step, tok.clone(), deadline));
                step_ready(gen_, step, &tok, deadline)
            }
            40..=44 if !self.reports.is_empty() => {
                // A copy of an earlier report, or that wait re-entered (a newer token, later).
                let i = self.rng.below(self.reports.len());
                let (gen_, step, tok, deadline) = self.reports[i].clone();
                if self.rng.below(2) == 0 {
                    step_ready(gen_, step, &tok, deadline)
                } else {
                    self.tokens += 1;
                    let tok = format!("g{gen_}s{step}n{}", self.tokens);
                    let deadline = deadline + Duration::seconds(1 + self.rng.below(300) as i64);
                    self.reports.push((gen_, step, tok.clone(), deadline));
                    step_ready(gen_, step, &tok, deadline)
                }
            }
            45..=62 => {
                let step = self.some_step();
                let id = format!("cb-{}-{}", step, self.rng.below(6));
                let key = self.keys[step as usize];
                let data = if key.is_empty() { json!({}) } else { json!({ key: self.rng.below(3) }) };
                let outcome = match self.rng.below(6) {
                    0 => StepOutcome::Failed { error: "Busy".into(), cause: "c".into(), retryable: true },
                    1 => StepOutcome::Failed { error: "No".into(), cause: "c".into(), retryable: false },
                    2 => StepOutcome::InProgress,
                    _ => StepOutcome::Succeeded,
                };
                let mut input = callback(&id, step, outcome, data);
                if let Input::StepInput { generation, attempt, hash, .. } = &mut input {
                    *hash = format!("h-{id}-{}", self.rng.below(2));
                    *generation = match self.rng.below(5) {
                        0 => Some(g),
                        1 => Some(g + 1),
                        2 => Some(g.saturating_sub(1).max(1)),
                        _ => None,
                    };
                    *attempt = match self.rng.below(4) {
                        0 => Some(1 + self.rng.below(3) as u32),
                        _ => None,
                    };
                }
                input
            }
            63..=69 => {
                let r = self.r.as_ref();
                let w = r.and_then(|r| {
                    let n = r.waits.len();
                    (n > 0).then(|| r.waits[self.rng.below(n)].clone())
                });
                match w {
                    Some(w) => Input::AttemptOpened { wait: WaitId::of(g, &w), attempt: w.attempt() },
                    None => Input::Tick,
                }
            }
            70..=76 => {
                let r = self.r.clone();
                let owed = r.as_ref().and_then(|r| {
                    let owed: Vec<&Wait> = r.waits.iter().filter(|w| w.owed().is_some()).collect();
                    (!owed.is_empty()).then(|| owed[self.rng.below(owed.len())].clone())
                });
                match owed {
                    Some(w) => Input::Resumed {
                        wait: WaitId::of(g, &w),
                        token: w.token.clone().unwrap(),
                        delivered: self.rng.below(3) != 0,
                    },
                    None => Input::Tick,
                }
            }
            77..=78 => Input::Cancel { reason: "walk".into() },
            79 => Input::CancelCompensate { reason: "walk".into() },
            80..=82 => Input::Finished {
                generation: g,
                finish: match self.rng.below(3) {
                    0 => Finish::Succeeded,
                    1 => Finish::Failed { error: FAILED_ERROR.into(), cause: "c".into() },
                    _ => Finish::TimedOut,
                },
            },
            83..=86 => {
                let fresh = self.rng.below(2) == 0;
                if fresh {
                    self.events += 1;
                }
                Input::start(eid(&format!("evt-{}", self.events)))
            }
            87..=89 => {
                let step = self.undo[self.rng.below(2)];
                self.tokens += 1;
                Input::UndoReady {
                    generation: g,
                    step,
                    token: token(&format!("u{step}n{}", self.tokens)),
                    deadline: self.now + Duration::hours(1),
                    error: ["States.Timeout", "Boom", "baton.Cancelled"][self.rng.below(3)].into(),
                    cause: "c".into(),
                }
            }
            90..=91 => {
                let step = self.undo[self.rng.below(2)];
                let id = format!("ack-{}", self.rng.below(4));
                Input::UndoInput {
                    id: eid(&id),
                    hash: format!("h-{id}"),
                    source: Source::Callback,
                    step,
                    outcome: StepOutcome::Succeeded,
                    generation: Some(g),
                    attempt: None,
                }
            }
            92 => Input::ExecutionGone { generation: g, status: "FAILED".into(), error: None },
            93 => Input::End { generation: g, status: "FAILED".into(), error: None, reason: "walk".into() },
            94..=96 => Input::BranchEnded {
                generation: g,
                step: self.optional,
                error: [None, Some("States.Timeout".to_owned()), Some("Boom".to_owned())][self.rng.below(3)]
                    .clone(),
            },
            _ => Input::Tick,
        }
    }

    /// What Step Functions, a worker or the sweeper would send next for the run to go on.
    #[expect(clippy::too_many_lines, reason = "one match over what each party would send next")]
    fn progress(&mut self) -> Option<Input> {
        let Some(r) = self.r.clone() else { return Some(Input::start(eid("evt-1"))) };
        let g = r.generation;
        let report = |walk: &mut Walk, step: u32| {
            walk.tokens += 1;
            let tok = format!("g{g}s{step}n{}", walk.tokens);
            let delay = Duration::seconds(walk.rng.below(30) as i64);
            let deadline = walk.now - delay + walk.timeout(step);
            walk.reports.push((g, step, tok.clone(), deadline));
            step_ready(g, step, &tok, deadline)
        };
        Some(match r.state {
            State::Pending => report(self, 0),
            State::Advancing { step } => match self.p.next_position(step).filter(|s| self.p.has(*s)) {
                Some(next) => report(self, next),
                None => {
                    if self.rng.below(2) == 0 {
                        Input::BranchEnded { generation: g, step: self.optional, error: None }
                    } else {
                        Input::Finished { generation: g, finish: Finish::Succeeded }
                    }
                }
            },
            State::Waiting { .. } => {
                let open: Vec<Wait> = r.waits.iter().filter(|w| w.is_open()).cloned().collect();
                let w = open.get(self.rng.below(open.len().max(1)))?.clone();
                match w.status {
                    WaitStatus::Unreached => report(self, w.step),
                    WaitStatus::Sleeping { until } => {
                        if self.now < until && self.rng.below(3) == 0 {
                            self.now = until + Duration::seconds(self.rng.below(600) as i64);
                        }
                        Input::Tick
                    }
                    WaitStatus::TaskDue { at } => {
                        if self.now < at {
                            self.now = at;
                            Input::Tick
                        } else {
                            Input::AttemptOpened { wait: WaitId::of(g, &w), attempt: w.attempt() }
                        }
                    }
                    _ => {
                        // A reminder's time first, now and then.
                        if let Some(at) = w.notice_at.filter(|at| self.now < *at && self.rng.below(3) == 0) {
                            self.now = at + Duration::seconds(self.rng.below(300) as i64);
                            return Some(Input::Tick);
                        }
                        let key = self.keys[w.step as usize];
                        let id = format!("cb-{}-{}", w.step, self.rng.below(6));
                        let outcome = match self.rng.below(8) {
                            0 => StepOutcome::Failed {
                                error: "Busy".into(),
                                cause: "c".into(),
                                retryable: true,
                            },
                            1 => StepOutcome::InProgress,
                            _ => StepOutcome::Succeeded,
                        };
                        let mut input = callback(&id, w.step, outcome, json!({ key: 1 }));
                        if let Input::StepInput { hash, .. } = &mut input {
                            *hash = format!("h-{id}-{}", self.rng.below(2));
                        }
                        input
                    }
                }
            }
            State::Compensating => {
                let c = r.compensation.as_ref()?;
                let u = c.undos.iter().find(|u| u.skip.is_none() && u.wait.is_open());
                match u {
                    Some(u) if u.wait.status == WaitStatus::Unreached => {
                        self.tokens += 1;
                        Input::UndoReady {
                            generation: g,
                            step: u.step(),
                            token: token(&format!("u{}n{}", u.step(), self.tokens)),
                            deadline: self.now + Duration::hours(1),
                            error: "Boom".into(),
                            cause: "c".into(),
                        }
                    }
                    Some(u) if u.wait.task_due().is_some() => {
                        Input::AttemptOpened { wait: uid(g, u.step()), attempt: u.wait.attempt() }
                    }
                    Some(u) => {
                        let id = format!("ack-{}", self.rng.below(4));
                        Input::UndoInput {
                            id: eid(&id),
                            hash: format!("h-{id}"),
                            source: Source::Callback,
                            step: u.step(),
                            outcome: StepOutcome::Succeeded,
                            generation: Some(g),
                            attempt: None,
                        }
                    }
                    None => Input::Finished {
                        generation: g,
                        finish: Finish::CompensationEnded { error: "Boom".into(), cause: "c".into() },
                    },
                }
            }
            State::Stranded { .. } => {
                Input::End { generation: g, status: "FAILED".into(), error: None, reason: "walk".into() }
            }
            _ => {
                self.events += 1;
                Input::start(eid(&format!("evt-{}", self.events)))
            }
        })
    }

    fn advance_clock(&mut self) {
        let step = match self.rng.below(20) {
            0 => Duration::minutes(30 + self.rng.below(90) as i64),
            1..=3 => Duration::minutes(self.rng.below(20) as i64),
            _ => Duration::seconds(self.rng.below(120) as i64),
        };
        self.now += step;
    }

    fn fail(&self, what: String) -> ! {
        let tail: Vec<&String> = self.log.iter().rev().take(30).rev().collect();
        panic!(
            "{what}\nlast inputs (oldest first):\n{}",
            tail.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }

    /// One input decided at the walk's clock; every invariant checked on the decision.
    fn step(&mut self) {
        self.advance_clock();
        let input = self.input();
        let skew = crate::limits::MAX_CLOCK_SKEW.whole_seconds();
        let now = self.now + Duration::seconds(self.rng.below(2 * skew as usize + 1) as i64 - skew);
        self.at = now;
        let prior = self.r.clone();
        self.log.push(format!("@{} {:?}", (now - T0).whole_seconds(), input));
        let (w, k) = names();
        let p = self.p.clone();
        let d = match no_panic(|| decide(&p, (&w, &k), prior.as_ref(), &input, now)) {
            Ok(d) => d,
            Err(m) => self.fail(format!("decide panicked: {m}")),
        };
        self.check(prior.as_ref(), &input, &d);
        if let Some(write) = &d.write {
            self.r = Some(write.to.clone());
            self.note_entries(prior.as_ref());
            self.check_listed();
        }
    }

    /// A record that owes the sweeper work is listed by its time, and a Tick then does it: a
    /// timer's wake at its time, a reminder at its time (unless its deadline passed first).
    fn check_listed(&mut self) {
        let Some(r) = self.r.clone() else { return };
        if !matches!(r.state.kind(), Kind::Waiting | Kind::Advancing | Kind::Compensating) || !r.owes_work() {
            return;
        }
        let grace = RESEND_RESUME_AFTER;
        for w in r.live_waits() {
            let on_time = match (&w.status, w.notice_at) {
                (WaitStatus::Sleeping { until }, _) => Some(*until),
                (WaitStatus::Open, Some(at)) => Some(at),
                _ => None,
            };
            if let Some(t) = on_time
                && r.due_at() > t - grace
            {
                self.fail(format!("listed at {} for work due at {t}: {:?}", r.due_at(), w));
            }
        }
        // The owed work due first, and when the sweeper takes it.
        let work_at = |w: &Wait| match (&w.status, w.notice_at) {
            (WaitStatus::Open, Some(at)) => Some(at),
            _ => w.due_at(grace).map(|d| d + grace),
        };
        let Some(first) = r.live_waits().filter(|w| w.owes_work()).min_by_key(|w| work_at(w)) else { return };
        let Some(t) = work_at(first).map(|d| d.max(self.now)) else { return };
        let (wn, k) = names();
        let p = self.p.clone();
        let probe = match no_panic(|| decide(&p, (&wn, &k), Some(&r), &Input::Tick, t)) {
            Ok(d) => d,
            Err(m) => self.fail(format!("a probe Tick at {t} panicked: {m}")),
        };
        let live = first.deadline.is_none_or(|d| t < d) || first.owed().is_some();
        if probe.outcome == Outcome::Ignored(IgnoreReason::NothingOwed) && live {
            self.fail(format!(
                "the record owes work (due {}), and a Tick at {t} finds nothing: {:?}",
                r.due_at(),
                r.live_waits().collect::<Vec<_>>()
            ));
        }
    }

    /// Records when each wait newly reached was entered (its deadline less its timeout).
    fn note_entries(&mut self, prior: Option<&Record>) {
        let Some(r) = self.r.clone() else { return };
        for w in &r.waits {
            let key = (r.generation, w.step);
            let was_reached = prior
                .filter(|p| p.generation == r.generation)
                .and_then(|p| p.wait(w.step))
                .is_some_and(|b| b.token.is_some());
            if w.token.is_some() && !was_reached && !self.entered.contains_key(&key) {
                let deadline = w.deadline.expect("a reached wait has a deadline");
                self.entered.insert(key, deadline - self.timeout(w.step));
            }
        }
    }

    fn check(&mut self, prior: Option<&Record>, input: &Input, d: &Decision) {
        let now = self.at;
        let reminders: Vec<&Effect> =
            d.effects.iter().filter(|e| matches!(e, Effect::Remind { .. })).collect();
        let cause = d.write.as_ref().map(|w| w.cause);
        if reminders.len() > 1 {
            self.fail(format!("two reminders in one decision: {d:?}"));
        }
        if cause == Some(Cause::Notified) && reminders.is_empty() {
            self.fail(format!("a reminder claimed and not published: {d:?}"));
        }
        for e in reminders {
            let Effect::Remind { wait, attempt, count } = *e else { unreachable!() };
            let Some(r) = prior else { self.fail(format!("a reminder with no record: {d:?}")) };
            if cause != Some(Cause::Notified) {
                self.fail(format!("a reminder published without its claim: {d:?}"));
            }
            let Some(w) = r.step_wait().filter(|w| w.step == wait.step && r.generation == wait.generation)
            else {
                self.fail(format!("a reminder of a wait the record is not at: {e:?} {:?}", r.waits))
            };
            if r.state != (State::Waiting { step: wait.step }) || w.status != WaitStatus::Open {
                self.fail(format!("a reminder while {} and the wait {:?}", r.state, w.status));
            }
            let remind = self.p.steps[wait.step as usize].remind.expect("a step that reminds");
            if count == 0 || count > remind.times || count <= w.notified {
                self.fail(format!(
                    "reminder count {count} (times {}, reminded {})",
                    remind.times, w.notified
                ));
            }
            if attempt != w.attempt() {
                self.fail(format!("reminder names attempt {attempt}, running {}", w.attempt()));
            }
            let key = (wait.generation, wait.step);
            let entered = self.entered.get(&key).copied().expect("the wait's entry noted");
            let due = entered + Duration::try_from(remind.due_after(count)).unwrap();
            if now < due {
                self.fail(format!("reminder {count} at {now}, due {due}"));
            }
            if w.deadline.is_some_and(|dl| now >= dl) {
                self.fail(format!("reminder {count} at {now}, past the deadline {:?}", w.deadline));
            }
            if !self.reminders.insert((wait.generation, wait.step, count)) {
                self.fail(format!("reminder {count} of {wait} published twice"));
            }
            if self.last_count.get(&key).is_some_and(|last| *last >= count) {
                self.fail(format!(
                    "reminder counts do not increase: {:?} then {count}",
                    self.last_count.get(&key)
                ));
            }
            self.last_count.insert(key, count);
        }
        self.check_timers(prior, input, d);
        self.check_liveness(prior, input, d);
    }

    #[expect(clippy::too_many_lines, reason = "each timer invariant checked on every decision")]
    fn check_timers(&mut self, prior: Option<&Record>, input: &Input, d: &Decision) {
        let now = self.at;
        let Some(r) = prior else { return };
        // No input (callback, event, replay, drain) ever moves a timer or resumes its token.
        if matches!(input, Input::StepInput { .. }) {
            let timer_tokens: Vec<&TaskToken> = r
                .waits
                .iter()
                .filter(|w| self.p.timer_of(w.step).is_some())
                .filter_map(|w| w.token.as_ref())
                .collect();
            if d.effects
                .iter()
                .any(|e| matches!(e, Effect::Resume { token, .. } if timer_tokens.contains(&token)))
            {
                self.fail(format!("an input resumed a timer's token: {d:?}"));
            }
        }
        let to = d.write.as_ref().map(|w| &w.to);
        for b in r.waits.iter() {
            let WaitStatus::Sleeping { until } = b.status else { continue };
            let key = (r.generation, b.step);
            if let Some(entered) = self.entered.get(&key) {
                let Some(Timer::After(after)) = self.p.timer_of(b.step) else { continue };
                let after = Duration::try_from(*after).unwrap();
                if until != *entered + after {
                    self.fail(format!("a timer sleeps until {until}, entered {entered}"));
                }
            }
            let Some(to) = to else { continue };
            let a = to.wait(b.step).filter(|_| to.generation == r.generation);
            let Some(a) = a else {
                self.fail(format!("a sleeping timer vanished from the record: {:?}", to.waits));
            };
            match (&a.status, input) {
                (WaitStatus::Sleeping { until: u }, _) if *u == until => {}
                (WaitStatus::Sleeping { until: u }, _) => {
                    self.fail(format!("a timer's time moved from {until} to {u} by {input:?}"))
                }
                (WaitStatus::Owed { outcome: WaitOutcome::Succeeded, .. }, Input::Tick) => {
                    if now < until || b.deadline.is_some_and(|dl| now >= dl) {
                        self.fail(format!(
                            "a timer woken at {now}: until {until}, deadline {:?}",
                            b.deadline
                        ));
                    }
                    if !self.woken.insert(key) {
                        self.fail(format!("the timer of {key:?} woken twice"));
                    }
                    let tok = b.token.clone().unwrap();
                    let resumes = d
                        .effects
                        .iter()
                        .filter(|e| matches!(e, Effect::Resume { token, resume: Resume::Success { .. }, .. } if *token == tok))
                        .count();
                    if resumes != 1 {
                        self.fail(format!("a woken timer's token got {resumes} successes: {d:?}"));
                    }
                }
                (WaitStatus::Ended { .. }, Input::Cancel { .. } | Input::CancelCompensate { .. }) => {
                    if a.outcome() != Some(WaitOutcome::Closed) {
                        self.fail(format!("a cancelled timer ended {:?}", a.outcome()));
                    }
                    if !fails(&d.effects, b.token.as_ref().unwrap().expose()) {
                        self.fail(format!("a cancelled timer's token not failed: {d:?}"));
                    }
                }
                (
                    WaitStatus::Ended { .. },
                    Input::Finished { .. } | Input::UndoReady { .. } | Input::ExecutionGone { .. },
                ) => {}
                (status, _) => self.fail(format!("a sleeping timer became {status:?} by {input:?}")),
            }
        }
    }

    /// A Tick that finds a timer's time come (or a reminder due) does it.
    fn check_liveness(&mut self, prior: Option<&Record>, input: &Input, d: &Decision) {
        let now = self.at;
        let (Some(r), Input::Tick) = (prior, input) else { return };
        if r.state.kind() != Kind::Waiting {
            return;
        }
        for w in &r.waits {
            let live = w.deadline.is_some_and(|dl| now < dl);
            if let WaitStatus::Sleeping { until } = w.status
                && until <= now
                && live
                && d.write.as_ref().is_none_or(|x| x.to.wait(w.step).is_some_and(Wait::is_open))
            {
                self.fail(format!("a Tick at {now} did not wake a timer due {until}: {d:?}"));
            }
            if w.status == WaitStatus::Open
                && w.role == Role::Step
                && w.notice_at.is_some_and(|at| at <= now)
                && live
                && !d.effects.iter().any(|e| matches!(e, Effect::Remind { .. }))
            {
                self.fail(format!("a Tick at {now} sent no reminder due {:?}: {d:?}", w.notice_at));
            }
        }
    }
}

/// Invariants 1 to 4 over random walks.
#[test]
fn a_random_walk_keeps_timers_and_reminders_within_their_invariants() {
    for seed in 1..=300u64 {
        let mut walk = Walk::new(seed);
        for _ in 0..400 {
            walk.step();
        }
    }
}
