//! Races of the parallel-group logic, found by an adversarial review: orderings of
//! `step_ready`, `branch_ended`, `resumed`, `finished` and inputs that Step Functions and a
//! standard SQS queue can produce, checked against the group invariants. Each test failed on a
//! bug before its fix; its comment names the invariant and the race. (Line references in the
//! comments are to the code as it was then.)
//!
//! Plans: review (0), the group `checks` of fraud (1), credit (2) and the optional address (3),
//! then payment (4) — or the same without payment, the group last.

use super::*;

fn grouped() -> Plan {
    with_group(
        plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["address_ok"], &["payment_ref"]]),
        (1, 3),
        &[3],
    )
}

/// The group is the last position.
fn grouped_last() -> Plan {
    with_group(plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["address_ok"]]), (1, 3), &[3])
}

fn ok(id: &str, step: u32) -> Input {
    let key = ["decision", "fraud_score", "credit_ok", "address_ok", "payment_ref"][step as usize];
    callback(id, step, StepOutcome::Succeeded, json!({ key: true }))
}

fn failed(id: &str, step: u32) -> Input {
    callback(
        id,
        step,
        StepOutcome::Failed { error: "no".into(), cause: "said no".into(), retryable: true },
        json!({}),
    )
}

fn step_ready(step: u32, tok: &str) -> Input {
    Input::StepReady { generation: 1, step, token: token(tok), deadline: T0 + Duration::days(2) }
}

fn ended(step: u32, error: &str) -> Input {
    Input::BranchEnded { generation: 1, step, error: Some(error.into()) }
}

/// An optional branch's report that Step Functions took its success.
fn confirmed(step: u32) -> Input {
    Input::BranchEnded { generation: 1, step, error: None }
}

fn finished() -> Input {
    Input::Finished { generation: 1, finish: Finish::Succeeded }
}

/// fraud (1) required, credit (2) and address (3) optional, the group last.
fn two_optional_last() -> Plan {
    with_optional(grouped_last(), &[2, 3])
}

fn outcome(r: &Record, step: u32) -> Option<WaitOutcome> {
    r.waits.iter().find(|b| b.step == step).and_then(|b| b.outcome())
}

/// A small engine around `decide`: it keeps the record, carries out the inbox (`Buffer` and
/// `DrainInbox`, so a fix that buffers a report is judged by where the record ends up), and
/// logs every decision. `MarkResumed` is only logged: a test delivers `Resumed` itself, when
/// the race it builds wants it.
struct Sim {
    plan: Plan,
    record: Option<Record>,
    now: OffsetDateTime,
    inbox: Vec<(u32, u32, Input)>,
    log: Vec<(Input, Decision)>,
    /// Inputs the engine would have retried later (see `apply`).
    held: Vec<Input>,
}

impl Sim {
    fn new(plan: Plan) -> Sim {
        Sim { plan, record: None, now: T0, inbox: Vec::new(), log: Vec::new(), held: Vec::new() }
    }

    /// Decides `input`, unless the engine would have it retried through its queue for now
    /// ([`crate::domain::lifecycle::unsettled`]): then it is held, and tried again after each
    /// later input, as a redelivery would be.
    fn apply(&mut self, input: &Input) -> Decision {
        if crate::domain::lifecycle::unsettled(&self.plan, self.record.as_ref(), input) {
            self.held.push(input.clone());
            return Decision::ignored(IgnoreReason::NothingOwed);
        }
        let d = self.decide(input);
        for held in std::mem::take(&mut self.held) {
            self.apply(&held);
        }
        d
    }

