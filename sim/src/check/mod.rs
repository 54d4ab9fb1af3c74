//! The invariants, checked after every schedule from the outside: from the simulated services'
//! own logs (Step Functions' starts and resumes, the outbound queue, the store's landed writes,
//! the dead-letter queues) and from what senders and operators were told, not from baton's
//! account of itself.
//!
//! One function per invariant, named after it (docs/ARCHITECTURE.md where it names one), grouped by
//! concern in the files of this folder. Every violation starts with its invariant's name in
//! brackets, `[terminal_record_never_changes] ...`, so a failed schedule says which one broke.
//! [`all`] runs them in a fixed order; checks of one item by several invariants (a landed write,
//! a resumed token, an inbox entry, a dead letter) stay interleaved item by item.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::world::MutexGuard;

use baton_core::domain::config::Config;
use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{Cause, Record, State};
use baton_core::ports::store::{Trace, WorkflowStore};

use crate::sfn::Model;
use crate::sqs::{Message, QueueId, Sqs};
use crate::store::{Landed, Published, Settled};
use crate::workload::{Evidence, Plan, block_on};
use crate::world::lock;
use crate::{Outcome, Stack};

/// Execution ARNs of the simulated stack: this, then `<machine>:<name>`.
const PREFIX_EXEC: &str = "arn:aws:states:us-east-1:123456789012:execution:sim-";

/// The ARN of the execution of `r`'s generation.
fn execution_arn(r: &Record) -> String {
    let name = baton_core::ports::orchestrator::execution_name(&r.workflow, &r.key, r.generation);
    format!("{PREFIX_EXEC}{}:{name}", r.workflow)
}

mod answers;
mod compensation;
mod dead_letters;
mod executions;
mod groups;
mod inbox;
mod late;
mod lifecycle;
mod limits;
mod liveness;
mod nothing_lost;
mod notices;
mod pinning;
mod quorum;
mod resumes;
mod retries;
mod tasks;
mod timers;

struct Checker<'a> {
    outcome: &'a mut Outcome,
}

impl Checker<'_> {
    /// Counts one check of `invariant`; a violation, if not `ok`, is recorded as
    /// `[invariant] <violation>`.
    fn check(&mut self, invariant: &'static str, ok: bool, violation: impl FnOnce() -> String) {
        self.outcome.checks += 1;
        *self.outcome.by_invariant.entry(invariant).or_default() += 1;
        if !ok {
            self.outcome.violations.push(format!("[{invariant}] {}", violation()));
        }
    }
}

/// Every landed write that completed a position (`waiting{n}` to `advancing{n}` by `complete`),
/// with the step it completed.
fn completions<'s>(s: &'s Seen<'_>) -> impl Iterator<Item = (&'s Landed, u32)> {
    s.writes.iter().filter_map(|w| {
        let (Some(State::Waiting { step }), State::Advancing { step: to }) = (w.from, w.to.state) else {
            return None;
        };
        let completed = step == to && w.to.history.last().is_some_and(|h| h.cause == Cause::Complete);
        completed.then_some((w, step))
    })
}

/// What the checks read, gathered once after the schedule: the services' logs (copied, or held
/// locked while the checks run) and every trace the store keeps.
struct Seen<'a> {
    stack: &'a Stack,
    plan: &'a Plan,
    /// The key every call about fails from a moment on, if any.
    cursed: Option<&'a str>,
    writes: MutexGuard<'a, Vec<Landed>>,
    model: MutexGuard<'a, Model>,
    published: MutexGuard<'a, Vec<Published>>,
    evidence: MutexGuard<'a, Evidence>,
    sqs: MutexGuard<'a, Sqs>,
    records: Vec<Record>,
    settles: MutexGuard<'a, Vec<Settled>>,
    /// Each (workflow, key) of the plan's: its trace in the store.
    traces: BTreeMap<(String, String), Trace>,
    /// The landed writes of each (workflow, key), by their place in `writes` (a check asks about
    /// one record's writes for each of its inputs: a crowd's writes are thousands).
    writes_by_key: BTreeMap<(String, String), Vec<usize>>,
}

