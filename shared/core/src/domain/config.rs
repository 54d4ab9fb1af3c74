//! Workflow definitions: load `infra/workflows.yaml`, validate it, and explain what is wrong.
//!
//! The file is parsed with serde-saphyr (a maintained YAML 1.2 parser; serde_yaml is archived)
//! into a plain JSON value, then checked field by field by hand rather than by serde derive. That
//! is deliberate: derive stops at the first problem and names it by line, while an operator fixing
//! a config wants every problem at once, each named by its path
//! (`workflows.order-review.steps[1].timeout: missing`). Duplicate keys are an error, as are
//! unknown fields: a typo such as `timout` must not silently drop a deadline.
//!
//! Rules kept here (docs/WORKFLOWS.md): names are valid and unique, every step has a timeout, durations
//! parse, `heartbeat` is shorter than `timeout`, `requires` names are unique identifiers, the key
//! is a JSON pointer, and every pattern compiles.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::domain::event::Event;
use crate::domain::ids::{CorrelationKey, IdError, StepName, WorkflowName};
pub use crate::domain::lifecycle::Remind;
pub use crate::domain::lifecycle::Requires;
pub use crate::domain::lifecycle::Retry;
use crate::domain::lifecycle::{OnRestart, Plan, Span, StepPlan, Timer, Until};
use crate::domain::pattern::Pattern;
use crate::limits::ATTEMPT_OPEN_LAG;

/// Where `BATON_CONFIG` points by default.
pub const DEFAULT_PATH: &str = "infra/workflows.yaml";

/// The longest deadline a step may have: Step Functions standard executions last at most a year.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The whole config: every workflow, in the order the file defines them.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub workflows: Vec<Workflow>,
    /// Which start and `accepts_events` patterns an event of a given `type` can match.
    pub routes: Routes,
    /// A stable hash of the canonical form: `v` and 12 hex digits of its SHA-256. Comments,
    /// formatting and the order of keys in mappings do not change it; any change of meaning
    /// does.
    pub version: String,
    /// The canonical form: the parsed file as JSON with every mapping's keys sorted. Parsed
    /// again (JSON is YAML), it gives this very config; the table keeps it by version.
    pub canonical: String,
}

/// One workflow definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub name: WorkflowName,
    /// Which events start it.
    pub when: Pattern,
    /// JSON pointer into the normalised event: the correlation key.
    pub key: String,
    pub on_restart: OnRestart,
    /// Every step, and every branch of every parallel group, in the order the config lists
    /// them: a group's branches are consecutive. A step's index here is its number in records,
    /// inboxes and tasks.
    pub steps: Vec<Step>,
    /// The parallel groups, in order, by the steps they span.
    pub groups: Vec<Group>,
    /// The version of the config this definition belongs to: records started on it keep it.
    pub config_version: String,
}

/// A parallel group: branches that open together, each waiting on its own task token, and a
/// workflow that moves on once every branch has an outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: StepName,
    /// The index of its first branch in [`Workflow::steps`].
    pub first: u32,
    /// The index of its last branch.
    pub last: u32,
}

impl Group {
    /// The most branches a group may have. Each open branch keeps its task token (up to 2,048
    /// characters), its failed attempts and its share of the inputs in the record's one DynamoDB
    /// item (400 KB): at 20, the largest tokens, every attempt failed and the group's inputs
    /// (128 KiB, held twice while resumes are owed) still fit once the engine has cut the
    /// attempts' texts (`fit_item_limit`).
    pub const MAX_BRANCHES: usize = 20;

    pub fn contains(&self, step: u32) -> bool {
        (self.first..=self.last).contains(&step)
    }
}

/// One place in a workflow's sequence: a step, or a parallel group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Position<'w> {
    Step(u32, &'w Step),
    Group(&'w Group),
}

/// One step: a task token parked until its required inputs are present, or its deadline passes.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: StepName,
    /// The operator-facing work created when the step starts waiting.
    pub task: Option<TaskTemplate>,
    /// Inputs that must be present before the step advances: all of a list (`requires: [a, b]`),
    /// any of it (`requires: { any_of: [a, b] }`) or at least N of it (`requires: { at_least:
    /// 2, of: [a, b, c] }`).
    pub requires: Requires,
    pub timeout: Duration,
    pub heartbeat: Option<Duration>,
    /// Domain events that may supply this step's inputs, correlated by the workflow's key.
    pub accepts_events: Option<Pattern>,
    /// Whether callbacks may supply them (`accepts_callbacks`, default true). A step fed only by
    /// domain events can refuse callbacks, so that no holder of a webhook secret can complete
    /// it.
    pub accepts_callbacks: bool,
    /// How long an input that arrives before this step waits is kept (`buffer_ttl`). Default:
    /// the step's timeout plus [`BUFFER_MARGIN`]: an early input can still be applied by
    /// anything up to a full step later.
    pub buffer_ttl: Duration,
    /// A parallel branch whose failure or timeout does not fail the workflow (`optional`,
    /// default false; only branches may set it). A workflow that ends with one that did not
    /// succeed ends `degraded`.
    pub optional: bool,
    /// How many times a failed attempt runs again (`retry`; `None`: one attempt).
    pub retry: Option<Retry>,
    /// How the step is undone when a later failure (or `baton cancel --compensate`) ends the
    /// workflow after it completed (`compensate`; `None`: it is not undone).
    pub compensate: Option<Compensate>,
    /// A timer step (`timer: { after: 24h }`, or `timer: { until: /data/starts_at }`): it waits
    /// for time alone, this long after Step Functions reaches it or until the time the start
    /// event holds at the pointer, then the workflow goes on. It takes no input, publishes no
    /// task, and has nothing to undo.
    pub timer: Option<Timer>,
    /// Reminders of the step's task while it waits (`remind: { after: 1d, every: 1d, times: 3 }`):
    /// each a task event of its own on the step's queue.
    pub remind: Option<Remind>,
    /// Escalation levels while it waits (`escalate: [{ after: 2d, queue: leads }]`): each, at its
    /// time from when the step began to wait, gives the step's task to its own queue as well.
    pub escalate: Vec<Escalation>,
}

/// One escalation level: `after` the step began to wait, its `task` (the step's title unless it
/// names its own) goes to its own `queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    pub after: Duration,
    pub task: TaskTemplate,
}

impl Escalation {
    /// The most levels a step may declare.
    pub const MAX_LEVELS: usize = 5;
}

/// A step's compensation: the task that undoes it, how long its wait may last, and how many
/// times the task is published in all, the first included (each failure publishes it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compensate {
    pub task: TaskTemplate,
    pub timeout: Duration,
    pub attempts: u32,
}

impl Compensate {
    /// `attempts` when the config leaves it out.
    pub const DEFAULT_ATTEMPTS: u32 = 3;
}

/// Added to a timer's `after` to get its step's default `timeout`: room for the sweep that wakes
/// it to be late, before Step Functions times the step out.
pub const TIMER_MARGIN: Duration = Duration::from_secs(15 * 60);

/// A timer step named `name` of `timeout`, its `timer` left to set: no task, no input, nothing to
/// undo.
fn timer_only(name: StepName, timeout: Duration) -> Step {
    Step {
        name,
        task: None,
        requires: Requires::default(),
        timeout,
        heartbeat: None,
        accepts_events: None,
        accepts_callbacks: false,
        buffer_ttl: timeout.saturating_add(BUFFER_MARGIN),
        optional: false,
        retry: None,
        compensate: None,
        timer: None,
        remind: None,
        escalate: Vec::new(),
    }
}

/// Added to a step's timeout to get the default `buffer_ttl`.
pub const BUFFER_MARGIN: Duration = Duration::from_secs(3600);

/// The operator task to create. `{key}`, `{workflow}`, `{step}` and `{generation}` in the title
/// are filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTemplate {
    pub title: String,
    pub queue: String,
}

impl TaskTemplate {
    pub const PLACEHOLDERS: [&'static str; 4] = ["key", "workflow", "step", "generation"];

    /// The longest `queue`: it names an SQS queue, `<stack>_tasks-<queue>`, and SQS names end at
    /// 80 characters, which leaves a stack name of up to 33.
    pub const MAX_QUEUE_LEN: usize = 40;

    /// Whether `queue` can name a task queue: 1 to [`Self::MAX_QUEUE_LEN`] of the characters
    /// an SQS queue name may hold (ASCII letters, digits, `-` and `_`).
    pub fn is_queue_name(queue: &str) -> bool {
        (1..=Self::MAX_QUEUE_LEN).contains(&queue.len())
            && queue.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }

    /// The title with its placeholders filled in.
    pub fn render(&self, workflow: &str, key: &str, step: &str, generation: u32) -> String {
        self.title
            .replace("{key}", key)
            .replace("{workflow}", workflow)
            .replace("{step}", step)
            .replace("{generation}", &generation.to_string())
    }
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError::new(
                String::new(),
                format!("cannot read {}: {e}", path.display()),
            )])
        })?;
        Config::parse(&text)
    }

    /// Parses and validates YAML text, collecting every problem.
    ///
    /// Parsing is a function of the text alone, and the same few texts are parsed again and
    /// again (each engine reads every registered version back; the simulation builds its stacks
    /// from a few hundred configs, thousands of times): the last configs parsed on this thread are
    /// kept, by text, and a text parsed before is answered with a copy.
    pub fn parse(yaml: &str) -> Result<Config, ConfigErrors> {
        if let Some(config) = parsed::get(yaml) {
            return Ok(config);
        }
        let config = Self::parse_text(yaml)?;
        parsed::keep(yaml, &config);
        Ok(config)
    }

    /// [`Config::parse`], without the configs kept.
    fn parse_text(yaml: &str) -> Result<Config, ConfigErrors> {
        let (root, canonical_text) = match read_canonical(yaml) {
            Some(root) => (root, Some(yaml)),
            None => {
                let root: Value = serde_saphyr::from_str(yaml).map_err(|e| {
                    ConfigErrors(vec![ConfigError::new(String::new(), format!("not valid YAML: {e}"))])
                })?;
                (root, None)
            }
        };
        let mut v = Validator::default();
        let config = v.config(&root);
        match (config, v.errors.is_empty()) {
            (Some(mut config), true) => {
                config.canonical = canonical_text.map_or_else(|| canonical(&root).to_string(), str::to_owned);
                config.version = version_of(&config.canonical);
                for w in &mut config.workflows {
                    w.config_version = config.version.clone();
                }
                Ok(config)
            }
            _ => Err(ConfigErrors(v.errors)),
        }
    }

    pub fn workflow(&self, name: &str) -> Option<&Workflow> {
        self.workflows.iter().find(|w| w.name.as_str() == name)
    }

    /// The pattern a route names: a workflow's start, or a step's `accepts_events`.
    pub fn pattern(&self, route: Route) -> Option<&Pattern> {
        let workflow = self.workflows.get(route.workflow)?;
        match route.step {
            None => Some(&workflow.when),
            Some(i) => workflow.steps.get(i)?.accepts_events.as_ref(),
        }
    }
}

