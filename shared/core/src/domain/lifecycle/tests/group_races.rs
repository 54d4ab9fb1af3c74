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
    Plan {
        groups: vec![Span { first: 1, last: 3 }],
        optional: vec![3],
        ..plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["address_ok"], &["payment_ref"]])
    }
}

/// The group is the last position.
fn grouped_last() -> Plan {
    Plan {
        groups: vec![Span { first: 1, last: 3 }],
        optional: vec![3],
        ..plan(&[&["decision"], &["fraud_score"], &["credit_ok"], &["address_ok"]])
    }
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
    Plan { optional: vec![2, 3], ..grouped_last() }
}

fn outcome(r: &Record, step: u32) -> Option<BranchOutcome> {
    r.branches.iter().find(|b| b.step == step).and_then(|b| b.outcome)
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
        s.all(&[Input::Start { event: eid("evt-1") }, step_ready(0, "t0"), ok("cb-review", 0)]);
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
            (State::Advancing { step: 1 }, Some(BranchOutcome::TimedOut), vec![3]),
            "report read {} the group opened: the optional branch was left open",
            if opened_first { "after" } else { "before" }
        );
    }
}

/// Found by an attack on the group logic, now fixed. The optional branch's Catch sends `branch_ended` and the branch ends; the required
/// branches are resumed, so the Parallel state completes and payment's `step_ready` is sent at
/// once. Read first (no order on the queue), it finds the record still `waiting{1}` (the
/// optional branch open) and is ignored `out_of_order` (lifecycle.rs, `on_step_ready`'s last
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
        (s.r().state, s.r().token.clone(), s.r().missed.clone()),
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
    let p = Plan {
        groups: vec![Span { first: 1, last: 2 }, Span { first: 3, last: 4 }],
        optional: vec![2],
        ..plan(&[
            &["decision"],
            &["fraud_score"],
            &["address_ok"],
            &["credit_ok"],
            &["limits_ok"],
            &["payment_ref"],
        ])
    };
    let mut s = Sim::before_group(p);
    s.all(&[step_ready(1, "t1"), step_ready(2, "t2")]);
    s.apply(&callback("cb-fraud", 1, StepOutcome::Succeeded, json!({"fraud_score": 3})));
    // Step Functions: branch 2 timed out (its Catch sent branch_ended), A completed, B began.
    let d = s.apply(&step_ready(3, "t3"));
    let failed: Vec<&Effect> =
        d.effects.iter().filter(|e| matches!(e, Effect::SendTaskFailure { .. })).collect();
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
/// record `waiting{1}` and `on_finished` ignores it `out_of_order` (lifecycle.rs, `fits`
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
    assert!(d.effects.contains(&Effect::MarkResumed { generation: 1, step: 3 }));
    // SendTaskSuccess answered TaskTimedOut (token gone): the engine marks it, not delivered.
    s.apply(&Input::Resumed { generation: 1, step: 3, delivered: false });
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
/// `branches` (lifecycle.rs, `on_step_ready`: `branches: Vec::new()`), so the report then finds
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
        s.apply(&Input::Resumed { generation: 1, step: 3, delivered: false });
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
        assert_eq!(outcome(s.r(), 2), Some(BranchOutcome::Succeeded));
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
    let v = s.r().version;
    s.all(&[confirmed(3), Input::Resumed { generation: 1, step: 3, delivered: true }]);
    assert_eq!(s.r().version, v, "nothing applied after the group failed");
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

/// BUG (minor). Cancel and `finished` clear the record's `owed` (lifecycle.rs: `owed: None` in
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
        let resumes: Vec<&Effect> = d
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::SendTaskSuccess { .. } | Effect::SendTaskFailure { .. }))
            .collect();
        assert!(resumes.is_empty(), "after {end:?} a duplicate re-sent {resumes:?}");
    }
    // The straight-line control: the same redelivery after the end sends nothing.
    let p = plan(&[&["decision"], &["x"]]);
    let mut s = Sim::new(p);
    s.all(&[Input::Start { event: eid("evt-1") }, step_ready(0, "t0"), ok("cb-review", 0)]);
    s.apply(&Input::Cancel { reason: "ops".into() });
    s.now = T0 + RESEND_RESUME_AFTER;
    assert_eq!(s.apply(&ok("cb-review", 0)).effects, []);
}

