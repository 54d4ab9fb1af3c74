//! baton's deterministic simulation: the real use cases (intake, progress, callback, sweeper,
//! replay, cancel), unmodified, over simulated AWS, under every kind of failure, in schedules a
//! seed chooses and replays exactly.
//!
//! The approach is FoundationDB's and TigerBeetle's VOPR's, at baton's size: one thread, a
//! virtual clock, a seeded generator, and an executor that interleaves the in-flight handler
//! invocations at every port call (`world.rs`). The ports are the ones production uses
//! (`WorkflowStore`, `Orchestrator`, `TaskPublisher`, `DeadLetterQueue`, the clock, write ids);
//! behind them sit the in-memory store, a model of Step Functions that runs the generated state
//! machines (`sfn.rs`), and a model of SQS with Lambda's event source mapping (`sqs.rs`).
//!
//! A schedule: a random workload (start events, duplicates, step events, callbacks from senders
//! that retry, early and late, conflicting payloads, restarts, cancels, replays, sweeper ticks),
//! run under random faults (errors before and after effects, lost answers that the SDK retries,
//! crashes between effects, latency, clock jumps, DynamoDB TTL deletions); then the faults stop,
//! time runs past every deadline, and the checks (`check.rs`) read the simulated services' own
//! logs.

pub mod check;
pub mod rng;
pub mod scale;
pub mod sfn;
pub mod sqs;
pub mod store;
pub mod workers;
pub mod workload;
pub mod world;

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_core::domain::config::Config;
use baton_core::domain::lifecycle::{Kind, State};
use baton_core::domain::webhook::Secrets;
use baton_core::mutants::Mutation;
use baton_core::ports::metrics::Metrics;
use baton_core::ports::secrets::RotatingSecrets;
use baton_core::ports::store::memory::MemoryStore;
use baton_core::use_cases::batch::SqsHandler;
use baton_core::use_cases::callback::Callbacks;
use baton_core::use_cases::engine::Engine;
use baton_core::use_cases::intake::Intake;
use baton_core::use_cases::progress::Progress;
use baton_core::use_cases::sweeper::Sweeper;
use time::{Duration, OffsetDateTime};

use crate::sfn::{Model, SimStepFunctions};
use crate::sqs::{QueueId, SimDeadLetters, Sqs};
use crate::store::{SimPublisher, SimStore};
use crate::workload::Evidence;
use crate::world::{ActorKind, Executor, Mutex, Rates, World, lock};

/// The workflows every schedule runs: two workflows started by the same event, a step with a
/// task and a heartbeat, a step fed by events and callbacks, an event type two steps accept,
/// restarts allowed in one and refused in the other.
pub const CONFIG: &str = r#"
workflows:
  review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    on_restart: after_terminal
    steps:
      - name: manual-review
        task: { title: "Review {key}", queue: risk }
        requires: [decision]
        accepts_events: { type: ["review.done", "order.note"] }
        timeout: 30m
        heartbeat: 10m
      - name: payment
        task: { title: "Collect {key}", queue: billing }
        requires: [payment_ref]
        accepts_events: { type: ["payment.settled", "order.note"] }
        timeout: 1h
  audit:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    on_restart: never
    steps:
      - name: check
        requires: [ok]
        timeout: 20m
"#;

/// The timer some schedules put before `review`'s `payment`: a cooling-off of 90 seconds (its
/// step's timeout the default margin after), during which operators cancel as at any step.
pub const TIMER_STEP: &str = "      - name: cool-off\n        timer: { after: 90s }\n";
/// A timer until the start event's `data.cool_until` ([`workload::Plan::date_starts`]), up to 20
/// minutes from when it is reached.
pub const UNTIL_STEP: &str =
    "      - name: cool-off\n        timer: { until: /data/cool_until }\n        timeout: 20m\n";

/// The `audit` workflow's step as some schedules have it: two approvals of three.
pub const QUORUM_CHECK: &str = "        requires: { at_least: 2, of: [ok, ok2, ok3] }\n";

/// The workflow with a parallel group that some schedules add to [`CONFIG`]: a step, then three
/// branches side by side (one fed by events too, one optional with a heartbeat), then (unless
/// the group is last, [`GROUP_LAST`]) a final step.
pub const GROUP_WORKFLOW: &str = r#"  checks:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    on_restart: after_terminal
    steps:
      - name: intake-review
        requires: [seen]
        timeout: 10m
      - parallel:
          name: all-checks
          branches:
            - name: fraud
              task: { title: "Fraud check {key}", queue: fraud }
              requires: [score]
              timeout: 15m
            - name: credit
              requires: [credit_ok]
              accepts_events: { type: ["credit.checked"] }
              timeout: 12m
            - name: address
              requires: [address_ok]
              timeout: 6m
              heartbeat: 2m
              optional: true
      - name: ship
        requires: [tracking]
        timeout: 20m
"#;

/// The workflow with retried steps that some schedules add to [`CONFIG`]: `verify` has three
/// attempts and a 30-second backoff that doubles; then a parallel group whose branches have two
/// attempts each, `scan` required and `notify` optional; then `close`.
pub const RETRY_WORKFLOW: &str = r#"  retried:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    on_restart: after_terminal
    steps:
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 40m
        retry: { attempts: 3, backoff: 30s }
      - parallel:
          name: checks
          branches:
            - name: scan
              task: { title: "Scan {key}", queue: scan }
              requires: [verdict]
              timeout: 30m
              retry: { attempts: 2, backoff: 30s }
            - name: notify
              task: { title: "Notify {key}", queue: notify }
              requires: [verdict]
              timeout: 20m
              optional: true
              retry: { attempts: 2, backoff: 1m }
      - name: close
        requires: [closed]
        timeout: 10m
"#;

/// [`RETRY_WORKFLOW`] as half the schedules that run it have it: each retried step and branch
/// declares a `heartbeat`, its backoff about the longest `baton validate` accepts with it (the
/// longest wait plus the sweep's 2 minutes under the heartbeat; `verify`: 30m, heartbeat 10m, 3
/// attempts, 3.5m doubling: the longest wait 7m).
pub fn retry_workflow_with_heartbeats() -> String {
    RETRY_WORKFLOW
        .replace(
            "        timeout: 40m\n        retry: { attempts: 3, backoff: 30s }\n",
            "        timeout: 30m\n        heartbeat: 10m\n        retry: { attempts: 3, backoff: 210s }\n",
        )
        .replace(
            "              timeout: 30m\n              retry: { attempts: 2, backoff: 30s }\n",
            "              timeout: 30m\n              heartbeat: 6m\n              retry: { attempts: 2, backoff: 230s }\n",
        )
        .replace(
            "              optional: true\n              retry: { attempts: 2, backoff: 1m }\n",
            "              optional: true\n              heartbeat: 5m\n              retry: { attempts: 2, backoff: 170s }\n",
        )
}

/// The workflow with compensation that some schedules add to [`CONFIG`]: `reserve` (2 attempts
/// to undo), a group whose required `charge` and optional `points` both declare `compensate`,
/// and `ship`, whose failure (or timeout, or a cancel with --compensate) undoes what completed.
pub const SAGA_WORKFLOW: &str = r#"  saga:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    on_restart: after_terminal
    steps:
      - name: reserve
        requires: [hold]
        timeout: 20m
        compensate: { task: { title: "Release {key}", queue: stock }, timeout: 15m, attempts: 2 }
      - parallel:
          name: settle
          branches:
            - name: charge
              requires: [charge_ref]
              timeout: 20m
              compensate: { task: { title: "Refund {key}", queue: billing }, timeout: 15m }
            - name: points
              requires: [points]
              timeout: 15m
              optional: true
              compensate: { task: { title: "Take back points {key}", queue: loyalty }, timeout: 10m, attempts: 1 }
      - name: ship
        requires: [tracking]
        timeout: 20m