/// The value of `text` when it is a config's canonical form already (each registered version is
/// kept so in the table, and every engine reads them back), read as the JSON it is: a fraction
/// of the YAML parser's work. Only a text that writing the value out again gives back exactly
/// (serde_json's own compact form, keys sorted) is read so; anything else is YAML's to read.
fn read_canonical(text: &str) -> Option<Value> {
    if !text.starts_with('{') {
        return None;
    }
    let root: Value = serde_json::from_str(text).ok()?;
    // (Compared as text: a `Value` equals a `&str` when it is that string.)
    let written = canonical(&root).to_string();
    (written == text).then_some(root)
}

/// `value` with every object's keys in sorted order, recursively.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&map[k]))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The configs [`Config::parse`] keeps, by the text they were parsed from: the last
/// [`parsed::KEPT`] texts parsed on the thread.
mod parsed {
    use std::cell::RefCell;
    use std::collections::{HashMap, VecDeque};

    use super::Config;

    /// How many texts are kept per thread (each config with its text: tens of kilobytes).
    pub(super) const KEPT: usize = 256;

    #[derive(Default)]
    struct Kept {
        by_text: HashMap<String, Config>,
        /// The texts kept, oldest first: the oldest goes when one more is kept.
        order: VecDeque<String>,
    }

    thread_local! {
        static KEPT_CONFIGS: RefCell<Kept> = RefCell::new(Kept::default());
    }

    pub(super) fn get(text: &str) -> Option<Config> {
        KEPT_CONFIGS.with(|k| k.borrow().by_text.get(text).cloned())
    }

    pub(super) fn keep(text: &str, config: &Config) {
        KEPT_CONFIGS.with(|k| {
            let mut k = k.borrow_mut();
            if k.by_text.contains_key(text) {
                return;
            }
            if k.order.len() >= KEPT
                && let Some(oldest) = k.order.pop_front()
            {
                k.by_text.remove(&oldest);
            }
            k.order.push_back(text.to_owned());
            k.by_text.insert(text.to_owned(), config.clone());
        });
    }
}

/// A config's version from its canonical form.
fn version_of(canonical: &str) -> String {
    use sha2::Digest;
    format!("v{}", &hex::encode(sha2::Sha256::digest(canonical.as_bytes()))[..12])
}

impl Workflow {
    /// What the lifecycle needs from this definition.
    pub fn plan(&self) -> Plan {
        let steps = (0u32..)
            .zip(&self.steps)
            .map(|(i, s)| StepPlan {
                requires: s.requires.clone(),
                group: self.group_of(i).map(|g| Span { first: g.first, last: g.last }),
                optional: s.optional,
                timeout: s.timeout,
                heartbeat: s.heartbeat,
                retry: s.retry,
                compensate: s.compensate.as_ref().map(|c| c.attempts),
                timer: s.timer.clone(),
                remind: s.remind,
                escalate: s.escalate.iter().map(|e| e.after).collect(),
            })
            .collect();
        Plan { steps, on_restart: self.on_restart, version: self.config_version.clone() }
    }

    /// The group a step is a branch of.
    pub fn group_of(&self, step: u32) -> Option<&Group> {
        self.groups.iter().find(|g| g.contains(step))
    }

    /// The workflow's sequence: each step, or each group in place of its branches.
    pub fn positions(&self) -> Vec<Position<'_>> {
        let mut positions = Vec::new();
        for (i, step) in (0u32..).zip(&self.steps) {
            match self.group_of(i) {
                Some(g) if g.first == i => positions.push(Position::Group(g)),
                Some(_) => {}
                None => positions.push(Position::Step(i, step)),
            }
        }
        positions
    }

    /// Does `event` start this workflow? `None` when the pattern does not match; otherwise the
    /// correlation key, or why the event has none.
    pub fn starts_on(&self, event: &Event) -> Option<Result<CorrelationKey, KeyError>> {
        self.when.matches(&event.normalised()).then(|| self.correlation_key(event))
    }

    /// The correlation key the event carries at this workflow's key pointer.
    pub fn correlation_key(&self, event: &Event) -> Result<CorrelationKey, KeyError> {
        self.correlation_key_in(&event.normalised())
    }

    /// [`Workflow::correlation_key`] of an event already normalised ([`Event::normalised`]).
    pub fn correlation_key_in(&self, normalised: &Value) -> Result<CorrelationKey, KeyError> {
        let text = crate::domain::event::text_at(normalised, &self.key)
            .ok_or_else(|| KeyError::Missing { pointer: self.key.clone() })?;
        CorrelationKey::parse(text).map_err(|source| KeyError::Invalid { pointer: self.key.clone(), source })
    }

    /// What each `timer: { until }` step reads from a start event (normalised): its time, or
    /// why there is none, kept by the record for when Step Functions reaches the step.
    pub fn untils(&self, normalised: &Value) -> Vec<Until> {
        (0u32..)
            .zip(&self.steps)
            .filter_map(|(i, s)| match &s.timer {
                Some(Timer::Until(pointer)) => Some(Until::read(i, pointer, normalised)),
                _ => None,
            })
            .collect()
    }

    /// The index of the step with this name.
    pub fn step_index(&self, name: &str) -> Option<u32> {
        self.steps.iter().position(|s| s.name.as_str() == name).and_then(|i| u32::try_from(i).ok())
    }

    /// The longest an execution of this workflow can run: at each position, its longest wait
    /// (a step's `timeout`; a parallel group's branches wait side by side, so its longest
    /// branch's); then, when the last position fails at its deadline, every compensation's
    /// wait, last position first (a group's side by side, so its longest). A `retry` adds
    /// nothing: every attempt runs inside the step's one token wait and its one `timeout`
    /// (asl.rs), as a compensation's attempts run inside its one wait.
    pub fn longest_run(&self) -> LongestRun {
        let longest = |waits: &mut dyn Iterator<Item = Duration>| waits.max().unwrap_or_default();
        let mut run = LongestRun::default();
        for position in self.positions() {
            let steps: Vec<&Step> = match position {
                Position::Step(_, step) => vec![step],
                Position::Group(g) => (g.first..=g.last).filter_map(|i| self.steps.get(i as usize)).collect(),
            };
            run.forward += longest(&mut steps.iter().map(|s| s.timeout));
            run.compensations +=
                longest(&mut steps.iter().filter_map(|s| Some(s.compensate.as_ref()?.timeout)));
        }
        run
    }
}

/// How long an execution can run, at most ([`Workflow::longest_run`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LongestRun {
    /// Through every position, each waiting out its deadline.
    pub forward: Duration,
    /// Then through every compensation, each waiting out its `timeout`.
    pub compensations: Duration,
}

impl LongestRun {
    pub fn total(&self) -> Duration {
        self.forward.saturating_add(self.compensations)
    }
}

/// A duration as the config writes one, in its largest whole unit (`400d`, `36h`, `90s`).
fn spell(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// One pattern an event may match: a workflow's start (`step: None`) or one step's
/// `accepts_events`, by index into [`Config::workflows`] and its steps. Ordered as the config
/// lists them: a workflow's start before its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub workflow: usize,
    pub step: Option<usize>,
}

/// The patterns an event can match, found by its `type` instead of trying every pattern of
/// every workflow: a pattern that pins `type` to exact strings (`type: ["order.placed"]`, as
/// almost every start does) is listed under each of them; one that does not is tried for every
/// event. An event's `type` is always a string, so a pattern listed under other types cannot
/// match it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routes {
    by_type: std::collections::HashMap<String, Vec<Route>>,
    any_type: Vec<Route>,
}

impl Routes {
    fn new(workflows: &[Workflow]) -> Routes {
        let mut routes = Routes::default();
        for (w, workflow) in workflows.iter().enumerate() {
            let steps = workflow.steps.iter().enumerate();
            let patterns = std::iter::once((None, Some(&workflow.when)))
                .chain(steps.map(|(i, step)| (Some(i), step.accepts_events.as_ref())));
            for (step, pattern) in patterns {
                let Some(pattern) = pattern else { continue };
                let route = Route { workflow: w, step };
                match pattern.required_strings("type") {
                    Some(types) => {
                        for t in types {
                            let listed = routes.by_type.entry(t.to_owned()).or_default();
                            if listed.last() != Some(&route) {
                                listed.push(route);
                            }
                        }
                    }
                    None => routes.any_type.push(route),
                }
            }
        }
        routes
    }

    /// Every pattern an event of this `type` can match, in config order. The caller still
    /// matches each one: this only leaves out those that cannot.
    pub fn candidates(&self, event_type: &str) -> Vec<Route> {
        let typed = self.by_type.get(event_type).map(Vec::as_slice).unwrap_or_default();
        if self.any_type.is_empty() {
            return typed.to_vec();
        }
        let mut all: Vec<Route> = typed.iter().chain(&self.any_type).copied().collect();
        all.sort_unstable();
        all
    }
}

/// Why an event that matched has no usable correlation key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the event has no string or number at the key pointer {pointer}")]
    Missing { pointer: String },
    #[error("the value at the key pointer {pointer} is not a valid correlation key: {source}")]
    Invalid {
        pointer: String,
        #[source]
        source: IdError,
    },
}

/// One problem, at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path to the field, e.g. `workflows.order-review.steps[1].timeout`.
    pub path: String,
    pub message: String,
}

impl ConfigError {
    fn new(path: String, message: impl Into<String>) -> Self {
        ConfigError { path, message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a config, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "invalid workflow config ({n} problem{}):", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// Parses `30s`, `15m`, `2h`, `2d`: a positive whole number and one unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(unit_at);
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?} is not a duration; write a whole number and a unit: 30s, 15m, 2h or 2d"
            ));
        }
    };
    let n: u64 = digits.parse().map_err(|_| {
        format!("{text:?} is not a duration; write a whole number and a unit: 30s, 15m, 2h or 2d")
    })?;
    if n == 0 {
        return Err("must be longer than zero".into());
    }
    n.checked_mul(scale).map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

