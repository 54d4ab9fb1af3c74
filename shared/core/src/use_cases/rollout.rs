//! `baton rollout plan`: what a config change would do to the records in flight, decided before
//! the deploy.
//!
//! Two configs are compared workflow by workflow, step by step. Each change is classified for
//! baton with versioned workflows: a record in flight finishes on the config version it started
//! on (its steps, `requires`, `accepts_events`, timeouts, task templates and its execution's
//! definition), and new starts follow the new version.
//! - **safe**: records in flight finish on their version (steps appended, inserted, removed,
//!   renamed or reordered; parallel groups added, removed, renamed or regrouped, branches made
//!   optional or required; `requires`, `accepts_events`, timeouts, tasks changed), or nothing
//!   live is touched;
//! - **breaking even with pinning**: a changed key pointer, always (start events and restarts
//!   would correlate to other keys); a removed workflow with live records (their callbacks
//!   would be refused);
//! - **needs a person**: a removed workflow's live records were not counted.
//!
//! Live records are counted per (workflow, config version, state) from the table's `by_due`
//! index (queried, never scanned) by the caller, and passed in as [`Live`].

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use time::OffsetDateTime;

use crate::domain::config::{Config, Step, Workflow};
use crate::domain::lifecycle::{Kind, State};
use crate::ports::store::{RecordHead, StoreError, WorkflowStore};

/// How a change affects the records in flight. In `--json` as in the text: `needs-human`, as
/// docs/WORKFLOWS.md and replay's classifications spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    Safe,
    NeedsHuman,
    Breaking,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Safe => "safe",
            Class::NeedsHuman => "needs-human",
            Class::Breaking => "breaking",
        }
    }
}

/// One difference between the two configs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub workflow: String,
    /// A stable code: `workflow_added`, `step_inserted`, `requires_changed`, ...
    pub kind: &'static str,
    /// What changed, in words.
    pub detail: String,
    pub class: Class,
    /// Why it is classified so.
    pub why: String,
    /// The live records it touches, per config version and state.
    pub touches: Vec<Touch>,
}

/// Live records of one (workflow, config version, state).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Touch {
    pub version: String,
    pub state: String,
    pub records: u64,
}

/// The live (non-terminal) records, counted per (workflow, config version, state); `None` when
/// they could not be counted (`--offline`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Live {
    counts: Option<BTreeMap<LiveKey, (State, u64)>>,
}

/// (workflow, config version, state as text): what live records are counted by.
type LiveKey = (String, String, String);

impl Live {
    /// Live records not counted: every change that depends on them needs a person.
    pub fn unknown() -> Live {
        Live { counts: None }
    }

    /// Counts the given live records.
    pub fn count<'a>(records: impl IntoIterator<Item = &'a RecordHead>) -> Live {
        let mut counts = BTreeMap::new();
        for r in records.into_iter().filter(|r| !r.state.is_terminal()) {
            let key = (r.workflow.to_string(), r.config_version.clone(), r.state.to_string());
            counts.entry(key).or_insert((r.state, 0)).1 += 1;
        }
        Live { counts: Some(counts) }
    }

    /// Every live record counted, per (workflow, config version): what deleting a version's
    /// state machine version waits for (docs/RUNBOOK.md). `None` if not counted.
    pub fn by_version(&self) -> Option<Vec<LiveVersion>> {
        let counts = self.counts.as_ref()?;
        let mut out: BTreeMap<(String, String), u64> = BTreeMap::new();
        for ((workflow, version, _), (_, n)) in counts {
            *out.entry((workflow.clone(), version.clone())).or_default() += n;
        }
        Some(
            out.into_iter()
                .map(|((workflow, version), records)| LiveVersion { workflow, version, records })
                .collect(),
        )
    }

    /// The live records of `workflow` whose state passes `filter`; `None` if not counted.
    fn touching(&self, workflow: &str, filter: impl Fn(State) -> bool) -> Option<Vec<Touch>> {
        let counts = self.counts.as_ref()?;
        Some(
            counts
                .iter()
                .filter(|((w, _, _), (state, _))| w == workflow && filter(*state))
                .map(|((_, version, text), (_, n))| Touch {
                    version: version.clone(),
                    state: text.clone(),
                    records: *n,
                })
                .collect(),
        )
    }
}

/// The live records of a workflow on one config version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveVersion {
    pub workflow: String,
    pub version: String,
    pub records: u64,
}

/// Live records counted per state at most (a Query of the `by_due` index per live state).
pub const LIVE_LIMIT: usize = 1_000_000;

/// The states of a record in flight: what `count_live` queries the index for.
pub const LIVE_KINDS: [Kind; 4] = [Kind::Pending, Kind::Waiting, Kind::Advancing, Kind::Compensating];