    fn decide(&mut self, input: &Input) -> Decision {
        let (w, k) = names();
        let d = decide(&self.plan, (&w, &k), self.record.as_ref(), input, self.now);
        if let Some(write) = &d.write {
            self.record = Some(write.to.clone());
        }
        self.log.push((input.clone(), d.clone()));
        for e in &d.effects {
            match e {
                Effect::Buffer { generation, step } => self.inbox.push((*generation, *step, input.clone())),
                Effect::DrainInbox { generation, step } => {
                    let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.inbox)
                        .into_iter()
                        .partition(|(g, s, _)| (*g, *s) == (*generation, *step));
                    self.inbox = rest;
                    for (_, _, entry) in due {
                        self.apply(&entry);
                    }
                }
                _ => {}
            }
        }
        d
    }

    fn all(&mut self, inputs: &[Input]) {
        for i in inputs {
            self.apply(i);
        }
    }

    fn r(&self) -> &Record {
        self.record.as_ref().expect("a record")
    }

    /// Started, review done: the record is `advancing{0}`, the group not yet open.
    fn before_group(plan: Plan) -> Sim {
        let mut s = Sim::new(plan);
        s.all(&[Input::start(eid("evt-1")), step_ready(0, "t0"), ok("cb-review", 0)]);
        assert_eq!(s.r().state, State::Advancing { step: 0 });
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Invariant 3 (an optional branch's failure never fails or delays its group) and 1 (every branch
// that opened ends with one outcome): reports of an optional branch's own Catch that are lost.

/// Found by an attack on the group logic, now fixed. The optional branch's `sqs:sendMessage.waitForTaskToken` fails (SQS refuses the
/// message), so its `step_ready` never comes; its Catch reports `branch_ended`. The report finds
/// the branch open without a token, and `on_branch_ended` (group.rs:259, `!(b.is_open() &&
/// b.token.is_some() || ...)`) calls it a `Duplicate`: nothing is written, the report is gone.
/// Step Functions' Parallel state completes once the required branches are resumed, but the
/// record waits at the group forever, and the next step's `step_ready` is ignored (out of order,
/// its token not even failed) — the optional branch's failure blocks the workflow.
#[test]
fn an_optional_branch_whose_step_ready_never_came_is_not_lost_when_its_catch_reports() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), ok("cb-fraud", 1), ok("cb-credit", 2)]);
    assert_eq!(s.r().state, State::Waiting { step: 1 });
    let d = s.apply(&ended(3, "States.TaskFailed"));
    assert_ne!(d.outcome, Outcome::Duplicate, "the branch's only report of its end, taken for a duplicate");
    // Step Functions has left the group and parks on payment.
    s.apply(&step_ready(4, "t4"));
    assert_eq!(
        (s.r().state, s.r().missed.clone()),
        (State::Waiting { step: 4 }, vec![3]),
        "the group must go on without the optional branch, and the workflow owe `degraded`"
    );
}

/// Found by an attack on the group logic, now fixed. Same hole, reached by reordering on the (standard, unordered) progress queue: the
/// optional branch times out and its `branch_ended` is read before its own `step_ready` (which
/// was, say, retried after losing a write race with its siblings' `step_ready`). Before the group
/// opened the report is ignored as `out_of_order` (group.rs:245-250); once open, it is a
/// `Duplicate` (group.rs:259-263). Either way it is gone, and the late `step_ready` then opens a
/// branch Step Functions has already ended: the group never advances.
#[test]
fn an_optional_branch_timeout_read_before_its_step_ready_still_ends_the_branch() {
    for opened_first in [false, true] {
        let mut s = Sim::before_group(grouped());
        if opened_first {
            s.apply(&step_ready(1, "t1"));
        }
        s.apply(&ended(3, "States.Timeout"));
        s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
        s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2)]);
        assert_eq!(
            (s.r().state, outcome(s.r(), 3), s.r().missed.clone()),
            (State::Advancing { step: 1 }, Some(WaitOutcome::TimedOut), vec![3]),
            "report read {} the group opened: the optional branch was left open",
            if opened_first { "after" } else { "before" }
        );
    }
}