impl<'a> Seen<'a> {
    fn gather(stack: &'a Stack, plan: &'a Plan) -> Seen<'a> {
        // The logs are read where they are, held locked while the checks run (nothing writes
        // them then), not copied.
        let writes = lock(&stack.store.writes);
        let model = lock(&stack.sfn);
        let published = lock(&stack.publisher.log);
        let evidence = lock(&stack.evidence);
        let sqs = lock(&stack.sqs);
        let records = stack.memory.records();
        let settles = lock(&stack.store.settles);
        let crowd = stack
            .config
            .workflow("crowd")
            .into_iter()
            .flat_map(|wf| plan.crowd.iter().map(move |k| (wf.name.clone(), k.clone())));
        let traces = stack
            .config
            .workflows
            .iter()
            .flat_map(|wf| plan.keys.iter().map(move |k| (wf.name.clone(), k.clone())))
            .chain(crowd)
            .map(|(w, k)| {
                let key = CorrelationKey::parse(k.as_str()).expect("a key");
                let trace = block_on(stack.memory.trace(&w, &key)).unwrap_or_default();
                ((w.to_string(), k), trace)
            })
            .collect();
        let mut writes_by_key: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            writes_by_key.entry((w.to.workflow.to_string(), w.to.key.to_string())).or_default().push(i);
        }
        let cursed = plan.cursed.as_deref();
        Seen {
            stack,
            plan,
            cursed,
            writes,
            model,
            published,
            evidence,
            sqs,
            records,
            settles,
            traces,
            writes_by_key,
        }
    }

    /// The landed writes of `workflow`/`key`, in the order they landed, each with its place in
    /// [`Seen::writes`].
    fn writes_of(&self, workflow: &str, key: &str) -> impl Iterator<Item = (usize, &Landed)> + use<'_, 'a> {
        let places = self.writes_by_key.get(&(workflow.to_owned(), key.to_owned()));
        places.into_iter().flatten().map(|&i| (i, &self.writes[i]))
    }

    /// The config a record's version names, if it was ever deployed.
    fn version_of(&self, version: Option<&String>) -> Option<Arc<Config>> {
        self.stack.store.deployed(version)
    }

    /// Every callback sent: the plan's senders', then the task workers'.
    fn callbacks(&self) -> impl Iterator<Item = &crate::workload::CallbackSend> {
        self.plan.callbacks.iter().chain(&self.evidence.callbacks)
    }

    /// Every message in the dead-letter queues: intake's, then progress's.
    fn dead(&self) -> Vec<&Message> {
        self.sqs.messages(QueueId::IntakeDlq).iter().chain(self.sqs.messages(QueueId::ProgressDlq)).collect()
    }
}

/// After the long jump: late copies of events, weeks on, changed nothing. No execution
/// started, no record was written (every record was terminal), and nothing broke a rule the
/// store enforces.
pub fn after_long_jump(
    stack: &Stack,
    (starts, writes, violations): (usize, usize, usize),
    outcome: &mut Outcome,
) {
    outcome.violations.extend(lock(&stack.violations).iter().skip(violations).cloned());
    let mut c = Checker { outcome };
    late::late_event_starts_nothing(&mut c, stack, starts);
    late::late_event_writes_nothing(&mut c, stack, writes);
}

/// Every invariant, in a fixed order, after the faults stopped and every deadline passed.
pub fn all(
    stack: &Stack,
    plan: &Plan,
    (settled_by, waiting_at_calm): (time::OffsetDateTime, &[Record]),
    outcome: &mut Outcome,
) {
    outcome.violations.extend(lock(&stack.violations).iter().cloned());
    let c = &mut Checker { outcome };
    let s = Seen::gather(stack, plan);

    limits::step_functions_refuses_no_call(c, &s);
    limits::no_execution_stopped_by_its_limits(c, &s);
    limits::record_size_bound_bounds_the_record(c, &s);
    executions::a_transient_send_failure_is_retried(c, &s);
    liveness::a_record_is_stranded_only_when_its_execution_is_gone(c, &s);
    inbox::no_lost_wake_up(c, &s);
    lifecycle::terminal_record_never_changes(c, &s);
    executions::one_generation_per_start_event(c, &s);
    for wf in &s.stack.config.workflows {
        for key in &s.plan.keys {
            executions::one_execution_per_generation(c, &s, wf, key);
            executions::no_generation_without_its_start_event(c, &s, wf, key);
        }
    }
    let tasks = tasks::by_id(&s.published);
    tasks::one_task_per_step(c, &tasks);
    let mut versions = pinning::Versions::new();
    for w in s.writes.iter() {
        pinning::written_with_a_deployed_version(c, &s, w);
        pinning::step_within_its_version(c, &s, w);
        pinning::generation_keeps_its_version(c, &s, w, &mut versions);
    }
    pinning::task_is_its_versions_step(c, &s, &versions);
    tasks::every_waiting_step_gets_its_task(c, &s, &tasks, (settled_by, waiting_at_calm));
    lifecycle::each_step_advances_at_most_once(c, &s);
    quorum::quorum_met_before_the_step_completes(c, &s);
    timers::all(c, &s);
    notices::all(c, &s);
    groups::every_opened_branch_ends_with_one_outcome(c, &s);
    groups::each_branch_token_resumed_at_most_once(c, &s);
    groups::optional_branch_never_fails_its_group(c, &s);
    groups::degraded_exactly_when_an_optional_branch_did_not_succeed(c, &s);
    groups::no_input_applied_after_the_group_failed(c, &s);
    groups::a_branch_input_never_moves_a_sibling(c, &s);
    retries::all(c, &s);
    compensation::all(c, &s);
    let owed = resumes::Owed::of(&s);
    for (token, calls) in &owed.by_token {
        resumes::one_payload_per_resume(c, token, calls);
        let since = owed.since.get(token);
        resumes::resume_resent_only_after_the_grace_period(c, token, calls, since, s.stack.skews().spread());
        resumes::at_most_one_resume_accepted(c, token, calls);
    }
    answers::every_answer_tells_the_truth(c, &s);
    answers::a_retry_gets_the_same_answer(c, &s);
    answers::an_answer_to_a_published_task_is_never_out_of_order(c, &s);
    nothing_lost::every_callback_is_classified(c, &s);
    nothing_lost::every_event_is_classified_for_its_step(c, &s, &versions);
    for t in s.traces.values() {
        let Some(record) = &t.record else { continue };
        for entry in &t.inbox {
            inbox::applied_only_to_its_generation(c, &s, record, entry);
            inbox::applied_input_never_ledgered_expired(c, t, record, entry);
            inbox::inbox_status_matches_what_happened(c, &s, record, entry);
        }
    }
    answers::a_cancel_ends_its_execution(c, &s);
    nothing_lost::a_rejected_input_leaves_a_trace(c, &s);
    liveness::every_record_ends(c, &s);
    liveness::every_execution_ends(c, &s);
    liveness::every_queue_drains(c, &s);
    liveness::owed_work_goes_out_in_time(c, &s);
    for m in s.dead().into_iter().filter(|m| !dead_letters::excused(&s, m)) {
        dead_letters::no_throttled_message_dead_lettered(c, m);
        dead_letters::every_dead_letter_has_a_reason(c, m);
    }
}