/// Checks an RFC 6901 JSON pointer: `/` separated, `~` only as `~0` or `~1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer; it must start with '/', e.g. /subject or /data/order_id"
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!("{pointer:?}: '~' must be escaped as ~0 ('~') or ~1 ('/')"));
        }
    }
    if pointer.split('/').skip(1).any(str::is_empty) {
        return Err(format!("{pointer:?} has an empty segment"));
    }
    Ok(())
}

fn is_input_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && s.len() <= 64
}

/// Walks the parsed YAML, collecting errors with their paths.
#[derive(Default)]
struct Validator {
    errors: Vec<ConfigError>,
}

impl Validator {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(ConfigError::new(path.to_owned(), message));
    }

    /// The mapping at `path`, or an error; unknown fields are errors too.
    fn object<'v>(&mut self, path: &str, v: &'v Value, allowed: &[&str]) -> Option<&'v Map<String, Value>> {
        let Some(map) = v.as_object() else {
            self.err(path, format!("expected a mapping, found {}", kind(v)));
            return None;
        };
        for k in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.err(&join(path, k), format!("unknown field; expected one of: {}", allowed.join(", ")));
        }
        Some(map)
    }

    fn required<'v>(&mut self, path: &str, map: &'v Map<String, Value>, field: &str) -> Option<&'v Value> {
        let v = map.get(field);
        if v.is_none() {
            self.err(&join(path, field), "missing");
        }
        v
    }

    fn string<'v>(&mut self, path: &str, v: &'v Value) -> Option<&'v str> {
        match v.as_str() {
            Some(s) if !s.trim().is_empty() => Some(s),
            Some(_) => {
                self.err(path, "must not be empty");
                None
            }
            None => {
                self.err(path, format!("expected a string, found {}", kind(v)));
                None
            }
        }
    }

    fn config(&mut self, root: &Value) -> Option<Config> {
        let top = self.object("", root, &["workflows"])?;
        let workflows = self.required("", top, "workflows")?;
        let Some(map) = workflows.as_object() else {
            self.err(
                "workflows",
                format!("expected a mapping of workflow name to definition, found {}", kind(workflows)),
            );
            return None;
        };
        if map.is_empty() {
            self.err("workflows", "defines no workflow");
        }
        let parsed: Vec<Option<Workflow>> = map.iter().map(|(name, def)| self.workflow(name, def)).collect();
        parsed.into_iter().collect::<Option<Vec<_>>>().map(|workflows| Config {
            routes: Routes::new(&workflows),
            workflows,
            version: String::new(),
            canonical: String::new(),
        })
    }

    fn workflow(&mut self, name: &str, def: &Value) -> Option<Workflow> {
        let path = format!("workflows.{name}");
        let wf_name = WorkflowName::parse(name).map_err(|e| self.err(&path, e.to_string())).ok();
        let map = self.object(&path, def, &["start", "on_restart", "steps"])?;

        let start_path = join(&path, "start");
        let start =
            self.required(&path, map, "start").and_then(|s| self.object(&start_path, s, &["when", "key"]));
        let when = start
            .and_then(|s| self.required(&start_path, s, "when"))
            .and_then(|w| self.pattern(&join(&start_path, "when"), w));
        let key = start.and_then(|s| self.required(&start_path, s, "key")).and_then(|k| {
            let kp = join(&start_path, "key");
            let k = self.string(&kp, k)?;
            check_pointer(k).map_err(|e| self.err(&kp, e)).ok().map(|_| k.to_owned())
        });

        let on_restart = match map.get("on_restart") {
            None => Some(OnRestart::default()),
            Some(Value::String(s)) if s == "after_terminal" => Some(OnRestart::AfterTerminal),
            Some(Value::String(s)) if s == "never" => Some(OnRestart::Never),
            Some(other) => {
                self.err(
                    &join(&path, "on_restart"),
                    format!("expected after_terminal or never, found {other}"),
                );
                None
            }
        };

        let sequence = self.required(&path, map, "steps").and_then(|s| self.steps(&join(&path, "steps"), s));
        let (steps, groups) = sequence?;
        let workflow = Workflow {
            name: wf_name?,
            when: when?,
            key: key?,
            on_restart: on_restart?,
            steps,
            groups,
            config_version: String::new(),
        };
        self.within_a_year(&path, &workflow);
        Some(workflow)
    }

    /// The one-year limit of a Standard execution, for the whole run: each `timeout` is checked
    /// against it on its own, but an execution that reaches it is stopped by Step Functions
    /// (`TIMED_OUT`) with no Catch and no report, so the record would wait for a report that
    /// never comes. Refused when the longest run ([`Workflow::longest_run`]) could pass it.
    fn within_a_year(&mut self, path: &str, workflow: &Workflow) {
        let run = workflow.longest_run();
        if run.total() <= MAX_TIMEOUT {
            return;
        }
        self.err(
            path,
            format!(
                "an execution could run {} (the steps' timeouts, a parallel group counted by its longest \
                 branch: {}; then, on the failure path, every compensation's timeout: {}), longer than the \
                 {} a Step Functions Standard execution may run, which ends it with no Catch and no report; \
                 shorten the timeouts so that they add up to {} at most",
                spell(run.total()),
                spell(run.forward),
                spell(run.compensations),
                spell(MAX_TIMEOUT),
                spell(MAX_TIMEOUT),
            ),
        );
    }

    fn pattern(&mut self, path: &str, v: &Value) -> Option<Pattern> {
        Pattern::parse(v)
            .map_err(|e| {
                let at = if e.path.is_empty() { path.to_owned() } else { format!("{path}.{}", e.path) };
                self.err(&at, e.message);
            })
            .ok()
    }

    /// The step list: steps and parallel groups, flattened into the steps (branches in place)
    /// and the groups that span them. Step, branch and group names are unique in a workflow.
    fn steps(&mut self, path: &str, v: &Value) -> Option<(Vec<Step>, Vec<Group>)> {
        let Some(list) = v.as_array() else {
            self.err(path, format!("expected a list of steps, found {}", kind(v)));
            return None;
        };
        if list.is_empty() {
            self.err(path, "a workflow needs at least one step");
        }
        let mut steps = Vec::new();
        let mut groups = Vec::new();
        let mut names = Vec::new();
        let mut complete = true;
        for (i, item) in list.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let first = u32::try_from(steps.len()).unwrap_or(u32::MAX);
            if item.get("parallel").is_some() {
                let parsed = self.group(&at, item, first, &mut names);
                complete &= parsed.as_ref().is_some_and(|(_, branches)| branches.len() >= 2);
                if let Some((g, branches)) = parsed {
                    groups.push(g);
                    steps.extend(branches);
                }
            } else {
                names.extend(raw_name(item).map(|n| (format!("{at}.name"), n)));
                match self.step(&at, item, false) {
                    Some(step) => steps.push(step),
                    None => complete = false,
                }
            }
        }
        // Duplicates are checked on the raw names, so a step with other problems still counts.
        let mut seen = HashSet::new();
        for (at, name) in names {
            if !seen.insert(name) {
                self.err(
                    &at,
                    format!("duplicate step name {name:?}; steps, branches and groups share one namespace"),
                );
            }
        }
        complete.then_some((steps, groups))
    }

    /// A `parallel` group: its name and its branches, each a step that may be `optional`.
    fn group<'v>(
        &mut self,
        path: &str,
        item: &'v Value,
        first: u32,
        names: &mut Vec<(String, &'v str)>,
    ) -> Option<(Group, Vec<Step>)> {
        self.object(path, item, &["parallel"])?;
        let path = join(path, "parallel");
        let map = self.object(&path, &item["parallel"], &["name", "branches"])?;
        names.extend(map.get("name").and_then(Value::as_str).map(|n| (join(&path, "name"), n)));
        let name = self.required(&path, map, "name").and_then(|n| {
            let np = join(&path, "name");
            let s = self.string(&np, n)?;
            StepName::parse(s).map_err(|e| self.err(&np, e.to_string())).ok()
        });
        let bp = join(&path, "branches");
        let list = self.required(&path, map, "branches").and_then(|b| {
            let list = b.as_array();
            if list.is_none() {
                self.err(&bp, format!("expected a list of branches, found {}", kind(b)));
            }
            list
        })?;
        if list.len() < 2 {
            self.err(&bp, format!("a parallel group needs at least two branches, found {}", list.len()));
        }
        if list.len() > Group::MAX_BRANCHES {
            self.err(
                &bp,
                format!(
                    "a parallel group has at most {} branches, found {}: every branch's token and inputs \
                     live in the record's one DynamoDB item",
                    Group::MAX_BRANCHES,
                    list.len()
                ),
            );
        }
        let mut branches = Vec::new();
        for (i, b) in list.iter().enumerate() {
            let at = format!("{bp}[{i}]");
            names.extend(raw_name(b).map(|n| (format!("{at}.name"), n)));
            branches.push(self.step(&at, b, true));
        }
        let branches: Vec<Step> = branches.into_iter().collect::<Option<_>>()?;
        // Step Functions can pass a group of optional branches only that all ended without
        // baton, before baton read a single branch's report: the record could not tell the group
        // passed from the group not reached. A required branch cannot end without baton's resume.
        if branches.len() >= 2 && branches.iter().all(|b| b.optional) {
            self.err(
                &bp,
                "a parallel group needs at least one branch that is not optional (make the one the workflow \
                 cannot do without required)",
            );
        }
        let last = first.checked_add(u32::try_from(branches.len()).ok()?)?.checked_sub(1)?;
        Some((Group { name: name?, first, last }, branches))
    }

    /// One step, or (`branch`) one branch of a parallel group, which may also be `optional`.
    fn step(&mut self, path: &str, v: &Value, branch: bool) -> Option<Step> {
        if v.get("timer").is_some() {
            return self.timer_step(path, v, branch);
        }
        const FIELDS: [&str; 13] = [
            "name",
            "remind",
            "escalate",
            "task",
            "requires",
            "timeout",
            "heartbeat",
            "accepts_events",
            "accepts_callbacks",
            "buffer_ttl",
            "optional",
            "retry",
            "compensate",
        ];
        let map = self.object(path, v, &FIELDS)?;
        if !branch && map.contains_key("optional") {
            self.err(&join(path, "optional"), "only a branch of a parallel group may be optional");
        }
        let name = self.required(path, map, "name").and_then(|n| {
            let np = join(path, "name");
            let s = self.string(&np, n)?;
            StepName::parse(s).map_err(|e| self.err(&np, e.to_string())).ok()
        });
        let task = self.optional(path, map, "task", Self::task);
        let requires = match map.get("requires") {
            None => Some(Requires::default()),
            Some(r) => self.requires(&join(path, "requires"), r),
        };
        let timeout =
            self.required(path, map, "timeout").and_then(|t| self.duration(&join(path, "timeout"), t));
        let heartbeat = self.optional(path, map, "heartbeat", Self::duration);
        if let (Some(t), Some(Some(h))) = (timeout, heartbeat)
            && h >= t
        {
            self.err(&join(path, "heartbeat"), "must be shorter than the step's timeout");
        }
        let accepts_events = self.optional(path, map, "accepts_events", Self::pattern);
        let buffer_ttl = match map.get("buffer_ttl") {
            None => timeout.map(|t| t + BUFFER_MARGIN),
            Some(b) => self.duration(&join(path, "buffer_ttl"), b),
        };
        let accepts_callbacks = self.accepts_callbacks(path, map, &accepts_events);
        let optional = self.flag(path, map, "optional");
        let retry = match map.get("retry") {
            None => Some(None),
            Some(r) => self.retry(&join(path, "retry"), r, (timeout, heartbeat.flatten())).map(Some),
        };
        let compensate = self.optional(path, map, "compensate", Self::compensate);
        let (remind, escalate) =
            self.notices(path, map, (branch, timeout, task.as_ref().and_then(|t| t.as_ref())));
        Some(Step {
            timer: None,
            remind: remind?,
            escalate: escalate?,
            compensate: compensate?,
            retry: retry?,
            optional: optional?,
            accepts_callbacks: accepts_callbacks?,
            buffer_ttl: buffer_ttl?,
            name: name?,
            task: task?,
            requires: requires?,
            timeout: timeout?,
            heartbeat: heartbeat?,
            accepts_events: accepts_events?,
        })
    }

    /// A timer step: `name`, `timer: { after: <duration> }` or `timer: { until: <pointer> }`, and
    /// a `timeout` that leaves the sweep that wakes it time to be late ([`ATTEMPT_OPEN_LAG`];
    /// default: `after` plus [`TIMER_MARGIN`]; required with `until`, whose time only the start
    /// event knows). Nothing else: a timer takes no input, publishes no task, and has nothing to
    /// undo. Not a branch of a parallel group.
    fn timer_step(&mut self, path: &str, v: &Value, branch: bool) -> Option<Step> {
        let Some(map) = v.as_object() else { return self.object(path, v, &[]).and(None) };
        for k in map.keys().filter(|k| !["name", "timer", "timeout"].contains(&k.as_str())) {
            self.err(
                &join(path, k),
                "not allowed on a timer step, which takes no input, publishes no task and has nothing to \
                 undo: a timer step has only name, timer and timeout",
            );
        }
        let tp = join(path, "timer");
        if branch {
            self.err(
                &tp,
                "a branch of a parallel group cannot be a timer; put the timer before or after the group",
            );
        }
        let name = self.required(path, map, "name").and_then(|n| {
            let np = join(path, "name");
            let s = self.string(&np, n)?;
            StepName::parse(s).map_err(|e| self.err(&np, e.to_string())).ok()
        });
        let timer = self.object(&tp, &map["timer"], &["after", "until"]);
        if let Some(t) = timer.filter(|t| t.contains_key("until")) {
            return self.until_timer(path, map, t, name?);
        }
        let after = timer
            .and_then(|t| self.required(&tp, t, "after"))
            .and_then(|a| self.duration(&join(&tp, "after"), a));
        let timeout = match (map.get("timeout"), after) {
            (None, after) => after.map(|a| a.saturating_add(TIMER_MARGIN)),
            (Some(t), after) => {
                let top = join(path, "timeout");
                let timeout = self.duration(&top, t)?;
                if let Some(a) = after.filter(|a| timeout < a.saturating_add(ATTEMPT_OPEN_LAG)) {
                    self.err(
                        &top,
                        format!(
                            "must be at least the timer's `after` ({}s) plus {}s for the sweep that wakes it \
                             (leave it out for {}s more than `after`)",
                            a.as_secs(),
                            ATTEMPT_OPEN_LAG.as_secs(),
                            TIMER_MARGIN.as_secs()
                        ),
                    );
                    return None;
                }
                Some(timeout)
            }
        };
        if timeout.is_some_and(|t| t > MAX_TIMEOUT) {
            self.err(&tp, format!("the timer and its margin may wait at most {}", spell(MAX_TIMEOUT)));
            return None;
        }
        Some(Step { timer: Some(Timer::After(after?)), ..timer_only(name?, timeout?) })
    }

    /// `timer: { until: <pointer> }` of the timer step at `path`: the pointer, and the `timeout`
    /// it needs (no `after` beside it).
    fn until_timer(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        timer: &Map<String, Value>,
        name: StepName,
    ) -> Option<Step> {
        let tp = join(path, "timer");
        if timer.contains_key("after") {
            self.err(
                &tp,
                "either `after` (a duration) or `until` (a pointer to a time in the start event), not both",
            );
            return None;
        }
        let up = join(&tp, "until");
        let pointer = self.string(&up, &timer["until"])?;
        check_pointer(pointer).map_err(|e| self.err(&up, e)).ok()?;
        let Some(timeout) = map.get("timeout") else {
            self.err(
                &join(path, "timeout"),
                format!(
                    "missing: a timer until a time needs `timeout`, the longest it may wait from when the step \
                     is reached (its time must come {}s before it, for the sweep that wakes it)",
                    ATTEMPT_OPEN_LAG.as_secs()
                ),
            );
            return None;
        };
        let timeout = self.duration(&join(path, "timeout"), timeout)?;
        Some(Step { timer: Some(Timer::Until(pointer.to_owned())), ..timer_only(name, timeout) })
    }

    /// `escalate`: a list of levels, each `after` (later than the level before, shorter than the
    /// step's `timeout`) and a `queue` (a task queue name), and a `title` (default: the step's
    /// task's). The step needs a `task`; not on a branch of a parallel group.
    fn escalate(
        &mut self,
        path: &str,
        v: &Value,
        (branch, timeout, task): (bool, Option<Duration>, Option<&TaskTemplate>),
    ) -> Option<Vec<Escalation>> {
        let Some(list) = v.as_array() else {
            self.err(path, format!("expected a list of levels, found {}", kind(v)));
            return None;
        };
        if branch {
            self.err(path, "a branch of a parallel group cannot be escalated yet; escalate a step");
        }
        let Some(task) = task else {
            self.err(path, "gives the step's task to another queue: the step needs a `task`");
            return None;
        };
        if list.is_empty() || list.len() > Escalation::MAX_LEVELS {
            self.err(path, format!("expected 1 to {} levels, found {}", Escalation::MAX_LEVELS, list.len()));
            return None;
        }
        let mut levels = Vec::new();
        let mut previous: Option<Duration> = None;
        for (i, level) in list.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let Some(map) = self.object(&at, level, &["after", "queue", "title"]) else { continue };
            let after = self.required(&at, map, "after").and_then(|a| self.duration(&join(&at, "after"), a));
            let mut fields = serde_json::Map::new();
            fields.insert("queue".into(), map.get("queue").cloned().unwrap_or(Value::Null));
            fields.insert(
                "title".into(),
                map.get("title").cloned().unwrap_or_else(|| Value::String(task.title.clone())),
            );
            let template = if map.contains_key("queue") {
                self.task(&at, &Value::Object(fields))
            } else {
                self.err(&join(&at, "queue"), "missing");
                None
            };
            if let Some(a) = after {
                if let Some(t) = timeout.filter(|t| a >= *t) {
                    self.err(
                        &join(&at, "after"),
                        format!(
                            "must be shorter than the step's timeout ({}s): the level could never be reached",
                            t.as_secs()
                        ),
                    );
                } else if previous.is_some_and(|p| a <= p) {
                    self.err(&join(&at, "after"), "must be later than the level before");
                }
                previous = Some(a);
            }
            let (Some(after), Some(template)) = (after, template) else { continue };
            levels.push(Escalation { after, task: template });
        }
        (levels.len() == list.len()).then_some(levels)
    }

    /// What a waiting step publishes on time besides its task: `remind` and `escalate`, both of
    /// the step's `task`.
    fn notices(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        (branch, timeout, task): (bool, Option<Duration>, Option<&TaskTemplate>),
    ) -> (Option<Option<Remind>>, Option<Vec<Escalation>>) {
        let remind = self.optional(path, map, "remind", |v, p, r| v.remind(p, r, (branch, timeout)));
        if map.contains_key("remind") && task.is_none() && !map.contains_key("task") {
            self.err(&join(path, "remind"), "reminds of the step's task: the step needs a `task`");
        }
        let escalate = match map.get("escalate") {
            None => Some(Vec::new()),
            Some(e) => self.escalate(&join(path, "escalate"), e, (branch, timeout, task)),
        };
        (remind, escalate)
    }

    /// `remind`: the first reminder `after` the step began to wait (before its `timeout`), then
    /// one `every` (default: `after`), `times` in all (1 to [`Remind::MAX_TIMES`], default 1).
    /// Not on a branch of a parallel group.
    fn remind(
        &mut self,
        path: &str,
        v: &Value,
        (branch, timeout): (bool, Option<Duration>),
    ) -> Option<Remind> {
        let map = self.object(path, v, &["after", "every", "times"])?;
        if branch {
            self.err(path, "a branch of a parallel group cannot be reminded of yet; remind on a step");
        }
        let after = self.required(path, map, "after").and_then(|a| self.duration(&join(path, "after"), a));
        let every = match map.get("every") {
            None => after,
            Some(e) => self.duration(&join(path, "every"), e),
        };
        let times = match map.get("times") {
            None => Some(1),
            Some(t) => {
                let n = t
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=Remind::MAX_TIMES).contains(n));
                if n.is_none() {
                    self.err(
                        &join(path, "times"),
                        format!("expected a whole number from 1 to {}, found {t}", Remind::MAX_TIMES),
                    );
                }
                n
            }
        };
        if let (Some(a), Some(t)) = (after, timeout)
            && a >= t
        {
            self.err(
                &join(path, "after"),
                format!(
                    "must be shorter than the step's timeout ({}s): no reminder could go out",
                    t.as_secs()
                ),
            );
            return None;
        }
        Some(Remind { after: after?, every: every?, times: times? })
    }

    /// `retry`: `attempts` (1 to [`Retry::MAX_ATTEMPTS`]) and `backoff`, shorter than the
    /// step's timeout; with a `heartbeat`, every wait between attempts, and the lag of the sweep
    /// that opens the next attempt ([`ATTEMPT_OPEN_LAG`]), shorter than it: Step Functions hears
    /// nothing from baton's heartbeat as an attempt fails to its heartbeat as the next attempt's
    /// task goes out.
    fn retry(
        &mut self,
        path: &str,
        v: &Value,
        (timeout, heartbeat): (Option<Duration>, Option<Duration>),
    ) -> Option<Retry> {
        let map = self.object(path, v, &["attempts", "backoff"])?;
        let ap = join(path, "attempts");
        let attempts = self.required(path, map, "attempts").and_then(|a| self.attempts(&ap, a));
        let bp = join(path, "backoff");
        let backoff = self.required(path, map, "backoff").and_then(|b| self.duration(&bp, b));
        let retry = Retry { attempts: attempts?, backoff: backoff? };
        if retry.backoff.is_zero() {
            self.err(&bp, "must be longer than 0s");
            return None;
        }
        if let Some(t) = timeout.filter(|t| retry.backoff >= *t) {
            self.err(&bp, format!("must be shorter than the step's timeout ({}s)", t.as_secs()));
            return None;
        }
        let longest = retry.wait_before(retry.attempts, timeout.unwrap_or(MAX_TIMEOUT));
        let silent = longest.saturating_add(ATTEMPT_OPEN_LAG);
        if let Some(h) = heartbeat.filter(|h| retry.attempts > 1 && silent >= *h) {
            self.err(
                &bp,
                format!(
                    "the longest wait between attempts ({}s), plus up to {}s for the sweep that opens the \
                     next attempt, must be shorter than the heartbeat ({}s): Step Functions hears no \
                     heartbeat while baton waits",
                    longest.as_secs(),
                    ATTEMPT_OPEN_LAG.as_secs(),
                    h.as_secs()
                ),
            );
            return None;
        }
        Some(retry)
    }

    /// `compensate`: the `task` that undoes the step (required), the `timeout` of its wait
    /// (required) and `attempts` (1 to [`Retry::MAX_ATTEMPTS`], default
    /// [`Compensate::DEFAULT_ATTEMPTS`]).
    fn compensate(&mut self, path: &str, v: &Value) -> Option<Compensate> {
        let map = self.object(path, v, &["task", "timeout", "attempts"])?;
        let task = self.required(path, map, "task").and_then(|t| self.task(&join(path, "task"), t));
        let timeout =
            self.required(path, map, "timeout").and_then(|t| self.duration(&join(path, "timeout"), t));
        let attempts = match map.get("attempts") {
            None => Some(Compensate::DEFAULT_ATTEMPTS),
            Some(a) => self.attempts(&join(path, "attempts"), a),
        };
        if timeout.is_some_and(|t| t.is_zero()) {
            self.err(&join(path, "timeout"), "must be longer than 0s");
            return None;
        }
        Some(Compensate { task: task?, timeout: timeout?, attempts: attempts? })
    }

    /// A number of attempts: a whole number from 1 to [`Retry::MAX_ATTEMPTS`].
    fn attempts(&mut self, path: &str, a: &Value) -> Option<u32> {
        let n =
            a.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| (1..=Retry::MAX_ATTEMPTS).contains(n));
        if n.is_none() {
            self.err(path, format!("expected a whole number from 1 to {}, found {a}", Retry::MAX_ATTEMPTS));
        }
        n
    }

    /// An optional field, read by `parse` when present: `Some(None)` when absent, `None` when
    /// present and invalid.
    fn optional<T>(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        field: &str,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<Option<T>> {
        match map.get(field) {
            None => Some(None),
            Some(v) => parse(self, &join(path, field), v).map(Some),
        }
    }

    /// An optional boolean field, false when absent.
    fn flag(&mut self, path: &str, map: &Map<String, Value>, name: &str) -> Option<bool> {
        match map.get(name) {
            None => Some(false),
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.err(&join(path, name), "must be true or false");
                None
            }
        }
    }

    /// `accepts_callbacks`: a boolean, and `false` only where events can feed the step.
    fn accepts_callbacks(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        accepts_events: &Option<Option<Pattern>>,
    ) -> Option<bool> {
        let field = join(path, "accepts_callbacks");
        match map.get("accepts_callbacks") {
            None => Some(true),
            Some(Value::Bool(true)) => Some(true),
            Some(Value::Bool(false)) if matches!(accepts_events, Some(None)) => {
                self.err(
                    &field,
                    "a step that refuses callbacks needs accepts_events, or nothing could complete it",
                );
                None
            }
            Some(Value::Bool(false)) => Some(false),
            Some(_) => {
                self.err(&field, "must be true or false");
                None
            }
        }
    }

    fn task(&mut self, path: &str, v: &Value) -> Option<TaskTemplate> {
        let map = self.object(path, v, &["title", "queue"])?;
        let title = self.required(path, map, "title").and_then(|t| self.string(&join(path, "title"), t));
        let queue = self.required(path, map, "queue").and_then(|q| self.string(&join(path, "queue"), q));
        // A task goes to the SQS queue its `queue` names: a name SQS would refuse would fail
        // every publish of the task, after the step started waiting.
        let queue = queue.filter(|q| {
            let ok = TaskTemplate::is_queue_name(q);
            if !ok {
                self.err(
                    &join(path, "queue"),
                    format!(
                        "{q:?} cannot name a task queue: 1 to {} ASCII letters, digits, - and _ (it names the SQS queue <stack>_tasks-<queue>)",
                        TaskTemplate::MAX_QUEUE_LEN
                    ),
                );
            }
            ok
        });
        if let Some(t) = title {
            for placeholder in placeholders(t) {
                if !TaskTemplate::PLACEHOLDERS.contains(&placeholder) {
                    self.err(
                        &join(path, "title"),
                        format!("unknown placeholder {{{placeholder}}}; known: {{key}}, {{workflow}}, {{step}}, {{generation}}"),
                    );
                }
            }
        }
        Some(TaskTemplate { title: title?.to_owned(), queue: queue?.to_owned() })
    }

    /// `requires`: a list (all of it), `{ any_of: [..] }`, or `{ at_least: N, of: [..] }`, with
    /// N from 1 to the list's length: a rule that can never be met is refused here.
    fn requires(&mut self, path: &str, v: &Value) -> Option<Requires> {
        if v.is_array() {
            let of = self.names(path, v)?;
            return Some(Requires { at_least: of.len(), of });
        }
        let before = self.errors.len();
        let map = self.object(path, v, &["any_of", "at_least", "of"])?;
        match (map.get("any_of"), map.get("at_least"), map.get("of")) {
            (Some(list), None, None) => {
                let of = self.names(&join(path, "any_of"), list)?;
                if of.is_empty() {
                    self.err(&join(path, "any_of"), "is empty: no input could ever meet it");
                    return None;
                }
                Some(Requires { of, at_least: 1 })
            }
            (None, Some(n), Some(list)) => {
                let of = self.names(&join(path, "of"), list);
                let np = join(path, "at_least");
                let Some(n) = n.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n >= 1) else {
                    self.err(&np, format!("expected a whole number from 1, found {n}"));
                    return None;
                };
                let of = of?;
                if n > of.len() {
                    self.err(
                        &np,
                        format!(
                            "{n} is more than the {} input(s) in `of`: the rule can never be met",
                            of.len()
                        ),
                    );
                    return None;
                }
                Some(Requires { of, at_least: n })
            }
            // An unknown field is error enough.
            _ if self.errors.len() > before => None,
            _ => {
                self.err(
                    path,
                    "expected a list of input names, `any_of: [..]`, or `at_least: N` with `of: [..]`",
                );
                None
            }
        }
    }

    fn names(&mut self, path: &str, v: &Value) -> Option<Vec<String>> {
        let Some(list) = v.as_array() else {
            self.err(path, format!("expected a list of input names, found {}", kind(v)));
            return None;
        };
        let mut seen = HashSet::new();
        let mut names = Vec::new();
        let before = self.errors.len();
        for (i, item) in list.iter().enumerate() {
            let ip = format!("{path}[{i}]");
            match item.as_str() {
                Some(s) if is_input_name(s) => {
                    if !seen.insert(s) {
                        self.err(&ip, format!("{s:?} is listed twice"));
                    }
                    names.push(s.to_owned());
                }
                Some(s) => self.err(
                    &ip,
                    format!(
                        "{s:?} is not an input name; use a-z, 0-9 and '_', starting with a letter or '_'"
                    ),
                ),
                None => self.err(&ip, format!("expected an input name, found {}", kind(item))),
            }
        }
        (self.errors.len() == before).then_some(names)
    }

    fn duration(&mut self, path: &str, v: &Value) -> Option<Duration> {
        let Some(text) = v.as_str() else {
            self.err(path, format!("expected a duration such as 30s, 15m, 2h or 2d, found {}", kind(v)));
            return None;
        };
        match parse_duration(text) {
            Ok(d) if d > MAX_TIMEOUT => {
                self.err(path, "is longer than a year, the longest a Step Functions execution may run");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.err(path, e);
                None
            }
        }
    }
}