/// Found by an attack on the group logic, now fixed. The optional branch's Catch sends `branch_ended` and the branch ends; the required
/// branches are resumed, so the Parallel state completes and payment's `step_ready` is sent at
/// once. Read first (no order on the queue), it finds the record still `waiting{1}` (the
/// optional branch open) and is ignored `out_of_order` (`step_ready.rs`, `on_step_ready`'s last
/// line; group.rs is not consulted since step 4 is no branch) — without failing its token.
/// The `branch_ended` then advances the group, but nothing will bring payment's `step_ready`
/// again: the record sits at `advancing{1}` while the execution parks on payment until its
/// deadline. An optional branch's failure has delayed (in fact failed) the workflow.
#[test]
fn the_next_steps_step_ready_read_before_an_optional_branchs_report_is_not_lost() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2)]);
    s.apply(&step_ready(4, "t4"));
    s.apply(&ended(3, "States.Timeout"));
    assert_eq!(
        (s.r().state, s.r().token(), s.r().missed.clone()),
        (State::Waiting { step: 4 }, Some(token("t4")), vec![3]),
        "payment's step_ready was dropped: the workflow is stuck after the group"
    );
}

/// BUG, worse when the next position is a group too. Two groups back to back: A = fraud (1) and
/// the optional address (2), B = credit (3) and limits (4). A's optional branch times out; its
/// report is read after B's first `step_ready` (the Parallel state A completed, B began). The
/// record is still `waiting{1}`, so `on_branch_ready` finds B's branch "not at its group" and
/// takes the last arm (group.rs:78-82): ignored, *and its token failed* (`baton.OutOfOrder`).
/// B's branch is required: its failure fails the Parallel state B and the workflow — an
/// optional branch's timeout has failed the run.
#[test]
fn a_group_after_a_group_is_not_failed_by_the_first_groups_late_optional_report() {
    let p = plan(&[
        &["decision"],
        &["fraud_score"],
        &["address_ok"],
        &["credit_ok"],
        &["limits_ok"],
        &["payment_ref"],
    ]);
    let p = with_group(with_group(p, (1, 2), &[2]), (3, 4), &[]);
    let mut s = Sim::before_group(p);
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2")]);
    s.apply(&callback("cb-fraud", 1, StepOutcome::Succeeded, json!({"fraud_score": 3})));
    // Step Functions: branch 2 timed out (its Catch sent branch_ended), A completed, B began.
    let d = s.apply(&step_ready(3, "t3"));
    let failed: Vec<&Effect> = d.effects.iter().filter(|e| fails(std::slice::from_ref(e), "t3")).collect();
    assert!(failed.is_empty(), "a live required branch of the next group failed by baton: {failed:?}");
    s.apply(&ended(2, "States.Timeout"));
    s.apply(&step_ready(4, "t4"));
    assert_eq!(
        (s.r().state, s.r().missed.clone()),
        (State::Waiting { step: 3 }, vec![2]),
        "the second group must open once the first is done"
    );
}

/// Found by an attack on the group logic, now fixed. The group is the last position: after the optional branch's `branch_ended` the
/// execution reports `finished(succeeded)` straight away. Read first, the report finds the
/// record `waiting{1}` and `on_finished` ignores it `out_of_order` (`reports.rs`, `fits`
/// requires `advancing{last}`). The `branch_ended` then advances the group, and the record stays
/// `advancing{1}` for good: never terminal (a restart is refused `already_running`), and the
/// sweeper re-sends the last branch's resume to a dead token on every tick.
#[test]
fn a_final_success_read_before_an_optional_branchs_report_still_ends_the_workflow_degraded() {
    let mut s = Sim::before_group(grouped_last());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2)]);
    s.apply(&Input::Finished { generation: 1, finish: Finish::Succeeded });
    s.apply(&ended(3, "States.Timeout"));
    assert_eq!(s.r().state, State::Degraded, "the execution ended; the record never does");
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: `degraded` exactly when an optional branch did not succeed.