#[cfg(test)]
mod tests {
    /// Each checker's file, by name.
    const SOURCES: &[(&str, &str)] = &[
        ("answers.rs", include_str!("answers.rs")),
        ("dead_letters.rs", include_str!("dead_letters.rs")),
        ("executions.rs", include_str!("executions.rs")),
        ("groups.rs", include_str!("groups.rs")),
        ("inbox.rs", include_str!("inbox.rs")),
        ("late.rs", include_str!("late.rs")),
        ("lifecycle.rs", include_str!("lifecycle.rs")),
        ("limits.rs", include_str!("limits.rs")),
        ("liveness.rs", include_str!("liveness.rs")),
        ("nothing_lost.rs", include_str!("nothing_lost.rs")),
        ("pinning.rs", include_str!("pinning.rs")),
        ("resumes.rs", include_str!("resumes.rs")),
        ("retries.rs", include_str!("retries.rs")),
        ("tasks.rs", include_str!("tasks.rs")),
    ];

    /// A violation names its invariant: every `c.check("name", ...)` sits in the function of
    /// that name, which says in a `///` line what it checks.
    #[test]
    fn every_check_is_named_after_the_function_that_makes_it() {
        let mut checks = 0;
        for (file, source) in SOURCES {
            for (at, _) in source.match_indices(".check(") {
                let before = &source[..at];
                let fn_at = ["\nfn ", "\npub(super) fn "].iter().filter_map(|f| before.rfind(f)).max();
                let fn_at = fn_at.unwrap_or_else(|| panic!("{file}: a check outside any function"));
                let function = before[fn_at..].split("fn ").nth(1).and_then(|r| r.split(['(', '<']).next());
                let named = source[at + ".check(".len()..].trim_start().strip_prefix('"');
                let named = named.and_then(|n| n.split('"').next());
                assert_eq!(named, function, "{file}: a check named {named:?} inside fn {function:?}");
                let doc = before[..fn_at].lines().next_back().unwrap_or_default();
                assert!(
                    doc.starts_with("///"),
                    "{file}: fn {function:?} has no `///` doc saying its invariant"
                );
                checks += 1;
            }
        }
        // Every check call of the checkers: `after_long_jump`'s two and `all`'s 35, as many as
        // before the split, the parallel groups' seven, bounded retry's five, the task workers'
        // answers' one, the heartbeat of retried steps' one, Step Functions' own sends' one,
        // the crowd's record ends' one, owed work's one, the record size bound's one, and the
        // stranded records' one.
        assert_eq!(checks, 56);
    }

    /// A violation starts with its invariant's name in brackets; every check is counted.
    #[test]
    fn a_violation_is_prefixed_with_its_invariant() {
        let mut outcome = crate::Outcome::default();
        let mut c = super::Checker { outcome: &mut outcome };
        c.check("holds", true, || unreachable!("no violation to say"));
        c.check("breaks", false, || "what broke".to_owned());
        assert_eq!(outcome.checks, 2);
        assert_eq!(outcome.violations, vec!["[breaks] what broke".to_owned()]);
    }
}
