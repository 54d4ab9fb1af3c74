//! Reminders of a step's task: each goes out only once claimed by a write that landed while its
//! wait was open, never before its time (counted from when Step Functions entered the step, by
//! its clock; the functions' clocks may be apart from it by the schedule's spread), and never
//! more of them than the step's `times`, each once.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::lifecycle::{Cause, Record, WaitStatus};
use baton_core::ports::store::TaskKind;

use super::{Checker, Seen};

/// The step's `remind` and `timeout` in `r`'s config version.
fn remind_of(
    s: &Seen<'_>,
    r: &Record,
    step: u32,
) -> Option<(baton_core::domain::lifecycle::Remind, time::Duration)> {
    let config = s.version_of(Some(&r.config_version))?;
    let st = config.workflow(r.workflow.as_str())?.steps.get(step as usize)?;
    Some((st.remind?, time::Duration::try_from(st.timeout).ok()?))
}

fn a_reminder_goes_out_while_its_wait_is_open_and_on_time(c: &mut Checker<'_>, s: &Seen<'_>) {
    let spread = s.stack.skews().spread();
    for p in s.published.iter().filter(|p| p.task.kind == TaskKind::Reminder) {
        let t = &p.task;
        let same = |r: &Record| r.workflow == t.workflow && r.key == t.key && r.generation == t.generation;
        // The write that claimed it, and the first that decided (or ended) the step's wait.
        let claim = s.writes.iter().find(|w| {
            same(&w.to)
                && w.to.history.last().is_some_and(|h| h.cause == Cause::Reminded)
                && w.to.wait(t.step).is_some_and(|x| x.reminded == t.reminder)
        });
        let ended = s.writes.iter().find(|w| {
            same(&w.to)
                && w.to
                    .wait(t.step)
                    .is_some_and(|x| !matches!(x.status, WaitStatus::Open | WaitStatus::TaskDue { .. }))
        });
        let Some(claim) = claim else {
            c.check("a_reminder_goes_out_while_its_wait_is_open_and_on_time", false, || {
                format!("reminder {} went out, and no write claimed it", t.id)
            });
            continue;
        };
        let open = ended.is_none_or(|e| claim.to.version < e.to.version);
        let on_time = remind_of(s, &claim.to, t.step)
            .zip(claim.to.wait(t.step).and_then(|w| w.deadline))
            .is_none_or(|((remind, timeout), deadline)| {
                let due = deadline - timeout
                    + time::Duration::try_from(remind.due_after(t.reminder)).unwrap_or(time::Duration::MAX);
                p.at + spread >= due
            });
        c.check("a_reminder_goes_out_while_its_wait_is_open_and_on_time", open && on_time, || {
            format!(
                "reminder {} went out at {} (claimed at {}; open when claimed: {open}, on time: {on_time})",
                t.id, p.at, claim.at
            )
        });
    }
}

fn never_more_reminders_than_times(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut counts: BTreeMap<(String, String, u32, u32), BTreeSet<u32>> = BTreeMap::new();
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    for t in s.published.iter().map(|p| &p.task).filter(|t| t.kind == TaskKind::Reminder) {
        *copies.entry(t.id.as_str()).or_default() += 1;
        counts
            .entry((t.workflow.to_string(), t.key.to_string(), t.generation, t.step))
            .or_default()
            .insert(t.reminder);
    }
    for ((workflow, key, generation, step), sent) in counts {
        let record = s.records.iter().find(|r| r.workflow.as_str() == workflow && r.key.as_str() == key);
        let Some((remind, _)) = record.and_then(|r| remind_of(s, r, step)) else { continue };
        let within = sent.iter().all(|n| (1..=remind.times).contains(n));
        c.check("never_more_reminders_than_times", within, || {
            format!("{workflow}/{key} generation {generation} step {step} sent reminders {sent:?}, at most {} declared", remind.times)
        });
    }
    for (id, n) in copies {
        c.check("never_more_reminders_than_times", n == 1, || format!("reminder {id} went out {n} times"));
    }
}

pub(super) fn all(c: &mut Checker<'_>, s: &Seen<'_>) {
    a_reminder_goes_out_while_its_wait_is_open_and_on_time(c, s);
    never_more_reminders_than_times(c, s);
}