/// Found by an attack on the group logic, now fixed. A callback completes the optional branch just after its deadline. Baton records it
/// succeeded and sends the success, which finds the token gone (`TaskTimedOut`); the engine
/// still submits `Resumed` (it does for a gone token: engine.rs `resumed` returns Ok, then
/// `MarkResumed` runs; `Input::Resumed` is documented "or found its token gone"), so the owed
/// success is cleared. The branch's Catch then reports `States.Timeout`: `on_branch_ended`
/// (group.rs:257-263) only overrides a success that is still owed, so it answers `Duplicate`.
/// The branch did not succeed in Step Functions (a Catch fires only if the task did not), yet the
/// workflow ends `succeeded`, not `degraded`.
#[test]
fn an_optional_branch_that_timed_out_after_its_success_found_the_token_gone_makes_the_end_degraded() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    let d = s.apply(&ok("cb-address", 3));
    assert!(
        d.effects
            .iter()
            .any(|e| matches!(e, Effect::Resume { wait, mark: Mark::Always, .. } if *wait == wid(1, 3)))
    );
    // SendTaskSuccess answered TaskTimedOut (token gone): the engine marks it, not delivered.
    s.apply(&resumed(s.r(), wid(1, 3), false));
    s.apply(&ended(3, "States.Timeout"));
    assert_eq!(s.r().missed, vec![3], "the timeout report of the optional branch was taken for a duplicate");
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2), step_ready(4, "t4"), ok("cb-pay", 4)]);
    s.apply(&Input::Finished { generation: 1, finish: Finish::Succeeded });
    assert_eq!(s.r().state, State::Degraded);
}

/// Found by an attack on the group logic, now fixed. The same override, overtaken by the next position. The optional branch was the last to
/// be decided: baton owes it a success, the group advances (no `MarkResumed` once advancing),
/// the success finds the token gone because the branch had just timed out, and its Catch sends
/// `branch_ended`. Payment's `step_ready` (the Parallel state completed) is read first: it clears
/// `branches` (then `lifecycle.rs`, `on_step_ready`: `branches: Vec::new()`), so the report then finds
/// no branch and is ignored `out_of_order` (group.rs:245). `missed` never learns of it and the
/// workflow ends `succeeded`. With the group last, `finished(succeeded)` read first makes the
/// record terminal, and the report is a `Duplicate` (group.rs:259): the same wrong `succeeded`.
#[test]
fn an_optional_branchs_timeout_overtaken_by_the_next_position_still_makes_the_end_degraded() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2), ok("cb-address", 3)]);
    assert_eq!(s.r().state, State::Advancing { step: 1 });
    s.apply(&step_ready(4, "t4"));
    s.apply(&ended(3, "States.Timeout"));
    s.all(&[ok("cb-pay", 4), Input::Finished { generation: 1, finish: Finish::Succeeded }]);
    assert_eq!(
        s.r().state,
        State::Degraded,
        "group in the middle: the timeout of the optional branch was lost"
    );

    let mut s = Sim::before_group(grouped_last());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2), ok("cb-address", 3)]);
    s.apply(&Input::Finished { generation: 1, finish: Finish::Succeeded });
    s.apply(&ended(3, "States.Timeout"));
    assert_eq!(s.r().state, State::Degraded, "group last: the timeout of the optional branch was lost");
}

/// Found by the simulation (seed 28267), now fixed. The group is last, and baton's success for
/// the optional branch was still owed when Step Functions timed the branch out. The execution's
/// success, read first, waited two minutes for the branch's report, then was taken for
/// `succeeded`; the report, delayed longer by faults, came too late. Every optional branch now
/// reports how it ended, success included, and the execution's success waits for those reports
/// however long they take.
#[test]
fn the_execution_success_waits_for_every_optional_branchs_own_report_however_late() {
    for (report, end) in [(ended(3, "States.Timeout"), State::Degraded), (confirmed(3), State::Succeeded)] {
        let mut s = Sim::before_group(grouped_last());
        s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
        s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2), ok("cb-address", 3)]);
        s.apply(&Input::Finished { generation: 1, finish: Finish::Succeeded });
        s.now += Duration::hours(1);
        s.apply(&Input::Tick);
        assert_eq!(s.r().state, State::Advancing { step: 1 }, "decided before the branch's report");
        s.apply(&report);
        assert_eq!(s.r().state, end, "after {report:?}");
    }
}

