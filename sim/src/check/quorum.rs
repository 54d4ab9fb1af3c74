//! Steps whose `requires` asks for any or N of a list: a step completes only once its rule is
//! met, each distinct input of the list counted once and a null not at all. Counted here from
//! the landed record, apart from the lifecycle's own count. (That it completes at most once is
//! `each_step_advances_at_most_once`.)

use super::{Checker, Seen};

pub(super) fn quorum_met_before_the_step_completes(c: &mut Checker<'_>, s: &Seen<'_>) {
    for (w, step) in super::completions(s) {
        let r = &w.to;
        let Some(config) = s.version_of(Some(&r.config_version)) else { continue };
        let Some(rule) = config
            .workflow(r.workflow.as_str())
            .and_then(|wf| wf.steps.get(step as usize))
            .map(|s| &s.requires)
        else {
            continue;
        };
        if rule.is_all() {
            continue;
        }
        let Some(wait) = r.wait(step) else { continue };
        // The list's names are unique (`baton validate` refuses a name listed twice).
        let present: Vec<&str> = rule
            .of
            .iter()
            .filter(|n| wait.inputs.get(*n).is_some_and(|v| !v.is_null()))
            .map(String::as_str)
            .collect();
        c.check("quorum_met_before_the_step_completes", present.len() >= rule.at_least, || {
            format!(
                "{}/{} generation {} step {step} completed with {present:?}, short of {rule}",
                r.workflow, r.key, r.generation
            )
        });
    }
}
