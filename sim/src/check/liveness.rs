//! Liveness: after the last fault and every deadline, everything has ended.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::ports::orchestrator::ExecutionStatus;
use time::OffsetDateTime;

use crate::world::lock;

use super::{Checker, Seen};
use crate::sqs::QueueId;

/// Every record ends (DESIGN §4.7): after the last fault and every deadline, each record is in
/// a terminal state. A crowd's records are told together: how many did not, and which.
pub(super) fn every_record_ends(c: &mut Checker<'_>, s: &Seen<'_>) {
    let crowd: Vec<&baton_core::domain::lifecycle::Record> =
        s.records.iter().filter(|r| r.workflow.as_str() == "crowd").collect();
    for r in s.records.iter().filter(|r| r.workflow.as_str() != "crowd") {
        if s.cursed == Some(r.key.as_str()) {
            continue;
        }
        c.check("every_record_ends", r.state.is_terminal(), || {
            format!(
                "record {}/{} is still {} (generation {}) after every deadline",
                r.workflow, r.key, r.state, r.generation
            )
        });
    }
    if crowd.is_empty() {
        return;
    }
    let open: Vec<String> =
        crowd.iter().filter(|r| !r.state.is_terminal()).map(|r| format!("{} {}", r.key, r.state)).collect();
    c.check("every_record_ends", open.is_empty(), || {
        format!(
            "{} of the crowd's {} records are not terminal after every deadline (their executions were stopped from the console or their final reports lost): {}",
            open.len(),
            crowd.len(),
            open.iter().take(6).cloned().collect::<Vec<_>>().join(", ")
        )
    });
}

/// Every execution ends: after the last fault and every deadline, none is still running.
pub(super) fn every_execution_ends(c: &mut Checker<'_>, s: &Seen<'_>) {
    for e in s.model.executions.values() {
        if s.cursed.is_some_and(|k| e.arn.contains(&format!("-{k}-g"))) {
            continue;
        }
        c.check("every_execution_ends", e.status != ExecutionStatus::Running, || {
            format!("execution {} is still running after every deadline", e.arn)
        });
    }
}

/// Every queue drains: after the last fault and every deadline, the intake and progress
/// queues are empty.
pub(super) fn every_queue_drains(c: &mut Checker<'_>, s: &Seen<'_>) {
    for queue in [QueueId::Intake, QueueId::Progress] {
        let left = s.sqs.messages(queue).len();
        c.check("every_queue_drains", left == 0, || {
            format!("{left} message(s) still in the {queue:?} queue")
        });
    }
}

/// What a record owes once it is due, whatever else is in the table: the task of a step's,
/// branch's or compensation's next attempt (due at its `next_attempt_at`), or a resume to Step
/// Functions (due once it has been owed for the grace, when the sweeper re-sends it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Owed {
    Task { id: String },
    Resume { token: String },
}

/// Owed work goes out within [`OWED_BOUND`] of when it is due (the clock's long jumps in the
/// faulty phase, when nothing ran, not counted): the task of a next attempt is published, a
/// resume reaches Step Functions, or the record stops owing it (its step ended; a next
/// attempt's deadline passed first). Whatever else is in the table: the sweeper lists at most a
/// batch per kind, and a hundred records that owe nothing must not keep the others' work from
/// going out. (The sweeper runs every minute; ten minutes allow for the faults.)
pub(super) fn owed_work_goes_out_in_time(c: &mut Checker<'_>, s: &Seen<'_>) {
    let end = s.stack.world.now();
    let mut jumps = lock(&s.stack.world.jumps).clone();
    jumps.sort();
    // The time by which work due at `due` has had OWED_BOUND of a running world.
    let bound = |due: OffsetDateTime| {
        let mut by = due + OWED_BOUND;
        for (from, to) in &jumps {
            if *from < by && *to > due {
                by += *to - (*from).max(due);
            }
        }
        by
    };
    // Each owed item of each record, when it was first owed (landed), due, and owed until (a
    // next attempt's task goes out only before its wait's deadline).
    let mut owed: BTreeMap<(String, String, Owed), OwedAt> = BTreeMap::new();
    // When each record stopped owing each item: the first landed write after it without it.
    let mut cleared: BTreeMap<(String, String, Owed), OffsetDateTime> = BTreeMap::new();
    let mut held: BTreeMap<(String, String), BTreeSet<Owed>> = BTreeMap::new();
    for w in s.writes.iter() {
        let r = &w.to;
        let at = (r.workflow.to_string(), r.key.to_string());
        let now: BTreeMap<Owed, (OffsetDateTime, Option<OffsetDateTime>)> =
            owed_by(s, r).into_iter().map(|(o, due, until)| (o, (due, until))).collect();
        let before = held.entry(at.clone()).or_default();
        for gone in before.iter().filter(|o| !now.contains_key(*o)) {
            cleared.entry((at.0.clone(), at.1.clone(), gone.clone())).or_insert(w.at);
        }
        for (item, (due, until)) in &now {
            owed.entry((at.0.clone(), at.1.clone(), item.clone())).or_insert((w.at, *due, *until));
        }
        *before = now.into_keys().collect();
    }
    let published: BTreeMap<&str, OffsetDateTime> =
        s.published.iter().rev().map(|p| (p.task.id.as_str(), p.at)).collect();
    for ((workflow, key, item), (landed, due, until)) in &owed {
        if s.cursed == Some(key.as_str()) {
            continue;
        }
        let by = bound((*due).max(*landed));
        if by > end {
            continue;
        }
        let went_out = match item {
            Owed::Task { id } => published.get(id.as_str()).is_some_and(|p| p >= landed),
            Owed::Resume { token } => s.model.resumes.iter().any(|r| &r.token == token && r.at >= *landed),
        };
        let stopped = cleared.get(&(workflow.clone(), key.clone(), item.clone())).is_some_and(|t| t <= &by)
            || until.is_some_and(|t| t <= by);
        c.check("owed_work_goes_out_in_time", went_out || stopped, || {
            format!(
                "{workflow}/{key}: {item:?}, owed since {landed} and due at {due}, had not gone out by {by} (nor was it owed no more)"
            )
        });
    }
}