/// A success report that comes once the record moved past the group is recorded all the same,
/// and the execution's success needs no other.
#[test]
fn an_optional_branchs_success_report_after_the_group_is_passed_is_recorded() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.all(&[ok("cb-fraud", 1), ok("cb-credit", 2), ok("cb-address", 3), step_ready(4, "t4")]);
    let d = s.apply(&confirmed(3));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::BranchDone));
    assert_eq!((s.r().confirmed.clone(), s.r().missed.clone()), (vec![3], vec![]));
    assert_eq!(s.apply(&confirmed(3)).outcome, Outcome::Duplicate);
    s.all(&[ok("cb-pay", 4), Input::Finished { generation: 1, finish: Finish::Succeeded }]);
    assert_eq!(s.r().state, State::Succeeded);
}

// Orderings an adversarial review of the optional branches' own reports tried, which hold.

/// The execution's success, read before both optional branches' reports (one success, one
/// timeout correcting a success that found its token gone), in either order, duplicated.
#[test]
fn the_end_waits_for_two_optional_reports_read_in_any_order_and_twice() {
    for first_success in [true, false] {
        let mut s = Sim::before_group(two_optional_last());
        s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
        s.all(&[ok("cb-1", 1), ok("cb-2", 2), ok("cb-3", 3)]);
        s.apply(&resumed(s.r(), wid(1, 3), false));
        s.apply(&finished());
        assert_eq!(s.r().state, State::Advancing { step: 1 });
        let reports = [confirmed(2), ended(3, "States.Timeout")];
        let order: Vec<Input> =
            if first_success { reports.to_vec() } else { reports.iter().rev().cloned().collect() };
        for r in &order {
            s.apply(r);
            s.apply(r);
        }
        assert_eq!(s.r().state, State::Degraded, "{:#?}", s.log);
        assert_eq!(outcome(s.r(), 2), Some(WaitOutcome::Succeeded));
    }
}

/// An optional report read before its group opened is held, then applied; the success report
/// read after the record left the group is recorded; the end needs nothing more.
#[test]
fn optional_reports_read_before_the_group_opens_or_after_it_is_passed_settle_it() {
    let mut s = Sim::before_group(grouped());
    s.apply(&ended(3, "States.Timeout"));
    assert_eq!(s.held.len(), 1);
    s.all(&[step_ready(2, "t2"), step_ready(1, "t1")]);
    assert_eq!(s.r().missed, vec![3]);
    s.all(&[ok("cb-1", 1), ok("cb-2", 2), step_ready(4, "t4")]);
    s.all(&[step_ready(3, "t3"), ended(3, "States.Timeout"), ok("cb-4", 4), finished()]);
    assert_eq!(s.r().state, State::Degraded);

    // Success reported after the record moved on, before the end; and after the end was read.
    for end_first in [false, true] {
        let mut s = Sim::before_group(grouped());
        s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
        s.all(&[ok("cb-3", 3), ok("cb-1", 1), ok("cb-2", 2)]);
        s.all(&[step_ready(4, "t4"), ok("cb-4", 4)]);
        if end_first {
            s.apply(&finished());
            assert_eq!(s.r().state, State::Advancing { step: 4 });
        }
        s.all(&[confirmed(3), finished(), confirmed(3)]);
        assert_eq!(s.r().state, State::Succeeded);
    }
}

/// A group last, the optional branch still open in the record (its Catch's report on its way):
/// the end is not held and comes out `degraded`; the report is then a duplicate. And a
/// required failure after an optional success: the success report changes nothing.
#[test]
fn an_open_optional_branch_at_the_end_needs_no_report_and_a_failed_group_takes_none() {
    let mut s = Sim::before_group(grouped_last());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), ok("cb-1", 1), ok("cb-2", 2)]);
    s.apply(&finished());
    assert_eq!(s.r().state, State::Degraded);
    let before = s.r().clone();
    s.all(&[step_ready(3, "t3"), ended(3, "States.Timeout"), confirmed(3), Input::Tick]);
    assert_eq!(s.r().state, before.state);
    assert_eq!(s.r().missed, before.missed);

    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3"), ok("cb-3", 3)]);
    s.apply(&callback(
        "cb-1",
        1,
        StepOutcome::Failed { error: "no".into(), cause: "c".into(), retryable: true },
        json!({}),
    ));
    let outcomes =
        |r: &Record| (r.state, r.missed.clone(), r.waits.iter().map(Wait::outcome).collect::<Vec<_>>());
    let before = outcomes(s.r());
    s.all(&[confirmed(3), resumed(s.r(), wid(1, 3), true)]);
    // The delivery mark of the success owed before the failure is kept (the sweeper sends it no
    // more); no outcome changes.
    assert_eq!(outcomes(s.r()), before, "nothing applied after the group failed");
    assert_eq!(s.r().waits[2].owed(), None);
}