"#;

/// The workflow of the crowds some schedules add to [`CONFIG`]: hundreds of records, each fed
/// by events (`member.enrolled`, then `member.welcomed`; a record not welcomed in time times
/// out and has its enrolment compensated), some of them stuck by what happens outside baton
/// (`workload::Plan::add_crowd`).
pub const CROWD_WORKFLOW: &str = r#"  crowd:
    start:
      when: { type: ["member.joined"] }
      key: /subject
    on_restart: never
    steps:
      - name: enrol
        requires: [enrolled]
        accepts_events: { type: ["member.enrolled"] }
        timeout: 5m
        compensate: { task: { title: "Unenrol {key}", queue: crowd }, timeout: 30m, attempts: 1 }
      - name: welcome
        requires: [welcomed]
        accepts_events: { type: ["member.welcomed"] }
        timeout: 5m
"#;

/// The workflow near DynamoDB's item limit that some schedules add to [`CONFIG`] (built by
/// [`wide_workflow`]): one group of twelve branches (`w0` required, the others optional), each
/// with a task and ten attempts (2 s apart, doubling), whose workers fail most attempts with Step Functions' longest
/// `error` and `cause` (256 and 32,768 characters): every failed attempt, and every branch's
/// owed failure, is kept in the one record.
pub fn wide_workflow() -> String {
    let branch = |i: usize| {
        let optional = if i == 0 { "" } else { "              optional: true\n" };
        format!(
            "            - name: w{i}\n              task: {{ title: \"Wide {{key}}\", queue: wide }}\n              requires: [verdict]\n              timeout: 60m\n{optional}              retry: {{ attempts: 10, backoff: 2s }}\n"
        )
    };
    let branches: String = (0..12).map(branch).collect();
    format!(
        "  wide:\n    start:\n      when: {{ type: [\"order.placed\"] }}\n      key: /subject\n    on_restart: after_terminal\n    steps:\n      - parallel:\n          name: many\n          branches:\n{branches}"
    )
}

/// [`GROUP_WORKFLOW`]'s final step, which schedules with the group last leave out.
pub const GROUP_LAST: &str = "      - name: ship\n        requires: [tracking]\n        timeout: 20m\n";

/// The config a schedule may deploy in mid-flight: a step inserted before `payment` in `review`
/// (records of version 2 wait there, and time out: no sender knows it), and `manual-review`'s
/// task template changed. Records started before the deploy must finish on [`CONFIG`].
pub fn config_v2() -> Config {
    config_v2_of(CONFIG)
}

/// [`config_v2`]'s change, made to `yaml` (a variant of [`CONFIG`]).
fn config_v2_of(yaml: &str) -> Config {
    config_v2_with(yaml, SagaChange::None)
}

/// [`config_v2`]'s change, made to `yaml` (a variant of [`CONFIG`]), with `saga` made to
/// [`SAGA_WORKFLOW`] if `yaml` has it.
pub fn config_v2_with(yaml: &str, saga: SagaChange) -> Config {
    let yaml = yaml.replace("title: \"Review {key}\"", "title: \"Second look at {key}\"").replace(
        "      - name: payment\n",
        "      - name: fraud-check\n        requires: [score]\n        timeout: 10m\n      - name: payment\n",
    );
    let yaml = yaml.replace(SAGA_WORKFLOW, &saga.apply(SAGA_WORKFLOW));
    Config::clone(&parsed(&yaml))
}

/// `yaml` (a variant of [`CONFIG`]) parsed once for the whole run, whichever thread asks: the
/// schedules deploy a few thousand variants, each thousands of times (10,000 schedules parsed
/// 17,000 configs, 4,700 of them different), and `Config::parse` keeps only the last few hundred
/// of each thread. Parsing YAML was about 3 % of a schedule's CPU.
fn parsed(yaml: &str) -> Arc<Config> {
    static PARSED: std::sync::LazyLock<Mutex<std::collections::HashMap<String, Arc<Config>>>> =
        std::sync::LazyLock::new(Mutex::default);
    if let Some(config) = lock(&PARSED).get(yaml) {
        return config.clone();
    }
    let config = Arc::new(Config::parse(yaml).expect("the simulation's configs are valid"));
    lock(&PARSED).entry(yaml.to_owned()).or_insert(config).clone()
}

/// How a mid-flight deploy changes [`SAGA_WORKFLOW`]: a step inserted, removed or moved before
/// its compensable ones, or its group's branches reordered, so that every compensable step has
/// another index in the new version than in the one its records run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SagaChange {
    None,
    /// `quote` inserted before `reserve`.
    InsertFirst,
    /// `check-stock` inserted between `reserve` and the group.
    InsertBeforeGroup,
    /// `reserve` removed.
    RemoveReserve,
    /// `points` before `charge` in the group.
    SwapBranches,
    /// `reserve` moved after the group.
    ReserveAfterGroup,
}

const SAGA_RESERVE: &str = "      - name: reserve\n        requires: [hold]\n        timeout: 20m\n        compensate: { task: { title: \"Release {key}\", queue: stock }, timeout: 15m, attempts: 2 }\n";
const SAGA_GROUP: &str = "      - parallel:\n          name: settle\n          branches:\n";
const SAGA_CHARGE: &str = "            - name: charge\n              requires: [charge_ref]\n              timeout: 20m\n              compensate: { task: { title: \"Refund {key}\", queue: billing }, timeout: 15m }\n";
const SAGA_SHIP: &str = "      - name: ship\n        requires: [tracking]\n        timeout: 20m\n";

impl SagaChange {
    pub const ALL: [SagaChange; 5] = [
        SagaChange::InsertFirst,
        SagaChange::InsertBeforeGroup,
        SagaChange::RemoveReserve,
        SagaChange::SwapBranches,
        SagaChange::ReserveAfterGroup,
    ];

    /// `saga` ([`SAGA_WORKFLOW`]) with this change made.
    pub fn apply(self, saga: &str) -> String {
        let step = |name: &str, needs: &str| {
            format!("      - name: {name}\n        requires: [{needs}]\n        timeout: 10m\n")
        };
        let changed = match self {
            SagaChange::None => saga.to_owned(),
            SagaChange::InsertFirst => {
                saga.replace(SAGA_RESERVE, &format!("{}{SAGA_RESERVE}", step("quote", "quote")))
            }
            SagaChange::InsertBeforeGroup => {
                saga.replace(SAGA_GROUP, &format!("{}{SAGA_GROUP}", step("check-stock", "stock")))
            }
            SagaChange::RemoveReserve => saga.replace(SAGA_RESERVE, ""),
            SagaChange::SwapBranches => {
                let points_at = saga.find("            - name: points\n").expect("points");
                let points = &saga[points_at..saga.find(SAGA_SHIP).expect("ship")];
                saga.replace(points, "").replace(SAGA_CHARGE, &format!("{points}{SAGA_CHARGE}"))
            }
            SagaChange::ReserveAfterGroup => {
                saga.replace(SAGA_RESERVE, "").replace(SAGA_SHIP, &format!("{SAGA_RESERVE}{SAGA_SHIP}"))
            }
        };
        assert!(self == SagaChange::None || changed != saga, "{self:?} changed nothing");
        changed
    }
}

/// The webhook secret the senders sign with.
pub const SECRET: &str = "whsec_c2ltdWxhdGlvbi1zZWNyZXQtb2YtMjQtYnl0ZXM=";
/// Where every schedule's clock starts.
pub const EPOCH: i64 = 1_800_000_000;
/// The state machine ARN prefix of the simulated stack.
pub const PREFIX: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:sim-";

/// One schedule's settings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub seed: u64,
    pub mutation: Option<Mutation>,
    /// Keep the readable schedule (slower).
    pub trace: bool,
}