/// Counts the live records in the store: pending, waiting, advancing and compensating ones, from the due-time
/// index, never a scan, and nothing else (no task token is read).
pub async fn count_live(store: &dyn WorkflowStore, now: OffsetDateTime) -> Result<Live, StoreError> {
    let mut records = Vec::new();
    let far = now + time::Duration::days(3650);
    for kind in LIVE_KINDS {
        records.extend(store.due_heads(kind, far, LIVE_LIMIT).await?);
    }
    Ok(Live::count(&records))
}

/// The deployed config: the version the stack's functions last started on (a rollback to an
/// older version makes it the deployed one again at its first cold start). `None` when none
/// registered yet.
pub async fn deployed(store: &dyn WorkflowStore) -> Result<Option<(Config, String)>, RolloutError> {
    let configs = store.configs().await?;
    let Some(newest) = configs.into_iter().max_by_key(|c| (c.started_at, c.registered_at)) else {
        return Ok(None);
    };
    let config = Config::parse(&newest.canonical)
        .map_err(|source| RolloutError::Unreadable { version: newest.version.clone(), source })?;
    Ok(Some((config, newest.version)))
}

/// Why the deployed config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the registered config {version} does not parse: {source}")]
    Unreadable { version: String, source: crate::domain::config::ConfigErrors },
}

/// The whole plan: every change, and the overall verdict (the worst class).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolloutPlan {
    pub from_version: String,
    pub to_version: String,
    pub changes: Vec<Change>,
    pub verdict: Class,
}

/// Compares `from` (deployed) with `to` (about to be deployed).
pub fn plan(from: &Config, to: &Config, live: &Live) -> RolloutPlan {
    // Patterns are compared as written (canonical JSON), not as compiled: the compiled form
    // keeps the order of the keys, which the canonical form sorts.
    let docs = (Doc::of(from), Doc::of(to));
    let mut changes = Vec::new();
    for old in &from.workflows {
        match to.workflow(old.name.as_str()) {
            None => {
                let touches = live.touching(old.name.as_str(), |_| true);
                let (class, why) = by_live(
                    &touches,
                    Class::Breaking,
                    "the deployed functions would not know the workflow: its live records' callbacks would get 404 unknown_workflow",
                );
                changes.push(change(old, "workflow_removed", "removed".into(), class, why, touches));
            }
            Some(new) => changes.extend(workflow_changes(old, new, &docs, live)),
        }
    }
    for new in &to.workflows {
        if from.workflow(new.name.as_str()).is_none() {
            let why = "new starts only".to_owned();
            changes.push(change(new, "workflow_added", "added".into(), Class::Safe, why, Some(Vec::new())));
        }
    }
    let verdict = changes.iter().map(|c| c.class).max().unwrap_or(Class::Safe);
    RolloutPlan { from_version: from.version.clone(), to_version: to.version.clone(), changes, verdict }
}

fn change(
    wf: &Workflow,
    kind: &'static str,
    detail: String,
    class: Class,
    why: String,
    touches: Option<Vec<Touch>>,
) -> Change {
    Change { workflow: wf.name.to_string(), kind, detail, class, why, touches: touches.unwrap_or_default() }
}

/// Why a change is safe for the records in flight.
const PINNED: &str =
    "records in flight finish on the config version they started on; new starts follow the new one";
const PINNED_RENAMED: &str = "records in flight finish on the config version they started on, and take callbacks by \
    the step's old name; new starts follow the new one";

/// `class` when live records are touched, safe when none are, needs a person when they were not
/// counted.
fn by_live(touches: &Option<Vec<Touch>>, class: Class, why: &str) -> (Class, String) {
    match touches {
        None => (Class::NeedsHuman, format!("live records were not counted; if there are any, {why}")),
        Some(t) if t.is_empty() => (Class::Safe, "no live records".into()),
        Some(t) => {
            let n: u64 = t.iter().map(|t| t.records).sum();
            (class, format!("{n} live record(s): {why}"))
        }
    }
}

/// A config's canonical form, for the parts compared as written.
struct Doc(Value);

impl Doc {
    fn of(config: &Config) -> Doc {
        Doc(serde_json::from_str(&config.canonical).unwrap_or(Value::Null))
    }

    fn when(&self, workflow: &str) -> &Value {
        &self.0["workflows"][workflow]["start"]["when"]
    }

    fn accepts_events(&self, workflow: &str, step: &str) -> Value {
        let steps = self.0["workflows"][workflow]["steps"].as_array();
        let step = steps.and_then(|s| s.iter().find(|s| s["name"] == step));
        step.map_or(Value::Null, |s| s["accepts_events"].clone())
    }
}