// ---------------------------------------------------------------------------------------------
// Invariant 5: nothing is applied to a branch after its group failed or closed.

/// Found by an attack on the group logic, now fixed. The optional branch succeeded (its success still owed, the delivery mark not yet in),
/// then a required branch fails and the group fails (`advancing{1}` by `fail_step`). The
/// optional branch's timeout report is then *applied*: a write `advancing{1} → advancing{1}`
/// (`branch_done`) turns its outcome `succeeded → timed_out` and adds it to `missed`
/// (group.rs:257-271 never looks at whether the group failed; the table row A→A `branch_done` is
/// meant for a group that advanced). The branch input after the group failed should be ignored
/// (`group_failed`), as every other input to that group is.
#[test]
fn no_report_is_applied_to_a_branch_after_its_group_failed() {
    let mut s = Sim::before_group(grouped());
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
    s.apply(&ok("cb-address", 3));
    let d = s.apply(&failed("cb-fraud", 1));
    assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::FailStep));
    let before = s.r().clone();
    let d = s.apply(&ended(3, "States.Timeout"));
    assert!(
        d.outcome != Outcome::Applied && d.write.is_none(),
        "applied to a branch of a failed group: {:?}, branch 3 {:?} -> {:?}, missed {:?} -> {:?}",
        d.outcome,
        outcome(&before, 3),
        outcome(s.r(), 3),
        before.missed,
        s.r().missed
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 2 (a resume is re-sent only while it is owed) and rule 5 (a terminal record owes
// nothing; a late input changes nothing).

/// BUG (minor). Cancel and `finished` clear the record's `owed` (then `lifecycle.rs`: `owed: None` in
/// `on_finished` and the cancel arm), so a straight step owes nothing once the record is
/// terminal. A branch's `owed` is never cleared there (`close_open_branches` only touches open
/// branches). A redelivered callback after the end, past the grace, then goes through
/// `repeated_input` → `group::resend_for_repeat` (group.rs:309-316, which checks no state) and
/// sends the branch's success again to the token of a stopped / ended execution. A straight
/// step's redelivery in the same place sends nothing.
#[test]
fn a_terminal_record_resends_no_branch_resume_on_a_redelivered_callback() {
    for end in [
        Input::Cancel { reason: "ops".into() },
        Input::Finished { generation: 1, finish: Finish::TimedOut },
        Input::Finished { generation: 1, finish: Finish::Failed { error: "e".into(), cause: "c".into() } },
    ] {
        let mut s = Sim::before_group(grouped());
        s.all(&[step_ready(1, "t1"), step_ready(2, "t2"), step_ready(3, "t3")]);
        s.apply(&ok("cb-fraud", 1)); // success owed to t1; its delivery mark not yet in
        s.apply(&end);
        assert!(s.r().state.is_terminal());
        s.now = T0 + RESEND_RESUME_AFTER;
        let d = s.apply(&ok("cb-fraud", 1));
        assert_eq!(d.outcome, Outcome::Duplicate);
        let resumes: Vec<&Effect> =
            d.effects.iter().filter(|e| matches!(e, Effect::Resume { .. } | Effect::Answer { .. })).collect();
        assert!(resumes.is_empty(), "after {end:?} a duplicate re-sent {resumes:?}");
    }
    // The straight-line control: the same redelivery after the end sends nothing.
    let p = plan(&[&["decision"], &["x"]]);
    let mut s = Sim::new(p);
    s.all(&[Input::start(eid("evt-1")), step_ready(0, "t0"), ok("cb-review", 0)]);
    s.apply(&Input::Cancel { reason: "ops".into() });
    s.now = T0 + RESEND_RESUME_AFTER;
    assert_eq!(s.apply(&ok("cb-review", 0)).effects, []);
}