/// A step's `name` as written, valid or not: duplicates are found among all of them.
fn raw_name(step: &Value) -> Option<&str> {
    step.get("name")?.as_str()
}

fn placeholders(title: &str) -> impl Iterator<Item = &str> {
    title.split('{').skip(1).filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_owned() } else { format!("{path}.{field}") }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("../../../../infra/workflows.yaml");

    fn errors(yaml: &str) -> Vec<String> {
        match Config::parse(yaml) {
            Ok(_) => panic!("expected errors for:\n{yaml}"),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn given_the_sample_config_then_it_loads_with_its_two_steps() {
        let config = Config::parse(SAMPLE).expect("the sample config is valid");
        let wf = config.workflow("order-review").expect("order-review is defined");
        assert_eq!(wf.key, "/subject");
        assert_eq!(wf.on_restart, OnRestart::AfterTerminal);
        let names: Vec<&str> = wf.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["manual-review", "payment"]);
        assert_eq!(wf.steps[0].timeout, Duration::from_secs(2 * 86_400));
        assert_eq!(wf.steps[0].heartbeat, Some(Duration::from_secs(3600)));
        assert_eq!(wf.steps[0].requires, Requires::all(&["decision"]));
        assert!(wf.steps[1].accepts_events.is_some());
        assert_eq!(wf.steps[1].buffer_ttl, Duration::from_secs(7 * 86_400 + 3600), "timeout plus the margin");
        let requires: Vec<Requires> = wf.plan().steps.iter().map(|s| s.requires.clone()).collect();
        assert_eq!(requires, [Requires::all(&["decision"]), Requires::all(&["payment_ref"])]);
        assert_eq!(wf.step_index("payment"), Some(1));
    }

    #[test]
    fn a_canonical_text_is_read_as_json_to_the_value_yaml_reads_from_it() {
        let config = Config::parse_text(SAMPLE).expect("the sample config is valid");
        let tricky = serde_json::json!({
            "b": ["\u{1}\u{1f}\"\\/", "é ✓ \u{10348}", "- not a list", "a: b", "#", "~", "null", "1e3"],
            "a": {"z": 1.5, "y": -7, "x": 18_446_744_073_709_551_615u64, "w": true, "v": null},
        });
        for text in [config.canonical.clone(), canonical(&tricky).to_string()] {
            let yaml: Value = serde_saphyr::from_str(&text).expect("JSON is YAML");
            assert_eq!(read_canonical(&text), Some(yaml), "{text}");
        }
        let again = Config::parse_text(&config.canonical).expect("the canonical form parses");
        assert_eq!((&again.version, &again.canonical), (&config.version, &config.canonical));
        // Not the canonical form: left to YAML, which reads it to the same version.
        let pretty = serde_json::to_string_pretty(&read_canonical(&config.canonical)).expect("JSON");
        assert_eq!(read_canonical(&pretty), None);
        assert_eq!(Config::parse_text(&pretty).expect("pretty JSON parses").version, config.version);
        for text in [r#"{"b":1,"a":2}"#, r#"{"a":1,"a":2}"#, r#"{"a": 2}"#, "[]", "a: 1"] {
            assert_eq!(read_canonical(text), None, "{text}");
        }
        assert_eq!(read_canonical(r#"{"a":2}"#), Some(serde_json::json!({"a": 2})));
    }

    #[test]
    fn durations_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "2", "d", "2w", "1.5h", "-1s", "2 d", "0s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        assert!(check_pointer("/subject").is_ok());
        assert!(check_pointer("/data/a~1b/c~0d").is_ok());
        assert!(check_pointer("subject").is_err());
        assert!(check_pointer("/data/~2").is_err());
        assert!(check_pointer("/data//x").is_err());
    }

    #[test]
    fn given_a_step_without_timeout_then_the_error_names_its_path() {
        let yaml = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: review, requires: [decision], timeout: 1d }
      - { name: payment, requires: [payment_ref] }
"#;
        assert_eq!(errors(yaml), ["workflows.order-review.steps[1].timeout: missing"]);
    }

    #[test]
    fn requires_says_all_any_or_n_of_a_list() {
        let yaml = r#"
workflows:
  approval:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: all, requires: [a, b], timeout: 1d }
      - { name: any, requires: { any_of: [legal, compliance] }, timeout: 1d }
      - { name: quorum, requires: { at_least: 2, of: [ann, bob, cy] }, timeout: 1d }
"#;
        let config = Config::parse(yaml).expect("valid");
        let shown: Vec<String> =
            config.workflow("approval").unwrap().steps.iter().map(|s| s.requires.to_string()).collect();
        assert_eq!(shown, ["all of [a, b]", "any of [legal, compliance]", "2 of [ann, bob, cy]"]);
    }

    #[test]
    fn a_requires_rule_that_can_never_be_met_is_refused_by_its_path() {
        let yaml = r#"
workflows:
  approval:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: s0, requires: { at_least: 4, of: [ann, bob, cy] }, timeout: 1d }
      - { name: s1, requires: { any_of: [] }, timeout: 1d }
      - { name: s2, requires: { at_least: 0, of: [ann] }, timeout: 1d }
      - { name: s3, requires: { at_least: 1, of: [ann, ann] }, timeout: 1d }
      - { name: s4, requires: { any_of: [a], of: [b] }, timeout: 1d }
      - { name: s5, requires: { at_least: 1 }, timeout: 1d }
      - { name: s6, requires: { all: [a] }, timeout: 1d }
