//! The engine: load, decide, write, then carry out the decision's effects.
//!
//! Every handler (intake, progress, callback, sweeper, the operator CLI) submits its inputs
//! here, so the lifecycle's rules (docs/ARCHITECTURE.md) are applied in one place:
//!
//! - **Decide, then apply.** [`lifecycle::decide`] is pure; the engine carries out its one
//!   conditional write, then its effects, in order.
//! - **A lost race is an outcome.** When the write loses, the store returns the winner's record
//!   (ALL_OLD) and the engine decides again on it, a bounded number of times. Only exhausted
//!   attempts are an error ([`EngineError::Contended`], retryable).
//! - **Effects are idempotent**, so a retry after a crash between the write and an effect
//!   repairs it: executions have deterministic names, tasks are put-if-absent, buffered entries
//!   settle once, ledger entries are keyed by input and reason.
//! - **The lost wake-up is closed by a handshake** (docs/ARCHITECTURE.md): a buffering side writes its
//!   inbox entry, then reads the record strongly consistently; the progress side writes
//!   `waiting{n}`, then reads the inbox strongly consistently. At least one side sees the other.
//! - **A lost answer is not a lost race.** Each record write carries a fresh `write_id`. When
//!   the answer to a write is lost (a timeout) and the SDK's retry finds the condition failed,
//!   the item it gets back (ALL_OLD) is that very write if the ids match: it counts as written,
//!   and its effects are carried out, instead of being mistaken for a duplicate.
//! - **Failures say how far the input got** ([`EngineError::Unfinished`],
//!   [`EngineError::Uncertain`]), so that an answer to a sender is always true: applied (and an
//!   effect is owed), maybe applied, or nothing applied.

use std::sync::Arc;

use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use tracing::{info, instrument, warn};

use crate::domain::asl::ExecutionInput;
use crate::domain::config::{Config, Workflow};
use crate::domain::error::Classified;
use crate::domain::error::error_chain;
use crate::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
use crate::domain::lifecycle::{
    self, Decision, Effect, IgnoreReason, Input, MAX_STEP_INPUT_BYTES, Mark, Outcome, Record, Resume, State,
    WaitId,
};
use crate::ports::metrics::{Metric, Metrics};
use crate::ports::orchestrator::{
    Orchestrator, OrchestratorError, StartExecution, execution_arn, execution_name,
};
use crate::ports::outbound::{PublishError, TaskPublisher};
use crate::ports::store::limits::MAX_ITEM_BYTES;
use crate::ports::store::{
    Applied, Claim, DrainTarget, InboxClaim, InboxEntry, InboxStatus, ItemSizes, LedgerEntry, StoreError,
    Task, TaskKind, WorkflowStore,
};

/// What became of a resume sent to Step Functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivered {
    Yes,
    /// The token was gone: the execution moved on (maybe with an earlier copy) or ended.
    TokenGone,
}

/// How many times a write that lost a race is decided again before giving up.
pub const MAX_ATTEMPTS: u32 = 8;
/// How long ledger entries are kept.
pub const LEDGER_RETENTION: Duration = Duration::days(90);

/// What [`Engine::submit_exact`] did: decided the input, or left it to the record's version.
#[derive(Debug)]
pub enum Exact {
    Decided(Box<Submitted>),
    /// The record runs this other config version: the input, as read, is not for it.
    OtherVersion(String),
}

/// What the engine did with one input.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub decision: Decision,
    /// The record decided on (the written one is the decision's write).
    prior: Option<Arc<Record>>,
}

impl Submitted {
    pub fn outcome(&self) -> Outcome {
        self.decision.outcome
    }

    /// The record after the decision: the written one, or the one decided on. Not a copy: a
    /// record is cloned only where it must be.
    pub fn record(&self) -> Option<&Record> {
        self.decision.write.as_ref().map(|w| &w.to).or(self.prior.as_deref())
    }
}

/// Where the engine gets the time: the system clock in production, a fixed or stepped one in
/// tests.
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// Where the engine gets a fresh id for each record write: random in production, seeded in a
/// simulation.
pub type WriteIds = Arc<dyn Fn() -> String + Send + Sync>;

/// Random 64-bit write ids.
pub fn random_write_ids() -> WriteIds {
    Arc::new(|| format!("{:016x}", fastrand::u64(..)))
}

/// The config version an input is decided under: a live record's own; a new start (no record,
/// or one ended) the current one; the first step's report for a pending record, the version
/// the report was read in (`reported`): the one its execution runs (a start that crossed a
/// deploy runs the definition live when it started, and the record follows it).
fn pinned_version<'r>(record: Option<&'r Record>, input: &Input, reported: &'r str) -> Option<&'r str> {
    match (record, input) {
        (Some(r), Input::Start { .. }) if r.state.is_terminal() => None,
        _ if crate::mutants::active(crate::mutants::Mutation::Unpinned) => None,
        (Some(r), Input::StepReady { generation, .. })
            if r.state == State::Pending && r.generation == *generation && !reported.is_empty() =>
        {
            Some(reported)
        }
        (Some(r), _) => Some(&r.config_version),
        (None, _) => None,
    }
}

/// A config version a record names cannot be had.
fn unregistered(version: &str, problem: &str) -> StoreError {
    StoreError::Corrupt {
        pk: crate::ports::store::CONFIG_PK.to_owned(),
        sk: format!("VERSION#{version}"),
        problem: format!("the config version records are pinned to cannot be read: {problem}"),
    }
}

/// The use-case core shared by every handler.
pub struct Engine {
    pub config: Arc<Config>,
    pub store: Arc<dyn WorkflowStore>,
    pub orchestrator: Arc<dyn Orchestrator>,
    pub publisher: Arc<dyn TaskPublisher>,
    /// `arn:...:stateMachine:<stack>-`: a workflow's state machine ARN is this plus its name.
    pub state_machine_prefix: String,
    /// The alias executions start through (`None`: the state machine itself).
    pub state_machine_alias: Option<String>,
    pub metrics: Metrics,
    pub clock: Clock,
    pub write_ids: WriteIds,
    /// How the store measures items: a record is trimmed to fit (`baton_aws::dynamodb::ITEM_SIZES`
    /// on AWS).
    pub item_sizes: ItemSizes,
    /// Earlier config versions read back from the table, for records pinned to them.
    pub versions: Versions,
}

/// The config versions an engine has read back from the table, by version, and whether its own
/// is registered there yet.
#[derive(Default)]
pub struct Versions {
    read: std::sync::Mutex<std::collections::HashMap<String, Arc<Config>>>,
    registered: std::sync::atomic::AtomicBool,
    /// A function started on this engine's config ([`Engine::register_config`]): registering it
    /// marks it started, so `baton rollout plan` takes it for the deployed one. An operator's
    /// engine never does.
    started: std::sync::atomic::AtomicBool,
    /// When every registered version was last read (first: once per engine).
    listed: std::sync::Mutex<Option<OffsetDateTime>>,
}

impl Versions {
    fn get(&self, version: &str) -> Option<Arc<Config>> {
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(version).cloned()
    }

    fn keep(&self, config: Config) {
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        read.entry(config.version.clone()).or_insert_with(|| Arc::new(config));
    }

    fn all(&self) -> Vec<Arc<Config>> {
        let read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut all: Vec<Arc<Config>> = read.values().cloned().collect();
        all.sort_by(|a, b| a.version.cmp(&b.version));
        all
    }
}

/// One workflow's definition in one config version.
#[derive(Clone)]
pub struct Definition {
    config: Arc<Config>,
    index: usize,
}

impl Definition {
    pub(crate) fn of(config: Arc<Config>, workflow: &str) -> Option<Definition> {
        let index = config.workflows.iter().position(|w| w.name.as_str() == workflow)?;
        Some(Definition { config, index })
    }
}

impl std::ops::Deref for Definition {
    type Target = Workflow;

    fn deref(&self) -> &Workflow {
        &self.config.workflows[self.index]
    }
}