// ---------------------------------------------------------------------------------------------
// A property test: random orderings of step_ready / branch_ended / finished, callbacks,
// redeliveries, delivery marks (late, twice), timeouts, cancels, restarts and ticks, against a
// model of Step Functions' Parallel state. Safety only (no liveness: the tests above cover the
// reports that are lost); every decision is checked against invariants 1, 2, 5, 6 and the
// group's states.

mod model {
    use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

    use proptest::prelude::*;

    use super::*;

    /// Plans whose steps each require `k{i}`: a group in the middle, last, first, and two groups
    /// back to back.
    fn plans() -> Vec<Plan> {
        let steps = |n: usize| -> Vec<Vec<String>> { (0..n).map(|i| vec![format!("k{i}")]).collect() };
        let p = |n, groups: Vec<Span>, optional: Vec<u32>| Plan {
            steps: steps(n),
            groups,
            optional,
            on_restart: OnRestart::AfterTerminal,
            version: Some("v1".into()),
            retries: Vec::new(),
            compensations: Vec::new(),
        };
        vec![
            p(5, vec![Span { first: 1, last: 3 }], vec![3]),
            p(4, vec![Span { first: 1, last: 3 }], vec![3]),
            p(3, vec![Span { first: 0, last: 1 }], vec![1]),
            p(6, vec![Span { first: 1, last: 2 }, Span { first: 3, last: 4 }], vec![2, 4]),
            p(4, vec![Span { first: 1, last: 3 }], vec![2, 3]),
        ]
    }

