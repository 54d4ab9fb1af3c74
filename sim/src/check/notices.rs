//! What the sweeper publishes while a step waits, reminders of its task and escalation levels:
//! each goes out only once claimed by a write that landed while its wait was open, never before
//! its time (counted from when Step Functions entered the step, by its clock; the functions'
//! clocks may be apart from it by the schedule's spread), each once; never more reminders than
//! the step's `times`; escalation levels in order.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::lifecycle::{Cause, Notice, Record, WaitStatus};
use baton_core::ports::store::{Task, TaskKind};

use super::{Checker, Seen};

/// The step's notices and `timeout` in `r`'s config version.
fn notices_of(
    s: &Seen<'_>,
    r: &Record,
    step: u32,
) -> Option<(Vec<(std::time::Duration, Notice)>, time::Duration)> {
    let config = s.version_of(Some(&r.config_version))?;
    let wf = config.workflow(r.workflow.as_str())?;
    let timeout = time::Duration::try_from(wf.steps.get(step as usize)?.timeout).ok()?;
    Some((wf.plan().step(step)?.notices(), timeout))
}

fn notice(t: &Task) -> Option<Notice> {
    match t.kind {
        TaskKind::Reminder => Some(Notice::Reminder(t.notice)),
        TaskKind::Escalation => Some(Notice::Escalation(t.notice)),
        TaskKind::Step | TaskKind::Compensation => None,
    }
}

fn a_notice_goes_out_while_its_wait_is_open_and_on_time(c: &mut Checker<'_>, s: &Seen<'_>) {
    let spread = s.stack.skews().spread();
    for p in s.published.iter() {
        let t = &p.task;
        let Some(n) = notice(t) else { continue };
        let same = |r: &Record| r.workflow == t.workflow && r.key == t.key && r.generation == t.generation;
        let Some(first) = s.writes.iter().find(|w| same(&w.to)) else { continue };
        let Some((schedule, timeout)) = notices_of(s, &first.to, t.step) else { continue };
        let Some(index) = schedule.iter().position(|(_, x)| *x == n) else {
            c.check("a_notice_goes_out_while_its_wait_is_open_and_on_time", false, || {
                format!("{} went out, and its step declares no such notice", t.id)
            });
            continue;
        };
        // The write that claimed it (the first that put it behind the wait), and the first that
        // decided (or ended) the step's wait.
        let claim = s.writes.iter().find(|w| {
            same(&w.to)
                && w.to.history.last().is_some_and(|h| h.cause == Cause::Notified)
                && w.to.wait(t.step).is_some_and(|x| x.notified as usize > index)
        });
        let ended = s.writes.iter().find(|w| {
            same(&w.to)
                && w.to
                    .wait(t.step)
                    .is_some_and(|x| !matches!(x.status, WaitStatus::Open | WaitStatus::TaskDue { .. }))
        });
        let Some(claim) = claim else {
            c.check("a_notice_goes_out_while_its_wait_is_open_and_on_time", false, || {
                format!("{} went out, and no write claimed it", t.id)
            });
            continue;
        };
        let open = ended.is_none_or(|e| claim.to.version < e.to.version);
        let on_time = claim.to.wait(t.step).and_then(|w| w.deadline).is_none_or(|deadline| {
            let after = time::Duration::try_from(schedule[index].0).unwrap_or(time::Duration::MAX);
            p.at + spread >= deadline - timeout + after
        });
        c.check("a_notice_goes_out_while_its_wait_is_open_and_on_time", open && on_time, || {
            format!(
                "{} went out at {} (claimed at {}; open when claimed: {open}, on time: {on_time})",
                t.id, p.at, claim.at
            )
        });
    }
}

fn never_more_reminders_than_times(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut counts: BTreeMap<(String, String, u32, u32), BTreeSet<u32>> = BTreeMap::new();
    for t in s.published.iter().map(|p| &p.task).filter(|t| t.kind == TaskKind::Reminder) {
        counts
            .entry((t.workflow.to_string(), t.key.to_string(), t.generation, t.step))
            .or_default()
            .insert(t.notice);
    }
    for ((workflow, key, generation, step), sent) in counts {
        let record = s.records.iter().find(|r| r.workflow.as_str() == workflow && r.key.as_str() == key);
        // Read from the config itself, not from the lifecycle's schedule (which a planted bug may
        // have grown).
        let declared = record.and_then(|r| {
            let config = s.version_of(Some(&r.config_version))?;
            config.workflow(r.workflow.as_str())?.steps.get(step as usize)?.remind
        });
        let Some(times) = declared.map(|r| r.times as usize) else { continue };
        let within = sent.iter().all(|n| (1..=times).contains(&(*n as usize)));
        c.check("never_more_reminders_than_times", within, || {
            format!("{workflow}/{key} generation {generation} step {step} sent reminders {sent:?}, at most {times} declared")
        });
    }
}

/// Each reminder and each escalation level goes out once, and the levels of one wait in order.
fn each_notice_once_and_levels_in_order(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    let mut levels: BTreeMap<(String, String, u32, u32), Vec<u32>> = BTreeMap::new();
    for t in s.published.iter().map(|p| &p.task) {
        if notice(t).is_some() {
            *copies.entry(t.id.as_str()).or_default() += 1;
        }
        if t.kind == TaskKind::Escalation {
            levels
                .entry((t.workflow.to_string(), t.key.to_string(), t.generation, t.step))
                .or_default()
                .push(t.notice);
        }
    }
    for (id, n) in copies {
        c.check("each_notice_once_and_levels_in_order", n == 1, || format!("{id} went out {n} times"));
    }
    for ((workflow, key, generation, step), sent) in levels {
        c.check("each_notice_once_and_levels_in_order", sent.windows(2).all(|w| w[0] < w[1]), || {
            format!("{workflow}/{key} generation {generation} step {step} escalated to levels {sent:?}, in that order")
        });
    }
}

pub(super) fn all(c: &mut Checker<'_>, s: &Seen<'_>) {
    a_notice_goes_out_while_its_wait_is_open_and_on_time(c, s);
    never_more_reminders_than_times(c, s);
    each_notice_once_and_levels_in_order(c, s);
}
