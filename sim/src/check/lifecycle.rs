//! The record's lifecycle: a terminal record never changes, and each step advances at most
//! once.

use std::collections::BTreeMap;

use baton_core::domain::lifecycle::State;

use super::{Checker, Seen};
use crate::store::Landed;

/// A terminal record never changes state (DESIGN §4.5): the only write from a terminal state
/// opens the next generation.
pub(super) fn terminal_record_never_changes(c: &mut Checker<'_>, s: &Seen<'_>) {
    for w in s.writes.iter() {
        if let (Some(from), Some(g)) = (w.from, w.from_generation) {
            c.check("terminal_record_never_changes", !from.is_terminal() || w.to.generation == g + 1, || {
                format!(
                    "terminal record {}/{} (generation {g}, {from}) changed to {} in the same generation",
                    w.to.workflow, w.to.key, w.to.state
                )
            });
        }
    }
}

/// Each step of a generation advances at most once (DESIGN §4.4), whatever was delivered twice,
/// retried or replayed.
pub(super) fn each_step_advances_at_most_once(c: &mut Checker<'_>, s: &Seen<'_>) {
    for violation in steps_advanced_twice(&s.writes) {
        c.check("each_step_advances_at_most_once", false, || violation);
    }
}

/// Each step of a generation advances at most once: one landed write from waiting on it to
/// advancing past it. The violations, if any.
fn steps_advanced_twice(writes: &[Landed]) -> Vec<String> {
    let mut advanced: BTreeMap<(String, String, u32, u32), usize> = BTreeMap::new();
    for w in writes {
        if let (Some(State::Waiting { step: from }), State::Advancing { step }) = (w.from, w.to.state)
            && from == step
            && w.from_generation == Some(w.to.generation)
        {
            let at = (w.to.workflow.to_string(), w.to.key.to_string(), w.to.generation, step);
            *advanced.entry(at).or_default() += 1;
        }
    }
    advanced
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((workflow, key, generation, step), n)| {
            format!("{workflow}/{key} generation {generation}: step {step} advanced {n} times")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use baton_core::domain::ids::{CorrelationKey, EventId, WorkflowName};
    use baton_core::domain::lifecycle::{Input, OnRestart, Plan, decide};

    use super::*;

    #[test]
    fn a_step_advanced_twice_is_a_violation_and_once_is_not() {
        let plan = Plan {
            steps: vec![Default::default(), Default::default()],
            on_restart: OnRestart::AfterTerminal,
            version: String::new(),
        };
        let (w, k) = (WorkflowName::parse("wf").unwrap(), CorrelationKey::parse("k").unwrap());
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let start = Input::start(EventId::parse("e").unwrap());
        let mut record = decide(&plan, (&w, &k), None, &start, now).write.unwrap().to;
        record.state = State::Advancing { step: 0 };
        let advance = Landed {
            at: now,
            from: Some(State::Waiting { step: 0 }),
            from_generation: Some(1),
            to: record.into(),
        };
        assert!(steps_advanced_twice(std::slice::from_ref(&advance)).is_empty());
        let twice = steps_advanced_twice(&[advance.clone(), advance]);
        assert_eq!(twice, vec!["wf/k generation 1: step 0 advanced 2 times".to_owned()]);
    }
}
