//! Compensation: a compensation task goes out only for a step that completed in its generation,
//! once the record entered compensation; at most one task per (generation, step, attempt), the
//! attempts never skipping one; last position first; every planned compensation ends with
//! exactly one outcome, and `compensated` only when each was acknowledged; no forward step moves
//! once compensation began, and a forward input that arrives then is ignored and ledgered. Read
//! from the tasks published, the landed writes, the plan's callbacks and what senders were told.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::lifecycle::{
    Cause, IgnoreReason, Kind, Plan, Record, Role, State, Undo, WaitOutcome,
};
use baton_core::ports::store::{Task, TaskKind};

use super::{Checker, Seen};
use crate::store::Published;

/// Every compensation invariant; the schedule counts as one that compensated when a record
/// entered compensation.
pub(super) fn all(c: &mut Checker<'_>, s: &Seen<'_>) {
    compensation_only_for_a_completed_step_once_compensating(c, s);
    one_compensation_task_per_attempt_none_skipped(c, s);
    compensations_run_last_position_first(c, s);
    every_planned_compensation_ends_with_one_outcome(c, s);
    compensated_only_if_every_one_was_acknowledged(c, s);
    no_forward_step_after_compensation_began(c, s);
    late_forward_input_during_compensation_is_ledgered(c, s);
    an_acknowledgement_applies_to_the_compensation_it_names(c, s);
    c.outcome.compensated |= s.writes.iter().any(|w| w.to.state == State::Compensating);
}

/// The writes of (workflow, key, generation), in the order they landed.
fn writes_of<'s>(s: &'s Seen<'_>, t: &Task) -> impl Iterator<Item = &'s Record> + 's {
    let g = t.generation;
    s.writes_of(t.workflow.as_str(), t.key.as_str()).map(|(_, l)| &*l.to).filter(move |r| r.generation == g)
}

/// Whether the write `r` records `step` completed: its success owed, or its branch succeeded.
fn completes(r: &Record, step: u32) -> bool {
    let succeeded = |role: Role| {
        r.wait(step).is_some_and(|w| w.role == role && w.outcome() == Some(WaitOutcome::Succeeded))
    };
    let single = r.state == (State::Advancing { step })
        && succeeded(Role::Step)
        && r.history.last().is_some_and(|h| h.cause == Cause::Complete);
    single || succeeded(Role::Branch)
}

/// The compensation tasks published.
fn undo_tasks<'s>(s: &'s Seen<'_>) -> impl Iterator<Item = &'s Published> + 's {
    s.published.iter().filter(|p| p.task.kind == TaskKind::Compensation)
}

/// The plan of `r`'s workflow in its config version.
fn plan_of(s: &Seen<'_>, r: &Record) -> Option<Plan> {
    let config = s.version_of(Some(&r.config_version))?;
    Some(config.workflow(r.workflow.as_str())?.plan())
}

/// The plan of (workflow, key)'s generation, in the config version its last write names (a
/// later generation may run another; a start that crossed a deploy settles on its version at
/// its first step).
fn plan_at(s: &Seen<'_>, workflow: &str, key: &str, generation: u32) -> Option<Plan> {
    let r =
        s.writes.iter().rev().map(|l| &l.to).find(|r| {
            r.workflow.as_str() == workflow && r.key.as_str() == key && r.generation == generation
        })?;
    plan_of(s, r)
}

/// A compensation task goes out only for a step that completed in that generation, and only
/// once the record entered compensation.
fn compensation_only_for_a_completed_step_once_compensating(c: &mut Checker<'_>, s: &Seen<'_>) {
    for p in undo_tasks(s) {
        let t = &p.task;
        let completed = writes_of(s, t).any(|r| completes(r, t.step));
        // When the write that began it landed (the record's `began_at` is its writer's clock).
        let began = s
            .writes
            .iter()
            .filter(|l| {
                let r = &l.to;
                (r.workflow.as_str(), r.key.as_str(), r.generation)
                    == (t.workflow.as_str(), t.key.as_str(), t.generation)
                    && r.compensation.is_some()
            })
            .map(|l| l.at)
            .min()
            .is_some_and(|began| began <= p.at);
        c.check("compensation_only_for_a_completed_step_once_compensating", completed && began, || {
            format!(
                "task {} went out at {} (step completed: {completed}, compensating by then: {began})",
                t.id, p.at
            )
        });
    }
}

/// At most one task per (generation, step, attempt) of a compensation, and the attempts never
/// skip one, nor pass the step's `compensate.attempts`.
fn one_compensation_task_per_attempt_none_skipped(c: &mut Checker<'_>, s: &Seen<'_>) {
    type Undo = (String, String, u32, u32);
    let mut by_undo: BTreeMap<Undo, BTreeSet<(u32, &String)>> = BTreeMap::new();
    for t in undo_tasks(s).map(|p| &p.task) {
        let at = (t.workflow.to_string(), t.key.to_string(), t.generation, t.step);
        by_undo.entry(at).or_default().insert((t.attempt, &t.id));
    }
    for ((workflow, key, generation, step), seen) in by_undo {
        let most = plan_at(s, &workflow, &key, generation).and_then(|p| p.compensation_of(step)).unwrap_or(1);
        let numbers: Vec<u32> = seen.iter().map(|(n, _)| *n).collect();
        let ok = numbers.iter().copied().eq(1..=numbers.len() as u32) && numbers.len() <= most as usize;
        c.check("one_compensation_task_per_attempt_none_skipped", ok, || {
            format!("{workflow}/{key} generation {generation} step {step}: compensation tasks {seen:?} for {most} attempt(s)")
        });
    }
}

