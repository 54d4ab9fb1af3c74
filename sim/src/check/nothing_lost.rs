//! Nothing is lost (DESIGN §4.6): every input ends applied, buffered, a named duplicate,
//! ignored with a reason or rejected with a clear error, and an operator can see which.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::lifecycle::Input;
use baton_core::ports::dead_letters::REASON_ATTRIBUTE;
use baton_core::ports::store::InboxStatus;
use baton_core::use_cases::intake::plan_event;

use super::pinning::Versions;
use super::{Checker, Seen};
use crate::store::Landed;
use crate::workload::event_id;

/// Whether the input `id` for `workflow`/`key` has a classification an operator can see: in
/// the record, settled in an inbox, in the ledger, or the cause of a landed write.
fn classified(s: &Seen<'_>, workflow: &str, key: &str, id: &str) -> bool {
    let Some(t) = s.traces.get(&(workflow.to_owned(), key.to_owned())) else { return false };
    t.record.as_ref().is_some_and(|r| {
        r.history.iter().any(|a| a.cause_id.as_deref() == Some(id))
            || r.applied.iter().any(|a| a.id.as_str() == id)
            || r.start_events.iter().any(|e| e.as_str() == id)
    }) || t.inbox.iter().any(|e| e.id.as_str() == id && e.status != InboxStatus::Buffered)
        || t.ledger.iter().any(|l| l.input_id == id)
        || s.writes_of(workflow, key)
            .any(|(_, w)| w.to.history.last().is_some_and(|a| a.cause_id.as_deref() == Some(id)))
}

/// The name of step `index` of `workflow` in config `version`.
fn step_name(s: &Seen<'_>, version: Option<&String>, workflow: &str, index: u64) -> Option<String> {
    let config = s.version_of(version)?;
    Some(config.workflow(workflow)?.steps.get(usize::try_from(index).ok()?)?.name.to_string())
}

/// Whether the input `id` is classified for the step named `name`: settled in its inbox,
/// ledgered, applied to that step (indices resolved in the version each was written under), or
/// applied under its id in a run before the record's last.
fn classified_for_step(
    s: &Seen<'_>,
    versions: &Versions,
    (workflow, key): (&str, &str),
    id: &str,
    name: &str,
) -> bool {
    let Some(t) = s.traces.get(&(workflow.to_owned(), key.to_owned())) else { return false };
    let settled = t.inbox.iter().any(|e| e.id.as_str() == id && e.step_name == name && e.status.is_final());
    // A ledger line is kept per (reason, input id), as the product keys it: the copies for two
    // steps ignored for one reason share it.
    let ledgered = t.ledger.iter().any(|l| l.input_id == id);
    let applied = s.writes_of(workflow, key).any(|(_, w)| {
        w.to.applied.iter().any(|a| {
            let g = a.generation;
            let version = versions.get(&(workflow.to_owned(), key.to_owned(), g));
            a.id.as_str() == id && step_name(s, version, workflow, u64::from(a.step)).as_deref() == Some(name)
        })
    });
    // Applied under its id in a generation before the record's last: a copy delivered in a later
    // run is a duplicate of that event (steps may be numbered otherwise there), never applied to
    // the new run.
    let earlier_run = t
        .record
        .as_ref()
        .is_some_and(|r| r.applied.iter().any(|a| a.id.as_str() == id && a.generation < r.generation));
    settled || ledgered || applied || earlier_run
}

/// Every callback that got an answer ends with a classification an operator can see, or was
/// refused (a 4xx other than 409; a 409 leaves a ledger line).
pub(super) fn every_callback_is_classified(c: &mut Checker<'_>, s: &Seen<'_>) {
    for a in &s.evidence.attempts {
        if s.cursed == Some(a.key.as_str()) || a.answer.is_none() {
            continue;
        }
        let rejected_traced = a.answer.as_ref().is_some_and(|(status, _)| *status == 409) && a.facts.ledger;
        c.check(
            "every_callback_is_classified",
            classified(s, &a.workflow, &a.key, &a.id)
                || rejected_traced
                || a.answer.as_ref().is_some_and(|(status, _)| *status >= 400 && *status != 409),
            || {
                format!(
                    "callback {} to {}/{} ({}) ends with no classification an operator can see",
                    a.id, a.workflow, a.key, a.step
                )
            },
        );
    }
}