    #[derive(Debug, Clone)]
    enum Action {
        Start(u8),
        Callback {
            id: u8,
            step: u8,
            outcome: u8,
            full: bool,
        },
        /// A callback for one of the steps the live execution parks on (an operator answering
        /// an open task).
        Answer {
            id: u8,
            n: u8,
            outcome: u8,
        },
        Progress {
            skip: u8,
        },
        RedeliverProgress(u8),
        RedeliverCallback(u8),
        /// A resume in flight reaches Step Functions (or finds its token gone); the engine then
        /// submits its delivery mark, if it owes one.
        Call {
            skip: u8,
        },
        /// A resume in flight is lost (the engine crashed after the write).
        LoseCall(u8),
        /// A delivery mark is submitted again (a retry).
        RedeliverMark(u8),
        /// A parked token misses its deadline.
        Timeout(u8),
        Cancel,
        Tick,
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            1 => (0u8..2).prop_map(Action::Start),
            6 => (0u8..8, 0u8..6, 0u8..6, any::<bool>())
                .prop_map(|(id, step, outcome, full)| Action::Callback { id, step, outcome, full }),
            6 => (0u8..8, any::<u8>(), 0u8..5).prop_map(|(id, n, outcome)| Action::Answer { id, n, outcome }),
            7 => (0u8..4).prop_map(|skip| Action::Progress { skip }),
            2 => any::<u8>().prop_map(Action::RedeliverProgress),
            2 => any::<u8>().prop_map(Action::RedeliverCallback),
            6 => (0u8..3).prop_map(|skip| Action::Call { skip }),
            1 => any::<u8>().prop_map(Action::LoseCall),
            1 => any::<u8>().prop_map(Action::RedeliverMark),
            1 => any::<u8>().prop_map(Action::Timeout),
            1 => Just(Action::Cancel),
            1 => Just(Action::Tick),
        ]
    }

    #[derive(Debug, Default)]
    struct Exec {
        positions: Vec<Span>,
        pos: usize,
        /// The tokens parked on, by step.
        parked: BTreeMap<u32, TaskToken>,
        /// Branches of the current group that completed, by step: succeeded?
        done_branches: BTreeMap<u32, bool>,
        /// Optional branches whose own Catch fired (they did not succeed).
        caught: BTreeSet<u32>,
        /// Branches that succeeded.
        succeeded: BTreeSet<u32>,
        done: bool,
    }

    struct World {
        plan: Plan,
        record: Option<Record>,
        now: OffsetDateTime,
        execs: BTreeMap<u32, Exec>,
        progress: VecDeque<Input>,
        delivered_progress: Vec<Input>,
        callbacks: Vec<Input>,
        /// Resumes in flight, each with the delivery mark the engine submits after it.
        calls: VecDeque<(TaskToken, bool, Option<Input>)>,
        delivered_marks: Vec<Input>,
        inbox: Vec<(u32, u32, Input)>,
        first_sent: HashMap<String, OffsetDateTime>,
    }

    impl World {
        fn enter(&mut self, generation: u32) {
            let e = self.execs.get_mut(&generation).expect("an execution");
            e.done_branches.clear();
            let Some(span) = e.positions.get(e.pos).copied() else {
                e.done = true;
                self.progress.push_back(Input::Finished { generation, finish: Finish::Succeeded });
                return;
            };
            for step in span.first..=span.last {
                let tok = token(&format!("g{generation}-s{step}"));
                e.parked.insert(step, tok.clone());
                self.progress.push_back(Input::StepReady {
                    generation,
                    step,
                    token: tok,
                    deadline: self.now + Duration::days(1),
                });
            }
        }

        /// A parked branch or step ended: `Some(true)` succeeded, `Some(false)` failed by baton,
        /// `None` timed out.
        fn end_parked(&mut self, generation: u32, step: u32, how: Option<bool>) {
            let optional = self.plan.is_optional(step);
            let e = self.execs.get_mut(&generation).expect("an execution");
            e.parked.remove(&step);
            match how {
                Some(true) => {
                    e.done_branches.insert(step, true);
                    e.succeeded.insert(step);
                    if optional {
                        self.progress.push_back(Input::BranchEnded { generation, step, error: None });
                    }
                }
                _ if optional => {
                    e.done_branches.insert(step, false);
                    e.caught.insert(step);
                    let error = if how.is_none() { "States.Timeout" } else { "no" };
                    self.progress.push_back(Input::BranchEnded {
                        generation,
                        step,
                        error: Some(error.into()),
                    });
                }
                _ => {
                    e.done = true;
                    e.parked.clear();
                    let finish = match how {
                        None => Finish::TimedOut,
                        _ => Finish::Failed { error: "no".into(), cause: "c".into() },
                    };
                    self.progress.push_back(Input::Finished { generation, finish });
                    return;
                }
            }
            let span = e.positions[e.pos];
            if (span.first..=span.last).all(|s| e.done_branches.contains_key(&s)) {
                e.pos += 1;
                self.enter(generation);
            }
        }

        /// Whether the token was open (the resume was delivered).
        fn resume(&mut self, tok: &TaskToken, success: bool) -> bool {
            let found = self.execs.iter().find_map(|(g, e)| {
                (!e.done).then(|| e.parked.iter().find(|(_, t)| *t == tok).map(|(s, _)| (*g, *s))).flatten()
            });
            if let Some((generation, step)) = found {
                self.end_parked(generation, step, Some(success));
            }
            found.is_some()
        }

        fn check_resend(&mut self, tok: &TaskToken) {
            match self.first_sent.get(tok.expose()) {
                None => {
                    self.first_sent.insert(tok.expose().to_owned(), self.now);
                }
                Some(first) => assert!(
                    self.now - *first >= RESEND_RESUME_AFTER,
                    "invariant 2: resume for {tok:?} sent again {} after the first",
                    self.now - *first
                ),
            }
        }

        #[expect(clippy::too_many_lines, reason = "the model's one match over every effect")]
        fn apply(&mut self, input: &Input) -> Decision {
            let (w, k) = names();
            let prior = self.record.clone();
            let d = decide(&self.plan, (&w, &k), prior.as_ref(), input, self.now);
            check(&self.plan, prior.as_ref(), input, &d);
            if let Some(write) = &d.write {
                self.record = Some(write.to.clone());
            }
            let effects = d.effects.clone();
            for (i, effect) in effects.iter().cloned().enumerate() {
                // A resume (and the delivery mark that follows it) is a call in flight: it may
                // arrive late, after a timeout, or be lost in a crash.
                let mark = match effects.get(i + 1) {
                    Some(Effect::MarkResumed { generation, step }) => {
                        Some(Input::Resumed { generation: *generation, step: *step, delivered: true })
                    }
                    _ => None,
                };
                match effect {
                    Effect::StartExecution { generation } => {
                        if !self.execs.contains_key(&generation) {
                            let mut positions = Vec::new();
                            let mut i = 0;
                            while (i as usize) < self.plan.steps.len() {
                                let span = self.plan.position(i);
                                positions.push(span);
                                i = span.last + 1;
                            }
                            self.execs.insert(generation, Exec { positions, ..Exec::default() });
                            self.enter(generation);
                        }
                    }
                    Effect::SendTaskSuccess { token, .. } => {
                        self.check_resend(&token);
                        self.calls.push_back((token, true, mark));
                    }
                    Effect::SendTaskFailure { token, .. } => {
                        if matches!(input, Input::Cancel { .. } | Input::StepReady { .. }) {
                            self.resume(&token, false);
                        } else {
                            self.check_resend(&token);
                            self.calls.push_back((token, false, mark));
                        }
                    }
                    Effect::StopExecution { generation, .. } => {
                        if let Some(e) = self.execs.get_mut(&generation) {
                            e.done = true;
                            e.parked.clear();
                        }
                    }
                    Effect::Buffer { generation, step } => self.inbox.push((generation, step, input.clone())),
                    Effect::DrainInbox { generation, step } => {
                        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.inbox)
                            .into_iter()
                            .partition(|(g, s, _)| (*g, *s) == (generation, step));
                        self.inbox = rest;
                        for (_, _, entry) in due {
                            let d = self.apply(&entry);
                            assert_ne!(d.outcome, Outcome::Buffered, "a drained entry buffered again");
                        }
                    }
                    Effect::MarkResumed { .. }
                    | Effect::CreateTask { .. }
                    | Effect::CreateUndoTask { .. }
                    | Effect::SendTaskHeartbeat { .. }
                    | Effect::MarkAttemptOpened { .. }
                    | Effect::Ledger { .. } => {}
                }
            }
            // `degraded` only when an optional branch did not succeed (in Step Functions).
            if let Some(r) = &self.record
                && let Some(e) = self.execs.get(&r.generation)
            {
                if r.state == State::Degraded {
                    assert!(
                        !e.caught.is_empty(),
                        "invariant 4: degraded, yet every optional branch succeeded"
                    );
                }
                {
                    for m in &r.missed {
                        assert!(
                            !e.succeeded.contains(m),
                            "invariant 4: branch {m} counted missed, but it succeeded in Step Functions"
                        );
                    }
                }
            }
            d
        }

        #[expect(clippy::too_many_lines, reason = "the model's one match over every action")]
        fn act(&mut self, a: &Action) {
            self.now += Duration::seconds(1);
            let pick = |q: &mut VecDeque<Input>, skip: u8| -> Option<Input> {
                if q.is_empty() { None } else { q.remove(usize::from(skip) % q.len()) }
            };
            match a {
                Action::Start(n) => {
                    self.apply(&Input::Start { event: eid(&format!("evt-{n}")) });
                }
                Action::Answer { id, n, outcome } => {
                    let parked: Vec<u32> = self
                        .execs
                        .values()
                        .filter(|e| !e.done)
                        .flat_map(|e| e.parked.keys().copied())
                        .collect();
                    if !parked.is_empty() {
                        let step = parked[usize::from(*n) % parked.len()];
                        let a = Action::Callback {
                            id: *id,
                            step: u8::try_from(step).expect("a small step"),
                            outcome: *outcome,
                            full: true,
                        };
                        self.act(&a);
                    }
                }
                Action::Callback { id, step, outcome, full } => {
                    let outcome = match outcome {
                        0 => StepOutcome::Failed { error: "no".into(), cause: "c".into(), retryable: true },
                        1 => StepOutcome::InProgress,
                        _ => StepOutcome::Succeeded,
                    };
                    let key = if *full { format!("k{step}") } else { "other".into() };
                    let data: Map<String, Value> = [(key, json!(format!("v{id}")))].into_iter().collect();
                    let input = Input::StepInput {
                        id: eid(&format!("cb-{id}")),
                        hash: format!("{step}:{outcome:?}:{data:?}"),
                        source: Source::Callback,
                        step: u32::from(*step),
                        outcome,
                        data,
                        generation: None,
                        attempt: None,
                    };
                    self.callbacks.push(input.clone());
                    self.apply(&input);
                }
                Action::Progress { skip } => {
                    if let Some(m) = pick(&mut self.progress, *skip) {
                        self.delivered_progress.push(m.clone());
                        self.apply(&m);
                    }
                }
                Action::RedeliverProgress(n) => {
                    if !self.delivered_progress.is_empty() {
                        let m =
                            self.delivered_progress[usize::from(*n) % self.delivered_progress.len()].clone();
                        self.apply(&m);
                    }
                }
                Action::RedeliverCallback(n) => {
                    if !self.callbacks.is_empty() {
                        let m = self.callbacks[usize::from(*n) % self.callbacks.len()].clone();
                        self.apply(&m);
                    }
                }
                Action::Call { skip } => {
                    if !self.calls.is_empty() {
                        let i = usize::from(*skip) % self.calls.len();
                        let (tok, success, mark) = self.calls.remove(i).expect("a call");
                        let delivered = self.resume(&tok, success);
                        if let Some(mut m) = mark {
                            if let Input::Resumed { delivered: d, .. } = &mut m {
                                *d = delivered;
                            }
                            self.delivered_marks.push(m.clone());
                            self.apply(&m);
                        }
                    }
                }
                Action::LoseCall(n) => {
                    if !self.calls.is_empty() {
                        let i = usize::from(*n) % self.calls.len();
                        self.calls.remove(i);
                    }
                }
                Action::RedeliverMark(n) => {
                    if !self.delivered_marks.is_empty() {
                        let m = self.delivered_marks[usize::from(*n) % self.delivered_marks.len()].clone();
                        self.apply(&m);
                    }
                }
                Action::Timeout(n) => {
                    let live: Vec<(u32, u32)> = self
                        .execs
                        .iter()
                        .filter(|(_, e)| !e.done)
                        .flat_map(|(g, e)| e.parked.keys().map(|s| (*g, *s)))
                        .collect();
                    if !live.is_empty() {
                        let (g, s) = live[usize::from(*n) % live.len()];
                        self.end_parked(g, s, None);
                    }
                }
                Action::Cancel => {
                    self.apply(&Input::Cancel { reason: "ops".into() });
                }
                Action::Tick => {
                    self.now += RESEND_RESUME_AFTER.max(RESTART_PENDING_AFTER);
                    self.apply(&Input::Tick);
                }
            }
        }
    }

    fn input_step(input: &Input) -> Option<u32> {
        match input {
            Input::StepInput { step, .. }
            | Input::BranchEnded { step, .. }
            | Input::Resumed { step, .. }
            | Input::StepReady { step, .. } => Some(*step),
            _ => None,
        }
    }

    /// Invariants 1, 5, 6 and the group's states, on one decision.
    fn check(plan: &Plan, prior: Option<&Record>, input: &Input, d: &Decision) {
        let Some(w) = &d.write else { return };
        let to = &w.to;
        // A group decided, or a record ended there, has no open branch; one waiting has one.
        if let Some(step) = to.state.step()
            && plan.group_of(step).is_some()
        {
            let open = to.branches.iter().filter(|b| b.is_open()).count();
            match to.state {
                State::Advancing { .. } => {
                    assert_eq!(open, 0, "invariant 1: advancing with a branch open: {to:?}")
                }
                _ => assert!(open > 0, "waiting at a group with no branch open: {:?}", to.branches),
            }
        }
        if to.state.is_terminal() {
            assert!(to.branches.iter().all(|b| !b.is_open()), "invariant 1: ended with a branch open");
        }
        let Some(p) = prior.filter(|p| p.generation == to.generation && !p.branches.is_empty()) else {
            return;
        };
        let same_group = p.branches.iter().map(|b| b.step).eq(to.branches.iter().map(|b| b.step));
        if !same_group {
            return;
        }
        // (1) an outcome is given once; the overrides: an optional success → timed_out, and on a
        // timeout report, a success Step Functions never confirmed → timed_out.
        let timed_out_report = matches!(input, Input::Finished { finish: Finish::TimedOut, .. });
        for (a, b) in p.branches.iter().zip(&to.branches) {
            if let Some(was) = a.outcome {
                let unconfirmed = timed_out_report && (a.unconfirmed || a.owed.is_some());
                let overridden = b.outcome == Some(BranchOutcome::TimedOut)
                    && (was == BranchOutcome::Succeeded && plan.is_optional(a.step) || unconfirmed);
                assert!(
                    b.outcome == Some(was) || overridden,
                    "invariant 1: branch {} went {was:?} -> {:?} on {input:?}",
                    a.step,
                    b.outcome
                );
            }
        }
        // (5) nothing applied to a branch after its group failed or closed.
        if crate::domain::lifecycle::group_failed(plan, p)
            && d.outcome == Outcome::Applied
            && !p.state.is_terminal()
        {
            assert!(
                matches!(w.cause, Cause::ReportFailed | Cause::ReportTimedOut | Cause::Cancel),
                "invariant 5: {:?} applied ({:?}) after the group failed",
                input,
                w.cause
            );
        }
        // (6) a branch's input moves no sibling (but a required failure closes open ones).
        if let Some(step) = input_step(input).filter(|s| p.branches.iter().any(|b| b.step == *s)) {
            for (a, b) in p.branches.iter().zip(&to.branches).filter(|(a, _)| a.step != step) {
                let closed =
                    w.cause == Cause::FailStep && a.is_open() && b.outcome == Some(BranchOutcome::Closed);
                assert!(
                    (a.token == b.token && a.inputs == b.inputs && a.outcome == b.outcome) || closed,
                    "invariant 6: {input:?} moved sibling {}: {a:?} -> {b:?}",
                    a.step
                );
                assert!(
                    a.owed == b.owed || closed,
                    "invariant 6: {input:?} changed sibling {}'s owed",
                    a.step
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

        #[test]
        fn group_invariants_hold_under_any_ordering_of_reports_inputs_marks_and_ticks(
            which in 0usize..5,
            actions in prop::collection::vec(action(), 1..80),
        ) {
            let mut world = World {
                plan: plans()[which].clone(),
                record: None,
                now: T0,
                execs: BTreeMap::new(),
                progress: VecDeque::new(),
                delivered_progress: Vec::new(),
                callbacks: Vec::new(),
                calls: VecDeque::new(),
                delivered_marks: Vec::new(),
                inbox: Vec::new(),
                first_sent: HashMap::new(),
            };
            world.apply(&Input::Start { event: eid("evt-0") });
            for a in &actions {
                world.act(a);
            }
        }
    }
}