/// `input`, whose step index is `from`'s, as the same step of `to`, found by name: the caller
/// read one config version, the record is pinned to another. A step `to` lacks (or, for a
/// domain event, one that takes no events there) gets an index past the end, so the lifecycle
/// rejects it as `unknown_step`, as for any step the config does not know. (Intake reads each
/// event in every version and submits it to a record only as its own version reads it.)
fn pin_step<'i>(input: &'i Input, from: &Workflow, to: &Workflow) -> std::borrow::Cow<'i, Input> {
    use std::borrow::Cow;
    if from.config_version == to.config_version {
        return Cow::Borrowed(input);
    }
    let source = match input {
        Input::StepInput { source, .. } => Some(*source),
        _ => None,
    };
    // An input the step in the record's own version would not take maps to no step: an event
    // it does not accept, or a callback where it says `accepts_callbacks: false` (the edge
    // checked the current version only; found by an attack test).
    let takes = |i: u32| match source {
        Some(lifecycle::Source::Event) => to.steps[i as usize].accepts_events.is_some(),
        Some(lifecycle::Source::Callback) => to.steps[i as usize].accepts_callbacks,
        None => true,
    };
    let map = |step: u32| {
        from.steps
            .get(step as usize)
            .and_then(|s| to.step_index(s.name.as_str()))
            .filter(|&i| takes(i))
            .unwrap_or(u32::MAX)
    };
    let mut pinned = input.clone();
    match &mut pinned {
        Input::StepInput { step, .. } | Input::StepReady { step, .. } | Input::BranchEnded { step, .. } => {
            *step = map(*step);
        }
        Input::Resumed { wait, .. } => wait.step = map(wait.step),
        // A compensation is acknowledged by callback whatever feeds its step, and its wait is
        // reported by the execution: both found by name, as a step's input is (found by review:
        // after a deploy that inserted a step, the refund of `charge` was recorded as `points`
        // acknowledged).
        Input::UndoInput { .. } | Input::UndoReady { .. }
            if crate::mutants::active(crate::mutants::Mutation::UndoUnpinned) =>
        {
            return Cow::Borrowed(input);
        }
        Input::UndoInput { step, .. } | Input::UndoReady { step, .. } => {
            *step = from
                .steps
                .get(*step as usize)
                .and_then(|s| to.step_index(s.name.as_str()))
                .unwrap_or(u32::MAX);
        }
        _ => return Cow::Borrowed(input),
    }
    Cow::Owned(pinned)
}

/// [`lifecycle::decide`], and the one fact it needs from beyond the record: a start event
/// that would restart a terminal record, but was refused earlier because its workflow was then
/// running (ledgered `already_running`), is a late copy of that refused event. It never starts
/// a later run (found by the simulation: a producer's retry weeks later started one).
pub async fn decide(
    store: &dyn WorkflowStore,
    plan: &lifecycle::Plan,
    names: (&WorkflowName, &CorrelationKey),
    record: Option<&Record>,
    input: &Input,
    now: OffsetDateTime,
) -> Result<Decision, StoreError> {
    let decision = lifecycle::decide(plan, names, record, input, now);
    if let (Input::Start { event, .. }, Some(write)) = (input, &decision.write)
        && write.cause == lifecycle::Cause::Restart
        && store.ledgered(names.0, names.1, event.as_str(), IgnoreReason::AlreadyRunning).await?
    {
        return Ok(Decision::ignored(IgnoreReason::RefusedWhileRunning));
    }
    Ok(decision)
}

impl Engine {
    pub fn now(&self) -> OffsetDateTime {
        (self.clock)()
    }

    /// The state machine ARN of a workflow.
    pub fn state_machine_arn(&self, workflow: &str) -> String {
        format!("{}{workflow}", self.state_machine_prefix)
    }

    /// What executions of a workflow start on: its alias, which points at the most recently
    /// deployed state machine version (during a deploy, not necessarily this engine's config:
    /// the first step's report settles the record's version), or the state machine itself.
    pub fn start_arn(&self, workflow: &str) -> String {
        let arn = self.state_machine_arn(workflow);
        match &self.state_machine_alias {
            Some(alias) => format!("{arn}:{alias}"),
            None => arn,
        }
    }

    /// The execution ARN of (workflow, key, generation).
    pub fn execution_arn(&self, workflow: &Workflow, key: &CorrelationKey, generation: u32) -> String {
        let name = execution_name(&workflow.name, key, generation);
        execution_arn(&self.state_machine_arn(workflow.name.as_str()), &name).unwrap_or(name)
    }

    /// Decides `input` against the stored record and carries the decision out.
    pub async fn submit(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        now: OffsetDateTime,
    ) -> Result<Submitted, EngineError> {
        match self.submit_on(workflow, key, input, now, false).await? {
            Exact::Decided(submitted) => Ok(*submitted),
            Exact::OtherVersion(_) => unreachable!("an input not held to its version is always decided"),
        }
    }

    /// Writes a decided record, on the condition the transition table gives: the config it names
    /// registered first, a write id of its own (to know a lost answer from a lost race), and
    /// trimmed to the store's item limit.
    async fn write_record(&self, write: &mut lifecycle::Write, attempt: u32) -> Result<Landed, EngineError> {
        if write.to.config_version == self.config.version {
            self.ensure_registered().await?;
        }
        write.to.write_id = Some((self.write_ids)());
        fit_item_limit(&mut write.to, self.item_sizes);
        let applied = self
            .store
            .apply(write)
            .await
            .map_err(|e| EngineError::Uncertain { source: Box::new(e.into()) })?;
        match applied {
            Applied::Written => {}
            Applied::Lost { current: Some(current) } if current.write_id == write.to.write_id => {
                info!("the answer to this write was lost; the write is in place, so it counts as written");
            }
            Applied::Lost { current } => {
                info!(attempt, "lost a race for the record; deciding again on the winner's state");
                return Ok(Landed::LostTo(current));
            }
        }
        info!(
            from = %write.from.map_or("absent".to_owned(), |s| s.to_string()),
            to = %write.to.state,
            cause = write.cause.as_str(),
            version = write.to.version,
            "transition"
        );
        Ok(Landed::Yes)
    }

    /// [`Engine::submit`] for an input that holds only under `workflow`'s own config version (a
    /// domain event matched against that version's `accepts_events`): nothing is done when the
    /// record is decided under another version, which is returned.
    pub async fn submit_exact(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        now: OffsetDateTime,
    ) -> Result<Exact, EngineError> {
        self.submit_on(workflow, key, input, now, true).await
    }

    #[instrument(skip_all, fields(workflow = %workflow.name, key = %key, input = %input_ref(input, now)))]
    async fn submit_on(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        now: OffsetDateTime,
        exact: bool,
    ) -> Result<Exact, EngineError> {
        let mut record = self.store.load(&workflow.name, key).await?;
        for attempt in 1..=MAX_ATTEMPTS {
            // The record's own version decides, whatever version the caller read the input
            // with: a record finishes on the config it started on (a new start, on this one).
            let (governing, input) = self.pinned(workflow, record.as_deref(), input).await?;
            let event = matches!(&*input, Input::StepInput { source: lifecycle::Source::Event, .. });
            if event && record.as_deref().is_some_and(|r| r.state == State::Pending) {
                info!("record pending: the event is retried once its version is settled");
                return Err(EngineError::Unsettled);
            }
            if exact && governing.config_version != workflow.config_version {
                info!(record_version = %governing.config_version, "the record runs another config version, which decides this input");
                return Ok(Exact::OtherVersion(governing.config_version.clone()));
            }
            let input = &*input;
            let workflow = &*governing;
            let plan = workflow.plan();
            if lifecycle::unsettled(&plan, record.as_deref(), input) {
                info!("a parallel group's report is still on its way: retried once it is in");
                return Err(EngineError::GroupUnsettled);
            }
            if lifecycle::task_not_out(record.as_deref(), input) {
                info!("the attempt's task is not marked out yet: the sender retries in a moment");
                return Err(EngineError::TaskNotOut);
            }
            // Decide with the time of the decision, not of the message's arrival: a record
            // written with an old `updated_at` looks owed for longer than it is, and a resume
            // would be re-sent inside its grace period (found by the simulation). A later `now`
            // given on purpose (a sweep as of a chosen time) still wins.
            let now = now.max(self.now());
            let mut decision =
                decide(&*self.store, &plan, (&workflow.name, key), record.as_deref(), input, now)
                    .await
                    .map_err(EngineError::Store)?;
            if let Some(write) = decision.write.as_mut()
                && let Landed::LostTo(current) = self.write_record(write, attempt).await?
            {
                record = current.map(|r| Arc::new(*r));
                continue;
            }
            self.observe(workflow, input, &decision, now);
            let mut submitted = Submitted { decision, prior: record };
            return match self
                .carry_out(workflow, key, input, &submitted.decision, submitted.record(), now)
                .await
            {
                Ok(found) => {
                    // What buffering found in the inbox: the id taken by another payload, or
                    // this input buffered before and since expired or drained.
                    if let Some(outcome) = found {
                        submitted.decision.outcome = outcome;
                    }
                    Ok(Exact::Decided(Box::new(submitted)))
                }
                Err(source) => {
                    Err(EngineError::Unfinished { submitted: Box::new(submitted), source: Box::new(source) })
                }
            };
        }
        Err(EngineError::Contended { attempts: MAX_ATTEMPTS })
    }

