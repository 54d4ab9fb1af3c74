//! Parallel groups: each branch that opened ends with one outcome; an optional branch never
//! fails its group, and `degraded` says exactly that one did not succeed; nothing is applied to
//! a branch once its group failed; a branch's input moves no sibling. Read from the landed
//! writes, one record's in order, and from Step Functions' own resume log.

use std::collections::BTreeMap;

use baton_core::domain::lifecycle::{Cause, Plan, Record, State, Wait, WaitOutcome, group_failed};

use super::{Checker, Seen, execution_arn};

/// The plan of the config version `r` runs.
fn plan_of(s: &Seen<'_>, r: &Record) -> Option<Plan> {
    let config = s.version_of(Some(&r.config_version))?;
    Some(config.workflow(r.workflow.as_str())?.plan())
}

fn branch(r: &Record, step: u32) -> Option<&Wait> {
    r.branches().find(|b| b.step == step)
}

/// Consecutive landed writes of one record at one parallel group, in the order they landed:
/// (before, after).
fn group_steps<'s>(s: &'s Seen<'_>) -> Vec<(&'s Record, &'s Record)> {
    let mut last: BTreeMap<(String, String), &Record> = BTreeMap::new();
    let mut pairs = Vec::new();
    for w in s.writes.iter() {
        let at = (w.to.workflow.to_string(), w.to.key.to_string());
        if let Some(before) = last.get(&at) {
            let same_group = before.generation == w.to.generation
                && before.at_group()
                && before.branches().next().map(|b| b.step) == w.to.branches().next().map(|b| b.step);
            if same_group {
                pairs.push((*before, &*w.to));
            }
        }
        last.insert(at, &w.to);
    }
    pairs
}

/// Every branch of a group that opened ends with exactly one outcome: once it has one, later
/// writes keep it (but for an optional branch baton took for a success Step Functions never got,
/// which its own timeout report corrects once), and a record that ended at a group has none
/// still open.
pub(super) fn every_opened_branch_ends_with_one_outcome(c: &mut Checker<'_>, s: &Seen<'_>) {
    for (before, after) in group_steps(s) {
        for b in before.branches() {
            let Some(was) = b.outcome() else { continue };
            let now = branch(after, b.step).and_then(Wait::outcome);
            let corrected = matches!(was, WaitOutcome::Succeeded | WaitOutcome::Failed)
                && b.unsure()
                && matches!(now, Some(WaitOutcome::TimedOut | WaitOutcome::Failed));
            c.check("every_opened_branch_ends_with_one_outcome", now == Some(was) || corrected, || {
                format!(
                    "{}/{} generation {}: branch {} went from {was:?} to {now:?} (v{} -> v{})",
                    after.workflow, after.key, after.generation, b.step, before.version, after.version
                )
            });
        }
    }
    for r in s.records.iter().filter(|r| r.state.is_terminal()) {
        for b in r.branches() {
            c.check("every_opened_branch_ends_with_one_outcome", !b.is_open(), || {
                format!("{}/{} ended {} with branch {} still open", r.workflow, r.key, r.state, b.step)
            });
        }
    }
}

/// Step Functions takes at most one resume for each branch's token (read from its own log).
pub(super) fn each_branch_token_resumed_at_most_once(c: &mut Checker<'_>, s: &Seen<'_>) {
    let branch_states: Vec<String> = s
        .stack
        .config
        .workflows
        .iter()
        .flat_map(|w| {
            w.groups.iter().flat_map(|g| (g.first..=g.last).map(|i| w.steps[i as usize].name.to_string()))
        })
        .collect();
    let mut accepted: BTreeMap<&str, usize> = BTreeMap::new();
    for r in s.model.resumes.iter().filter(|r| r.accepted) {
        let state = s.model.tokens.get(&r.token).map(|(_, state, _)| state.as_str());
        if state.is_some_and(|st| branch_states.iter().any(|b| b == st)) {
            *accepted.entry(r.token.as_str()).or_default() += 1;
        }
    }
    for (token, n) in accepted {
        c.check("each_branch_token_resumed_at_most_once", n <= 1, || {
            format!("branch token {token} had {n} resumes accepted")
        });
    }
}

/// An optional branch's failure never fails its group: a group that failed (its record moved
/// on by a branch's failure, or ended failed or timed out while at the group) had a required
/// branch fail or time out.
pub(super) fn optional_branch_never_fails_its_group(c: &mut Checker<'_>, s: &Seen<'_>) {
    for w in s.writes.iter() {
        let r = &w.to;
        let failed_group = match r.state {
            State::Advancing { .. } => r.history.last().is_some_and(|a| a.cause == Cause::FailStep),
            State::Failed | State::TimedOut => true,
            _ => false,
        };
        if !failed_group || !r.at_group() || w.from.is_some_and(State::is_terminal) {
            continue;
        }
        let Some(plan) = plan_of(s, r) else { continue };
        // An execution that reached the step after the group ended there, not in the group (the
        // record, not told yet, was still at the group when the end was reported).
        let next = r.branches().next().and_then(|b| plan.next_position(b.step));
        let config = s.version_of(Some(&r.config_version));
        let next_name = next.and_then(|i| {
            Some(config.as_ref()?.workflow(r.workflow.as_str())?.steps.get(i as usize)?.name.to_string())
        });
        let arn = execution_arn(r);
        if next_name.is_some_and(|n| s.model.tokens.values().any(|(a, st, _)| a == &arn && st == &n)) {
            continue;
        }
        let required_failed = r.branches().any(|b| {
            !plan.is_optional(b.step)
                && matches!(b.outcome(), Some(WaitOutcome::Failed | WaitOutcome::TimedOut))
        });
        let only_optional = !required_failed
            && r.branches().any(|b| {
                plan.is_optional(b.step)
                    && matches!(b.outcome(), Some(WaitOutcome::Failed | WaitOutcome::TimedOut))
            })
            && r.branches().all(|b| plan.is_optional(b.step) || b.outcome() != Some(WaitOutcome::Closed));
        c.check("optional_branch_never_fails_its_group", !only_optional, || {
            format!(
                "{}/{} generation {}: the group failed ({}) with only optional branches failed: {:?}",
                r.workflow,
                r.key,
                r.generation,
                r.state,
                r.branches().map(|b| (b.step, b.outcome())).collect::<Vec<_>>()
            )
        });
    }
}