/// What one schedule did and found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub seed: u64,
    pub points: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub checks: u64,
    /// The checks made, by invariant.
    pub by_invariant: BTreeMap<&'static str, u64>,
    /// Whether the schedule ran the workflow with a parallel group.
    pub groups: bool,
    /// Whether the schedule ran the workflow with a retried step.
    pub retries: bool,
    /// Whether a record of the schedule entered compensation.
    pub compensated: bool,
    /// Whether the schedule's retried steps and branches declare a heartbeat.
    pub heartbeats: bool,
    /// Whether the schedule ran each function on a clock of its own.
    pub skewed: bool,
    /// Whether Step Functions' own sends to SQS failed now and then in the schedule.
    pub send_faults: bool,
    /// How many records the schedule's crowd had (0: none).
    pub crowd: usize,
    /// Whether the schedule ran the wide workflow, near the item limit.
    pub wide: bool,
    /// Whether the schedule deployed version 2 (in mid-flight).
    pub deployed: bool,
    /// The largest record of a group of more than two branches written: its exact size in bytes,
    /// and the engine's cheap bound of it.
    pub largest_record: (usize, usize),
    /// How long the schedule took to run, in milliseconds (set by the runner).
    pub millis: u64,
    pub violations: Vec<String>,
    /// The schedule, step by step (when traced).
    pub trace: Vec<String>,
}

/// The simulated services every deployment shares.
pub struct Shared {
    world: Arc<World>,
    store: Arc<SimStore>,
    sfn: Arc<Mutex<Model>>,
    sqs: Arc<Mutex<Sqs>>,
    publisher: Arc<SimPublisher>,
    skews: Skews,
}

/// How far each function's clock is from the world's: every Lambda function reads its own
/// host's clock, and two hosts disagree (by up to a second here). The operator's engine
/// (`baton cancel`, `baton replay`) reads the world's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skews {
    pub intake: Duration,
    pub progress: Duration,
    pub callback: Duration,
    pub sweeper: Duration,
}

impl Skews {
    /// The widest disagreement between two clocks (the world's counted): what no function can
    /// see, so what a check of times two functions took may be off by.
    pub fn spread(&self) -> Duration {
        let all = [Duration::ZERO, self.intake, self.progress, self.callback, self.sweeper];
        let max = all.iter().max().copied().unwrap_or_default();
        let min = all.iter().min().copied().unwrap_or_default();
        max - min
    }

    /// Each function's clock apart from the world's by up to half a second either way (so two
    /// of them by up to a second), drawn from `rng`.
    pub fn draw(rng: &mut rng::Rng) -> Skews {
        let mut one = || Duration::milliseconds(rng.range(-500, 500));
        Skews { intake: one(), progress: one(), callback: one(), sweeper: one() }
    }
}

/// One deploy: a config, its state machines, and the functions built on it, each function on an
/// engine of its own that reads its own clock ([`Skews`]). `engine` is the operator's.
pub struct Deployment {
    pub config: Arc<Config>,
    pub engine: Arc<Engine>,
    pub intake: Arc<dyn SqsHandler>,
    pub progress: Arc<dyn SqsHandler>,
    pub callbacks: Arc<Callbacks>,
    pub sweeper: Arc<Sweeper>,
}

impl Shared {
    /// Puts `config`'s state machines in the model and builds the functions on it.
    fn deploy(&self, config: Arc<Config>) -> Deployment {
        let world = &self.world;
        lock(&self.store.deployed).push(config.clone());
        for w in &config.workflows {
            lock(&self.sfn).machines.insert(format!("{PREFIX}{}", w.name), Arc::new(machine_definition(w)));
        }
        let dlq = |queue| Arc::new(SimDeadLetters { world: world.clone(), sqs: self.sqs.clone(), queue });
        let secrets = RotatingSecrets::fixed(Secrets::parse(SECRET).expect("the secret"));
        let skews = self.skews;
        Deployment {
            intake: Arc::new(Intake::new(self.engine(&config, skews.intake), dlq(QueueId::IntakeDlq))),
            progress: Arc::new(Progress::new(
                self.engine(&config, skews.progress),
                dlq(QueueId::ProgressDlq),
            )),
            callbacks: Arc::new(Callbacks::new(self.engine(&config, skews.callback), secrets)),
            sweeper: Arc::new(Sweeper::new(self.engine(&config, skews.sweeper))),
            engine: self.engine(&config, Duration::ZERO),
            config,
        }
    }

    /// An engine on `config` whose clock is the world's plus `skew`.
    fn engine(&self, config: &Arc<Config>, skew: Duration) -> Arc<Engine> {
        let clock_world = self.world.clone();
        let ids_world = self.world.clone();
        Arc::new(Engine {
            config: config.clone(),
            store: self.store.clone(),
            orchestrator: Arc::new(SimStepFunctions {
                world: self.world.clone(),
                model: self.sfn.clone(),
                sqs: self.sqs.clone(),
            }),
            publisher: self.publisher.clone(),
            state_machine_prefix: PREFIX.to_owned(),
            state_machine_alias: None,
            metrics: Metrics::to(Box::new(std::io::sink())),
            clock: Arc::new(move || clock_world.now() + skew),
            write_ids: Arc::new(move || format!("w{}", ids_world.next_id())),
            // What the engine trims a record to, as on AWS (its bound noted for the store's log of
            // sizes); the memory store below measures every item exactly, as DynamoDB does
            // (`store::EXACT_SIZES`).
            item_sizes: store::ENGINE_SIZES,
            versions: Default::default(),
        })
    }
}

/// The definition `baton synth` writes for `workflow` (`asl::render`), as the stack deploys it:
/// its progress queue's placeholder replaced by the simulated queue. Built as a value, not
/// written out and read back (`machine_definition_is_the_synthesised_text` checks it is the
/// same).
pub fn machine_definition(workflow: &baton_core::domain::config::Workflow) -> serde_json::Value {
    fn name_queue(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s)
                if s.contains(baton_core::domain::asl::PROGRESS_QUEUE_PLACEHOLDER) =>
            {
                *s = s.replace(baton_core::domain::asl::PROGRESS_QUEUE_PLACEHOLDER, "sim-progress");
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(name_queue),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(name_queue),
            _ => {}
        }
    }
    let mut definition = baton_core::domain::asl::definition(workflow);
    name_queue(&mut definition);
    definition
}

/// Everything a schedule runs on. `config`, `engine` and the handlers are the deployment the
/// schedule starts on; [`Stack::live`] is the one running now.
pub struct Stack {
    pub live: Arc<Mutex<Arc<Deployment>>>,
    shared: Shared,
    pub world: Arc<World>,
    pub config: Arc<Config>,
    pub engine: Arc<Engine>,
    pub memory: Arc<MemoryStore>,
    pub store: Arc<SimStore>,
    pub sfn: Arc<Mutex<Model>>,
    pub sqs: Arc<Mutex<Sqs>>,
    pub publisher: Arc<SimPublisher>,
    pub intake: Arc<dyn SqsHandler>,
    pub progress: Arc<dyn SqsHandler>,
    pub callbacks: Arc<Callbacks>,
    pub sweeper: Arc<Sweeper>,
    pub violations: Arc<Mutex<Vec<String>>>,
    pub evidence: Arc<Mutex<Evidence>>,
    /// When the sweeper's schedule fires next.
    pub next_sweep: Mutex<OffsetDateTime>,
}

impl Stack {
    pub fn new(world: Arc<World>, cursed: Option<(String, OffsetDateTime)>) -> Stack {
        Stack::with_config(world, cursed, CONFIG, Skews::default())
    }