/// Every input of every event sent ends with a classification an operator can see, for its own
/// step by name (an event two steps accept is applied, buffered or ledgered for each, never
/// dropped for one as a duplicate of the other), or was dead-lettered with its reason (or
/// without, where baton could not give one).
pub(super) fn every_event_is_classified_for_its_step(c: &mut Checker<'_>, s: &Seen<'_>, versions: &Versions) {
    let dead = s.dead();
    for e in s.plan.all_events() {
        let Ok(parsed) = plan_event(&s.stack.config, &e.body) else { continue };
        for (wf, key, input) in &parsed.inputs {
            if s.cursed == Some(key.as_str()) {
                continue;
            }
            let id = input.id().map(ToString::to_string).unwrap_or_default();
            // Dead-lettered with its reason, or without one where baton could not give it
            // (`dead_letters::excused`): an operator sees it there.
            let in_dlq = dead.iter().any(|m| {
                m.body == e.body
                    && (m.attributes.contains_key(REASON_ATTRIBUTE) || super::dead_letters::excused(s, m))
            });
            let at = (wf.name.as_str(), key.as_str());
            let for_its_step = match input {
                Input::StepInput { step, .. } => wf
                    .steps
                    .get(*step as usize)
                    .is_none_or(|step| classified_for_step(s, versions, at, &id, step.name.as_str())),
                _ => true,
            };
            c.check(
                "every_event_is_classified_for_its_step",
                (classified(s, wf.name.as_str(), key.as_str(), &id) && for_its_step) || in_dlq,
                || {
                    let step = match input {
                        Input::StepInput { step, .. } => format!("step {step}"),
                        _ => "start".into(),
                    };
                    format!(
                        "event {id} for {}/{key} ({step}) ends with no classification an operator can see",
                        wf.name
                    )
                },
            );
        }
    }
}

/// A rejected input leaves a trace an operator can find: an event reusing an id with another
/// payload is dead-lettered with its reason, or ledgered.
pub(super) fn a_rejected_input_leaves_a_trace(c: &mut Checker<'_>, s: &Seen<'_>) {
    let dead = s.dead();
    let mut bodies: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for e in s.plan.all_events() {
        if let Some(id) = event_id(&e.body) {
            bodies.entry(id.to_string()).or_default().push(&e.body);
        }
    }
    for (id, list) in &bodies {
        let distinct: BTreeSet<&&str> = list.iter().collect();
        if distinct.len() < 2 {
            continue;
        }
        // Refused (`idempotency_key_reused`), or ignored for another reason (the record had
        // ended): either way in the ledger, or dead-lettered with a reason.
        let traced = dead
            .iter()
            .any(|m| list.contains(&m.body.as_str()) && m.attributes.contains_key(REASON_ATTRIBUTE))
            || s.traces.values().any(|t| t.ledger.iter().any(|l| l.input_id == *id));
        let applied_everywhere =
            s.plan.cursed.as_ref().is_some_and(|k| list[0].contains(&format!("\"subject\":\"{k}\"")));
        c.check("a_rejected_input_leaves_a_trace", traced || applied_everywhere || !evidence_reached(&s.writes, id), || {
            let ledger: Vec<String> = s.traces.values().flat_map(|t| t.ledger.iter().map(|l| format!("{}:{}", l.input_id, l.reason.as_str()))).collect();
            let inbox: Vec<String> = s.traces.values().flat_map(|t| t.inbox.iter().map(|e| format!("{}:{}", e.id, e.status.as_str()))).collect();
            format!("event {id} was sent with {} different payloads, and the refused one left no trace (ledger {ledger:?}, inbox {inbox:?})", distinct.len())
        });
    }
}

/// Did any input with this id reach a record?
fn evidence_reached(writes: &[Landed], id: &str) -> bool {
    writes.iter().any(|w| w.to.history.last().is_some_and(|a| a.cause_id.as_deref() == Some(id)))
}