"#;
        let errs = errors(yaml);
        let expect = [
            "workflows.approval.steps[0].requires.at_least: 4 is more than the 3 input(s) in `of`: the rule can never be met",
            "workflows.approval.steps[1].requires.any_of: is empty: no input could ever meet it",
            "workflows.approval.steps[2].requires.at_least: expected a whole number from 1, found 0",
            "workflows.approval.steps[3].requires.of[1]: \"ann\" is listed twice",
            "workflows.approval.steps[4].requires: expected a list of input names",
            "workflows.approval.steps[5].requires: expected a list of input names",
            "workflows.approval.steps[6].requires.all: unknown field",
        ];
        assert_eq!(errs.len(), expect.len(), "{errs:#?}");
        for (got, want) in errs.iter().zip(expect) {
            assert!(got.starts_with(want), "expected {want:?}, got {got:?}");
        }
    }

    #[test]
    fn given_many_problems_then_all_are_reported_in_file_order() {
        let yaml = r#"
workflows:
  Bad_Name:
    start: { when: { type: "order.placed" }, key: subject }
    on_restart: sometimes
    steps:
      - { name: review, requires: [decision, decision], timeout: 2w, heartbeat: 1h, timout: 1d }
      - { name: review, timeout: 1h, heartbeat: 2h, task: { title: "Do {thing}", queue: q } }
"#;
        let errs = errors(yaml);
        let expect = [
            "workflows.Bad_Name: workflow name \"Bad_Name\" contains 'B'",
            "workflows.Bad_Name.start.when.type",
            "workflows.Bad_Name.start.key: \"subject\" is not a JSON pointer",
            "workflows.Bad_Name.on_restart: expected after_terminal or never",
            "workflows.Bad_Name.steps[0].timout: unknown field",
            "workflows.Bad_Name.steps[0].requires[1]: \"decision\" is listed twice",
            "workflows.Bad_Name.steps[0].timeout: \"2w\" is not a duration",
            "workflows.Bad_Name.steps[1].task.title: unknown placeholder {thing}",
            "workflows.Bad_Name.steps[1].heartbeat: must be shorter than the step's timeout",
            "workflows.Bad_Name.steps[1].name: duplicate step name \"review\"",
        ];
        assert_eq!(errs.len(), expect.len(), "{errs:#?}");
        for (got, want) in errs.iter().zip(expect) {
            assert!(got.starts_with(want), "expected {want:?}, got {got:?}");
        }
    }

    #[test]
    fn given_a_step_that_refuses_callbacks_then_it_must_accept_events() {
        let yaml = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - { name: review, requires: [decision], timeout: 1d, accepts_callbacks: false }
      - { name: payment, timeout: 1d, accepts_callbacks: false, accepts_events: { type: ["paid"] } }
      - { name: ship, timeout: 1d, accepts_callbacks: "no" }
"#;
        assert_eq!(
            errors(yaml),
            [
                "workflows.order-review.steps[0].accepts_callbacks: a step that refuses callbacks needs accepts_events, or nothing could complete it",
                "workflows.order-review.steps[2].accepts_callbacks: must be true or false",
            ]
        );
    }

    #[test]
    fn given_duplicate_workflow_keys_then_yaml_parsing_refuses_them() {
        let yaml = "workflows:\n  a:\n    steps: []\n  a:\n    steps: []\n";
        let errs = errors(yaml);
        assert!(
            errs[0].contains("not valid YAML") && errs[0].to_lowercase().contains("duplicate"),
            "{errs:?}"
        );
    }

    #[test]
    fn titles_render_their_placeholders() {
        let t = TaskTemplate {
            title: "Review {workflow}/{key} at {step} (gen {generation})".into(),
            queue: "q".into(),
        };
        assert_eq!(
            t.render("order-review", "order-1", "manual-review", 2),
            "Review order-review/order-1 at manual-review (gen 2)"
        );
    }

    /// Step Functions ends a Standard execution after a year, with no Catch and no report: a
    /// workflow whose timeouts could add up to more is refused, with its path and the figures.
    /// A parallel group counts its longest branch; the failure path adds every compensation's
    /// timeout (a group's longest); a retry adds nothing (its attempts share the step's
    /// deadline).
    #[test]
    fn given_timeouts_that_could_add_up_to_more_than_a_year_then_the_workflow_is_refused() {
        let wf = |steps: &str| {
            format!(
                "workflows:\n  long-haul:\n    start: {{ when: {{ type: [\"order.placed\"] }}, key: /subject }}\n    steps:\n{steps}"
            )
        };
        // Two steps of 200 days each: each fits a year, together they do not.
        let errs = errors(&wf("      - { name: a, timeout: 200d }\n      - { name: b, timeout: 200d }\n"));
        assert_eq!(
            errs,
            [
                "workflows.long-haul: an execution could run 400d (the steps' timeouts, a parallel group counted \
              by its longest branch: 400d; then, on the failure path, every compensation's timeout: 0d), \
              longer than the 365d a Step Functions Standard execution may run, which ends it with no Catch \
              and no report; shorten the timeouts so that they add up to 365d at most"
            ]
        );

        // 300 days forward and 70 of compensation: the failure path passes the year.
        let undo = |days: u32| {
            format!("compensate: {{ task: {{ title: \"Undo {{key}}\", queue: q }}, timeout: {days}d }}")
        };
        let errs = errors(&wf(&format!(
            "      - {{ name: a, timeout: 100d, {} }}\n      - {{ name: b, timeout: 200d }}\n",
            undo(70)
        )));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("workflows.long-haul: an execution could run 370d"), "{errs:?}");
        assert!(
            errs[0].contains("longest branch: 300d; then") && errs[0].contains("timeout: 70d)"),
            "{errs:?}"
        );

        // A group waits as long as its longest branch, and its compensations as their longest;
        // a retried step waits its one timeout: 250d + 45d forward, 70d back, exactly a year.
        let year = wf(&format!(
            "      - parallel:\n          name: checks\n          branches:\n            - {{ name: slow, timeout: 250d, {} }}\n            - {{ name: fast, timeout: 10d, {} }}\n      - {{ name: last, timeout: 45d, retry: {{ attempts: 10, backoff: 1h }} }}\n",
            undo(70),
            undo(60)
        ));
        let config = Config::parse(&year).unwrap_or_else(|e| panic!("{e}"));
        let run = config.workflows[0].longest_run();
        let days = |n: u64| Duration::from_secs(n * 86_400);
        assert_eq!((run.forward, run.compensations, run.total()), (days(295), days(70), MAX_TIMEOUT));
        // A second more is refused.
        let over = year.replace("timeout: 45d", "timeout: 3888001s");
        assert!(errors(&over)[0].contains("could run 31536001s"), "{:?}", errors(&over));
    }

    #[test]
    fn a_task_queue_must_be_a_name_sqs_takes_and_the_error_names_the_field() {
        let yaml = |queue: &str| {
            format!(
                "workflows:\n  wf:\n    start: {{ when: {{ type: [t] }}, key: /subject }}\n    steps:\n      \
                 - {{ name: s, timeout: 1h, task: {{ title: t, queue: {queue:?} }}, \
                 compensate: {{ task: {{ title: u, queue: \"ok\" }}, timeout: 1h }} }}\n"
            )
        };
        for good in ["risk-review", "Stock_2", &"q".repeat(TaskTemplate::MAX_QUEUE_LEN)] {
            assert!(Config::parse(&yaml(good)).is_ok(), "{good:?}");
        }
        for bad in
            ["risk review", "stock.fifo", "caf\u{e9}", "a/b", &"q".repeat(TaskTemplate::MAX_QUEUE_LEN + 1)]
        {
            let errs = errors(&yaml(bad));
            assert_eq!(errs.len(), 1, "{bad:?}: {errs:?}");
            assert!(errs[0].starts_with("workflows.wf.steps[0].task.queue: "), "{errs:?}");
            assert!(errs[0].contains("cannot name a task queue"), "{errs:?}");
        }
    }

    /// The index by `type` leaves out only patterns that cannot match: over starts and
    /// `accepts_events` of every shape (typed, several types, no type, a `type` operator, `type`
    /// inside `$or`, a numeric `type`), the routes that match each event are exactly the
    /// patterns that match it when every one is tried.
    #[test]
    fn routes_by_type_find_exactly_the_patterns_a_full_scan_matches() {
        let yaml = r#"
workflows:
  typed:
    start: { when: { type: ["a.placed", "b.placed", "a.placed"] }, key: /subject }
    steps:
      - { name: s1, requires: [x], timeout: 1d, accepts_events: { type: ["a.paid"] } }
      - { name: s2, requires: [x], timeout: 1d, accepts_events: { source: ["shop"] } }
  untyped:
    start: { when: { source: ["shop"] }, key: /subject }
    steps:
      - { name: s1, requires: [x], timeout: 1d, accepts_events: { type: [{ prefix: "a." }] } }
  either:
    start: { when: { "$or": [{ type: ["a.placed"] }, { source: ["other"] }] }, key: /subject }
    steps:
      - { name: s1, requires: [x], timeout: 1d, accepts_events: { type: [5] } }
      - { name: s2, requires: [x], timeout: 1d, accepts_events: { type: ["b.placed"], source: ["shop"] } }
"#;
        let config = Config::parse(yaml).expect("valid");
        let all: Vec<Route> = config
            .workflows
            .iter()
            .enumerate()
            .flat_map(|(w, wf)| {
                std::iter::once(Route { workflow: w, step: None })
                    .chain((0..wf.steps.len()).map(move |i| Route { workflow: w, step: Some(i) }))
            })
            .collect();
        let pattern = |r: &Route| config.pattern(*r);
        let mut seen = 0;
        for t in ["a.placed", "b.placed", "a.paid", "a.other", "c", "5"] {
            for source in ["shop", "other", "elsewhere"] {
                let event =
                    serde_json::json!({"id": "e", "source": source, "type": t, "subject": "k", "data": {}});
                let scanned: Vec<Route> =
                    all.iter().filter(|r| pattern(r).is_some_and(|p| p.matches(&event))).copied().collect();
                let candidates = config.routes.candidates(t);
                let routed: Vec<Route> = candidates
                    .iter()
                    .filter(|r| pattern(r).is_some_and(|p| p.matches(&event)))
                    .copied()
                    .collect();
                assert_eq!(routed, scanned, "type {t}, source {source}");
                assert!(
                    candidates.windows(2).all(|w| w[0] < w[1]),
                    "config order, once each: {candidates:?}"
                );
                seen += scanned.len();
            }
        }
        assert!(seen > 10, "the events match something: {seen}");
        // Typed patterns are left out for other types: a `c` event is tried only against the
        // patterns that do not pin `type` to strings.
        assert_eq!(config.routes.candidates("c").len(), 5, "{:?}", config.routes.candidates("c"));
    }

    /// The parallel group of docs/WORKFLOWS.md's config format, as a whole workflow.
    pub(crate) const GROUPED: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 2d
      - parallel:
          name: checks
          branches:
            - name: fraud-check
              task: { title: "Fraud check {key}", queue: fraud }
              requires: [fraud_score]
              timeout: 1d
            - name: credit-check
              requires: [credit_ok]
              accepts_events: { type: ["credit.checked"] }
              timeout: 1d
            - name: address-check
              requires: [address_ok]
              timeout: 2h
              optional: true
      - name: payment
        requires: [payment_ref]
        timeout: 7d