    /// A stack that deploys `yaml` (a variant of [`CONFIG`]) first, its functions' clocks apart
    /// from the world's by `skews`.
    pub fn with_config(
        world: Arc<World>,
        cursed: Option<(String, OffsetDateTime)>,
        yaml: &str,
        skews: Skews,
    ) -> Stack {
        let config = parsed(yaml);
        let memory = Arc::new(MemoryStore::new().with_item_sizes(store::EXACT_SIZES));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let store = Arc::new(SimStore {
            world: world.clone(),
            inner: memory.clone(),
            writes: Mutex::new(Vec::new()),
            violations: violations.clone(),
            cursed,
            late_puts: Mutex::new(Default::default()),
            deployed: Mutex::new(Vec::new()),
            settles: Mutex::new(Vec::new()),
            attempts_due: Mutex::new(Vec::new()),
            compensating_since: Mutex::new(None),
            largest: Mutex::new((0, 0)),
            underbound: Mutex::new(None),
        });
        let sqs = Arc::new(Mutex::new(Sqs::default()));
        let sfn = Arc::new(Mutex::new(Model::default()));
        let publisher = Arc::new(SimPublisher::new(world.clone()));
        let shared = Shared {
            world: world.clone(),
            store: store.clone(),
            sfn: sfn.clone(),
            sqs: sqs.clone(),
            publisher: publisher.clone(),
            skews,
        };
        let first = Arc::new(shared.deploy(config.clone()));
        Stack {
            intake: first.intake.clone(),
            progress: first.progress.clone(),
            callbacks: first.callbacks.clone(),
            sweeper: first.sweeper.clone(),
            engine: first.engine.clone(),
            live: Arc::new(Mutex::new(first)),
            shared,
            config,
            memory,
            store,
            sfn,
            sqs,
            publisher,
            violations,
            evidence: Arc::new(Mutex::new(Evidence::default())),
            next_sweep: Mutex::new(world.now() + Duration::minutes(1)),
            world,
        }
    }

    /// How far each function's clock is from the world's.
    pub fn skews(&self) -> Skews {
        self.shared.skews
    }

    /// The record of `workflow` and `key` as the store holds it now (a copy), if there is one:
    /// what a test reads back after driving the use cases.
    pub fn record(&self, workflow: &str, key: &str) -> Option<baton_core::domain::lifecycle::Record> {
        let workflow = baton_core::domain::ids::WorkflowName::parse(workflow).expect("a workflow name");
        let key = baton_core::domain::ids::CorrelationKey::parse(key).expect("a correlation key");
        self.memory.shared(&workflow, &key).map(Arc::unwrap_or_clone)
    }

    /// What runs now: the first deployment, or the one a deploy replaced it with.
    pub fn live(&self) -> Arc<Deployment> {
        lock(&self.live).clone()
    }

    /// Deploys `config` as `sam deploy` would: the state machines' definitions change for new
    /// executions, and the functions invoked from now on run on it (invocations under way
    /// finish on the old one).
    pub fn deploy(&self, config: Config) {
        let version = config.version.clone();
        let config = Arc::new(config);
        let deployment = Arc::new(self.shared.deploy(config.clone()));
        *lock(&self.live) = deployment;
        lock(&self.world.counts).add("deploy");
        self.world.note(|| format!("deploy: config {version}"));
    }

    /// Spawns an invocation of the function behind `queue` if it has visible messages.
    fn invoke(&self, queue: QueueId) {
        if !lock(&self.sqs).any_visible(queue, self.world.now()) {
            return;
        }
        let handler = match queue {
            QueueId::Intake => self.live().intake.clone(),
            _ => self.live().progress.clone(),
        };
        let future =
            crate::sqs::invoke(self.world.clone(), self.sqs.clone(), queue, handler, self.violations.clone());
        self.world.spawn(
            format!("{queue:?}#{}", self.world.next_id()),
            ActorKind::Invocation,
            Box::pin(future),
        );
    }

    /// The sweeper's schedule (`rate(1 minute)`): a sweep when its minute has come, the next one
    /// a minute on (after a jump, at the next minute of the schedule).
    fn scheduled_sweep(&self) {
        self.scheduled_sweep_every(Duration::minutes(1));
    }

    /// [`Stack::scheduled_sweep`] with sweeps `period` apart: an hour into the calm, when every
    /// deadline but the longest has passed, the simulation keeps one sweep in five (the owed
    /// work checks allow two of those).
    fn scheduled_sweep_every(&self, period: Duration) {
        let now = self.world.now();
        let mut next = lock(&self.next_sweep);
        if now < *next {
            return;
        }
        let behind = (now - *next).whole_seconds() % period.whole_seconds();
        *next = now + period - Duration::seconds(behind);
        drop(next);
        self.sweep();
    }

    /// A sweep now: the sweeper function sweeps as of its own clock, as on AWS.
    fn sweep(&self) {
        let sweeper = self.live().sweeper.clone();
        let future = async move {
            let _ = sweeper.run_once(sweeper.now()).await;
        };
        self.world.spawn(format!("sweep#{}", self.world.next_id()), ActorKind::Invocation, Box::pin(future));
    }

    /// The sweeper's schedule fires now and then just as a next attempt is due (on AWS, once
    /// a minute: in one case in sixty within the second after it): here a sweep then, by the
    /// sweeper's clock, for every attempt that landed due since the last call, so that a
    /// worker answering at once races the clocks' skew.
    fn sweep_at_due_attempts(&self) {
        let due: Vec<OffsetDateTime> = std::mem::take(&mut *lock(&self.store.attempts_due));
        for at in due {
            let at = at - self.shared.skews.sweeper + Duration::milliseconds(self.world.below(200) as i64);
            spawn_sweep_at(&self.world, &self.live, at, "sweep@due");
        }
    }

    /// Fires Step Functions' timers due now; their reports go to the progress queue.
    pub fn fire_timers(&self) {
        let now = self.world.now();
        let mut out = Vec::new();
        let fired = lock(&self.sfn).fire_timers(now, &mut out);
        if fired > 0 {
            self.world.note(|| format!("  {fired} task(s) timed out"));
        }
        let mut sqs = lock(&self.sqs);
        for body in out {
            sqs.send(QueueId::Progress, body, BTreeMap::new(), now);
        }
    }
}

/// When a schedule deploys version 2.
#[derive(Debug, Clone, Copy)]
enum DeployAt {
    Time(OffsetDateTime),
    /// This long after a record first began compensating.
    Compensating(Duration),
}

/// Deploys version 2 (with its change to the saga workflow) once its time has come.
fn deploy_when_due(stack: &Stack, deploy: &mut Option<(DeployAt, SagaChange)>, yaml: &str) {
    let Some((when, saga)) = *deploy else { return };
    let now = stack.world.now();
    let due = match when {
        DeployAt::Time(at) => now >= at,
        DeployAt::Compensating(after) => {
            lock(&stack.store.compensating_since).is_some_and(|t| now >= t + after)
        }
    };
    if due {
        *deploy = None;
        stack.deploy(config_v2_with(yaml, saga));
    }
}

/// A sweep at `at`: the sweeper's schedule fires then, and the invocation starts then (its
/// timeout counts from there), on the functions deployed by then.
pub(crate) fn spawn_sweep_at(
    world: &Arc<World>,
    live: &Arc<Mutex<Arc<Deployment>>>,
    at: OffsetDateTime,
    name: &str,
) {
    let (w, l, name) = (world.clone(), live.clone(), name.to_owned());
    let timer = async move {
        crate::world::sleep_until(w.clone(), at).await;
        let sweeper = lock(&l).sweeper.clone();
        let run = async move {
            let _ = sweeper.run_once(sweeper.now()).await;
        };
        w.spawn(name, ActorKind::Invocation, Box::pin(run));
    };
    world.spawn("sweep-timer", ActorKind::External, Box::pin(timer));
}

/// The most steps one schedule may take before it is declared stuck.
const MAX_STEPS: u64 = 200_000;
/// The steps a schedule may take besides, for each record of its crowd.
const STEPS_PER_CROWD_RECORD: u64 = 4_000;