    /// Registers the config this engine carries in the table, once per process (at a cold
    /// start): the deployed versions stay readable, and `baton rollout plan` compares against
    /// the one started last. A failure is logged, never fatal here: no record is written on
    /// this version before it is registered ([`Engine::submit`] tries again first).
    pub async fn register_config(&self) {
        self.versions.started.store(true, std::sync::atomic::Ordering::Release);
        if let Err(e) = self.ensure_registered().await {
            warn!(config_version = %self.config.version, error = %error_chain(&e), "cannot register the config; tried again before the first start");
        }
    }

    async fn ensure_registered(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.versions.registered.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = self.now();
        let config = crate::ports::store::RegisteredConfig {
            version: self.config.version.clone(),
            canonical: self.config.canonical.clone(),
            registered_at: now,
            started_at: now,
        };
        self.store.register_config(&config, self.versions.started.load(Ordering::Acquire)).await?;
        self.versions.registered.store(true, Ordering::Release);
        info!(config_version = %config.version, "config registered");
        Ok(())
    }

    /// The definition `input` (whose step is `workflow`'s) is decided under for `record`, and the
    /// input with its step found again there by name.
    pub async fn pinned<'i>(
        &self,
        workflow: &Workflow,
        record: Option<&Record>,
        input: &'i Input,
    ) -> Result<(Definition, std::borrow::Cow<'i, Input>), StoreError> {
        let version = pinned_version(record, input, &workflow.config_version);
        let governing = self.definition(workflow.name.as_str(), version).await?.ok_or_else(|| {
            unregistered(version.unwrap_or(&self.config.version), "it has no such workflow")
        })?;
        let input = pin_step(input, workflow, &governing);
        Ok((governing, input))
    }

    /// `workflow` as config `version` (`None`: this engine's own) defines it, if it does.
    pub async fn definition(
        &self,
        workflow: &str,
        version: Option<&str>,
    ) -> Result<Option<Definition>, StoreError> {
        Ok(Definition::of(self.config_of(version).await?, workflow))
    }

    /// `workflow` as defined in a config version that has a step named `step`: this engine's
    /// own first, then the registered ones (a callback for a step an earlier version had,
    /// answering a record pinned to it; or one a later deploy added). Which one does not matter:
    /// the engine finds the step again by name in the record's own version.
    pub async fn definition_with_step(
        &self,
        workflow: &str,
        step: &str,
    ) -> Result<Option<Definition>, StoreError> {
        let find = |all: Vec<Arc<Config>>| {
            all.into_iter().find_map(|c| Definition::of(c, workflow).filter(|d| d.step_index(step).is_some()))
        };
        if let Some(found) = find(self.config_versions().await?) {
            return Ok(Some(found));
        }
        // A version registered since this engine read them (deployed after its cold start).
        self.read_registered().await?;
        Ok(find(self.config_versions().await?))
    }

    /// Every config version records may be on: this engine's own first, then every registered
    /// one (read from the table once per engine; a version registered later is read when a
    /// record names it).
    pub async fn config_versions(&self) -> Result<Vec<Arc<Config>>, StoreError> {
        let listed = *self.versions.listed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if listed.is_none() {
            self.read_registered().await?;
        }
        let mut all = vec![self.config.clone()];
        all.extend(self.versions.all().into_iter().filter(|c| c.version != self.config.version));
        Ok(all)
    }

    /// Reads the registered versions again if the last read is older than `age`: a version
    /// deployed since (during a deploy, old and new functions run side by side) may read an
    /// input this one does not. `true` if it read them.
    pub async fn refresh_versions(&self, age: Duration) -> Result<bool, StoreError> {
        let listed = *self.versions.listed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if listed.is_some_and(|at| self.now() - at < age) {
            return Ok(false);
        }
        self.read_registered().await?;
        Ok(true)
    }

    async fn read_registered(&self) -> Result<(), StoreError> {
        let now = self.now();
        for registered in self.store.configs().await? {
            if self.versions.get(&registered.version).is_some() {
                continue;
            }
            match Config::parse(&registered.canonical) {
                Ok(config) if config.version == registered.version => self.versions.keep(config),
                Ok(config) => {
                    warn!(registered = %registered.version, parsed = %config.version, "a registered config reads back as another version; skipped")
                }
                Err(e) => {
                    warn!(registered = %registered.version, error = %e, "a registered config does not parse; skipped")
                }
            }
        }
        *self.versions.listed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now);
        Ok(())
    }

    /// The config of `version` (`None`: this engine's own): its own, or an earlier one read
    /// back from the table once and kept.
    pub async fn config_of(&self, version: Option<&str>) -> Result<Arc<Config>, StoreError> {
        let Some(version) = version.filter(|v| *v != self.config.version) else {
            return Ok(self.config.clone());
        };
        if let Some(config) = self.versions.get(version) {
            return Ok(config);
        }
        self.read_registered().await?;
        self.versions
            .get(version)
            .ok_or_else(|| unregistered(version, "it is not registered, or does not read back"))
    }

    /// Logs the classification and counts it.
    fn observe(&self, workflow: &Workflow, input: &Input, decision: &Decision, now: OffsetDateTime) {
        let wf = Some(workflow.name.as_str());
        let metric = match (decision.outcome, input) {
            (Outcome::Applied, Input::Start { .. }) => Some(Metric::WorkflowsStarted),
            (Outcome::Applied, Input::ExecutionGone { .. }) => Some(Metric::RecordsStranded),
            // The write that ends the workflow, whatever input made it.
            (Outcome::Applied, _)
                if decision
                    .write
                    .as_ref()
                    .is_some_and(|w| w.to.state.is_terminal() && !w.from.is_some_and(State::is_terminal)) =>
            {
                decision.write.as_ref().and_then(|w| match w.to.state {
                    State::Succeeded => Some(Metric::WorkflowsSucceeded),
                    State::Degraded => Some(Metric::WorkflowsDegraded),
                    State::Failed => Some(Metric::WorkflowsFailed),
                    State::TimedOut => Some(Metric::WorkflowsTimedOut),
                    State::Cancelled => Some(Metric::WorkflowsCancelled),
                    State::Compensated => Some(Metric::WorkflowsCompensated),
                    State::CompensationFailed => Some(Metric::WorkflowsCompensationFailed),
                    _ => None,
                })
            }
            (Outcome::Duplicate, _) => Some(Metric::DuplicateInputs),
            (Outcome::Buffered, _) => Some(Metric::InputsBuffered),
            (Outcome::Ignored(reason), _) if reason != lifecycle::IgnoreReason::NothingOwed => {
                Some(Metric::InputsIgnored)
            }
            _ => None,
        };
        if let Some(metric) = metric {
            self.metrics.count(metric, wf, now);
        }
        match decision.outcome {
            Outcome::Ignored(lifecycle::IgnoreReason::NothingOwed) => {}
            Outcome::Ignored(reason) => info!(reason = reason.as_str(), "input ignored; kept in the ledger"),
            Outcome::Rejected(reason) => warn!(reason = reason.as_str(), "input rejected"),
            other => info!(outcome = ?other, "input classified"),
        }
    }

    /// Carries out every effect of `decision`, whatever happens to the others: a task that cannot
    /// be published must not keep the inbox from draining, nor a failed stop keep a cancel from
    /// failing the parked token (both found by review with the simulation). The first failure
    /// is returned, so the input is retried. Buffering may find the input's outcome otherwise
    /// than decided: that outcome is returned. Each effect is whole: a resume carries its own
    /// mark, an attempt's task its heartbeat and its mark.
    async fn carry_out(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        decision: &Decision,
        record: Option<&Record>,
        now: OffsetDateTime,
    ) -> Result<Option<Outcome>, EngineError> {
        let mut first_error = None;
        let mut found = None;
        for effect in &decision.effects {
            match self.carry_out_one(workflow, key, input, effect, record, now).await {
                Ok(outcome) => found = found.or(outcome),
                Err(e) => {
                    warn!(error_type = e.error_type(), error = %error_chain(&e), "an effect failed; the others were still tried");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(found), Err)
    }

    async fn carry_out_one(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        effect: &Effect,
        record: Option<&Record>,
        now: OffsetDateTime,
    ) -> Result<Option<Outcome>, EngineError> {
        match effect {
            Effect::StartExecution { generation } => {
                let input = ExecutionInput {
                    workflow: workflow.name.to_string(),
                    key: key.to_string(),
                    generation: *generation,
                };
                let started = self
                    .orchestrator
                    .start_execution(&StartExecution {
                        state_machine_arn: self.start_arn(workflow.name.as_str()),
                        workflow: workflow.name.clone(),
                        key: key.clone(),
                        generation: *generation,
                        input: serde_json::to_value(&input).unwrap_or(Value::Null),
                    })
                    .await?;
                info!(execution = %started.execution_arn, already_existed = started.already_existed, "execution started");
            }
            Effect::DrainInbox { generation, step } => {
                self.drain(workflow, key, *generation, *step, now).await?
            }
            Effect::Buffer { generation, step } => {
                return self.buffer(workflow, key, input, *generation, *step, now).await;
            }
            Effect::CreateTask { wait, attempt } => {
                self.create_task(workflow, key, *wait, *attempt, record, now).await?
            }
            Effect::Remind { wait, attempt, count } => {
                self.notify(workflow, key, (*wait, *attempt), lifecycle::Notice::Reminder(*count), now)
                    .await?
            }
            Effect::Escalate { wait, attempt, level } => {
                self.notify(workflow, key, (*wait, *attempt), lifecycle::Notice::Escalation(*level), now)
                    .await?
            }
            Effect::OpenAttempt { wait, attempt, beat } => {
                self.open_attempt(workflow, key, (*wait, *attempt), beat.as_ref(), record, now).await?
            }
            Effect::Resume { wait, token, resume, mark } => {
                let delivered = self.send_resume(workflow, key, token, resume, record).await?;
                // A delivered resume the record does not wait on is followed by the next report:
                // nothing to mark. The mark follows a resume that went out, never one that
                // failed (it stays owed, for a retry or the sweeper).
                if *mark == Mark::Always || delivered == Delivered::TokenGone {
                    let resumed = Input::Resumed {
                        wait: *wait,
                        token: token.clone(),
                        delivered: delivered == Delivered::Yes,
                    };
                    Box::pin(self.submit(workflow, key, &resumed, now)).await?;
                }
            }
            Effect::Answer { token, resume } => {
                self.send_resume(workflow, key, token, resume, record).await?;
            }
            Effect::SendTaskHeartbeat { token } => {
                let sent = self.orchestrator.send_task_heartbeat(token).await;
                self.resumed(sent, "heartbeat", workflow, key, record).await?;
            }
            Effect::StopExecution { generation, cause } => {
                let arn = self.execution_arn(workflow, key, *generation);
                self.orchestrator.stop_execution(&arn, "baton.Cancelled", cause).await?;
                info!(execution = %arn, "execution stopped");
            }
            Effect::Ledger { reason } => self.ledger(workflow, key, input, *reason, record, now).await?,
        }
        Ok(None)
    }

    /// The next attempt's task of a wait: a heartbeat first when the step keeps its token alive
    /// between attempts, then the task, then its mark. The mark is left out when the task did
    /// not go out, or the heartbeat did not land: marked, nothing would beat again (found by an
    /// attack test), and the sweeper tries again.
    async fn open_attempt(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        (wait, attempt): (WaitId, u32),
        beat: Option<&TaskToken>,
        record: Option<&Record>,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        let beat = match beat {
            Some(token) => {
                let sent = self.orchestrator.send_task_heartbeat(token).await;
                self.resumed(sent, "heartbeat", workflow, key, record).await.map(|_| ())
            }
            None => Ok(()),
        };
        let created = self.create_task(workflow, key, wait, attempt, record, now).await;
        if beat.is_ok() && created.is_ok() {
            let opened = Input::AttemptOpened { wait, attempt };
            Box::pin(self.submit(workflow, key, &opened, now)).await?;
        }
        beat.and(created)
    }

    /// A success or failure resume, and whether it reached Step Functions.
    async fn send_resume(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        token: &TaskToken,
        resume: &Resume,
        record: Option<&Record>,
    ) -> Result<Delivered, EngineError> {
        match resume {
            Resume::Success { output } => {
                let sent = self.orchestrator.send_task_success(token, output).await;
                self.resumed(sent, "success", workflow, key, record).await
            }
            Resume::Failure { error, cause } => {
                let sent = self.orchestrator.send_task_failure(token, error, cause).await;
                self.resumed(sent, "failure", workflow, key, record).await
            }
        }
    }

    /// Records an ignored (or refused) input in the ledger, with the record as it stood.
    async fn ledger(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        reason: lifecycle::IgnoreReason,
        record: Option<&Record>,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        let entry = LedgerEntry {
            config_version: Some(workflow.config_version.clone()),
            workflow: workflow.name.clone(),
            key: key.clone(),
            input_id: input_ref(input, now),
            reason,
            generation: record.map(|r| r.generation),
            state: record.map(|r| r.state.to_string()),
            detail: crate::ports::store::ledger_detail(input_detail(input)),
            at: now,
            expires_at: now + LEDGER_RETENTION,
        };
        self.store.put_ledger(&entry).await?;
        Ok(())
    }

    /// A resume that finds the token gone is not an error: the execution moved on (this resume,
    /// or an earlier copy of it, already arrived) or it ended (timed out, failed, stopped). The
    /// execution's status says which, and the log says so; the record's final report follows.
    async fn resumed(
        &self,
        result: Result<(), OrchestratorError>,
        what: &str,
        workflow: &Workflow,
        key: &CorrelationKey,
        record: Option<&Record>,
    ) -> Result<Delivered, EngineError> {
        match result {
            Ok(()) => {
                info!(resume = what, "resume delivered");
                Ok(Delivered::Yes)
            }
            Err(OrchestratorError::TokenGone { fingerprint, code, .. }) => {
                let generation = record.map_or(1, |r| r.generation);
                let arn = self.execution_arn(workflow, key, generation);
                let status = match self.orchestrator.describe(&arn).await {
                    Ok(info) => info.status.as_str().to_owned(),
                    Err(e) => format!("unknown ({})", e.error_type()),
                };
                let classified = if status == "RUNNING" { "execution_moved_on" } else { "execution_ended" };
                warn!(resume = what, token = %fingerprint, code = %code, execution_status = %status, classified,
                    "token gone: nothing more is owed for this step");
                Ok(Delivered::TokenGone)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the task of `attempt` of the wait (a step's or branch's, or a compensation's),
    /// idempotently, and publishes it once. From the
    /// second attempt it carries the error that failed the one before, from `record`.
    async fn create_task(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        wait: WaitId,
        attempt: u32,
        record: Option<&Record>,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        let (generation, step) = (wait.generation, wait.step);
        let kind = if wait.compensation { TaskKind::Compensation } else { TaskKind::Step };
        let Some(spec) = workflow.steps.get(step as usize) else { return Ok(()) };
        let template = match kind {
            TaskKind::Step => spec.task.as_ref(),
            TaskKind::Compensation => spec.compensate.as_ref().map(|c| &c.task),
            TaskKind::Reminder | TaskKind::Escalation => None,
        };
        let Some(template) = template else { return Ok(()) };
        let task = Task {
            kind,
            workflow: workflow.name.clone(),
            key: key.clone(),
            generation,
            step,
            step_name: spec.name.to_string(),
            id: Task::task_id(&workflow.name, key, generation, spec.name.as_str(), attempt, kind),
            title: template.render(workflow.name.as_str(), key.as_str(), spec.name.as_str(), generation),
            queue: template.queue.clone(),
            created_at: now,
            published: false,
            attempt,
            previous_error: record
                .filter(|r| attempt > 1 && r.generation == generation)
                .and_then(|r| r.failed_attempts(step).iter().find(|a| a.attempt + 1 == attempt))
                .map(|a| format!("{}: {}", a.error, a.cause)),
            notice: 0,
        };
        let stored = match self.store.put_task(&task).await? {
            Claim::Acquired => task,
            Claim::Exists(existing) if existing.published => return Ok(()),
            Claim::Exists(existing) => existing,
        };
        self.publisher.publish(&stored).await?;
        self.store.mark_task_published(&stored).await?;
        info!(task = %stored.id, queue = %stored.queue, "task created and published");
        Ok(())
    }

    /// Publishes a notice of the task of `attempt` of `wait`, claimed by the write before: a
    /// reminder on the step's queue, or the task on an escalation level's queue. Once, and not
    /// stored (a crash before it goes out loses it; the next one still comes).
    async fn notify(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        (wait, attempt): (WaitId, u32),
        notice: lifecycle::Notice,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        let Some(spec) = workflow.steps.get(wait.step as usize) else { return Ok(()) };
        let task_id =
            Task::task_id(&workflow.name, key, wait.generation, spec.name.as_str(), attempt, TaskKind::Step);
        let (kind, n, template, id) = match notice {
            lifecycle::Notice::Reminder(n) => {
                (TaskKind::Reminder, n, spec.task.as_ref(), format!("{task_id}/r{n}"))
            }
            lifecycle::Notice::Escalation(level) => {
                let template = spec.escalate.get(level as usize - 1).map(|e| &e.task);
                (TaskKind::Escalation, level, template, format!("{task_id}/e{level}"))
            }
        };
        let Some(template) = template else { return Ok(()) };
        let task = Task {
            kind,
            workflow: workflow.name.clone(),
            key: key.clone(),
            generation: wait.generation,
            step: wait.step,
            step_name: spec.name.to_string(),
            id,
            title: template.render(workflow.name.as_str(), key.as_str(), spec.name.as_str(), wait.generation),
            queue: template.queue.clone(),
            created_at: now,
            published: false,
            attempt,
            previous_error: None,
            notice: n,
        };
        self.publisher.publish(&task).await?;
        info!(task = %task.id, queue = %task.queue, of = %task_id, kind = kind.as_str(), n, "notice published");
        Ok(())
    }

    /// Stores an early input in its step's inbox, then looks again: if the step is waiting now,
    /// the progress side may have drained before the entry landed, so drain here.
    async fn buffer(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        generation: u32,
        step: u32,
        now: OffsetDateTime,
    ) -> Result<Option<Outcome>, EngineError> {
        let Some(id) = input.id() else { return Ok(None) };
        let Some(spec) = workflow.steps.get(step as usize) else { return Ok(None) };
        let ttl = Duration::try_from(spec.buffer_ttl).unwrap_or(Duration::ZERO);
        let entry = InboxEntry {
            workflow: workflow.name.clone(),
            key: key.clone(),
            step,
            step_name: spec.name.to_string(),
            config_version: workflow.config_version.clone(),
            id: id.clone(),
            generation,
            arrived_at: now,
            input: serde_json::to_value(input).unwrap_or(Value::Null),
            status: InboxStatus::Buffered,
            expires_at: now + ttl,
            expiry_hold: None,
            drain_target: None,
            drained_at: None,
            callback_key: matches!(input, Input::StepInput { source: lifecycle::Source::Callback, .. }),
        };
        if let Some(refused) = self.refuse_overflow(workflow, key, input, &entry, now).await? {
            return Ok(Some(refused));
        }
        let stored = self
            .store
            .buffer(&entry)
            .await
            .map_err(|e| EngineError::Uncertain { source: Box::new(e.into()) })?;
        if let Claim::Exists(existing) = stored {
            // The same id buffered earlier with another payload: refused, and ledgered, not
            // folded silently into the first (found by the simulation); and answered as refused
            // (found by review).
            if existing.input.get("hash") != entry.input.get("hash") {
                warn!(step, "input refused: its id was buffered earlier with another payload");
                let reason = lifecycle::IgnoreReason::IdempotencyKeyReused;
                self.ledger(workflow, key, input, reason, None, now).await?;
                return Ok(Some(Outcome::Rejected(lifecycle::RejectReason::IdempotencyKeyReused)));
            }
            // The same input again: still buffered, it goes on to the handshake below; already
            // expired or drained, that is its outcome (ledgered then), not "buffered".
            match existing.status {
                // Still open (a drain or the sweeper may hold it): the handshake below.
                InboxStatus::Buffered | InboxStatus::Draining | InboxStatus::Expiring => {
                    info!(step, "input already buffered")
                }
                InboxStatus::Expired => {
                    return Ok(Some(Outcome::Ignored(lifecycle::IgnoreReason::BufferExpired)));
                }
                InboxStatus::Applied | InboxStatus::Ignored => return Ok(Some(Outcome::Duplicate)),
            }
        }
        if crate::mutants::active(crate::mutants::Mutation::SkipHandshakeRead) {
            return Ok(None);
        }
        let current = self.store.load(&workflow.name, key).await?;
        if current.is_some_and(|r| r.waits_at(step) && r.generation == generation) {
            self.drain(workflow, key, generation, step, now).await?;
        }
        Ok(None)
    }

    /// Refuses an early input that would take a step's open inbox past what the step can ever
    /// take ([`MAX_STEP_INPUT_BYTES`], each entry counted with [`INBOX_ENTRY_OVERHEAD`]), and
    /// ledgers it, as an input too large for a waiting step is. Unbounded, twelve 60 KiB early
    /// callbacks to a key never started were all buffered, then ledgered whole on expiry (found
    /// by review). A redelivery of an input already in the inbox is not counted twice. Two
    /// buffers racing may each see the other's entry missing, so the bound can be passed by
    /// what is in flight at once, never more.
    async fn refuse_overflow(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        input: &Input,
        entry: &InboxEntry,
        now: OffsetDateTime,
    ) -> Result<Option<Outcome>, EngineError> {
        let inbox = self.store.inbox(&workflow.name, key, &entry.step_name).await?;
        if inbox.iter().any(|e| e.same_input(entry)) {
            return Ok(None);
        }
        // Only this generation's open entries: an earlier generation's are never drained into
        // this one, they only expire (found by an attack test).
        let open = inbox.iter().filter(|e| {
            matches!(e.status, InboxStatus::Buffered | InboxStatus::Draining | InboxStatus::Expiring)
                && e.generation == entry.generation
        });
        let held: usize = open.map(buffered_bytes).sum();
        if held + buffered_bytes(entry) <= MAX_STEP_INPUT_BYTES {
            return Ok(None);
        }
        warn!(workflow = %workflow.name, key = %key, step = entry.step, held,
            "early input refused: the step's buffered inputs would pass what the step can take");
        self.ledger(workflow, key, input, lifecycle::IgnoreReason::InputsTooLarge, None, now).await?;
        Ok(Some(Outcome::Rejected(lifecycle::RejectReason::InputsTooLarge)))
    }

    /// Applies a step's buffered inputs for `generation` in arrival order. Each entry is decided
    /// like a fresh input (the record's `applied` list makes a second application a duplicate),
    /// then settled; when two drains race, the settle's condition lets exactly one win. An entry
    /// buffered for another generation is left alone: it expires, ledgered, as one whose run
    /// never reached its step.
    pub async fn drain(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        generation: u32,
        step: u32,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        // Every entry is tried, whatever happens to the others; the first failure is returned at
        // the end, so the step_ready (or the callback) that drained is retried.
        let mut first_error = None;
        let Some(spec) = workflow.steps.get(step as usize) else { return Ok(()) };
        for entry in self.store.inbox(&workflow.name, key, spec.name.as_str()).await? {
            let open = matches!(entry.status, InboxStatus::Buffered | InboxStatus::Draining);
            if !open || entry.generation != generation {
                continue;
            }
            // Taken first: the sweeper may be expiring it (then it is left to the sweeper, which
            // sees this step waiting and gives it back, or expires it for good: InboxClaim).
            // Held from now, not from when a sweep began: a lease never starts before the claim.
            let claim = InboxClaim::Drain(DrainTarget { generation, step }, now.max(self.now()));
            match self.store.claim(&entry, &claim).await {
                Ok(answer) if claim.held(&answer) => {}
                Ok(_) => continue,
                Err(e) => {
                    warn!(id = %entry.id, error_type = e.error_type(), "buffered input not applied yet; retried with the drain");
                    first_error.get_or_insert(e.into());
                    continue;
                }
            }
            if let Err(e) = self.drain_one(workflow, key, step, &entry, now).await {
                warn!(id = %entry.id, error_type = e.error_type(), "buffered input not applied yet; retried with the drain");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn drain_one(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        step: u32,
        entry: &InboxEntry,
        now: OffsetDateTime,
    ) -> Result<(), EngineError> {
        let mut input: Input = match serde_json::from_value(entry.input.clone()) {
            Ok(input) => input,
            Err(e) => {
                warn!(id = %entry.id, error = %e, "buffered entry is unreadable; expiring it");
                self.store.settle(entry, InboxStatus::Draining, InboxStatus::Expired).await?;
                return Ok(());
            }
        };
        // The entry waits for its generation: applied with that generation named, so a drain
        // that paused while the workflow restarted finds the record in another generation and
        // leaves the entry, never moving the new run (found by review).
        // And it is for the step of its name in `workflow`, the record's version, whichever
        // version it was buffered under.
        if let Input::StepInput { generation, step: at, .. } = &mut input {
            *generation = Some(entry.generation);
            *at = step;
        }
        // An entry whose input reached the record is settled even when an effect after it
        // failed: the record owes that effect now, and the entry must not later expire as if it
        // had never been applied.
        let (outcome, failed) = match Box::pin(self.submit(workflow, key, &input, now)).await {
            Ok(applied) => (applied.outcome(), None),
            Err(EngineError::Unfinished { submitted, source }) => {
                (submitted.outcome(), Some(EngineError::Unfinished { submitted, source }))
            }
            Err(e) => return Err(e),
        };
        // Buffered: the record moved away from this step meanwhile; the entry stays for later.
        // Ignored or refused with its ledger entry unwritten: the entry stays too, so the
        // retried drain ledgers it (settled now, the refusal would leave no trace; found by the
        // simulation, seed 17459).
        let reached_record = matches!(outcome, Outcome::Applied | Outcome::Duplicate);
        if outcome == Outcome::Buffered {
            // Given back, to wait (or expire) as before this drain took it.
            self.store.claim(entry, &InboxClaim::Undrain).await?;
            return failed.map_or(Ok(()), Err);
        }
        if failed.is_some() && !reached_record {
            return failed.map_or(Ok(()), Err);
        }
        // Applied (or found applied); or ignored or refused, with the ledger saying why: the
        // entry tells which, so an operator never reads "applied" for an input that changed
        // nothing (found by review).
        let settled = if reached_record {
            info!(id = %entry.id, ?outcome, "buffered input applied");
            InboxStatus::Applied
        } else {
            info!(id = %entry.id, ?outcome, "buffered input drained and ignored; ledgered");
            InboxStatus::Ignored
        };
        self.store.settle(entry, InboxStatus::Draining, settled).await?;
        failed.map_or(Ok(()), Err)
    }
}

/// Whether a decided record's write landed, or another writer's did first (its record, if any).
enum Landed {
    Yes,
    LostTo(Option<Box<Record>>),
}

/// Keeps a record under the store's item limit (DynamoDB's, in production) whatever the length of the ids it remembers: the
/// step inputs are capped on their own (`inputs_too_large`), and the oldest audit entries give
/// way when long ids fill the rest (found by review: 200 transitions with 1 KB ids, then a large
/// input, made a record no write could store, so its step could never advance).
///
/// What the audit trail cannot make room for, the failed attempts' texts do: a wide retried
/// group whose branches failed many times with long error texts decided a 467 KB record, which
/// DynamoDB refused on every write (found by review). Their causes are cut, with the causes of
/// the failures owed to Step Functions, then their errors, until it fits; the attempts
/// themselves (who failed them, when) stay.
pub fn fit_item_limit(record: &mut Record, sizes: ItemSizes) {
    if (sizes.record_bound)(record) <= MAX_ITEM_BYTES {
        return;
    }
    while (sizes.record)(record) > MAX_ITEM_BYTES && record.history.len() > 1 {
        let drop = (record.history.len() / 4).max(1);
        record.history.drain(..drop);
    }
    for (cause, error, id) in [(128, 256, usize::MAX), (16, 64, usize::MAX), (0, 16, 32)] {
        if (sizes.record)(record) <= MAX_ITEM_BYTES {
            return;
        }
        // A compensation's acknowledgements are remembered to recognise redelivery: at the last
        // stage only the newest of each stays (found by an attack test: forty compensations'
        // acknowledgements under long ids took a record past the limit).
        if id != usize::MAX {
            for u in record.compensation.iter_mut().flat_map(|c| c.undos.iter_mut()) {
                let excess = u.acks.len().saturating_sub(1);
                u.acks.drain(..excess);
            }
        }
        // An owed failure's cause too (the branches' of a wide group whose resumes a throttled
        // Step Functions holds up: found by the simulation), as far as the failed attempts':
        // Step Functions gets it shorter; its error name stays whole.
        for w in waits_mut(record) {
            if let lifecycle::WaitStatus::Owed { resume: Resume::Failure { cause: text, .. }, .. } =
                &mut w.status
            {
                *text = text.chars().take(cause.max(16)).collect();
            }
        }
        for attempt in waits_mut(record).flat_map(|w| w.failed.iter_mut()) {
            attempt.cause = attempt.cause.chars().take(cause).collect();
            attempt.error = attempt.error.chars().take(error).collect();
            if attempt.input.as_str().chars().count() > id
                && let Ok(short) = EventId::parse(attempt.input.as_str().chars().take(id).collect::<String>())
            {
                attempt.input = short;
            }
        }
    }
}

/// Every wait a record keeps: its position's, its compensations'.
fn waits_mut(record: &mut Record) -> impl Iterator<Item = &mut lifecycle::Wait> {
    let undos = record.compensation.iter_mut().flat_map(|c| c.undos.iter_mut()).map(|u| &mut u.wait);
    record.waits.iter_mut().chain(undos)
}

/// A stable id for an input, for logs and ledger entries. Inputs from outside have their own id;
/// reports from Step Functions get one derived from what they say.
pub fn input_ref(input: &Input, now: OffsetDateTime) -> String {
    match input {
        Input::Start { event, .. } => event.to_string(),
        Input::StepInput { id, .. } => id.to_string(),
        Input::StepReady { generation, step, token, .. } => {
            format!("step_ready/g{generation}/s{step}/{}", token.fingerprint())
        }
        Input::Finished { generation, finish } => {
            let outcome = match finish {
                lifecycle::Finish::Succeeded => "succeeded",
                lifecycle::Finish::Failed { .. } => "failed",
                lifecycle::Finish::TimedOut => "timed_out",
                lifecycle::Finish::CompensationEnded { .. } => "compensation_ended",
            };
            format!("finished/g{generation}/{outcome}")
        }
        Input::BranchEnded { generation, step, .. } => format!("branch_ended/g{generation}/s{step}"),
        Input::Resumed { wait, token, .. } => format!("resumed/{wait}/{}", token.fingerprint()),
        Input::AttemptOpened { wait, attempt } => format!("attempt_opened/{wait}/a{attempt}"),
        Input::Cancel { .. } => format!("cancel/{}", now.unix_timestamp()),
        Input::CancelCompensate { .. } => format!("cancel_compensate/{}", now.unix_timestamp()),
        Input::UndoReady { generation, step, token, .. } => {
            format!("undo_ready/g{generation}/s{step}/{}", token.fingerprint())
        }
        Input::UndoInput { id, .. } => id.to_string(),
        Input::ExecutionGone { generation, status, .. } => format!("execution_gone/g{generation}/{status}"),
        Input::End { generation, .. } => format!("end/g{generation}/{}", now.unix_timestamp()),
        Input::Tick => "tick".into(),
    }
}

/// What the ledger keeps about an ignored input. Inputs from outside are kept whole (the
/// serialized [`Input`]), so `baton replay` can re-deliver them, up to
/// [`crate::ports::store::LEDGER_DETAIL_KEPT`] ([`crate::ports::store::ledger_detail`] cuts the
/// rest); reports from Step Functions keep a summary, and a task token only as its fingerprint.
pub fn input_detail(input: &Input) -> Value {
    match input {
        Input::Start { .. } | Input::StepInput { .. } | Input::UndoInput { .. } => {
            serde_json::to_value(input).unwrap_or(Value::Null)
        }
        Input::UndoReady { generation, step, token, .. } => {
            json!({"kind": "undo_ready", "generation": generation, "step": step, "token": token.fingerprint()})
        }
        Input::StepReady { generation, step, token, .. } => {
            json!({"kind": "step_ready", "generation": generation, "step": step, "token": token.fingerprint()})
        }
        Input::Finished { generation, finish } => {
            json!({"kind": "finished", "generation": generation, "finish": finish})
        }
        Input::BranchEnded { generation, step, error } => {
            json!({"kind": "branch_ended", "generation": generation, "step": step, "error": error})
        }
        Input::Resumed { wait, token, delivered } => {
            json!({"kind": "resumed", "wait": wait, "token": token.fingerprint(), "delivered": delivered})
        }
        Input::AttemptOpened { wait, attempt } => {
            json!({"kind": "attempt_opened", "wait": wait, "attempt": attempt})
        }
        Input::Cancel { reason } => json!({"kind": "cancel", "reason": reason}),
        Input::CancelCompensate { reason } => json!({"kind": "cancel_compensate", "reason": reason}),
        Input::ExecutionGone { generation, status, error } => {
            json!({"kind": "execution_gone", "generation": generation, "status": status, "error": error})
        }
        Input::End { generation, status, error, reason } => {
            json!({"kind": "end", "generation": generation, "status": status, "error": error, "reason": reason})
        }
        Input::Tick => json!({"kind": "tick"}),
    }
}

/// Why the engine could not finish an input.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Orchestrator(#[from] OrchestratorError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Every attempt lost a race for the record: heavy contention. Retry later.
    #[error("the record kept changing: {attempts} attempts lost the race")]
    Contended { attempts: u32 },
    /// A domain event for a step of a record still pending: which config version reads it (and
    /// so which step takes it, if any) is settled by its execution's first step report, seconds
    /// away. Retried through the queue rather than buffered under a reading that may not hold.
    #[error(
        "the record is pending: the config version that reads this event is not settled until its first step"
    )]
    Unsettled,
    /// A report that must wait for a parallel group's other report ([`lifecycle::unsettled`]):
    /// an optional branch's end before its group opened, or the execution's success before every
    /// optional branch reported how it ended.
    #[error("a parallel group's report is still on its way; this one is retried after it")]
    GroupUnsettled,
    /// An answer naming the attempt of a step, branch or compensation whose task is not marked
    /// out yet (the mark follows the publish, or the sweeper publishes it again): retried in a
    /// moment.
    #[error("the attempt's task is not marked out yet; retry in a moment")]
    TaskNotOut,
    /// A write (the record's, or an inbox entry's) failed without a definite answer: it may or
    /// may not have landed. A retry of the same input finds out, and applies it at most once.
    #[error("a write's outcome is unknown")]
    Uncertain {
        #[source]
        source: Box<EngineError>,
    },
    /// The input was decided and its record write (if it had one) landed; then one of the
    /// decision's effects failed. What the record owes (a resume, a start) the sweeper and any
    /// retry of the input carry out; the other effects are repeated by a retry.
    #[error("the input was {outcome} but an effect failed", outcome = outcome_word(submitted.outcome()))]
    Unfinished {
        submitted: Box<Submitted>,
        #[source]
        source: Box<EngineError>,
    },
}

fn outcome_word(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Applied => "applied",
        Outcome::Buffered => "buffered",
        Outcome::Duplicate => "a duplicate",
        Outcome::Ignored(_) => "ignored",
        Outcome::Rejected(_) => "rejected",
    }
}

impl EngineError {
    /// The error types the engine adds to those of its ports.
    pub const OWN_ERROR_TYPES: &[&str] = &["record_contended", "record_pending", "task_not_out"];
}

impl Classified for EngineError {
    fn error_type(&self) -> &'static str {
        match self {
            EngineError::Store(e) => e.error_type(),
            EngineError::Orchestrator(e) => e.error_type(),
            EngineError::Publish(e) => e.error_type(),
            EngineError::Contended { .. } => "record_contended",
            EngineError::Unsettled => "record_pending",
            EngineError::GroupUnsettled => "group_unsettled",
            EngineError::TaskNotOut => "task_not_out",
            EngineError::Uncertain { source } | EngineError::Unfinished { source, .. } => source.error_type(),
        }
    }

    fn retryable(&self) -> bool {
        match self {
            EngineError::Store(e) => e.retryable(),
            EngineError::Orchestrator(e) => e.retryable(),
            EngineError::Publish(e) => e.retryable(),
            EngineError::Contended { .. }
            | EngineError::Unsettled
            | EngineError::GroupUnsettled
            | EngineError::TaskNotOut => true,
            EngineError::Uncertain { source } | EngineError::Unfinished { source, .. } => source.retryable(),
        }
    }

    fn throttled(&self) -> bool {
        match self {
            EngineError::Store(e) => e.throttled(),
            EngineError::Orchestrator(e) => e.throttled(),
            EngineError::Publish(e) => e.throttled(),
            EngineError::Contended { .. }
            | EngineError::Unsettled
            | EngineError::GroupUnsettled
            | EngineError::TaskNotOut => false,
            EngineError::Uncertain { source } | EngineError::Unfinished { source, .. } => source.throttled(),
        }
    }
}

/// What one buffered entry counts against its step's bound: its input as stored, and what
/// the item costs besides.
fn buffered_bytes(entry: &InboxEntry) -> usize {
    crate::json_len::json_len(&entry.input).unwrap_or(MAX_STEP_INPUT_BYTES) + INBOX_ENTRY_OVERHEAD
}

/// What an inbox entry costs besides its input: keys, status, dates. At most
/// `MAX_STEP_INPUT_BYTES / INBOX_ENTRY_OVERHEAD` (256) empty inputs wait for one step.
pub const INBOX_ENTRY_OVERHEAD: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::lifecycle::{Source, StepOutcome};

    fn workflow(yaml_steps: &str) -> Workflow {
        let yaml = format!(
            "workflows:\n  w:\n    start: {{ when: {{ type: [\"s\"] }}, key: /subject }}\n    steps:\n{yaml_steps}"
        );
        Config::parse(&yaml).expect("valid").workflows.remove(0)
    }

    fn input(step: u32, source: Source) -> Input {
        Input::StepInput {
            id: crate::domain::ids::EventId::parse("i-1").unwrap(),
            hash: "h".into(),
            source,
            step,
            outcome: StepOutcome::Succeeded,
            data: Default::default(),
            generation: None,
            attempt: None,
        }
    }

    fn step_of(input: &Input) -> u32 {
        match input {
            Input::StepInput { step, .. } | Input::StepReady { step, .. } => *step,
            _ => panic!("no step"),
        }
    }

    // ---- adversarial review: early inputs against the store (in-memory) -------------------

    struct NoOrchestrator;

    #[async_trait::async_trait]
    impl Orchestrator for NoOrchestrator {
        async fn start_execution(
            &self,
            _: &StartExecution,
        ) -> Result<crate::ports::orchestrator::Started, OrchestratorError> {
            unimplemented!()
        }
        async fn send_task_success(
            &self,
            _: &crate::domain::ids::TaskToken,
            _: &Value,
        ) -> Result<(), OrchestratorError> {
            unimplemented!()
        }
        async fn send_task_failure(
            &self,
            _: &crate::domain::ids::TaskToken,
            _: &str,
            _: &str,
        ) -> Result<(), OrchestratorError> {
            unimplemented!()
        }
        async fn send_task_heartbeat(
            &self,
            _: &crate::domain::ids::TaskToken,
        ) -> Result<(), OrchestratorError> {
            unimplemented!()
        }
        async fn describe(
            &self,
            _: &str,
        ) -> Result<crate::ports::orchestrator::ExecutionInfo, OrchestratorError> {
            unimplemented!()
        }
        async fn history(
            &self,
            _: &str,
        ) -> Result<Vec<crate::ports::orchestrator::HistoryEvent>, OrchestratorError> {
            unimplemented!()
        }
        async fn stop_execution(&self, _: &str, _: &str, _: &str) -> Result<(), OrchestratorError> {
            unimplemented!()
        }
    }

    struct NoPublisher;

    #[async_trait::async_trait]
    impl TaskPublisher for NoPublisher {
        async fn publish(&self, _: &crate::ports::store::Task) -> Result<(), PublishError> {
            unimplemented!()
        }
    }

    const STEPS: &str = "      - { name: review, timeout: 1h }\n      - { name: pay, timeout: 1h, accepts_events: { type: [\"paid\"] } }\n";

    fn engine() -> Engine {
        let config = Config::parse(&format!(
            "workflows:\n  w:\n    start: {{ when: {{ type: [\"s\"] }}, key: /subject }}\n    steps:\n{STEPS}"
        ))
        .expect("valid");
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        Engine {
            config: Arc::new(config),
            store: Arc::new(crate::ports::store::memory::MemoryStore::new()),
            orchestrator: Arc::new(NoOrchestrator),
            publisher: Arc::new(NoPublisher),
            state_machine_prefix: "arn:aws:states:us-east-1:1:stateMachine:t-".into(),
            state_machine_alias: None,
            metrics: Metrics::to(Box::new(std::io::sink())),
            clock: Arc::new(move || now),
            write_ids: Arc::new(|| "w".into()),
            item_sizes: crate::ports::store::ItemSizes::ESTIMATE,
            versions: Default::default(),
        }
    }

    fn sized(id: &str, step: u32, source: Source, bytes: usize) -> Input {
        let mut data = serde_json::Map::new();
        data.insert("blob".into(), Value::String("x".repeat(bytes)));
        Input::StepInput {
            id: crate::domain::ids::EventId::parse(id).unwrap(),
            hash: format!("h-{id}-{source:?}"),
            source,
            step,
            outcome: StepOutcome::Succeeded,
            data,
            generation: None,
            attempt: None,
        }
    }

    /// Invariant 4: different generations are bounded separately. Early inputs buffered for
    /// generation 1 (which never reach generation 2: a drain skips them, they only expire) must
    /// not use up generation 2's budget for the same step.
    #[tokio::test]
    async fn early_inputs_of_another_generation_do_not_count_against_this_ones_budget() {
        let engine = engine();
        let w = engine.config.workflows[0].clone();
        let key = CorrelationKey::parse("k").unwrap();
        let now = engine.now();
        // Given generation 1's inbox for step 0 holding 2 x 60 KiB (under 128 KiB)
        for id in ["g1-a", "g1-b"] {
            let out =
                engine.buffer(&w, &key, &sized(id, 0, Source::Callback, 60 * 1024), 1, 0, now).await.unwrap();
            assert_eq!(out, None, "{id} buffered");
        }
        // When generation 2's first early input, 60 KiB, arrives for the same step
        let out =
            engine.buffer(&w, &key, &sized("g2-a", 0, Source::Callback, 60 * 1024), 2, 0, now).await.unwrap();
        // Then it is buffered: generation 2 has nothing buffered yet
        assert_eq!(out, None, "generation 2's only early input refused because of generation 1's");
    }

    /// An event and a callback with the same id are different inputs (their ids are chosen by
    /// different parties): buffered early, in either order, each is kept as an input of its
    /// own, neither refused as a reuse of the other's id (found by review).
    #[tokio::test]
    async fn an_early_callback_and_an_early_event_with_one_id_are_two_inputs() {
        for (first, second) in [(Source::Event, Source::Callback), (Source::Callback, Source::Event)] {
            let engine = engine();
            let w = engine.config.workflows[0].clone();
            let key = CorrelationKey::parse("k").unwrap();
            let now = engine.now();
            for source in [first, second] {
                let out = engine.buffer(&w, &key, &sized("same", 1, source, 10), 1, 1, now).await.unwrap();
                assert_eq!(
                    out, None,
                    "the {source:?} after the {first:?} was not buffered as an input of its own"
                );
            }
            let inbox = engine.store.inbox(&w.name, &key, "pay").await.unwrap();
            let mut sources: Vec<_> = inbox.iter().map(|e| (e.id.as_str(), e.source())).collect();
            sources.sort_by_key(|(_, s)| format!("{s:?}"));
            assert_eq!(sources, [("same", Some(Source::Callback)), ("same", Some(Source::Event))]);
            // Each again is the same input, not a third.
            for source in [first, second] {
                assert_eq!(
                    engine.buffer(&w, &key, &sized("same", 1, source, 10), 1, 1, now).await.unwrap(),
                    None
                );
            }
            assert_eq!(engine.store.inbox(&w.name, &key, "pay").await.unwrap().len(), 2);
        }
    }

    /// Invariant 2 (callbacks_refused), held by the engine too: a callback never reaches a step
    /// that refuses callbacks in the record's own config version, as an event never reaches one
    /// that takes no events there. The edge checks only the version that names the step first.
    #[test]
    fn a_callback_never_reaches_a_step_that_refuses_callbacks_in_the_records_version() {
        // The record runs v1, where pay takes domain events only
        let v1 = workflow(
            "      - { name: review, timeout: 1h }\n      - { name: pay, timeout: 1h, accepts_callbacks: false, accepts_events: { type: [\"paid\"] } }\n",
        );
        // The callback was admitted under v2 (the deployed one), where pay takes callbacks
        let v2 = workflow(
            "      - { name: review, timeout: 1h }\n      - { name: pay, timeout: 1h, accepts_events: { type: [\"paid\"] } }\n",
        );
        let mut v1 = v1;
        v1.config_version = "v1".into();
        let mut v2 = v2;
        v2.config_version = "v2".into();
        assert!(!v1.steps[1].accepts_callbacks && v2.steps[1].accepts_callbacks);
        assert_eq!(
            step_of(&pin_step(&input(1, Source::Callback), &v2, &v1)),
            u32::MAX,
            "a callback admitted under v2 reaches v1's pay, which refuses callbacks"
        );
    }

    /// A compensation's acknowledgement and its wait's report name their step by its index in
    /// the version the caller read: a deploy that inserted a step before the compensable ones
    /// must not move an acknowledgement of `charge` onto `points` (found by review).
    #[test]
    fn a_compensation_input_read_under_another_version_is_found_again_by_step_name() {
        let undo = "compensate: { task: { title: t, queue: q }, timeout: 1h }";
        let v1 = workflow(&format!(
            "      - {{ name: charge, timeout: 1h, {undo} }}\n      - {{ name: points, timeout: 1h, {undo} }}\n"
        ));
        let mut v2 = workflow(&format!(
            "      - {{ name: check, timeout: 1h }}\n      - {{ name: charge, timeout: 1h, {undo} }}\n      - {{ name: points, timeout: 1h, {undo} }}\n"
        ));
        v2.config_version = format!("{}-2", v2.config_version);
        let ack = |step| Input::UndoInput {
            id: crate::domain::ids::EventId::parse("ack-1").unwrap(),
            hash: "h".into(),
            source: Source::Callback,
            step,
            outcome: StepOutcome::Succeeded,
            generation: Some(1),
            attempt: Some(1),
        };
        let step = |input: &Input| match input {
            Input::UndoInput { step, .. } | Input::UndoReady { step, .. } => *step,
            _ => panic!("not a compensation input"),
        };
        // charge is step 1 in v2 (the callback function's) and step 0 in v1 (the record's).
        assert_eq!(step(&pin_step(&ack(1), &v2, &v1)), 0, "charge's acknowledgement left charge");
        assert_eq!(step(&pin_step(&ack(2), &v2, &v1)), 1);
        // A step the record's version lacks maps past its end.
        assert_eq!(step(&pin_step(&ack(0), &v2, &v1)), u32::MAX);
        let ready = Input::UndoReady {
            generation: 1,
            step: 2,
            token: crate::domain::ids::TaskToken::parse("t").unwrap(),
            deadline: OffsetDateTime::UNIX_EPOCH,
            error: "e".into(),
            cause: "c".into(),
        };
        assert_eq!(step(&pin_step(&ready, &v2, &v1)), 1);
    }

    #[test]
    fn an_input_read_under_another_version_is_found_again_by_step_name() {
        let v1 = workflow(
            "      - { name: review, timeout: 1h }\n      - { name: pay, timeout: 1h, accepts_events: { type: [\"paid\"] } }\n",
        );
        let v2 = workflow(
            "      - { name: check, timeout: 1h }\n      - { name: review, timeout: 1h }\n      - { name: pay, timeout: 1h }\n",
        );
        // The same version: the input as it is.
        assert!(matches!(pin_step(&input(1, Source::Callback), &v1, &v1), std::borrow::Cow::Borrowed(_)));
        // review is step 0 in v1 and step 1 in v2; pay is 1 and 2.
        assert_eq!(step_of(&pin_step(&input(0, Source::Callback), &v1, &v2)), 1);
        assert_eq!(step_of(&pin_step(&input(1, Source::Callback), &v1, &v2)), 2);
        // A step the record's version lacks is past its end: the lifecycle rejects it.
        assert_eq!(step_of(&pin_step(&input(0, Source::Callback), &v2, &v1)), u32::MAX);
        // A domain event reaches only a step that takes events in the record's version.
        assert_eq!(step_of(&pin_step(&input(1, Source::Event), &v1, &v2)), u32::MAX);
        assert_eq!(step_of(&pin_step(&input(2, Source::Event), &v2, &v1)), 1);
        // Inputs without a step are untouched.
        let cancel = Input::Cancel { reason: "r".into() };
        assert_eq!(*pin_step(&cancel, &v1, &v2), cancel);
    }
}
