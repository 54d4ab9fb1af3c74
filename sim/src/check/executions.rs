//! Executions and generations: one execution per (workflow, key, generation), each generation
//! opened by a start event of its own.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::config::Workflow;
use baton_core::domain::lifecycle::Cause;

use super::{Checker, PREFIX_EXEC, Seen};
use crate::workload::event_id;

/// A start event seen again never opens another generation (DESIGN §4.2): each generation was
/// opened (a landed start or restart write) by an event of its own.
pub(super) fn one_generation_per_start_event(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut opened_by: BTreeMap<(String, String, String), BTreeSet<u32>> = BTreeMap::new();
    for w in s.writes.iter() {
        if let Some(a) = w.to.history.last().filter(|a| matches!(a.cause, Cause::Start | Cause::Restart))
            && let Some(id) = &a.cause_id
        {
            let at = (w.to.workflow.to_string(), w.to.key.to_string(), id.to_string());
            opened_by.entry(at).or_default().insert(w.to.generation);
        }
    }
    for ((workflow, key, id), generations) in &opened_by {
        c.check("one_generation_per_start_event", generations.len() == 1, || {
            format!("{workflow}/{key}: start event {id} opened generations {generations:?}")
        });
    }
}

/// The generations Step Functions started an execution for, for `key` of `wf`, and the ARN
/// prefix of those executions.
fn started_generations(s: &Seen<'_>, wf: &Workflow, key: &str) -> (String, BTreeSet<u32>) {
    let prefix = format!("{PREFIX_EXEC}{}:{}-{key}-g", wf.name, wf.name);
    let generations = s
        .model
        .starts
        .iter()
        .filter_map(|(arn, _)| arn.strip_prefix(&prefix).and_then(|g| g.parse().ok()))
        .collect();
    (prefix, generations)
}

/// At most one execution per (workflow, key, generation) (DESIGN §4.2): as many starts as
/// generations started.
pub(super) fn one_execution_per_generation(c: &mut Checker<'_>, s: &Seen<'_>, wf: &Workflow, key: &str) {
    let (prefix, generations) = started_generations(s, wf, key);
    let starts = s.model.starts.iter().filter(|(arn, _)| arn.starts_with(&prefix)).count();
    c.check("one_execution_per_generation", starts == generations.len(), || {
        format!("{}/{key}: {starts} starts for {} generations", wf.name, generations.len())
    });
}

/// No generation without a start event of its own: no execution runs a generation past the
/// number of distinct start events sent for its key.
pub(super) fn no_generation_without_its_start_event(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    wf: &Workflow,
    key: &str,
) {
    let (_, generations) = started_generations(s, wf, key);
    let distinct_start_events = s
        .plan
        .all_events()
        .filter(|e| e.body.contains("\"order.placed\"") && e.body.contains(&format!("\"subject\":\"{key}\"")))
        .filter_map(|e| event_id(&e.body))
        .collect::<BTreeSet<_>>()
        .len();
    let max = generations.iter().max().copied().unwrap_or(0) as usize;
    c.check("no_generation_without_its_start_event", max <= distinct_start_events, || {
        format!("{}/{key}: generation {max} started, but only {distinct_start_events} distinct start event(s) were sent", wf.name)
    });
}

/// A transient failure of Step Functions' own send to SQS (a step's `step_ready`, a final
/// report, an optional branch's report, an `undo_ready`) never fails the execution: the task
/// state's `Retry` sends it again. Without one, a wait's Catch takes the blip for the step's
/// failure (the run ends failed, or compensates), and a report state, which has no Catch, fails
/// the execution with no report, so its record waits for one forever.
pub(super) fn a_transient_send_failure_is_retried(c: &mut Checker<'_>, s: &Seen<'_>) {
    for f in &s.model.sends_failed {
        c.check("a_transient_send_failure_is_retried", f.retried, || {
            let ended = s.model.executions.get(&f.arn).map(|e| (e.status.clone(), e.failure.clone()));
            format!(
                "execution {}: the send of state {:?} failed at {} ({}) and no Retry took it; the execution then: {ended:?}",
                f.arn,
                f.state,
                f.at,
                crate::sfn::SEND_FAILED_ERROR
            )
        });
    }
}