/// Runs one schedule.
///
/// A panic inside the schedule (above all `decide`'s assertion that a write follows the record's
/// and the wait's tables, on through baton-core's `checks` feature) is one more violation of the
/// seed, named `decide_follows_its_tables` when it is that assertion, not the end of the run.
pub fn run(options: Options) -> Outcome {
    let seed = options.seed;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_schedule(options))).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        let invariant = if message.starts_with("decide chose") || message.starts_with("a terminal record") {
            "decide_follows_its_tables"
        } else {
            "no_panic"
        };
        let first = message.lines().next().unwrap_or_default();
        Outcome { seed, violations: vec![format!("[{invariant}] {first}")], ..Outcome::default() }
    })
}

#[expect(
    clippy::too_many_lines,
    reason = "the simulation's step loop: one match over every kind of event the world schedules"
)]
fn run_schedule(options: Options) -> Outcome {
    baton_core::mutants::set(options.mutation);
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).expect("a time");
    let world = World::new(options.seed, start, options.trace);
    let mut plan = workload::Plan::generate(&world);
    plan.add_limits(&mut rng::Rng::new(options.seed ^ 0x11_3175));
    *lock(&world.rates) = plan.rates;
    // Half the schedules deploy version 2 at some time in the faulty phase; some run with early
    // inputs kept only seconds, so that buffers expire while their steps begin to wait (the
    // sweep's expiry racing a drain). Drawn from a generator of their own, so the rest of a
    // seed's schedule stays what it was.
    let mut dice = rng::Rng::new(options.seed ^ 0x5eed_d091);
    let deploy_at = dice
        .chance(0.5)
        .then(|| start + Duration::seconds(dice.below(plan.horizon.whole_seconds() as u64) as i64));
    let yaml = match dice.chance(0.3).then(|| ["5s", "20s", "1m"][dice.below(3) as usize]) {
        Some(ttl) => {
            world.note(|| format!("early inputs to manual-review are kept {ttl}"));
            CONFIG.replacen(
                "        heartbeat: 10m\n",
                &format!("        heartbeat: 10m\n        buffer_ttl: {ttl}\n"),
                1,
            )
        }
        None => CONFIG.to_owned(),
    };
    // Two schedules in five make the audit workflow's step an N-of-M approval, with approvers
    // of their own, drawn from a generator of their own.
    let mut quorums = rng::Rng::new(options.seed ^ 0x9_0a0_2f3);
    let yaml = if quorums.chance(0.4) {
        world.note(|| "the audit workflow's check takes two approvals of three".to_owned());
        plan.add_quorum(&mut quorums);
        yaml.replacen("        requires: [ok]\n", QUORUM_CHECK, 1)
    } else {
        yaml
    };
    // Three schedules in ten put a timer before the review workflow's payment, drawn from a
    // generator of their own.
    let mut timers = rng::Rng::new(options.seed ^ 0x7_1e3e);
    // Half of those wait until a time each start event holds instead (sometimes past, sometimes
    // too late for the timeout, sometimes unreadable: those fail the run).
    let yaml = if timers.chance(0.3) {
        let step = if timers.chance(0.5) {
            world.note(|| "the review workflow cools off until the start event's cool_until".to_owned());
            plan.date_starts(&mut timers, start);
            UNTIL_STEP
        } else {
            world.note(|| "the review workflow cools off 90s before payment".to_owned());
            TIMER_STEP
        };
        yaml.replacen("      - name: payment\n", &format!("{step}      - name: payment\n"), 1)
    } else {
        yaml
    };
    // Three schedules in ten remind the reviewers of manual-review's task, three times, and
    // escalate it twice, early in its 30 minutes (so that a review left open a while meets every
    // notice, and the planted bugs of notices are met often), drawn from a generator of their own.
    let mut reminders = rng::Rng::new(options.seed ^ 0x4e_3141);
    let yaml = if reminders.chance(0.3) {
        world.note(|| {
            "manual-review's task is reminded of every 2m, three times, and escalated at 3m and 9m".to_owned()
        });
        yaml.replacen(
            "        heartbeat: 10m\n",
            "        heartbeat: 10m\n        remind: { after: 2m, every: 2m, times: 3 }\n        \
             escalate: [{ after: 3m, queue: risk-leads }, { after: 9m, queue: risk-heads }]\n",
            1,
        )
    } else {
        yaml
    };
    // Two schedules in five add the workflow with a parallel group (half of them with the group
    // last), with its own senders, drawn from a generator of their own.
    let mut groups = rng::Rng::new(options.seed ^ 0x6a0_9a11);
    let with_groups = groups.chance(0.4);
    let yaml = if with_groups {
        let last = groups.chance(0.5);
        let workflow = if last { GROUP_WORKFLOW.replace(GROUP_LAST, "") } else { GROUP_WORKFLOW.to_owned() };
        world.note(|| {
            format!("the checks workflow runs a parallel group{}", if last { ", last" } else { "" })
        });
        plan.add_groups(&mut groups, !last);
        format!("{yaml}{workflow}")
    } else {
        yaml
    };
    // Two schedules in five add the workflow with a retried step, with its own senders, drawn
    // from a generator of their own.
    // (Drawn first: a schedule with a crowd runs the retried and the saga workflows too, whose
    // owed work the crowd's stuck records must not keep from going out.)
    let mut crowds = rng::Rng::new(options.seed ^ 0xc40_3d5);
    let with_crowd = crowds.chance(0.1);
    let mut retries = rng::Rng::new(options.seed ^ 0x7e7_7a1e);
    let with_retries = retries.chance(0.4) || with_crowd;
    // Half of those with a heartbeat on each retried step and branch.
    let heartbeats = with_retries && retries.chance(0.5);
    let yaml = if with_retries {
        world.note(|| "the retried workflow runs retried steps and branches".to_owned());
        plan.add_retries(&mut retries);
        let workflow = if heartbeats { retry_workflow_with_heartbeats() } else { RETRY_WORKFLOW.to_owned() };
        if heartbeats {
            world.note(|| "its retried steps and branches declare a heartbeat".to_owned());
        }
        format!("{yaml}{workflow}")
    } else {
        yaml
    };
    // About half the schedules add the workflow with compensation, with its own senders (and
    // operators who cancel with --compensate), drawn from a generator of their own.
    let mut sagas = rng::Rng::new(options.seed ^ 0x5a6a_c0de);
    let with_sagas = sagas.chance(0.5) || with_crowd;
    let yaml = if with_sagas {
        world.note(|| "the saga workflow compensates what completed when ship fails".to_owned());
        plan.add_sagas(&mut sagas);
        format!("{yaml}{SAGA_WORKFLOW}")
    } else {
        yaml
    };
    // Half the schedules run each function on a clock of its own, apart from the world's by up
    // to half a second either way, drawn from a generator of their own.
    let mut clocks = rng::Rng::new(options.seed ^ 0xc10c_5e3d);
    let skews = if clocks.chance(0.5) { Skews::draw(&mut clocks) } else { Skews::default() };
    if skews != Skews::default() {
        world.note(|| format!("the functions' clocks are off the world's by {skews:?}"));
    }
    // A schedule that deploys and runs the saga workflow changes it too, one way of five; half
    // of them deploy once a saga record has begun compensating, up to a minute on, so that the
    // acknowledgements are handled by the new functions (drawn from a generator of their own).
    let mut deploys = rng::Rng::new(options.seed ^ 0xde9_1075);
    let mut deploy = deploy_at.map(|at| {
        let saga = if with_sagas { *deploys.pick(&SagaChange::ALL) } else { SagaChange::None };
        let when = if with_sagas && deploys.chance(0.5) {
            DeployAt::Compensating(Duration::seconds(deploys.range(0, 60)))
        } else {
            DeployAt::Time(at)
        };
        world.note(|| format!("deploys version 2 ({when:?}), the saga workflow changed: {saga:?}"));
        (when, saga)
    });
    // One schedule in ten adds the wide workflow, whose records come near the item limit.
    let mut wide = rng::Rng::new(options.seed ^ 0x91de_5123);
    let with_wide = wide.chance(0.1);
    let yaml = if with_wide {
        world.note(|| "the wide workflow's records come near DynamoDB's item limit".to_owned());
        // Step Functions throttles the task calls for some minutes (its quota hit) as the
        // branches' last attempts fail: their failures stay owed, each with its cause, in the
        // one record.
        let from = start + Duration::seconds(wide.range(60, 180));
        let until = from + Duration::seconds(wide.range(4 * 60, 8 * 60));
        *lock(&world.throttle_spell) = Some((from, until, "sfn.SendTask"));
        lock(&world.spells).push((from, until, "sfn.SendTask"));
        format!("{yaml}{}", wide_workflow())
    } else {
        yaml
    };
    let yaml = if with_crowd {
        plan.add_crowd(&mut crowds);
        world.note(|| {
            format!(
                "a crowd of {} records, {} of their executions stopped from the console, {} final reports lost",
                plan.crowd.len(),
                plan.console_stops.len(),
                plan.lost_reports.len()
            )
        });
        format!("{yaml}{CROWD_WORKFLOW}")
    } else {
        yaml
    };
    let will_deploy = deploy.is_some();
    let cursed = plan.cursed.clone().map(|k| (k, start + plan.cursed_from));
    let stack = Stack::with_config(world.clone(), cursed, &yaml, skews);
    // The sweeper's schedule fires every minute, from a second of its own.
    *lock(&stack.next_sweep) = start + Duration::seconds(clocks.range(1, 60));
    // Three schedules in ten have Step Functions' own sends to SQS fail now and then while the
    // faults last, drawn from a generator of their own.
    let mut sends = rng::Rng::new(options.seed ^ 0x5e4d_fa11);
    let send_faults = sends.chance(0.3);
    if send_faults {
        let rate = [0.01, 0.03, 0.06][sends.below(3) as usize];
        lock(&stack.sfn).send_faults = sfn::SendFaults { rate, rng: sends, next: 0 };
        world.note(|| format!("Step Functions' own sends to SQS fail at {rate}"));
    }
    // DynamoDB's `by_due` index is eventually consistent: in most schedules its reads lag
    // behind the table, each item by up to a few, or a few hundred, writes (a backlog that
    // outlasts a sweep's lease), drawn from a generator of its own.
    let max_lag = [0, 4, 40, 400][dice.below(4) as usize];
    if max_lag > 0 {
        let mut lag = rng::Rng::new(options.seed ^ 0x1a6_91dc);
        // Half the reads see the table as it stands; the others, some moment within the lag.
        stack.memory.set_index_lag(max_lag, move |max| if lag.chance(0.5) { 0 } else { lag.below(max + 1) });
        world.note(|| format!("the by_due index lags up to {max_lag} writes behind the table"));
    }
    if let Some(k) = &plan.cursed {
        world.note(|| {
            format!("key {k} is cursed: every store call for it fails from {}", start + plan.cursed_from)
        });
    }
    // One schedule in ten adds a crowd: hundreds of records of their own workflow, a share
    // of them stuck by what happens outside baton (an execution stopped from the console, a
    // final report lost past the DLQ), enough to fill the sweeper's batches.
    for (workflow, key) in &plan.lost_reports {
        let name = baton_core::ports::orchestrator::execution_name(
            &baton_core::domain::ids::WorkflowName::parse(workflow.as_str()).expect("a workflow"),
            &baton_core::domain::ids::CorrelationKey::parse(key.as_str()).expect("a key"),
            1,
        );
        let arn = format!("{}{workflow}:{name}", PREFIX.replace(":stateMachine:", ":execution:"));
        lock(&stack.sfn).lost_reports.insert(arn);
    }
    // The task workers of the retried steps and of the compensations, drawn from a generator of
    // their own.
    let mut workers =
        workers::Workers::new(workload::stack_parts(&stack), rng::Rng::new(options.seed ^ 0x0b0e_4e45));
    if with_retries {
        workers = workers.answering("retried", workers::Policy::USUAL);
    }
    if with_sagas {
        workers = workers.answering("saga", workers::Policy::USUAL);
    }
    if with_wide {
        workers = workers.answering("wide", workers::Policy::WIDE);
    }
    if workers.any() {
        *lock(&stack.publisher.workers) = Some(Box::new(move |p| workers.read(p)));
    }
    let mut exec = Executor::default();
    workload::spawn_all(&stack, &plan);

    // The faulty phase: everything the plan holds, interleaved and failing. Time passes in small
    // steps, in rare large jumps, and whenever nothing can move until something wakes.
    let mut steps = 0u64;
    let mut stalled = 0u32;
    let horizon = start + plan.horizon;
    let mut last_extra_sweep: Option<OffsetDateTime> = None;
    // A crowd's records take steps of their own.
    let max_steps = MAX_STEPS + STEPS_PER_CROWD_RECORD * plan.crowd.len() as u64;
    let mut index = IndexLagBound { lagging: max_lag > 0, ..IndexLagBound::default() };
    while steps < max_steps {
        steps += 1;
        index.keep_up(&stack);
        deploy_when_due(&stack, &mut deploy, &yaml);
        stack.sweep_at_due_attempts();
        stack.scheduled_sweep();
        let roll = world.below(1000);
        let moved = match roll {
            0..=699 => exec.step(&world),
            700..=779 => {
                stack.invoke(QueueId::Intake);
                false
            }
            780..=859 => {
                stack.invoke(QueueId::Progress);
                false
            }
            // An extra sweep, beside the schedule's (a retried invocation, a manual run): with
            // a crowd, whose work takes many more steps, at most one a minute.
            860..=869
                if plan.crowd.is_empty()
                    || last_extra_sweep.is_none_or(|t| world.now() - t >= Duration::minutes(1)) =>
            {
                last_extra_sweep = Some(world.now());
                stack.sweep();
                false
            }
            // Time passes between inputs; an invocation's own calls take time only through the
            // latency faults, as a real one finishes within its function's timeout.
            // A sleeper wakes on time, to the millisecond: a worker that answers within a second,
            // a sweep as an attempt is due.
            // (While work can run, time passes as often per actor whatever their number: Lambda
            // runs invocations side by side, and a crowd's must not outlive their timeouts for
            // want of turns.)
            870..=949
                if !exec.runnable(&world)
                    || world.chance(0.05 * (4.0 / exec.runnable_count(&world).max(4) as f64)) =>
            {
                let by = Duration::seconds(world.below(5) as i64 + 1);
                let now = world.now();
                let wake = world.next_wake().map_or(by, |t| (t - now).max(Duration::milliseconds(1)));
                world.advance(by.min(wake));
                false
            }
            // A long quiet spell: only when no invocation is in flight (one would be killed by
            // its timeout long before).
            950..=951 if !exec.invoking(&world) => {
                let by = Duration::minutes(world.below(60) as i64 + 5);
                world.note(|| format!("clock jumps {by}"));
                lock(&world.counts).add("clock_jump");
                let from = world.now();
                world.advance(by);
                lock(&world.jumps).push((from, world.now()));
                false
            }
            952..=959 => {
                let now = world.now();
                let reaped = stack.memory.reap_expired(now, &mut || world.chance(0.5));
                if reaped > 0 {
                    lock(&world.counts).add("ttl_deletion");
                    world.note(|| format!("TTL deleted {reaped} expired item(s)"));
                }
                false
            }
            _ => {
                stack.fire_timers();
                false
            }
        };
        stalled = if moved { 0 } else { stalled + 1 };
        if stalled > 20 && !exec.runnable(&world) {
            // Everyone is asleep or waiting: skip to the next thing that happens.
            stalled = 0;
            if let Some(next) = next_event(&stack) {
                world.set_now(next);
            } else if world.now() > horizon {
                break;
            } else {
                world.advance(Duration::seconds(30));
            }
        }
        if world.now() > horizon && exec.is_idle(&world) {
            break;
        }
    }

    // The calm phase: no more faults (the cursed key stays cursed); the sweeper runs as its
    // schedule does; time moves on until every deadline has passed and nothing is left to do.
    *lock(&world.rates) = Rates::default();
    lock(&stack.sfn).send_faults.rate = 0.0;
    *lock(&world.throttle_spell) = None;
    world.note(|| "the faults stop".to_owned());
    stack.fire_timers();
    // The steps really waiting when the faults stop: the record waits, and so does its task in
    // Step Functions (a step that timed out meanwhile needs no task any more).
    let waiting_at_calm: Vec<baton_core::domain::lifecycle::Record> = {
        let model = lock(&stack.sfn);
        stack
            .memory
            .records()
            .into_iter()
            .filter(|r| {
                r.step_wait()
                    .and_then(|w| w.token.as_ref())
                    .is_some_and(|t| model.tokens.get(t.expose()).is_some_and(|(_, _, open)| *open))
            })
            .collect()
    };
    let calm_from = world.now();
    let calm_until = calm_from + Duration::hours(4);
    // The DLQ alarm has fired for whatever the faults dead-lettered: the operator replays (a
    // drain or a task still owed by a dead-lettered message is delivered again, guarded). It
    // fires again for messages that reach a DLQ later (a last receive that died or failed its
    // own dead-letter send is moved by SQS's redrive only at the next receive), and the operator
    // replays again.
    let replay_at = calm_from + Duration::seconds(60);
    let replays = [replay_at, replay_at + Duration::minutes(15), replay_at + Duration::hours(1)];
    for at in replays {
        workload::spawn_alarm_replay(&stack, at);
    }
    // StrandedRecordsAlarm has fired for the records whose executions ended without their
    // reports (the sweeper strands one long past its deadline): the operator ends them with
    // `baton end`, as their executions ended.
    for at in [calm_from + Duration::hours(3), calm_from + Duration::minutes(230)] {
        workload::spawn_stranded_end(&stack, at);
    }
    let settled_by = replay_at + crate::sqs::VISIBILITY + Duration::seconds(60);
    // Stranded inputs are looked for once every drain owed has come round again: after a
    // replay, an entry a sweep died holding waits out the sweep's lease before another takes it
    // over (InboxClaim), then one sweep period. A drain owed by a message still in a DLQ then
    // (it reached it after the replay: its dead-letter send failed as the faults stopped) comes
    // round at the next replay (found by `make sim`, seed 16343).
    let checked_after = |replay: OffsetDateTime| {
        replay
            + crate::sqs::VISIBILITY
            + Duration::seconds(60)
            + baton_core::limits::EXPIRY_LEASE
            + Duration::seconds(60)
    };
    let mut stranded_at = checked_after(replay_at);
    let mut stranded: Option<Vec<String>> = None;
    let mut long_jump = plan.long_jump.clone();
    let mut outcome = Outcome {
        seed: options.seed,
        groups: with_groups,
        retries: with_retries,
        heartbeats,
        skewed: skews != Skews::default(),
        send_faults,
        crowd: plan.crowd.len(),
        wide: with_wide,
        deployed: will_deploy,
        ..Outcome::default()
    };
    // What the world looked like before the long jump, once checked: (starts, writes,
    // violations seen).
    let mut before_jump: Option<(usize, usize, usize)> = None;
    // The table's writes when it was last seen to change, and when: a quiet minute since, the
    // index has caught up.
    let mut still = (stack.memory.writes(), world.now());
    let mut timers_fired: Option<OffsetDateTime> = None;
    while steps < max_steps {
        steps += 1;
        index.keep_up(&stack);
        if stranded.is_none() && world.now() >= stranded_at {
            let dead_letters = {
                let sqs = lock(&stack.sqs);
                !sqs.messages(QueueId::IntakeDlq).is_empty() || !sqs.messages(QueueId::ProgressDlq).is_empty()
            };
            match replays.iter().find(|at| **at > world.now()) {
                Some(next) if dead_letters => stranded_at = checked_after(*next),
                _ => stranded = Some(stranded_inputs(&stack)),
            }
        }
        deploy_when_due(&stack, &mut deploy, &yaml);
        stack.sweep_at_due_attempts();
        let period = if world.now() < calm_from + Duration::hours(1) { 1 } else { 5 };
        stack.scheduled_sweep_every(Duration::minutes(period));
        stack.invoke(QueueId::Intake);
        stack.invoke(QueueId::Progress);
        // (No faults, so no latency: the clock moves only where this loop moves it. Timers are
        // fired once per moment, not once per round: a crowd's executions are many.)
        if timers_fired != Some(world.now()) {
            timers_fired = Some(world.now());
            stack.fire_timers();
        }
        let before = world.points();
        let finished = exec.round(&world);
        if world.points() != before || finished > 0 || exec.runnable(&world) {
            continue;
        }
        if world.now() > calm_until && exec.is_idle(&world) && quiet(&stack) {
            let Some((by, late)) = long_jump.take() else { break };
            // Everything is checked as it stands, before TTL removes the traces it reads.
            check::all(&stack, &plan, (settled_by, &waiting_at_calm), &mut outcome);
            before_jump = Some((
                lock(&stack.sfn).starts.len(),
                lock(&stack.store.writes).len(),
                lock(&stack.violations).len(),
            ));
            // Weeks later: TTL has deleted some expired receipts and inbox entries, and a few
            // events arrive once more (a producer's late retry).
            world.note(|| format!("clock jumps {by}"));
            lock(&world.counts).add("clock_jump");
            world.advance(by);
            stack.sweep();
            if stack.memory.reap_expired(world.now(), &mut || world.chance(0.7)) > 0 {
                lock(&world.counts).add("ttl_deletion");
            }
            let now = world.now();
            for body in late {
                let m = lock(&stack.sqs).send(QueueId::Intake, body.clone(), BTreeMap::new(), now);
                world.note(|| format!("  sent {m} (late): {}", body.chars().take(110).collect::<String>()));
            }
            continue;
        }
        // Nothing moved: let time pass to the next thing that happens (the sweeper's schedule
        // fires every minute).
        let now = world.now();
        let step = next_event(&stack).map_or(Duration::minutes(1), |t| (t - now).max(Duration::seconds(1)));
        world.advance(step.min(Duration::minutes(5)));
        let writes = stack.memory.writes();
        if writes != still.0 {
            still = (writes, world.now());
        } else if world.now() - still.1 >= INDEX_QUIET {
            // A quiet minute: on AWS the index lags by about a second, so it has caught up.
            stack.memory.catch_up_index();
        }
        let period = if world.now() < calm_from + Duration::hours(1) { 1 } else { 5 };
        stack.scheduled_sweep_every(Duration::minutes(period));
        let reaped = stack.memory.reap_expired(world.now(), &mut || world.chance(0.5));
        if reaped > 0 {
            lock(&world.counts).add("ttl_deletion");
        }
    }

    if steps >= max_steps {
        let sqs = lock(&stack.sqs);
        outcome.violations.push(format!(
            "[every_schedule_settles] the schedule did not settle within {max_steps} steps: actors {:?} left, {} intake and {} progress message(s), next timer {:?}",
            exec.names(),
            sqs.messages(QueueId::Intake).len(),
            sqs.messages(QueueId::Progress).len(),
            lock(&stack.sfn).next_timer(),
        ));
    }
    match before_jump {
        None => check::all(&stack, &plan, (settled_by, &waiting_at_calm), &mut outcome),
        Some(before) => check::after_long_jump(&stack, before, &mut outcome),
    }
    outcome.checks += 1;
    outcome.violations.extend(stranded.unwrap_or_default());
    let failed_sends = lock(&stack.sfn).sends_failed.len() as u64;
    if failed_sends > 0 {
        *lock(&world.counts).faults.entry("sfn_send_failed").or_insert(0) += failed_sends;
    }
    outcome.largest_record = *lock(&stack.store.largest);
    outcome.points = world.points();
    outcome.faults = lock(&world.counts).faults.clone();
    if options.trace {
        outcome.trace = lock(&world.log).clone();
    }
    baton_core::mutants::set(None);
    // What holds the stack from inside it: the actors left, and the task workers reading the
    // outbound queue (each holds the stack back); dropped, the schedule's memory is freed.
    drop(exec);
    world.drop_actors();
    lock(&stack.publisher.workers).take();
    outcome
}

