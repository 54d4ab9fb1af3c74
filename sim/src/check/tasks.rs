//! Operator tasks: one per (workflow, key, generation, step), always the same, and every step
//! still waiting once the faults stop gets its own.

use std::collections::BTreeMap;

use baton_core::domain::lifecycle::{Record, State};
use baton_core::ports::store::{Task, TaskKind};
use time::OffsetDateTime;

use super::{Checker, Seen};
use crate::store::Published;

/// Every task published, by task id: each copy of it, in the order published.
pub(super) fn by_id(published: &[Published]) -> BTreeMap<String, Vec<&Published>> {
    let mut tasks: BTreeMap<String, Vec<&Published>> = BTreeMap::new();
    for p in published {
        tasks.entry(p.task.id.clone()).or_default().push(p);
    }
    tasks
}

/// One operator task per (workflow, key, generation, step) (DESIGN §4.3), whatever
/// redelivery does: every copy published under one task id has the same contents.
pub(super) fn one_task_per_step(c: &mut Checker<'_>, tasks: &BTreeMap<String, Vec<&Published>>) {
    for (id, copies) in tasks {
        let first = &copies[0].task;
        c.check(
            "one_task_per_step",
            copies.iter().all(|p| {
                p.task.title == first.title && p.task.queue == first.queue && p.task.step == first.step
            }),
            || format!("task {id} was published with different contents"),
        );
    }
}

/// Once the faults stop and the operator has replayed the DLQs, every step that still waits
/// gets its task within one visibility timeout: nothing a crash, a dead letter or a removed
/// noop line left owed is lost. Exactly its attempt's: the task of the attempt running (or, in
/// a backoff, of the next one, unless that is due only past the deadline), for the record's
/// step or for each open branch of its group that Step Functions reached.
pub(super) fn every_waiting_step_gets_its_task(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    tasks: &BTreeMap<String, Vec<&Published>>,
    (settled_by, waiting_at_calm): (OffsetDateTime, &[Record]),
) {
    for r in waiting_at_calm {
        if s.cursed == Some(r.key.as_str()) {
            continue;
        }
        let Some(config) = s.version_of(Some(&r.config_version)) else { continue };
        let Some(wf) = config.workflow(r.workflow.as_str()) else { continue };
        let waiting: Vec<(u32, u32, Option<OffsetDateTime>, Option<OffsetDateTime>)> = match r.state {
            State::Waiting { .. } => r
                .waits
                .iter()
                .filter(|b| r.waits_at(b.step))
                .map(|b| (b.step, b.attempt(), b.task_due(), b.deadline))
                .collect(),
            _ => continue,
        };
        for (step, attempt, next_at, deadline) in waiting {
            if wf.steps.get(step as usize).is_none_or(|spec| spec.task.is_none()) {
                continue;
            }
            // (Within one visibility timeout: once whatever left it owed has come round again.)
            // A step answered or ended before then needs no task: its work is over.
            let left_at = s
                .writes
                .iter()
                .filter(|w| {
                    w.to.workflow == r.workflow
                        && w.to.key == r.key
                        && w.to.version > r.version
                        && (w.to.generation != r.generation || !w.to.waits_at(step))
                })
                .map(|w| w.at)
                .next();
            if left_at.is_some_and(|t| t <= settled_by) {
                continue;
            }
            // A next attempt due only at or past the step's deadline never goes out.
            if next_at.zip(deadline).is_some_and(|(due, end)| due >= end) {
                continue;
            }
            let name = wf.steps[step as usize].name.as_str();
            let id = Task::task_id(&r.workflow, &r.key, r.generation, name, attempt, TaskKind::Step);
            c.check("every_waiting_step_gets_its_task", tasks.contains_key(&id), || {
                format!(
                    "{id}: the step was waiting when the faults stopped, and its task was never published"
                )
            });
        }
    }
}