/// `degraded` holds exactly when an optional branch did not succeed: a record that finished
/// (succeeded or degraded) is degraded if and only if Step Functions took no success for one of
/// its optional branches' tokens, read from Step Functions' own log.
pub(super) fn degraded_exactly_when_an_optional_branch_did_not_succeed(c: &mut Checker<'_>, s: &Seen<'_>) {
    for r in s.records.iter().filter(|r| matches!(r.state, State::Succeeded | State::Degraded)) {
        let Some(config) = s.version_of(Some(&r.config_version)) else { continue };
        let Some(wf) = config.workflow(r.workflow.as_str()) else { continue };
        let optional: Vec<&str> =
            wf.steps.iter().filter(|st| st.optional).map(|st| st.name.as_str()).collect();
        if optional.is_empty() {
            continue;
        }
        let arn = execution_arn(r);
        let succeeded = |state: &str| {
            s.model.tokens.iter().filter(|(_, (a, st, _))| a == &arn && st == state).any(|(token, _)| {
                s.model
                    .resumes
                    .iter()
                    .any(|x| x.accepted && &x.token == token && x.payload.starts_with("success"))
            })
        };
        let missed = optional.iter().any(|st| !succeeded(st));
        // Ended by an operator (`baton end`) with an optional branch's success unconfirmed: baton
        // cannot tell whether Step Functions took it, and says `degraded` (stranded.rs).
        let unsure = r.history.last().is_some_and(|h| h.cause == Cause::End)
            && r.state == State::Degraded
            && plan_of(s, r).is_some_and(|p| {
                p.optional().any(|st| !r.confirmed.contains(&st) && !r.missed.contains(&st))
            });
        c.check(
            "degraded_exactly_when_an_optional_branch_did_not_succeed",
            (r.state == State::Degraded) == missed || unsure,
            || {
                format!(
                    "{}/{} generation {} ended {}, but Step Functions {} an optional branch's success",
                    r.workflow,
                    r.key,
                    r.generation,
                    r.state,
                    if missed { "missed" } else { "took every" }
                )
            },
        );
    }
}

/// No input is applied to a branch after its group failed or closed: once a branch is closed, or
/// a required sibling failed, no later write changes its inputs or outcome.
pub(super) fn no_input_applied_after_the_group_failed(c: &mut Checker<'_>, s: &Seen<'_>) {
    for (before, after) in group_steps(s) {
        let Some(plan) = plan_of(s, before) else { continue };
        if !group_failed(&plan, before) {
            continue;
        }
        for b in before.branches() {
            let a = branch(after, b.step);
            // A timeout report corrects a resume Step Functions never confirmed.
            let corrected = b.unsure()
                && a.is_some_and(|a| a.outcome() == Some(WaitOutcome::TimedOut))
                && after.state == State::TimedOut;
            let unchanged = a.is_some_and(|a| {
                a.inputs == b.inputs && (a.outcome() == b.outcome() || b.is_open() || corrected)
            });
            c.check("no_input_applied_after_the_group_failed", unchanged, || {
                format!(
                    "{}/{} generation {}: branch {} changed after its group failed (v{} -> v{})",
                    after.workflow, after.key, after.generation, b.step, before.version, after.version
                )
            });
        }
    }
}

/// A branch's input never moves a sibling: a write that applied an input to one branch leaves
/// every other branch's inputs as they were, and their outcomes too, but for the siblings a
/// required branch's failure closes.
pub(super) fn a_branch_input_never_moves_a_sibling(c: &mut Checker<'_>, s: &Seen<'_>) {
    for (before, after) in group_steps(s) {
        let applied = after.history.last().filter(|a| {
            matches!(a.cause, Cause::Merge | Cause::BranchDone | Cause::Complete | Cause::FailStep)
                && a.cause_id.is_some()
        });
        let Some(target) = applied.and_then(|_| after.applied.last()).map(|a| a.step) else { continue };
        if after.applied.len() == before.applied.len() && after.applied.last() == before.applied.last() {
            continue;
        }
        for b in before.branches().filter(|b| b.step != target) {
            let a = branch(after, b.step);
            let closed_by_failure =
                b.is_open() && a.is_some_and(|a| a.outcome() == Some(WaitOutcome::Closed));
            let kept =
                a.is_some_and(|a| a.inputs == b.inputs && (a.outcome() == b.outcome() || closed_by_failure));
            c.check("a_branch_input_never_moves_a_sibling", kept, || {
                format!(
                    "{}/{} generation {}: an input for branch {target} moved branch {} (v{} -> v{})",
                    after.workflow, after.key, after.generation, b.step, before.version, after.version
                )
            });
        }
    }
}
