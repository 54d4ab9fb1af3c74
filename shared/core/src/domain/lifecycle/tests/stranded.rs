//! Stranded records: an execution ended without its report. The sweeper strands the record;
//! nothing but an operator's `end` moves it after, and it ends as its execution did.

use super::compensation::{reached, saga, shipping_failed, undo_outcome};
use super::*;

fn gone(status: &str) -> Input {
    Input::ExecutionGone { generation: 1, status: status.into(), error: None }
}

fn end(status: &str) -> Input {
    Input::End {
        generation: 1,
        status: status.into(),
        error: None,
        reason: "execution stopped from the console".into(),
    }
}

#[test]
fn a_live_record_whose_execution_is_gone_is_stranded_and_owes_nothing_more() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let waiting = ready(&p, &started(&p), 0, "t0");
    for (status, expected) in [("ABORTED", Outcome::Applied), ("NOT_FOUND", Outcome::Applied)] {
        let d = run(&p, Some(&waiting), &gone(status));
        assert_eq!(d.outcome, expected, "{status}");
        let r = after(&d);
        assert_eq!((r.state.kind(), r.deadline(), r.owes_work()), (Kind::Stranded, None, false));
        assert_eq!(d.write.as_ref().map(|w| w.cause), Some(Cause::ExecutionGone));
    }
    // A running execution never strands its record; nor does another generation's.
    assert_eq!(run(&p, Some(&waiting), &gone("RUNNING")).outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
    let other = Input::ExecutionGone { generation: 2, status: "ABORTED".into(), error: None };
    assert!(run(&p, Some(&waiting), &other).write.is_none());
    // Again, it is a duplicate.
    let stranded = after(&run(&p, Some(&waiting), &gone("ABORTED")));
    assert_eq!(run(&p, Some(&stranded), &gone("ABORTED")).outcome, Outcome::Duplicate);
}

#[test]
fn nothing_but_an_end_moves_a_stranded_record_and_every_other_input_is_ledgered() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let stranded = after(&run(&p, Some(&ready(&p, &started(&p), 0, "t0")), &gone("ABORTED")));
    let late_report = Input::Finished { generation: 1, finish: Finish::TimedOut };
    for input in [
        callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"})),
        late_report,
        Input::Cancel { reason: "op".into() },
    ] {
        let d = run(&p, Some(&stranded), &input);
        assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::Stranded), "{input:?}");
        assert_eq!(d.effects, [Effect::Ledger { reason: IgnoreReason::Stranded }], "{input:?}");
    }
    // A new start event is refused as while the run goes on (`already_running`): a copy of it
    // after the end must never start a later run.
    let d = run(&p, Some(&stranded), &Input::start(eid("evt-2")));
    assert_eq!(d.effects, [Effect::Ledger { reason: IgnoreReason::AlreadyRunning }]);
    let tick = run(&p, Some(&stranded), &Input::Tick);
    assert_eq!((tick.outcome, tick.effects.len()), (Outcome::Ignored(IgnoreReason::NothingOwed), 0));
    // Only a stranded record is ended so.
    let live = ready(&p, &started(&p), 0, "t0");
    assert_eq!(run(&p, Some(&live), &end("ABORTED")).outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
    assert_eq!(run(&p, Some(&stranded), &end("RUNNING")).outcome, Outcome::Ignored(IgnoreReason::OutOfOrder));
}

#[test]
fn a_stranded_forward_run_ends_as_its_execution_did() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let stranded = after(&run(&p, Some(&ready(&p, &started(&p), 0, "t0")), &gone("ABORTED")));
    for (status, state) in [
        ("ABORTED", State::Cancelled),
        ("TIMED_OUT", State::TimedOut),
        ("FAILED", State::Failed),
        ("NOT_FOUND", State::Failed),
        ("SUCCEEDED", State::Succeeded),
    ] {
        let d = run(&p, Some(&stranded), &end(status));
        assert_eq!(
            (after(&d).state, d.write.as_ref().map(|w| w.cause)),
            (state, Some(Cause::End)),
            "{status}"
        );
    }
    let ended = after(&run(&p, Some(&stranded), &end("ABORTED")));
    assert_eq!(run(&p, Some(&ended), &end("ABORTED")).outcome, Outcome::Ignored(IgnoreReason::Terminal));
}

/// A record stuck compensating (its execution stopped mid-chain) is stranded like any other,
/// and ends as the chain would have: what was acknowledged is undone, the rest stays undone.
#[test]
fn a_record_stranded_while_compensating_ends_compensation_failed_with_what_stays_undone() {
    let p = saga();
    let r = reached(&p, &shipping_failed(&p), 1, "NoCarrier");
    assert_eq!(r.state, State::Compensating);
    let stranded = after(&run(&p, Some(&r), &gone("ABORTED")));
    assert_eq!(stranded.state.kind(), Kind::Stranded);
    assert!(!stranded.owes_work(), "no compensation's task or resume is owed any more");
    let ended = after(&run(&p, Some(&stranded), &end("ABORTED")));
    assert_eq!(ended.state, State::CompensationFailed);
    let c = ended.compensation.as_ref().unwrap();
    assert!(c.undos.iter().all(|u| undo_outcome(u).is_some()), "every compensation has its outcome");
}

/// An input the run applied before it was stranded, decided again (a drain that died after its
/// write, finished by the sweeper), is a duplicate, never ignored as `stranded`: its inbox entry
/// settles as applied (`make sim`, seed 28386). Another input still is `stranded`.
#[test]
fn an_input_applied_before_the_strand_is_a_duplicate_after_it() {
    let p = plan(&[&["decision"], &["payment_ref"]]);
    let input = callback("cb-0", 0, StepOutcome::Succeeded, json!({"decision": "ok"}));
    let advancing = after(&run(&p, Some(&ready(&p, &started(&p), 0, "t0")), &input));
    let stranded = after(&run(&p, Some(&advancing), &gone("ABORTED")));
    assert_eq!(stranded.state.kind(), Kind::Stranded);
    let again = run(&p, Some(&stranded), &input);
    assert_eq!(
        (again.outcome, again.write.is_none(), again.effects.is_empty()),
        (Outcome::Duplicate, true, true)
    );
    let other = callback("cb-1", 0, StepOutcome::Succeeded, json!({"decision": "ok"}));
    assert_eq!(run(&p, Some(&stranded), &other).outcome, Outcome::Ignored(IgnoreReason::Stranded));
}
