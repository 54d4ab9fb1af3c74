//! Version pinning: a record is decided on the config version its generation runs, whatever was
//! deployed since. Every landed write's step is a step of its version, a generation changes
//! version only at its first step (to the one its execution runs), and every task published is
//! its version's task for that step, named and titled as that version defines it.

use std::collections::BTreeMap;

use baton_core::domain::lifecycle::State;

use baton_core::ports::store::TaskKind;

use super::{Checker, Seen};
use crate::store::Landed;

/// The config version each (workflow, key, generation) runs, as its landed writes say.
pub(super) type Versions = BTreeMap<(String, String, u32), String>;

/// Every landed write names a config version that was deployed.
pub(super) fn written_with_a_deployed_version(c: &mut Checker<'_>, s: &Seen<'_>, w: &Landed) {
    let r = &w.to;
    if s.version_of(Some(&r.config_version)).is_none() {
        c.check("written_with_a_deployed_version", false, || {
            format!(
                "{}/{} was written with config version {:?}, never deployed",
                r.workflow, r.key, r.config_version
            )
        });
    }
}

/// A landed write's step is a step of its config version.
pub(super) fn step_within_its_version(c: &mut Checker<'_>, s: &Seen<'_>, w: &Landed) {
    let r = &w.to;
    let Some(config) = s.version_of(Some(&r.config_version)) else { return };
    let steps = config.workflow(r.workflow.as_str()).map_or(0, |wf| wf.steps.len());
    c.check("step_within_its_version", r.state.step().is_none_or(|step| (step as usize) < steps), || {
        format!(
            "{}/{} moved to {}, past the {steps} step(s) of its config version {}",
            r.workflow, r.key, r.state, config.version
        )
    });
}

/// A generation keeps its config version: it changes only at its first step, to the version
/// its execution runs. `versions` holds each generation's version so far, and is updated.
pub(super) fn generation_keeps_its_version(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    w: &Landed,
    versions: &mut Versions,
) {
    let r = &w.to;
    let Some(config) = s.version_of(Some(&r.config_version)) else { return };
    let first = versions
        .entry((r.workflow.to_string(), r.key.to_string(), r.generation))
        .or_insert_with(|| config.version.clone());
    // The one change allowed: the first step's report confirms the version the execution runs
    // (a start that crossed a deploy), before any step happened.
    if w.from == Some(State::Pending) && r.state == (State::Waiting { step: 0 }) {
        *first = config.version.clone();
    }
    c.check("generation_keeps_its_version", *first == config.version, || {
        format!(
            "{}/{} generation {} changed config version {first} -> {}",
            r.workflow, r.key, r.generation, config.version
        )
    });
}

/// Every task published is its generation's version's task for that step, named and titled as
/// that version defines it.
pub(super) fn task_is_its_versions_step(c: &mut Checker<'_>, s: &Seen<'_>, versions: &Versions) {
    for p in s.published.iter() {
        let t = &p.task;
        let at = (t.workflow.to_string(), t.key.to_string(), t.generation);
        let Some(config) = versions.get(&at).and_then(|v| s.version_of(Some(v))) else { continue };
        let Some(wf) = config.workflow(t.workflow.as_str()) else { continue };
        let spec = wf.steps.get(t.step as usize);
        let expected = spec.and_then(|spec| {
            // A compensation's task is its version's `compensate.task`.
            let template = match t.kind {
                TaskKind::Step | TaskKind::Reminder => spec.task.as_ref()?,
                TaskKind::Escalation => &spec.escalate.get(t.notice.checked_sub(1)? as usize)?.task,
                TaskKind::Compensation => &spec.compensate.as_ref()?.task,
            };
            let title =
                template.render(t.workflow.as_str(), t.key.as_str(), spec.name.as_str(), t.generation);
            Some((spec.name.to_string(), title))
        });
        c.check(
            "task_is_its_versions_step",
            expected.as_ref() == Some(&(t.step_name.clone(), t.title.clone())),
            || {
                format!(
                    "task {} ({} {:?}) is not step {} of config version {}: {expected:?}",
                    t.id, t.step_name, t.title, t.step, wf.config_version
                )
            },
        );
    }
}
