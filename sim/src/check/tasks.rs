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
/// noop line left owed is lost.
pub(super) fn every_waiting_step_gets_its_task(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    tasks: &BTreeMap<String, Vec<&Published>>,
    (settled_by, waiting_at_calm): (OffsetDateTime, &[Record]),
) {
    // (Within one visibility timeout: once whatever left it owed has come round again.) A step
    // answered or ended before then needs no task: its work is over.
    for r in waiting_at_calm {
        let State::Waiting { step } = r.state else { continue };
        if s.cursed == Some(r.key.as_str()) {
            continue;
        }
        let left_at = s
            .writes
            .iter()
            .filter(|w| {
                w.to.workflow == r.workflow
                    && w.to.key == r.key
                    && w.from == Some(r.state)
                    && w.from_generation == Some(r.generation)
            })
            .find(|w| w.to.state != r.state)
            .map(|w| w.at);
        if left_at.is_some_and(|t| t <= settled_by) {
            continue;
        }
        let Some(config) = s.version_of(r.config_version.as_ref()) else { continue };
        let Some(wf) = config.workflow(r.workflow.as_str()) else { continue };
        let Some(spec) = wf.steps.get(step as usize) else { continue };
        if spec.task.is_none() {
            continue;
        }
        // A retried step: the attempt running, or (while the next waits out its backoff) the
        // one before or any later one. (A sender may fail an attempt by name before its task went
        // out: the next one's task stands for it.)
        let attempt = if r.next_attempt_at.is_some() { r.attempt() - 1 } else { r.attempt() };
        let id =
            Task::task_id(&r.workflow, &r.key, r.generation, spec.name.as_str(), attempt, TaskKind::Step);
        let published = tasks.values().flatten().any(|p| {
            let t = &p.task;
            t.workflow == r.workflow
                && t.key == r.key
                && (t.generation, t.step) == (r.generation, step)
                && t.attempt >= attempt
        });
        c.check("every_waiting_step_gets_its_task", published, || {
            format!("{id}: the step was waiting when the faults stopped, and its task was never published")
        });
    }
}