fn workflow_changes(old: &Workflow, new: &Workflow, docs: &(Doc, Doc), live: &Live) -> Vec<Change> {
    let mut out = Vec::new();
    if old.key != new.key {
        // Events for the records in flight would correlate elsewhere: no pinning helps.
        let touches = live.touching(old.name.as_str(), |_| true);
        out.push(change(
            old,
            "key_changed",
            format!("key {} -> {}", old.key, new.key),
            Class::Breaking,
            "events and restarts for existing keys would correlate to other records".into(),
            touches,
        ));
    }
    if docs.0.when(old.name.as_str()) != docs.1.when(new.name.as_str()) {
        let why = "decides new starts only".to_owned();
        out.push(change(old, "start_pattern_changed", "start.when changed".into(), Class::Safe, why, None));
    }
    if old.on_restart != new.on_restart {
        let detail = format!("on_restart {:?} -> {:?}", old.on_restart, new.on_restart);
        out.push(change(
            old,
            "on_restart_changed",
            detail,
            Class::Safe,
            "decides restarts only".into(),
            None,
        ));
    }
    out.extend(step_structure(old, new, live));
    out.extend(group_structure(old, new, live));
    for (i, o) in old.steps.iter().enumerate() {
        if let Some(n) = new.steps.iter().find(|s| s.name == o.name) {
            let accepts = (
                docs.0.accepts_events(old.name.as_str(), o.name.as_str()),
                docs.1.accepts_events(new.name.as_str(), n.name.as_str()),
            );
            out.extend(step_changes(old, i as u32, (o, n), accepts, live));
        }
    }
    out
}