/// The longest the `by_due` index lags behind a write: far past a global secondary index's
/// usual lag of about a second.
const INDEX_LAG_BOUND: Duration = Duration::seconds(10);

/// The table's write count as time passed, so that the `by_due` index is never further behind
/// than [`INDEX_LAG_BOUND`], however busy the table (found by `make sim`, seed 7019: while other
/// records kept writing, an index minutes stale hid a retried branch's next attempt from every
/// sweep until its heartbeat ran out).
#[derive(Default)]
struct IndexLagBound {
    /// Whether the index lags at all (in one schedule in four it does not, and there is nothing
    /// to keep up with).
    lagging: bool,
    /// The write counts seen, each with when the index has caught up with it (the time it was
    /// seen plus the bound: worked out once, not on every step).
    written: std::collections::VecDeque<(OffsetDateTime, u64)>,
}

impl IndexLagBound {
    fn keep_up(&mut self, stack: &Stack) {
        if !self.lagging {
            return;
        }
        let (now, writes) = (stack.world.now(), stack.memory.writes());
        if self.written.back().is_none_or(|(_, w)| *w != writes) {
            self.written.push_back((now + INDEX_LAG_BOUND, writes));
        }
        while let Some((_, w)) = self.written.front().filter(|(caught_up, _)| *caught_up <= now).copied() {
            self.written.pop_front();
            stack.memory.catch_up_index_to(w);
        }
    }
}