/// Compensations run last position first: the first task of a compensation goes out only after
/// the first task of every compensation at a later position that went out at all.
fn compensations_run_last_position_first(c: &mut Checker<'_>, s: &Seen<'_>) {
    type Run = (String, String, u32);
    let mut first: BTreeMap<Run, BTreeMap<u32, time::OffsetDateTime>> = BTreeMap::new();
    // When baton set each compensation going: its wait reached in the record (the task is
    // published after that write, and a send held back by latency can land after a later
    // position's: seed 89724), or its first task's publication if that came first.
    for w in s.writes.iter() {
        let r = &w.to;
        for u in r
            .compensation
            .iter()
            .flat_map(|c| &c.undos)
            .filter(|u| u.wait.token.is_some() && u.skip.is_none())
        {
            let at = first.entry((r.workflow.to_string(), r.key.to_string(), r.generation)).or_default();
            at.entry(u.step()).or_insert(w.at);
        }
    }
    for p in undo_tasks(s).filter(|p| p.task.attempt == 1) {
        let t = &p.task;
        let at = first.entry((t.workflow.to_string(), t.key.to_string(), t.generation)).or_default();
        let when = at.entry(t.step).or_insert(p.at);
        *when = (*when).min(p.at);
    }
    for ((workflow, key, generation), by_step) in first {
        let Some(plan) = plan_at(s, &workflow, &key, generation) else { continue };
        for (a, at_a) in &by_step {
            for (b, at_b) in &by_step {
                let later = plan.position(*a).first > plan.position(*b).first;
                c.check("compensations_run_last_position_first", !later || at_a <= at_b, || {
                    format!("{workflow}/{key} generation {generation}: step {b}'s compensation went out at {at_b}, before step {a}'s at {at_a}, a later position")
                });
            }
        }
    }
}

/// Every planned compensation ends with exactly one outcome: once set, it never changes, and a
/// record that ended after compensating has one for each; it ends compensated, compensation
/// failed, or (nothing run) as its run ended.
fn every_planned_compensation_ends_with_one_outcome(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut outcomes: BTreeMap<(String, String, u32, u32), String> = BTreeMap::new();
    for r in s.writes.iter().map(|l| &l.to) {
        for u in r.compensation.iter().flat_map(|c| &c.undos) {
            let Some(outcome) = u.wait.outcome().map(|o| o.name(Role::Compensation)) else { continue };
            let at = (r.workflow.to_string(), r.key.to_string(), r.generation, u.step());
            let first = outcomes.entry(at).or_insert_with(|| outcome.to_owned());
            c.check("every_planned_compensation_ends_with_one_outcome", first == outcome, || {
                format!(
                    "{}/{} generation {} step {}: compensation {first}, then {}",
                    r.workflow,
                    r.key,
                    r.generation,
                    u.step(),
                    outcome
                )
            });
        }
    }
    for r in s.records.iter().filter(|r| r.state.is_terminal()) {
        let Some(comp) = &r.compensation else { continue };
        let open: Vec<u32> =
            comp.undos.iter().filter(|u| u.wait.outcome().is_none()).map(|u| u.step()).collect();
        let ends = matches!(
            r.state.kind(),
            Kind::Compensated | Kind::CompensationFailed | Kind::Failed | Kind::TimedOut | Kind::Cancelled
        );
        c.check("every_planned_compensation_ends_with_one_outcome", open.is_empty() && ends, || {
            format!("{}/{} ended {} with compensations {open:?} open", r.workflow, r.key, r.state)
        });
    }
}

/// `compensated` holds only if every compensation run was acknowledged, each by a sender's
/// acknowledgement of success for that step.
fn compensated_only_if_every_one_was_acknowledged(c: &mut Checker<'_>, s: &Seen<'_>) {
    let acked: BTreeSet<(String, String)> = s
        .callbacks()
        .filter(|cb| cb.body["compensation"] == true && cb.body["outcome"] == "succeeded")
        .map(|cb| (cb.key.clone(), cb.step.to_owned()))
        .collect();
    for r in s.writes.iter().map(|l| &l.to).filter(|r| r.state == State::Compensated) {
        let Some(comp) = &r.compensation else { continue };
        let names = s.version_of(Some(&r.config_version));
        let wf = names.as_ref().and_then(|c| c.workflow(r.workflow.as_str()));
        for u in comp.run() {
            let name = wf.and_then(|w| w.steps.get(u.step() as usize)).map(|st| st.name.to_string());
            let by_sender = name.is_some_and(|n| acked.contains(&(r.key.to_string(), n)));
            let ok = u.wait.outcome() == Some(WaitOutcome::Succeeded) && by_sender;
            c.check("compensated_only_if_every_one_was_acknowledged", ok, || {
                format!("{}/{} compensated with step {}'s compensation {:?} (acknowledged by a sender: {by_sender})", r.workflow, r.key, u.step(), u.wait.outcome())
            });
        }
    }
}