/// Steps appended, inserted, removed, renamed or reordered. Safe with pinning: a record in flight
/// keeps its version's step list, and its execution the definition it started with.
fn step_structure(old: &Workflow, new: &Workflow, live: &Live) -> Vec<Change> {
    let names = |w: &Workflow| w.steps.iter().map(|s| s.name.to_string()).collect::<Vec<_>>();
    let (a, b) = (names(old), names(new));
    if a == b {
        return Vec::new();
    }
    let removed: Vec<&String> = a.iter().filter(|n| !b.contains(n)).collect();
    let added: Vec<&String> = b.iter().filter(|n| !a.contains(n)).collect();
    let mut found: Vec<(&'static str, String)> = Vec::new();
    // A rename: a step gone and a step new at the same position.
    let mut renamed = Vec::new();
    for r in &removed {
        let i = a.iter().position(|n| n == *r).unwrap_or(usize::MAX);
        if let Some(n) = b.get(i).filter(|n| added.contains(n)) {
            renamed.push(((*r).clone(), n.clone()));
            found.push(("step_renamed", format!("step {r} renamed {n} (position {i})")));
        }
    }
    let is_renamed_from = |n: &String| renamed.iter().any(|(from, _)| from == n);
    let is_renamed_to = |n: &String| renamed.iter().any(|(_, to)| to == n);
    for r in removed.iter().filter(|r| !is_renamed_from(r)) {
        found.push(("step_removed", format!("step {r} removed")));
    }
    let kept_old: Vec<&String> = a.iter().filter(|n| b.contains(n)).collect();
    let kept_new: Vec<&String> = b.iter().filter(|n| a.contains(n)).collect();
    for n in added.iter().filter(|n| !is_renamed_to(n)) {
        let i = b.iter().position(|x| x == *n).unwrap_or(0);
        let appended = b[i..].iter().all(|x| !a.contains(x));
        if appended {
            found.push(("step_appended", format!("step {n} appended at position {i}")));
        } else {
            found.push(("step_inserted", format!("step {n} inserted at position {i}")));
        }
    }
    if kept_old != kept_new {
        found.push(("steps_reordered", format!("steps reordered: {} -> {}", a.join(", "), b.join(", "))));
    }
    let touches = live.touching(old.name.as_str(), |_| true);
    found
        .into_iter()
        .map(|(kind, detail)| {
            let why = match kind {
                "step_renamed" => PINNED_RENAMED,
                _ => PINNED,
            };
            change(old, kind, detail, Class::Safe, why.into(), touches.clone())
        })
        .collect()
}

/// Parallel groups added, removed or renamed, branches moved into, out of or between groups,
/// and branches made optional or required. Safe with pinning, as step changes are: a record at a
/// group finishes it (and its workflow) on its version's group, its execution on the definition
/// it started with.
fn group_structure(old: &Workflow, new: &Workflow, live: &Live) -> Vec<Change> {
    // Each group by name, with its branches by name, in order.
    let groups = |w: &Workflow| -> Vec<(String, Vec<String>)> {
        w.groups
            .iter()
            .map(|g| {
                let branches =
                    (g.first..=g.last).filter_map(|i| w.steps.get(i as usize)).map(|s| s.name.to_string());
                (g.name.to_string(), branches.collect())
            })
            .collect()
    };
    let (a, b) = (groups(old), groups(new));
    let mut found: Vec<(&'static str, String)> = Vec::new();
    for (i, (name, branches)) in a.iter().enumerate() {
        match b.iter().find(|(n, _)| n == name) {
            Some((_, now)) if now != branches => found.push((
                "group_branches_changed",
                format!("group {name}: branches {} -> {}", branches.join(", "), now.join(", ")),
            )),
            Some(_) => {}
            // Renamed: the same branches under another name where it stood.
            None => match b.get(i).filter(|(n, now)| now == branches && !a.iter().any(|(o, _)| o == n)) {
                Some((n, _)) => found.push(("group_renamed", format!("group {name} renamed {n}"))),
                None => {
                    found.push(("group_removed", format!("group {name} ({}) removed", branches.join(", "))))
                }
            },
        }
    }
    for (i, (name, branches)) in b.iter().enumerate() {
        let renamed = a.get(i).is_some_and(|(o, was)| was == branches && !b.iter().any(|(n, _)| n == o));
        if !a.iter().any(|(n, _)| n == name) && !renamed {
            found.push(("group_added", format!("group {name} ({}) added", branches.join(", "))));
        }
    }
    for o in old.steps.iter().filter(|o| o.optional) {
        if new.steps.iter().any(|n| n.name == o.name && !n.optional) {
            found.push(("branch_made_required", format!("branch {} is required now", o.name)));
        }
    }
    for n in new.steps.iter().filter(|n| n.optional) {
        if old.steps.iter().any(|o| o.name == n.name && !o.optional) {
            found.push(("branch_made_optional", format!("branch {} is optional now", n.name)));
        }
    }
    let touches = live.touching(old.name.as_str(), |_| true);
    found
        .into_iter()
        .map(|(kind, detail)| change(old, kind, detail, Class::Safe, PINNED.into(), touches.clone()))
        .collect()
}

/// A step's reminders or escalation levels changed: a record waiting at the step keeps its
/// version's.
fn notice_changes(
    wf: &Workflow,
    (old, new): (&Step, &Step),
    touches: impl Fn() -> Option<Vec<Touch>>,
) -> Vec<Change> {
    let mut out = Vec::new();
    if old.remind != new.remind {
        let spell = |r: Option<crate::domain::config::Remind>| {
            r.map_or("none".to_owned(), |r| {
                format!("after {}s, every {}s, {} time(s)", r.after.as_secs(), r.every.as_secs(), r.times)
            })
        };
        let touches = touches();
        let detail = format!("{}: remind {} -> {}", old.name, spell(old.remind), spell(new.remind));
        out.push(change(wf, "remind_changed", detail, Class::Safe, PINNED.into(), touches));
    }
    if old.escalate != new.escalate {
        let spell = |levels: &[crate::domain::config::Escalation]| {
            let each: Vec<String> =
                levels.iter().map(|e| format!("{} after {}s", e.task.queue, e.after.as_secs())).collect();
            if each.is_empty() { "none".to_owned() } else { format!("[{}]", each.join(", ")) }
        };
        let touches = touches();
        let detail = format!("{}: escalate {} -> {}", old.name, spell(&old.escalate), spell(&new.escalate));
        out.push(change(wf, "escalate_changed", detail, Class::Safe, PINNED.into(), touches));
    }
    out
}

/// Changes to one step that kept its name.
fn step_changes(
    wf: &Workflow,
    index: u32,
    (old, new): (&Step, &Step),
    accepts_events: (Value, Value),
    live: &Live,
) -> Vec<Change> {
    let mut out = Vec::new();
    let at_step = |state: State| state.step() == Some(index);
    let at_or_before = |state: State| state == State::Pending || state.step().is_some_and(|s| s <= index);
    if old.requires != new.requires {
        let touches = live.touching(wf.name.as_str(), at_step);
        let detail = format!("{}: requires {} -> {}", old.name, old.requires, new.requires);
        out.push(change(wf, "requires_changed", detail, Class::Safe, PINNED.into(), touches));
    }
    if accepts_events.0 != accepts_events.1 {
        let touches = live.touching(wf.name.as_str(), at_or_before);
        out.push(change(
            wf,
            "accepts_events_changed",
            format!("{}: accepts_events changed", old.name),
            Class::Safe,
            PINNED.into(),
            touches,
        ));
    }
    if old.timer != new.timer {
        let spell = |t: &Option<crate::domain::lifecycle::Timer>| {
            t.as_ref().map_or("none".to_owned(), ToString::to_string)
        };
        let touches = live.touching(wf.name.as_str(), at_step);
        let detail = format!("{}: timer {} -> {}", old.name, spell(&old.timer), spell(&new.timer));
        out.push(change(wf, "timer_changed", detail, Class::Safe, PINNED.into(), touches));
    }
    out.extend(notice_changes(wf, (old, new), || live.touching(wf.name.as_str(), at_step)));
    let pinned = "running executions keep the deadlines they started with; new executions get the new one";
    if old.timeout != new.timeout {
        let detail =
            format!("{}: timeout {}s -> {}s", old.name, old.timeout.as_secs(), new.timeout.as_secs());
        out.push(change(wf, "timeout_changed", detail, Class::Safe, pinned.into(), None));
    }
    if old.heartbeat != new.heartbeat {
        let secs =
            |h: Option<std::time::Duration>| h.map_or("none".to_owned(), |h| format!("{}s", h.as_secs()));
        let detail = format!("{}: heartbeat {} -> {}", old.name, secs(old.heartbeat), secs(new.heartbeat));
        out.push(change(wf, "heartbeat_changed", detail, Class::Safe, pinned.into(), None));
    }
    if old.task != new.task {
        let why = "records in flight create their tasks from their own version's template; new starts use the new one";
        out.push(change(
            wf,
            "task_changed",
            format!("{}: task changed", old.name),
            Class::Safe,
            why.into(),
            None,
        ));
    }
    if old.compensate != new.compensate {
        out.push(compensation_change(wf, index, (old, new), live));
    }
    if old.buffer_ttl != new.buffer_ttl {
        let detail = format!(
            "{}: buffer_ttl {}s -> {}s",
            old.name,
            old.buffer_ttl.as_secs(),
            new.buffer_ttl.as_secs()
        );
        let why = "applies to inputs buffered from now on";
        out.push(change(wf, "buffer_ttl_changed", detail, Class::Safe, why.into(), None));
    }
    out
}

/// A step's `compensate` added, changed or removed. Safe with pinning: a record in flight runs
/// (and compensates) on its version's config and the definition its execution started with,
/// whose compensation chain has that version's compensations; new starts get the new ones. The
/// records it touches are those that completed the step or may yet: at it or later, or
/// compensating.
fn compensation_change(wf: &Workflow, index: u32, (old, new): (&Step, &Step), live: &Live) -> Change {
    let describe = |s: &Step| {
        s.compensate.as_ref().map_or("none".to_owned(), |c| {
            format!(
                "{:?} on {} within {}s, {} attempt(s)",
                c.task.title,
                c.task.queue,
                c.timeout.as_secs(),
                c.attempts
            )
        })
    };
    let kind = match (&old.compensate, &new.compensate) {
        (None, _) => "compensation_added",
        (_, None) => "compensation_removed",
        _ => "compensation_changed",
    };
    let detail = format!("{}: compensate {} -> {}", old.name, describe(old), describe(new));
    let reached = |state: State| state == State::Compensating || state.step().is_some_and(|s| s >= index);
    let touches = live.touching(wf.name.as_str(), reached);
    let why = "records in flight are compensated as the config version they started on says, through the \
        compensation chain their execution started with; new starts follow the new one";
    change(wf, kind, detail, Class::Safe, why.into(), touches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{CorrelationKey, WorkflowName};

    const V1: &str = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 2d
      - name: payment
        requires: [payment_ref]
        timeout: 7d
"#;

    fn config(yaml: &str) -> Config {
        Config::parse(yaml).expect("valid")
    }

    #[tokio::test]
    async fn the_deployed_config_is_the_one_started_last_so_a_rollback_is_seen() {
        use crate::ports::store::RegisteredConfig;
        use crate::ports::store::memory::MemoryStore;
        let store = MemoryStore::new();
        assert!(deployed(&store).await.unwrap().is_none(), "nothing registered yet");
        let (v1, v2) = (config(V1), config(&V1.replace("timeout: 7d", "timeout: 9d")));
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let start = |c: &Config, minutes: i64| {
            let at = t0 + time::Duration::minutes(minutes);
            RegisteredConfig {
                version: c.version.clone(),
                canonical: c.canonical.clone(),
                registered_at: at,
                started_at: at,
            }
        };
        let version = |d: Option<(Config, String)>| d.map(|(_, v)| v);
        store.register_config(&start(&v1, 0), true).await.unwrap();
        store.register_config(&start(&v2, 10), true).await.unwrap();
        assert_eq!(version(deployed(&store).await.unwrap()), Some(v2.version.clone()));
        // Rolled back: v1's functions start again.
        store.register_config(&start(&v1, 20), true).await.unwrap();
        assert_eq!(version(deployed(&store).await.unwrap()), Some(v1.version.clone()));
    }

    fn live(states: &[State]) -> Live {
        Live::count(&records(states))
    }

    fn records(states: &[State]) -> Vec<RecordHead> {
        let head = |(i, state): (usize, &State)| RecordHead {
            workflow: WorkflowName::parse("order-review").unwrap(),
            key: CorrelationKey::parse(format!("k{i}")).unwrap(),
            state: *state,
            config_version: "v1".into(),
        };
        states.iter().enumerate().map(head).collect()
    }

    fn kinds(p: &RolloutPlan) -> Vec<(&'static str, Class)> {
        p.changes.iter().map(|c| (c.kind, c.class)).collect()
    }

    #[test]
    fn the_same_config_changes_nothing() {
        let p = plan(&config(V1), &config(V1), &live(&[State::Waiting { step: 0 }]));
        assert!(p.changes.is_empty());
        assert_eq!(p.verdict, Class::Safe);
        assert_eq!(p.from_version, p.to_version);
    }

    #[test]
    fn the_canonical_form_reads_back_as_the_same_config_whatever_the_key_order() {
        let yaml = V1.replace(
            "start: { when: { type: [\"order.placed\"] }, key: /subject }",
            "start: { key: /subject, when: { type: [\"order.placed\"], data: { total: [{ numeric: [\">=\", 1000] }] } } }",
        );
        let written = config(&yaml);
        let registered = config(&written.canonical);
        assert_eq!(registered.version, written.version);
        let p = plan(&registered, &written, &live(&[State::Waiting { step: 0 }]));
        assert!(p.changes.is_empty(), "{:?}", kinds(&p));
        let reordered = yaml
            .replace("when: { type: [\"order.placed\"], data:", "when: { data:")
            .replace("1000] }] } } }", "1000] }] }, type: [\"order.placed\"] } }");
        assert_eq!(config(&reordered).version, written.version, "key order is not meaning");
    }

    #[test]
    fn an_appended_step_is_safe_and_counts_the_live_records_it_touches() {
        let to = V1.replace(
            "        timeout: 7d\n",
            "        timeout: 7d\n      - name: archive\n        timeout: 1d\n",
        );
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 1 }]));
        assert_eq!(kinds(&p), [("step_appended", Class::Safe)]);
        assert_eq!(p.changes[0].touches[0].records, 1);
        assert!(
            p.changes[0].why.contains("finish on the config version they started on"),
            "{}",
            p.changes[0].why
        );
        let p = plan(&config(V1), &config(&to), &live(&[]));
        assert_eq!(kinds(&p), [("step_appended", Class::Safe)]);
        assert!(p.changes[0].touches.is_empty());
    }

    #[test]
    fn an_inserted_step_and_a_rename_are_named_and_safe_with_pinning() {
        let to = V1.replace("name: manual-review", "name: risk-review").replace(
            "      - name: payment",
            "      - name: fraud-check\n        timeout: 1h\n      - name: payment",
        );
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 0 }, State::Pending]));
        assert_eq!(kinds(&p), [("step_renamed", Class::Safe), ("step_inserted", Class::Safe)]);
        assert!(p.changes[0].detail.contains("manual-review renamed risk-review"), "{}", p.changes[0].detail);
        assert!(p.changes[0].why.contains("old name"), "{}", p.changes[0].why);
        assert_eq!(p.changes[1].touches.iter().map(|t| t.records).sum::<u64>(), 2);
        assert_eq!(p.verdict, Class::Safe);
    }

    #[test]
    fn live_records_are_summed_per_workflow_and_version_whatever_their_state() {
        let mut records =
            records(&[State::Waiting { step: 0 }, State::Advancing { step: 1 }, State::Pending]);
        records[2].config_version = "v2".into();
        records.extend(self::records(&[State::Succeeded]));
        let by_version = Live::count(&records).by_version().expect("counted");
        let row = |v: &str, n| LiveVersion { workflow: "order-review".into(), version: v.into(), records: n };
        assert_eq!(by_version, [row("v1", 2), row("v2", 1)], "terminal records are not live");
        assert_eq!(Live::unknown().by_version(), None);
    }

    #[test]
    fn groups_added_renamed_regrouped_or_made_optional_are_named_and_safe_with_pinning() {
        let grouped = |name: &str, branches: &[&str], optional: &str| {
            let branches: String = branches
                .iter()
                .map(|b| {
                    let opt = if *b == optional { ", optional: true" } else { "" };
                    format!("            - {{ name: {b}, requires: [x], timeout: 1h{opt} }}\n")
                })
                .collect();
            format!(
                "workflows:\n  order-review:\n    start: {{ when: {{ type: [\"order.placed\"] }}, key: /subject }}\n    steps:\n      \
                 - name: manual-review\n        requires: [decision]\n        timeout: 2d\n      \
                 - parallel:\n          name: {name}\n          branches:\n{branches}"
            )
        };
        let v1 = config(&grouped("checks", &["fraud", "credit"], ""));
        let same = plan(&v1, &v1, &live(&[State::Waiting { step: 1 }]));
        assert!(same.changes.is_empty(), "{:?}", same.changes);
        let renamed = plan(&v1, &config(&grouped("risk", &["fraud", "credit"], "")), &live(&[]));
        assert_eq!(kinds(&renamed), [("group_renamed", Class::Safe)]);
        let regrouped =
            plan(&v1, &config(&grouped("checks", &["fraud", "credit", "address"], "address")), &live(&[]));
        assert_eq!(
            kinds(&regrouped),
            [("step_appended", Class::Safe), ("group_branches_changed", Class::Safe)]
        );
        let optional = plan(&v1, &config(&grouped("checks", &["fraud", "credit"], "credit")), &live(&[]));
        assert_eq!(kinds(&optional), [("branch_made_optional", Class::Safe)]);
        let added = plan(&config(V1), &v1, &live(&[State::Waiting { step: 0 }]));
        assert!(kinds(&added).contains(&("group_added", Class::Safe)), "{:?}", kinds(&added));
    }

    #[test]
    fn reordered_steps_are_safe_with_pinning_and_count_the_live_records() {
        let to = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: payment
        requires: [payment_ref]
        timeout: 7d
      - name: manual-review
        requires: [decision]
        timeout: 2d
"#;
        let p = plan(
            &config(V1),
            &config(to),
            &live(&[State::Waiting { step: 1 }, State::Advancing { step: 0 }]),
        );
        assert_eq!(kinds(&p), [("steps_reordered", Class::Safe)]);
        assert!(
            p.changes[0].detail.contains("manual-review, payment -> payment, manual-review"),
            "{}",
            p.changes[0].detail
        );
        assert_eq!(p.changes[0].touches.iter().map(|t| t.records).sum::<u64>(), 2);
    }

    #[test]
    fn a_changed_start_pattern_or_restart_policy_decides_new_starts_only() {
        let to = V1
            .replace(
                r#"when: { type: ["order.placed"] }"#,
                r#"when: { type: ["order.placed", "order.created"] }"#,
            )
            .replace("    steps:", "    on_restart: never\n    steps:");
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 0 }, State::Succeeded]));
        assert_eq!(kinds(&p), [("start_pattern_changed", Class::Safe), ("on_restart_changed", Class::Safe)]);
        assert!(p.changes.iter().all(|c| c.touches.is_empty()), "new starts only: no live record is touched");
        assert!(p.changes[1].detail.contains("AfterTerminal -> Never"), "{}", p.changes[1].detail);
        assert_eq!(p.verdict, Class::Safe);
    }

    #[test]
    fn a_removed_workflow_with_live_records_breaks() {
        let to = "workflows:\n  other:\n    start: { when: { type: [\"x\"] }, key: /subject }\n    steps:\n      - name: s\n        timeout: 1h\n";
        let p = plan(&config(V1), &config(to), &live(&[State::Advancing { step: 1 }]));
        assert_eq!(kinds(&p), [("workflow_removed", Class::Breaking), ("workflow_added", Class::Safe)]);
        let p = plan(&config(V1), &config(to), &live(&[]));
        assert_eq!(p.verdict, Class::Safe);
    }

    #[test]
    fn a_changed_key_pointer_breaks_even_without_live_records() {
        let to = V1.replace("key: /subject", "key: /data/order_id");
        let p = plan(&config(V1), &config(&to), &live(&[]));
        assert_eq!(kinds(&p), [("key_changed", Class::Breaking)]);
    }

    #[test]
    fn requires_is_safe_and_counts_only_the_records_at_that_step() {
        let to = V1.replace("requires: [payment_ref]", "requires: [payment_ref, receipt]");
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 0 }]));
        assert_eq!(kinds(&p), [("requires_changed", Class::Safe)]);
        assert!(p.changes[0].touches.is_empty());
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 1 }]));
        assert_eq!(kinds(&p), [("requires_changed", Class::Safe)]);
        assert_eq!(p.changes[0].touches[0].records, 1);
    }

    #[test]
    fn a_timer_inserted_then_changed_is_reported_with_the_records_sleeping_at_it() {
        let timer = |after: &str| {
            V1.replace(
                "      - name: payment\n",
                &format!(
                    "      - {{ name: cool-off, timer: {{ after: {after} }} }}\n      - name: payment\n"
                ),
            )
        };
        let p = plan(&config(V1), &config(&timer("24h")), &live(&[State::Waiting { step: 0 }]));
        assert!(kinds(&p).contains(&("step_inserted", Class::Safe)), "{:?}", kinds(&p));
        let p = plan(&config(&timer("24h")), &config(&timer("12h")), &live(&[State::Waiting { step: 1 }]));
        let changed: Vec<&Change> = p.changes.iter().filter(|c| c.kind == "timer_changed").collect();
        assert_eq!(changed.len(), 1, "{:?}", kinds(&p));
        assert_eq!(changed[0].detail, "cool-off: timer after 86400s -> after 43200s");
        assert_eq!(changed[0].touches[0].records, 1, "the record sleeping at the timer");
    }

    #[test]
    fn reminders_and_escalation_changed_are_reported_with_the_records_waiting_at_the_step() {
        let with = |notices: &str| {
            V1.replace("        requires: [decision]\n", &format!("        task: {{ title: \"Review\", queue: risk }}\n        requires: [decision]\n{notices}"))
        };
        let from = with("");
        let to = with(
            "        remind: { after: 1h, times: 2 }\n        escalate: [{ after: 1d, queue: leads }]\n",
        );
        let p = plan(&config(&from), &config(&to), &live(&[State::Waiting { step: 0 }]));
        let details: Vec<(&str, &str)> = p.changes.iter().map(|c| (c.kind, c.detail.as_str())).collect();
        assert!(
            details.contains(&(
                "remind_changed",
                "manual-review: remind none -> after 3600s, every 3600s, 2 time(s)"
            )),
            "{details:?}"
        );
        assert!(
            details.contains(&("escalate_changed", "manual-review: escalate none -> [leads after 86400s]")),
            "{details:?}"
        );
        assert!(p.changes.iter().filter(|c| c.kind.ends_with("_changed")).all(|c| c.touches[0].records == 1));
    }

    #[test]
    fn a_quorum_rule_changed_is_reported_in_words_with_the_records_it_touches() {
        let to =
            V1.replace("requires: [payment_ref]", "requires: { at_least: 1, of: [payment_ref, voucher] }");
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 1 }]));
        assert_eq!(kinds(&p), [("requires_changed", Class::Safe)]);
        assert_eq!(
            p.changes[0].detail,
            "payment: requires all of [payment_ref] -> any of [payment_ref, voucher]"
        );
        assert_eq!(p.changes[0].touches[0].records, 1);
    }

    #[test]
    fn a_removed_or_renamed_step_that_took_events_is_safe_for_records_on_their_version() {
        let with_events = V1.replace(
            "requires: [payment_ref]\n",
            "requires: [payment_ref]\n        accepts_events: { type: [\"payment.settled\"] }\n",
        );
        let renamed = with_events.replace("name: payment", "name: settle");
        let p = plan(&config(&with_events), &config(&renamed), &live(&[State::Waiting { step: 1 }]));
        assert_eq!(kinds(&p), [("step_renamed", Class::Safe)]);
        let removed = "workflows:\n  order-review:\n    start: { when: { type: [\"order.placed\"] }, key: /subject }\n    steps:\n      - name: manual-review\n        requires: [decision]\n        timeout: 2d\n";
        let p = plan(&config(&with_events), &config(removed), &live(&[State::Waiting { step: 0 }]));
        assert_eq!(
            kinds(&p),
            [("step_removed", Class::Safe)],
            "events are read in each record's own version"
        );
    }

    #[test]
    fn changed_accepts_events_are_safe_and_count_the_records_at_or_before_the_step() {
        let to = V1.replace(
            "requires: [payment_ref]\n",
            "requires: [payment_ref]\n        accepts_events: { type: [\"payment.settled\"] }\n",
        );
        let p = plan(&config(V1), &config(&to), &live(&[State::Waiting { step: 0 }, State::Succeeded]));
        assert_eq!(kinds(&p), [("accepts_events_changed", Class::Safe)]);
        assert_eq!(p.changes[0].touches.iter().map(|t| t.records).sum::<u64>(), 1);
    }

    #[test]
    fn compensations_added_changed_or_removed_are_classified_against_the_records_that_reached_the_step() {
        let undo = |attempts: u32| {
            format!(
                "requires: [payment_ref]\n        compensate: {{ task: {{ title: \"Refund {{key}}\", queue: q }}, timeout: 1d, attempts: {attempts} }}\n"
            )
        };
        let (v1, added) = (config(V1), config(&V1.replace("requires: [payment_ref]\n", &undo(3))));
        let changed = config(&V1.replace("requires: [payment_ref]\n", &undo(5)));
        let reached = [State::Waiting { step: 0 }, State::Waiting { step: 1 }, State::Compensating];
        let p = plan(&v1, &added, &live(&reached));
        assert_eq!(kinds(&p), [("compensation_added", Class::Safe)]);
        // Only the records at payment or compensating: the one at review has not reached it.
        assert_eq!(p.changes[0].touches.iter().map(|t| t.records).sum::<u64>(), 2);
        assert!(
            p.changes[0].detail.contains(r#"none -> "Refund {key}" on q within 86400s, 3 attempt(s)"#),
            "{}",
            p.changes[0].detail
        );
        assert_eq!(kinds(&plan(&added, &changed, &live(&reached))), [("compensation_changed", Class::Safe)]);
        assert_eq!(kinds(&plan(&changed, &v1, &live(&reached))), [("compensation_removed", Class::Safe)]);
    }

    #[test]
    fn uncounted_live_records_need_a_person_and_timeouts_are_safe() {
        let to = V1.replace("name: manual-review", "name: check").replace(
            "requires: [payment_ref]\n",
            "requires: [payment_ref]\n        accepts_events: { type: [\"x\"] }\n",
        );
        let p = plan(&config(V1), &config(&to), &Live::unknown());
        assert_eq!(kinds(&p), [("step_renamed", Class::Safe), ("accepts_events_changed", Class::Safe)]);
        let removed = "workflows:\n  other:\n    start: { when: { type: [\"x\"] }, key: /subject }\n    steps:\n      - name: s\n        timeout: 1h\n";
        let p = plan(&config(V1), &config(removed), &Live::unknown());
        assert_eq!(kinds(&p), [("workflow_removed", Class::NeedsHuman), ("workflow_added", Class::Safe)]);
        let to = V1.replace("timeout: 7d", "timeout: 9d");
        let p = plan(&config(V1), &config(&to), &Live::unknown());
        // The default buffer_ttl follows the timeout: it changes too.
        assert_eq!(kinds(&p), [("timeout_changed", Class::Safe), ("buffer_ttl_changed", Class::Safe)]);
    }
}