"#;

    #[test]
    fn a_parallel_group_flattens_into_its_branches_and_spans_them() {
        let config = Config::parse(GROUPED).unwrap();
        let wf = &config.workflows[0];
        let names: Vec<&str> = wf.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["manual-review", "fraud-check", "credit-check", "address-check", "payment"]);
        assert_eq!(wf.groups.len(), 1);
        assert_eq!((wf.groups[0].name.as_str(), wf.groups[0].first, wf.groups[0].last), ("checks", 1, 3));
        assert_eq!(
            wf.steps.iter().map(|s| s.optional).collect::<Vec<_>>(),
            [false, false, false, true, false]
        );
        assert_eq!(wf.step_index("credit-check"), Some(2));
        assert_eq!(wf.positions().len(), 3);
        let plan = wf.plan();
        let groups: Vec<Option<Span>> = plan.steps.iter().map(|s| s.group).collect();
        let group = Some(Span { first: 1, last: 3 });
        assert_eq!(groups, [None, group, group, group, None]);
        assert_eq!(plan.optional().collect::<Vec<_>>(), [3]);
        assert_eq!(
            (plan.next_position(0), plan.next_position(2), plan.last_position()),
            (Some(1), Some(4), 4)
        );
        // A branch's `accepts_events` routes like a step's.
        assert_eq!(config.routes.candidates("credit.checked"), [Route { workflow: 0, step: Some(2) }]);
    }

    #[test]
    fn a_retry_reads_attempts_and_backoff_and_each_wait_doubles_capped_by_the_timeout() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - name: review
        timeout: 1h
        retry: { attempts: 4, backoff: 10m }
      - name: pay
        timeout: 1h
      - parallel:
          name: checks
          branches:
            - { name: fraud, timeout: 2h, retry: { attempts: 2, backoff: 5m } }
            - { name: stock, timeout: 1h }