/// A quiet spell after which the `by_due` index has caught up with the table: far past a global
/// secondary index's usual lag of about a second, and within a sweep period.
const INDEX_QUIET: Duration = Duration::minutes(1);

/// The next time something happens by itself: a sleeper wakes, a message becomes visible again,
/// a task times out.
fn next_event(stack: &Stack) -> Option<OffsetDateTime> {
    let now = stack.world.now();
    let (intake, progress) = {
        let sqs = lock(&stack.sqs);
        (sqs.next_visible(QueueId::Intake, now), sqs.next_visible(QueueId::Progress, now))
    };
    let timer = lock(&stack.sfn).next_timer();
    let sweep = Some(*lock(&stack.next_sweep));
    [stack.world.next_wake(), intake, progress, timer, sweep].into_iter().flatten().min()
}

/// Buffered inputs whose step is waiting in their generation, a visibility timeout after the
/// faults stopped: by then every drain owed has come round again, so an input still waiting
/// beside its waiting step was lost (the lost wake-up).
fn stranded_inputs(stack: &Stack) -> Vec<String> {
    let cursed = stack.store.cursed.as_ref().map(|(k, _)| k.clone());
    let mut found = Vec::new();
    for r in stack.memory.records() {
        if cursed.as_deref() == Some(r.key.as_str()) {
            continue;
        }
        // The steps that wait: the record's, or the reached and open branches of its group.
        let steps = match r.state {
            State::Waiting { .. } => {
                r.waits.iter().map(|b| b.step).filter(|&s| r.waits_at(s)).collect::<Vec<u32>>()
            }
            _ => continue,
        };
        for step in steps {
            stranded_at(stack, &r, step, &mut found);
        }
    }
    found
}