/// No forward step moves once compensation began: every later write of the generation is
/// compensating or terminal, and none was caused by a forward input.
fn no_forward_step_after_compensation_began(c: &mut Checker<'_>, s: &Seen<'_>) {
    let forward: BTreeSet<&str> =
        s.callbacks().filter(|cb| cb.body["compensation"] != true).map(|cb| cb.id.as_str()).collect();
    let mut began: BTreeSet<(String, String, u32)> = BTreeSet::new();
    for r in s.writes.iter().map(|l| &l.to) {
        let at = (r.workflow.to_string(), r.key.to_string(), r.generation);
        if !began.contains(&at) {
            if r.state == State::Compensating {
                began.insert(at);
            }
            continue;
        }
        let cause = r.history.last().and_then(|h| h.cause_id.as_deref());
        // Stranded (its execution gone) is no forward step.
        let stranded = r.state.kind() == baton_core::domain::lifecycle::Kind::Stranded;
        let ok = (r.state == State::Compensating || stranded || r.state.is_terminal())
            && !cause.is_some_and(|id| forward.contains(id));
        c.check("no_forward_step_after_compensation_began", ok, || {
            format!(
                "{}/{} generation {} was written {} by {cause:?} after its compensation began",
                r.workflow, r.key, r.generation, r.state
            )
        });
    }
}

/// A forward input that arrives while the record compensates is answered `ignored`
/// (`compensating`), and the ledger keeps it.
fn late_forward_input_during_compensation_is_ledgered(c: &mut Checker<'_>, s: &Seen<'_>) {
    let reason = IgnoreReason::Compensating;
    for a in &s.evidence.attempts {
        let Some((_, answer)) = &a.answer else { continue };
        if answer["reason"] != reason.as_str() {
            continue;
        }
        let ledgered = s
            .traces
            .get(&(a.workflow.clone(), a.key.clone()))
            .is_some_and(|t| t.ledger.iter().any(|l| l.input_id == a.id && l.reason == reason));
        c.check("late_forward_input_during_compensation_is_ledgered", ledgered, || {
            format!(
                "{} for {}/{} was answered ignored ({}) and is not in the ledger",
                a.id,
                a.workflow,
                a.key,
                reason.as_str()
            )
        });
    }
}

/// An acknowledgement (or a failure of an attempt) applies to the compensation of the step it
/// names, by name in the record's own config version, whatever version read it: a write it
/// caused changes that step's compensation and no other, in the generation it names.
fn an_acknowledgement_applies_to_the_compensation_it_names(c: &mut Checker<'_>, s: &Seen<'_>) {
    let acks: BTreeMap<&str, &serde_json::Value> = s
        .callbacks()
        .filter(|cb| cb.body["compensation"] == true)
        .map(|cb| (cb.id.as_str(), &cb.body))
        .collect();
    let mut last: BTreeMap<(String, String), &Record> = BTreeMap::new();
    for r in s.writes.iter().map(|l| &l.to) {
        let before = last.insert((r.workflow.to_string(), r.key.to_string()), r);
        let Some(id) = r.history.last().and_then(|h| h.cause_id.as_deref()) else { continue };
        let (Some(body), Some(comp)) = (acks.get(id), &r.compensation) else { continue };
        let earlier = before.filter(|b| b.generation == r.generation).and_then(|b| b.compensation.as_ref());
        let changed: Vec<u32> = comp
            .undos
            .iter()
            .filter(|u| earlier.and_then(|e| e.undo(u.step())) != Some(u))
            .map(Undo::step)
            .collect();
        let config = s.version_of(Some(&r.config_version));
        let name = |step: u32| {
            config.as_ref().and_then(|c| {
                Some(c.workflow(r.workflow.as_str())?.steps.get(step as usize)?.name.to_string())
            })
        };
        let named = body["step"].as_str();
        let generation_ok = body["generation"].as_u64().is_none_or(|g| g == u64::from(r.generation));
        let ok = generation_ok && changed.iter().all(|&step| name(step).as_deref() == named);
        c.check("an_acknowledgement_applies_to_the_compensation_it_names", ok, || {
            format!(
                "{}/{} generation {}: {id}, for the compensation of {named:?} (generation {}), changed the compensation of {:?} (version {:?})",
                r.workflow,
                r.key,
                r.generation,
                body["generation"],
                changed.iter().map(|&st| name(st).unwrap_or_else(|| st.to_string())).collect::<Vec<_>>(),
                r.config_version
            )
        });
    }
}