"#;
        let config = Config::parse(yaml).unwrap();
        let retry = config.workflows[0].steps[0].retry.unwrap();
        assert_eq!((retry.attempts, retry.backoff), (4, Duration::from_secs(600)));
        let hour = Duration::from_secs(3600);
        let waits: Vec<u64> = (2..=5).map(|n| retry.wait_before(n, hour).as_secs()).collect();
        assert_eq!(waits, [600, 1200, 2400, 3600]);
        assert_eq!(config.workflows[0].steps[1].retry, None);
        let plan = config.workflows[0].plan();
        let retry_of = |step: u32| plan.step(step).and_then(|s| s.retry);
        assert_eq!(retry_of(0), Some(retry));
        assert_eq!(retry_of(1), None);
        // A parallel branch retries as a step does, within its own timeout.
        let fraud = plan.step(2).expect("the branch");
        assert_eq!((fraud.retry.map(|r| r.attempts), fraud.timeout), (Some(2), Duration::from_secs(7200)));
        assert_eq!(retry_of(3), None);
    }

    #[test]
    fn a_bad_retry_is_named_by_its_path() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: a, timeout: 1h, retry: { attempts: 0, backoff: 1m } }
      - { name: b, timeout: 1h, retry: { attempts: 11, backoff: 1m } }
      - { name: c, timeout: 1h, retry: { attempts: 2, backoff: 2h } }
      - { name: d, timeout: 1h, retry: { attempts: 2 } }
      - { name: e, timeout: 1h, heartbeat: 15m, retry: { attempts: 3, backoff: 10m } }
      - { name: f, timeout: 1h, retry: { attempts: 2, backoff: 1m, jitter: 1s } }
      - parallel:
          name: g
          branches:
            - { name: h, timeout: 1h, retry: { attempts: 2, backoff: 2h } }
            - { name: i, timeout: 1h, retry: { attempts: 2, backoff: 1m } }
"#;
        assert_eq!(
            errors(yaml),
            [
                "workflows.wf.steps[0].retry.attempts: expected a whole number from 1 to 10, found 0",
                "workflows.wf.steps[1].retry.attempts: expected a whole number from 1 to 10, found 11",
                "workflows.wf.steps[2].retry.backoff: must be shorter than the step's timeout (3600s)",
                "workflows.wf.steps[3].retry.backoff: missing",
                "workflows.wf.steps[4].retry.backoff: the longest wait between attempts (1200s), plus up to 120s for the sweep that opens the next attempt, must be shorter than the heartbeat (900s): Step Functions hears no heartbeat while baton waits",
                "workflows.wf.steps[5].retry.jitter: unknown field; expected one of: attempts, backoff",
                "workflows.wf.steps[6].parallel.branches[0].retry.backoff: must be shorter than the step's timeout (3600s)",
            ]
        );
    }

    /// The review's example: timeout 30m, heartbeat 10m, 3 attempts with a 4m backoff. The
    /// second wait is 8m: with the sweep that opens the attempt (up to 2m late), Step Functions
    /// could hear nothing for the whole heartbeat. Two attempts (one 4m wait) fit.
    #[test]
    fn a_heartbeat_must_outlast_the_longest_wait_between_attempts_and_the_sweep_that_ends_it() {
        let yaml = |attempts: u32| {
            format!(
                "workflows:\n  wf:\n    start: {{ when: {{ type: [\"a\"] }}, key: /subject }}\n    steps:\n      - {{ name: s, timeout: 30m, heartbeat: 10m, retry: {{ attempts: {attempts}, backoff: 4m }} }}\n"
            )
        };
        assert!(Config::parse(&yaml(2)).is_ok());
        assert_eq!(
            errors(&yaml(3)),
            [
                "workflows.wf.steps[0].retry.backoff: the longest wait between attempts (480s), plus up to 120s for the sweep that opens the next attempt, must be shorter than the heartbeat (600s): Step Functions hears no heartbeat while baton waits"
            ]
        );
    }

    #[test]
    fn a_group_wider_than_the_record_can_hold_is_refused() {
        let branches: String = (0..=Group::MAX_BRANCHES)
            .map(|i| format!("            - {{ name: b{i}, timeout: 1h }}\n"))
            .collect();
        let yaml = format!(
            "workflows:\n  wf:\n    start: {{ when: {{ type: [\"a\"] }}, key: /subject }}\n    steps:\n      - parallel:\n          name: g\n          branches:\n{branches}"
        );
        assert_eq!(
            errors(&yaml),
            [
                "workflows.wf.steps[0].parallel.branches: a parallel group has at most 20 branches, found 21: every branch's token and inputs live in the record's one DynamoDB item"
            ]
        );
    }

    #[test]
    fn a_bad_group_is_named_by_the_path_of_each_problem() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - name: review
        timeout: 1h
        optional: true
      - parallel:
          name: Checks
          branches:
            - name: review
              timeout: 1h
      - parallel:
          name: more
          branches: []
          extra: 1
      - parallel:
          name: review
          branches:
            - name: a
              timeout: 1h
              optional: maybe
            - name: b
      - parallel:
          name: all-optional
          branches:
            - { name: c, timeout: 1h, optional: true }
            - { name: d, timeout: 1h, optional: true }