/// [`stranded_inputs`] of one waiting step.
fn stranded_at(stack: &Stack, r: &baton_core::domain::lifecycle::Record, step: u32, found: &mut Vec<String>) {
    {
        // The step's name in the record's own config version: the inbox is kept by name.
        let Some(name) = stack
            .store
            .deployed(Some(&r.config_version))
            .and_then(|c| Some(c.workflow(r.workflow.as_str())?.steps.get(step as usize)?.name.to_string()))
        else {
            return;
        };
        let inbox = workload::block_on(baton_core::ports::store::WorkflowStore::inbox(
            &*stack.memory,
            &r.workflow,
            &r.key,
            &name,
        ))
        .unwrap_or_default();
        for e in inbox {
            if !e.status.is_final() && e.generation == r.generation {
                found.push(format!(
                    "[no_lost_wake_up] {}/{} input {} is still {} while its step {step} waits (generation {}): a lost wake-up",
                    r.workflow,
                    r.key,
                    e.id,
                    e.status.as_str(),
                    r.generation
                ));
            }
        }
    }
}

/// Nothing left in the work queues, and no task waiting in Step Functions.
fn quiet(stack: &Stack) -> bool {
    let sqs = lock(&stack.sqs);
    sqs.messages(QueueId::Intake).is_empty()
        && sqs.messages(QueueId::Progress).is_empty()
        && lock(&stack.sfn).next_timer().is_none()
}

/// The record states a schedule can end in without a violation.
pub fn settled(kind: Kind) -> bool {
    kind.is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workflows every variant of the simulation's config deploys (each change a schedule
    /// may make to [`CONFIG`], each added workflow, each version 2).
    fn variants() -> Vec<Config> {
        let all = format!(
            "{CONFIG}{GROUP_WORKFLOW}{RETRY_WORKFLOW}{SAGA_WORKFLOW}{}{CROWD_WORKFLOW}",
            wide_workflow()
        );
        let changed = CONFIG
            .replacen("        heartbeat: 10m\n", "        heartbeat: 10m\n        buffer_ttl: 20s\n", 1)
            .replacen("        requires: [ok]\n", QUORUM_CHECK, 1)
            .replacen(
                "        heartbeat: 10m\n",
                "        heartbeat: 10m\n        remind: { after: 2m, every: 2m, times: 3 }\n        \
                 escalate: [{ after: 3m, queue: risk-leads }, { after: 9m, queue: risk-heads }]\n",
                1,
            );
        let timed = |step: &str| {
            changed.replacen("      - name: payment\n", &format!("{step}      - name: payment\n"), 1)
        };
        let others =
            format!("{}{}", GROUP_WORKFLOW.replace(GROUP_LAST, ""), retry_workflow_with_heartbeats());
        let mut configs = vec![
            Config::parse(&all).expect("valid"),
            Config::parse(&format!("{}{others}", timed(TIMER_STEP))).expect("valid"),
            Config::parse(&format!("{}{others}", timed(UNTIL_STEP))).expect("valid"),
        ];
        configs.extend(SagaChange::ALL.into_iter().map(|saga| config_v2_with(&all, saga)));
        configs
    }

    /// A machine's definition built as a value is the one `baton synth` writes, read back with
    /// its queue named, as the stack once deployed it.
    #[test]
    fn machine_definition_is_the_synthesised_text() {
        for config in variants() {
            for w in &config.workflows {
                let text = baton_core::domain::asl::render(w)
                    .replace(baton_core::domain::asl::PROGRESS_QUEUE_PLACEHOLDER, "sim-progress");
                let read: serde_json::Value = serde_json::from_str(&text).expect("ASL is JSON");
                assert_eq!(machine_definition(w), read, "{}", w.name);
                assert_eq!(machine_definition(w).to_string(), read.to_string(), "{}", w.name);
            }
        }
    }
}