/// When an owed item was first owed (its write landed), when it was due, and until when (a next
/// attempt's wait's deadline).
type OwedAt = (OffsetDateTime, OffsetDateTime, Option<OffsetDateTime>);

/// How long after it is due (or the faults stopped) owed work may take to go out: the sweeper
/// runs every minute and lists a record a grace after it is due; ten minutes is ten sweeps.
const OWED_BOUND: time::Duration = time::Duration::minutes(10);

/// What `r` owes, each with when it is due and, for a next attempt's task, its wait's deadline.
fn owed_by(
    s: &Seen<'_>,
    r: &baton_core::domain::lifecycle::Record,
) -> Vec<(Owed, OffsetDateTime, Option<OffsetDateTime>)> {
    use baton_core::domain::lifecycle::{Kind, Role, WaitStatus};
    use baton_core::ports::store::{Task, TaskKind};
    let grace = baton_core::limits::RESEND_RESUME_AFTER;
    let Some(config) = s.version_of(Some(&r.config_version)) else { return Vec::new() };
    let Some(wf) = config.workflow(r.workflow.as_str()) else { return Vec::new() };
    let name = |step: u32| wf.steps.get(step as usize).map(|st| st.name.to_string());
    let task = |step: u32, attempt: u32, kind: TaskKind| {
        name(step)
            .map(|n| Owed::Task { id: Task::task_id(&r.workflow, &r.key, r.generation, &n, attempt, kind) })
    };
    let mut items = Vec::new();
    for w in r.live_waits() {
        let kind = if w.role == Role::Compensation { TaskKind::Compensation } else { TaskKind::Step };
        match (&w.status, &w.token) {
            (WaitStatus::TaskDue { at }, _) if r.state.kind() != Kind::Advancing => {
                items.extend(task(w.step, w.attempt(), kind).map(|t| (t, *at, w.deadline)));
            }
            (WaitStatus::Owed { since, .. }, Some(token)) => {
                items.push((Owed::Resume { token: token.expose().to_owned() }, *since + grace, None));
            }
            _ => {}
        }
    }
    items
}

/// A record is stranded only when its execution ended (or never was) at least
/// `STRANDED_AFTER` before: a running execution, or one that ended a moment ago and whose report
/// is on its way, is never left to a person. A pending record whose execution never started is
/// the sweeper's to start, not stranded.
pub(super) fn a_record_is_stranded_only_when_its_execution_is_gone(c: &mut Checker<'_>, s: &Seen<'_>) {
    use baton_core::domain::lifecycle::Kind;
    let spread = time::Duration::seconds(1);
    for w in s.writes.iter().filter(|w| w.to.state.kind() == Kind::Stranded) {
        if w.from.is_some_and(|f| f.kind() == Kind::Stranded) {
            continue;
        }
        let r = &w.to;
        let name = baton_core::ports::orchestrator::execution_name(&r.workflow, &r.key, r.generation);
        let execution = s.model.executions.values().find(|e| e.arn.ends_with(&format!(":{name}")));
        let ok = match execution {
            Some(e) => e.closed_at.is_some_and(|at| at + baton_core::limits::STRANDED_AFTER <= w.at + spread),
            None => w.from.is_some_and(|f| f.kind() != Kind::Pending),
        };
        c.check("a_record_is_stranded_only_when_its_execution_is_gone", ok, || {
            format!(
                "{}/{} generation {} was stranded at {} from {:?}, its execution {}",
                r.workflow,
                r.key,
                r.generation,
                w.at,
                w.from,
                match execution {
                    Some(e) => format!("{:?} (closed at {:?})", e.status, e.closed_at),
                    None => "never started".to_owned(),
                }
            )
        });
    }
}