"#;
        assert_eq!(
            errors(yaml),
            [
                "workflows.wf.steps[0].optional: only a branch of a parallel group may be optional",
                "workflows.wf.steps[1].parallel.name: step name \"Checks\" contains 'C'; allowed: a-z, 0-9 and '-'",
                "workflows.wf.steps[1].parallel.branches: a parallel group needs at least two branches, found 1",
                "workflows.wf.steps[2].parallel.extra: unknown field; expected one of: name, branches",
                "workflows.wf.steps[2].parallel.branches: a parallel group needs at least two branches, found 0",
                "workflows.wf.steps[3].parallel.branches[0].optional: must be true or false",
                "workflows.wf.steps[3].parallel.branches[1].timeout: missing",
                "workflows.wf.steps[4].parallel.branches: a parallel group needs at least one branch that is not optional (make the one the workflow cannot do without required)",
                "workflows.wf.steps[1].parallel.branches[0].name: duplicate step name \"review\"; steps, branches and groups share one namespace",
                "workflows.wf.steps[3].parallel.name: duplicate step name \"review\"; steps, branches and groups share one namespace",
            ]
        );
    }

    #[test]
    fn a_timer_step_waits_for_time_alone_with_a_default_timeout() {
        let yaml = r#"
workflows:
  payout:
    start: { when: { type: ["payout.requested"] }, key: /subject }
    steps:
      - { name: approve, requires: [ok], timeout: 1d }
      - { name: cool-off, timer: { after: 24h } }
      - { name: pay, requires: [paid], timeout: 1h }
"#;
        let c = Config::parse(yaml).expect("valid");
        let wf = c.workflow("payout").unwrap();
        let timer = &wf.steps[1];
        assert_eq!(timer.timer, Some(Timer::After(Duration::from_secs(24 * 3600))));
        assert_eq!(timer.timeout, Duration::from_secs(24 * 3600) + TIMER_MARGIN);
        assert!(timer.task.is_none() && !timer.accepts_callbacks && timer.accepts_events.is_none());
        assert_eq!(wf.plan().timer_of(1), Some(&Timer::After(Duration::from_secs(24 * 3600))));
        assert_eq!(wf.plan().timer_of(0), None);
    }

    #[test]
    fn a_timer_until_a_time_reads_it_from_the_start_event_at_its_pointer() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: start-date, timer: { until: /data/starts_at }, timeout: 90d }
      - { name: approve, requires: [ok], timeout: 1h }
"#;
        let config = Config::parse(yaml).unwrap();
        let wf = &config.workflows[0];
        assert_eq!(wf.steps[0].timer, Some(Timer::Until("/data/starts_at".into())));
        assert_eq!(wf.steps[0].timeout, Duration::from_secs(90 * 86_400));
        let read = wf.untils(&serde_json::json!({"data": {"starts_at": "2027-01-01T09:00:00+01:00"}}));
        assert_eq!(read.len(), 1);
        assert_eq!((read[0].step, read[0].at), (0, Some(time::macros::datetime!(2027-01-01 08:00 UTC))));
        let missing = wf.untils(&serde_json::json!({"data": {}}));
        assert_eq!(missing[0].error.as_deref(), Some("the start event has no time at /data/starts_at"));
        let long = wf.untils(&serde_json::json!({"data": {"starts_at": "x".repeat(10_000)}}));
        assert!(
            long[0].error.as_ref().is_some_and(|e| e.chars().count() <= Until::MAX_ERROR_CHARS),
            "{long:?}"
        );
    }

    #[test]
    fn a_bad_timer_is_named_by_its_path() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: a, timer: { after: 1h }, task: { title: "T", queue: q }, requires: [x] }
      - { name: b, timer: { after: 1h }, timeout: 61m }
      - { name: c, timer: { after: 0s } }
      - { name: d, timer: { until: /starts_at } }
      - { name: e, timer: 1h }
      - { name: i, timer: { until: starts_at }, timeout: 1d }
      - { name: j, timer: { until: /s, after: 1h }, timeout: 1d }
      - { name: k, timer: { until: /s }, timeout: 400d }
      - parallel:
          name: g
          branches:
            - { name: f, timer: { after: 1h } }
            - { name: h, requires: [approved], timeout: 1h }
"#;
        assert_eq!(
            errors(yaml),
            [
                "workflows.wf.steps[0].task: not allowed on a timer step, which takes no input, publishes no task and has nothing to undo: a timer step has only name, timer and timeout",
                "workflows.wf.steps[0].requires: not allowed on a timer step, which takes no input, publishes no task and has nothing to undo: a timer step has only name, timer and timeout",
                "workflows.wf.steps[1].timeout: must be at least the timer's `after` (3600s) plus 120s for the sweep that wakes it (leave it out for 900s more than `after`)",
                "workflows.wf.steps[2].timer.after: must be longer than zero",
                "workflows.wf.steps[3].timeout: missing: a timer until a time needs `timeout`, the longest it may wait from when the step is reached (its time must come 120s before it, for the sweep that wakes it)",
                "workflows.wf.steps[4].timer: expected a mapping, found a string",
                "workflows.wf.steps[5].timer.until: \"starts_at\" is not a JSON pointer; it must start with '/', e.g. /subject or /data/order_id",
                "workflows.wf.steps[6].timer: either `after` (a duration) or `until` (a pointer to a time in the start event), not both",
                "workflows.wf.steps[7].timeout: is longer than a year, the longest a Step Functions execution may run",
                "workflows.wf.steps[8].parallel.branches[0].timer: a branch of a parallel group cannot be a timer; put the timer before or after the group",
            ]
        );
    }

    #[test]
    fn a_reminder_reads_after_every_and_times_and_a_bad_one_is_named_by_its_path() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: a, task: { title: "T", queue: q }, requires: [x], timeout: 2d, remind: { after: 1d } }
      - { name: b, task: { title: "T", queue: q }, requires: [x], timeout: 2d, remind: { after: 4h, every: 1h, times: 3 } }
"#;
        let c = Config::parse(yaml).expect("valid");
        let steps = &c.workflow("wf").unwrap().steps;
        let day = Duration::from_secs(86_400);
        assert_eq!(steps[0].remind, Some(Remind { after: day, every: day, times: 1 }));
        let b = steps[1].remind.expect("b's reminders");
        assert_eq!(
            (b.due_after(1), b.due_after(3)),
            (Duration::from_secs(4 * 3600), Duration::from_secs(6 * 3600))
        );
        let bad = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: a, requires: [x], timeout: 2d, remind: { after: 1d } }
      - { name: b, task: { title: "T", queue: q }, timeout: 2d, remind: { after: 3d } }
      - { name: c, task: { title: "T", queue: q }, timeout: 2d, remind: { after: 1h, times: 11, often: true } }
"#;
        assert_eq!(
            errors(bad),
            [
                "workflows.wf.steps[0].remind: reminds of the step's task: the step needs a `task`",
                "workflows.wf.steps[1].remind.after: must be shorter than the step's timeout (172800s): no reminder could go out",
                "workflows.wf.steps[2].remind.often: unknown field; expected one of: after, every, times",
                "workflows.wf.steps[2].remind.times: expected a whole number from 1 to 10, found 11",
            ]
        );
    }

    #[test]
    fn escalation_levels_read_their_queue_and_title_and_a_bad_level_is_named_by_its_path() {
        let yaml = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - name: approve
        task: { title: "Approve {key}", queue: approvers }
        requires: [ok]
        timeout: 3d
        escalate: [{ after: 1d, queue: leads }, { after: 2d, queue: heads, title: "Urgent: {key}" }]
"#;
        let c = Config::parse(yaml).expect("valid");
        let wf = c.workflow("wf").unwrap();
        let levels = &wf.steps[0].escalate;
        assert_eq!(levels[0].task, TaskTemplate { title: "Approve {key}".into(), queue: "leads".into() });
        assert_eq!(levels[1].task.title, "Urgent: {key}");
        assert_eq!(
            wf.plan().steps[0].escalate,
            [Duration::from_secs(86_400), Duration::from_secs(2 * 86_400)]
        );
        let bad = r#"
workflows:
  wf:
    start: { when: { type: ["a"] }, key: /subject }
    steps:
      - { name: a, requires: [x], timeout: 2d, escalate: [{ after: 1d, queue: leads }] }
      - name: b
        task: { title: "T", queue: q }
        timeout: 2d
        escalate: [{ after: 1d, queue: "no spaces" }, { after: 12h, queue: leads }, { after: 3d, queue: heads }, { queue: x }]
"#;
        assert_eq!(
            errors(bad),
            [
                "workflows.wf.steps[0].escalate: gives the step's task to another queue: the step needs a `task`",
                "workflows.wf.steps[1].escalate[0].queue: \"no spaces\" cannot name a task queue: 1 to 40 ASCII letters, digits, - and _ (it names the SQS queue <stack>_tasks-<queue>)",
                "workflows.wf.steps[1].escalate[1].after: must be later than the level before",
                "workflows.wf.steps[1].escalate[2].after: must be shorter than the step's timeout (172800s): the level could never be reached",
                "workflows.wf.steps[1].escalate[3].after: missing",
            ]
        );
    }
}
