//! The hot path, measured (`make bench`): what one core does per event, per decision and per
//! whole workflow. Figures and their history: docs/PERFORMANCE.md.
//!
//! - `event_parse`: an SQS body to an [`Event`].
//! - `match_routed` / `match_every_pattern`: one parsed event against the start and
//!   `accepts_events` patterns of N workflows, through the index by `type` that intake uses, and
//!   the way it was done before it (every pattern tried), side by side.
//! - `plan_and_decide`: all intake does before its first write for one start event: parse,
//!   match, correlation key ([`plan_event`]), then [`lifecycle::decide`].
//! - `decide`: the pure transition function alone, for a callback that completes a step.
//! - `record_size_check`: the item-size check every record write makes, exact and bounded.
//! - `two_step_workflow`: the engine end to end on the in-memory store, through the real
//!   handlers: intake's start event, progress's two `step_ready` reports and its `finished`
//!   report, and two signed callbacks through the callback handler (signature checked). Step
//!   Functions and SQS answer at once, and what the senders send is built and signed before the
//!   clock starts, so the figure is baton's own CPU per workflow.
//! - `two_step_workflow_with_senders`: the same with the senders' work (building the bodies,
//!   signing the callbacks) inside the clock, as `two_step_workflow` measured until 2026-12-02.
//! - `forged_signature`: the review's amplification request (a 64 KiB body, an 8 KB
//!   `webhook-signature` of empty `v1,` entries, two active secrets) through the check as it was
//!   before the fix (`before`: one MAC per secret and entry, kept here only to measure it) and
//!   through [`Secrets::verify`] (`after`); and a request with 8 forged signatures of the right
//!   length, the most the check now reads (`after_most_entries`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use baton_core::domain::config::Config;
use baton_core::domain::event::Event;
use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
use baton_core::domain::lifecycle::{self, Input, Record, Source, State, StepOutcome};
use baton_core::domain::webhook::Secrets;
use baton_core::ports::dead_letters::{DeadLetterError, DeadLetterQueue};
use baton_core::ports::metrics::Metrics;
use baton_core::ports::orchestrator::{
    ExecutionInfo, HistoryEvent, Orchestrator, OrchestratorError, StartExecution, Started,
};
use baton_core::ports::outbound::{PublishError, TaskPublisher};
use baton_core::ports::secrets::RotatingSecrets;
use baton_core::ports::store::Task;
use baton_core::ports::store::memory::MemoryStore;
use baton_core::use_cases::batch::SqsHandler;
use baton_core::use_cases::callback::Callbacks;
use baton_core::use_cases::engine::{Engine, Versions, random_write_ids, system_clock};
use baton_core::use_cases::intake::{Intake, plan_event};
use baton_core::use_cases::progress::Progress;
use divan::{Bencher, black_box, counter::ItemsCount};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

// The allocator the functions ship with (functions/*/src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    divan::main();
}

const SAMPLE: &str = include_str!("../../../infra/workflows.yaml");
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `n` workflows shaped like the sample's: a start on its own `type` with a numeric condition,
/// a review step, and a payment step that takes its own `type` of event.
fn config_of(n: usize) -> Config {
    let mut yaml = String::from("workflows:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  wf-{i}:\n    start:\n      when: {{ type: [\"order.placed.{i}\"], data: {{ total: [{{ numeric: [\">=\", 1000] }}] }} }}\n      key: /subject\n    steps:\n      - {{ name: review, requires: [decision], timeout: 2d }}\n      - {{ name: payment, requires: [payment_ref], timeout: 7d, accepts_events: {{ type: [\"payment.settled.{i}\"] }} }}\n"
        ));
    }
    Config::parse(&yaml).expect("generated config is valid")
}

/// A start event for the middle workflow of `n`.
fn start_body(n: usize, key: &str) -> String {
    json!({
        "specversion": "1.0", "id": format!("evt-{key}"), "source": "shop", "type": format!("order.placed.{}", n / 2),
        "subject": key, "time": "2026-11-30T10:00:00Z", "data": {"total": 1500, "currency": "EUR"}
    })
    .to_string()
}

const SIZES: [usize; 4] = [1, 10, 100, 1000];

#[divan::bench]
fn event_parse(bencher: Bencher) {
    let body = start_body(10, "order-1");
    bencher.counter(ItemsCount::new(1usize)).bench(|| Event::parse(black_box(&body)).expect("parses"));
}

#[divan::bench(args = SIZES)]
fn match_routed(bencher: Bencher, n: usize) {
    let config = config_of(n);
    let event = Event::parse(&start_body(n, "order-1")).expect("parses");
    let normalised = event.normalised();
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        let mut matched = 0;
        for route in config.routes.candidates(black_box(&event.r#type)) {
            matched += usize::from(config.pattern(route).is_some_and(|p| p.matches(&normalised)));
        }
        assert_eq!(matched, 1);
    });
}

#[divan::bench(args = SIZES)]
fn match_every_pattern(bencher: Bencher, n: usize) {
    let config = config_of(n);
    let event = Event::parse(&start_body(n, "order-1")).expect("parses");
    let normalised = event.normalised();
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        let mut matched = 0;
        for wf in &config.workflows {
            matched += usize::from(wf.when.matches(black_box(&normalised)));
            for step in &wf.steps {
                matched += usize::from(step.accepts_events.as_ref().is_some_and(|p| p.matches(&normalised)));
            }
        }
        assert_eq!(matched, 1);
    });
}

#[divan::bench(args = SIZES)]
fn plan_and_decide(bencher: Bencher, n: usize) {
    let config = config_of(n);
    let body = start_body(n, "order-1");
    let now = OffsetDateTime::now_utc();
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        let Ok(plan) = plan_event(&config, black_box(&body)) else { panic!("plans") };
        let [(workflow, key, input)] = plan.inputs.as_slice() else { panic!("one input") };
        let decision = lifecycle::decide(&workflow.plan(), (&workflow.name, key), None, input, now);
        assert!(decision.write.is_some());
    });
}

#[divan::bench]
fn decide(bencher: Bencher) {
    let config = Config::parse(SAMPLE).expect("sample");
    let workflow = &config.workflows[0];
    let plan = workflow.plan();
    let key = CorrelationKey::parse("order-1".to_owned()).expect("key");
    let now = OffsetDateTime::now_utc();
    let waiting = waiting_record(&workflow.name, &key, now);
    let input = Input::StepInput {
        id: baton_core::domain::ids::EventId::parse("cb-1".to_owned()).expect("id"),
        hash: "h".into(),
        source: Source::Callback,
        step: 0,
        outcome: StepOutcome::Succeeded,
        data: serde_json::Map::from_iter([("decision".to_owned(), json!("approve"))]),
        generation: None,
        attempt: None,
    };
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        let decision =
            lifecycle::decide(&plan, (&workflow.name, &key), Some(black_box(&waiting)), &input, now);
        assert_eq!(decision.write.as_ref().map(|w| w.to.state), Some(State::Advancing { step: 0 }));
    });
}

/// What each record write checks against DynamoDB's 400 KB item limit: the exact size (the
/// whole item built, as it was checked before) and the bound checked first, side by side.
#[divan::bench(args = ["exact", "bound"])]
fn record_size_check(bencher: Bencher, how: &str) {
    let config = Config::parse(SAMPLE).expect("sample");
    let key = CorrelationKey::parse("order-1".to_owned()).expect("key");
    let waiting = waiting_record(&config.workflows[0].name, &key, OffsetDateTime::now_utc());
    use baton_aws::dynamodb::record_size;
    use baton_core::ports::store::limits::record_size_bound;
    let size: fn(&Record) -> usize = match how {
        "exact" => record_size,
        _ => record_size_bound,
    };
    bencher.counter(ItemsCount::new(1usize)).bench(|| size(black_box(&waiting)));
}

/// A record waiting on step 0, as progress leaves it.
fn waiting_record(workflow: &WorkflowName, key: &CorrelationKey, now: OffsetDateTime) -> Record {
    let start = Input::start(baton_core::domain::ids::EventId::parse("evt-1".to_owned()).expect("id"));
    let plan = Config::parse(SAMPLE).expect("sample").workflows[0].plan();
    let pending = lifecycle::decide(&plan, (workflow, key), None, &start, now).write.expect("starts").to;
    let ready = Input::StepReady {
        generation: 1,
        step: 0,
        token: TaskToken::parse("tok-1".to_owned()).expect("token"),
        deadline: now + time::Duration::days(2),
    };
    lifecycle::decide(&plan, (workflow, key), Some(&pending), &ready, now).write.expect("waits").to
}

/// Step Functions and SQS as the happy path sees them: every call taken at once.
struct Immediate;

#[async_trait::async_trait]
impl Orchestrator for Immediate {
    async fn start_execution(&self, req: &StartExecution) -> Result<Started, OrchestratorError> {
        Ok(Started { execution_arn: req.execution_name(), already_existed: false })
    }
    async fn send_task_success(&self, _: &TaskToken, _: &Value) -> Result<(), OrchestratorError> {
        Ok(())
    }
    async fn send_task_failure(&self, _: &TaskToken, _: &str, _: &str) -> Result<(), OrchestratorError> {
        unreachable!("not on the happy path")
    }
    async fn send_task_heartbeat(&self, _: &TaskToken) -> Result<(), OrchestratorError> {
        unreachable!("not on the happy path")
    }
    async fn describe(&self, _: &str) -> Result<ExecutionInfo, OrchestratorError> {
        unreachable!("not on the happy path")
    }
    async fn history(&self, _: &str) -> Result<Vec<HistoryEvent>, OrchestratorError> {
        unreachable!("not on the happy path")
    }
    async fn stop_execution(&self, _: &str, _: &str, _: &str) -> Result<(), OrchestratorError> {
        unreachable!("not on the happy path")
    }
}

#[async_trait::async_trait]
impl TaskPublisher for Immediate {
    async fn publish(&self, _: &Task) -> Result<(), PublishError> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl DeadLetterQueue for Immediate {
    async fn send(&self, _: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError> {
        panic!("nothing on the happy path is dead-lettered: {reason}: {detail}")
    }
    async fn requeue(&self, _: &SqsMessage) -> Result<(), DeadLetterError> {
        panic!("nothing on the happy path is throttled")
    }
    fn max_receive_count(&self) -> u32 {
        5
    }
}

struct Stack {
    store: Arc<MemoryStore>,
    intake: Intake,
    progress: Progress,
    callbacks: Callbacks,
    secrets: Secrets,
    version: String,
    next: AtomicU64,
}

impl Stack {
    fn new() -> Stack {
        let config = Config::parse(SAMPLE).expect("sample");
        let version = config.version.clone();
        let store = Arc::new(MemoryStore::new().with_item_sizes(baton_aws::dynamodb::ITEM_SIZES));
        let engine = Arc::new(Engine {
            config: Arc::new(config),
            store: store.clone(),
            orchestrator: Arc::new(Immediate),
            publisher: Arc::new(Immediate),
            state_machine_prefix: "arn:aws:states:us-east-1:123456789012:stateMachine:baton-".into(),
            state_machine_alias: None,
            metrics: Metrics::to(Box::new(std::io::sink())),
            clock: system_clock(),
            write_ids: random_write_ids(),
            item_sizes: baton_aws::dynamodb::ITEM_SIZES,
            versions: Versions::default(),
        });
        let secrets = Secrets::parse(SECRET).expect("secret");
        Stack {
            store,
            intake: Intake::new(engine.clone(), Arc::new(Immediate)),
            progress: Progress::new(engine.clone(), Arc::new(Immediate)),
            callbacks: Callbacks::new(
                engine,
                RotatingSecrets::fixed(Secrets::parse(SECRET).expect("secret")),
            ),
            secrets,
            version,
            next: AtomicU64::new(0),
        }
    }

    fn sqs_event(body: &Value) -> SqsEvent {
        let mut message = SqsMessage::default();
        message.message_id = Some("m".into());
        message.body = Some(body.to_string());
        let mut event = SqsEvent::default();
        event.records.push(message);
        event
    }

    async fn sqs(handler: &dyn SqsHandler, event: SqsEvent) {
        let answer = handler.handle(event).await;
        assert!(answer.batch_item_failures.is_empty(), "no message comes back");
    }

    /// A callback as its sender sends it: the body and the signed headers.
    fn signed(&self, id: &str, body: &Value) -> (http::HeaderMap, String) {
        let body = body.to_string();
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let mut headers = http::HeaderMap::new();
        headers.insert("webhook-id", id.parse().expect("header"));
        headers.insert("webhook-timestamp", now.to_string().parse().expect("header"));
        headers.insert(
            "webhook-signature",
            self.secrets.sign(id, now, body.as_bytes()).parse().expect("header"),
        );
        (headers, body)
    }

    async fn callback(&self, (headers, body): (http::HeaderMap, String)) {
        let answer = self.callbacks.handle(&headers, body.as_bytes()).await;
        assert_eq!(answer.status, http::StatusCode::OK, "{:?}", answer.body);
    }

    fn step_ready(&self, key: &str, step: u32, name: &str) -> Value {
        json!({
            "kind": "step_ready", "workflow": "order-review", "key": key, "generation": 1, "step": step,
            "step_name": name, "config_version": self.version, "token": format!("tok-{key}-{step}"),
            "entered_at": OffsetDateTime::now_utc().format(&Rfc3339).expect("formats"), "timeout_seconds": 172_800
        })
    }

    /// What the senders of one two-step workflow of the sample config send, in order: the start
    /// event, the first step's report, the reviewer's signed callback, the second step's report,
    /// the payment's signed callback, and the execution's `finished` report.
    fn inputs(&self) -> Inputs {
        let key = format!("order-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let start = json!({
            "specversion": "1.0", "id": format!("evt-{key}"), "source": "shop", "type": "order.placed",
            "subject": key, "data": {"total": 1500}
        });
        let decision = json!({"workflow": "order-review", "key": key, "step": "manual-review",
            "outcome": "succeeded", "data": {"decision": "approve"}});
        let paid = json!({"workflow": "order-review", "key": key, "step": "payment",
            "outcome": "succeeded", "data": {"payment_ref": "pay-1"}});
        let finished = json!({"kind": "finished", "workflow": "order-review", "key": key, "generation": 1,
            "config_version": self.version, "outcome": "succeeded"});
        Inputs {
            start: Self::sqs_event(&start),
            first_ready: Self::sqs_event(&self.step_ready(&key, 0, "manual-review")),
            decision: self.signed(&format!("cb-{key}-0"), &decision),
            second_ready: Self::sqs_event(&self.step_ready(&key, 1, "payment")),
            paid: self.signed(&format!("cb-{key}-1"), &paid),
            finished: Self::sqs_event(&finished),
            key,
        }
    }

    /// One two-step workflow of the sample config, start to `succeeded`, through the handlers.
    async fn workflow(&self, inputs: Inputs) -> String {
        Self::sqs(&self.intake, inputs.start).await;
        Self::sqs(&self.progress, inputs.first_ready).await;
        self.callback(inputs.decision).await;
        Self::sqs(&self.progress, inputs.second_ready).await;
        self.callback(inputs.paid).await;
        Self::sqs(&self.progress, inputs.finished).await;
        inputs.key
    }
}

struct Inputs {
    key: String,
    start: SqsEvent,
    first_ready: SqsEvent,
    decision: (http::HeaderMap, String),
    second_ready: SqsEvent,
    paid: (http::HeaderMap, String),
    finished: SqsEvent,
}

/// The engine's work per workflow: what the senders send is built and signed before the clock
/// starts, as it is by other machines in production.
#[divan::bench]
fn two_step_workflow(bencher: Bencher) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let stack = Stack::new();
    // The path measured is the whole one: the first workflow ends `succeeded`.
    let key = runtime.block_on(stack.workflow(stack.inputs()));
    let records = stack.store.records();
    let record = records.iter().find(|r| r.key.as_str() == key).expect("the record");
    assert_eq!(record.state, State::Succeeded, "{record:?}");
    bencher
        .counter(ItemsCount::new(1usize))
        .with_inputs(|| stack.inputs())
        .bench_local_values(|inputs| runtime.block_on(stack.workflow(inputs)));
}

/// The same, with the senders' work inside the clock too (building the bodies and signing the
/// callbacks): how `two_step_workflow` measured before 2026-12-02.
#[divan::bench]
fn two_step_workflow_with_senders(bencher: Bencher) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let stack = Stack::new();
    bencher.counter(ItemsCount::new(1usize)).bench_local(|| runtime.block_on(stack.workflow(stack.inputs())));
}

mod forged_signature {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;

    const OTHER: &str = "whsec_c2Vjb25kLXNlY3JldC1vZi0yNC1ieXRlcw==";
    const TS: i64 = 1_614_265_330;

    fn body() -> Vec<u8> {
        vec![b'x'; 64 * 1024]
    }

    /// The review's header: 8 KB of empty `v1,` entries.
    fn header() -> String {
        ["v1,"; 2_000].join(" ")
    }

    /// The check as it stood before the fix: every secret against every `v1,` entry that
    /// decodes (an empty one does), one MAC over the whole body each time.
    fn verify_before(secrets: &[Vec<u8>], header: &str, body: &[u8]) -> bool {
        let candidates: Vec<Vec<u8>> = header
            .split_whitespace()
            .filter_map(|e| e.strip_prefix("v1,"))
            .filter_map(|s| STANDARD.decode(s).ok())
            .collect();
        secrets.iter().any(|secret| {
            candidates.iter().any(|c| {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
                mac.update(format!("msg.{TS}.").as_bytes());
                mac.update(body);
                mac.verify_slice(c).is_ok()
            })
        })
    }

    #[divan::bench]
    fn before(bencher: Bencher) {
        let keys: Vec<Vec<u8>> =
            [SECRET, OTHER].iter().map(|s| STANDARD.decode(&s["whsec_".len()..]).expect("base64")).collect();
        let (header, body) = (header(), body());
        bencher.bench(|| black_box(verify_before(&keys, black_box(&header), black_box(&body))));
    }

    #[divan::bench]
    fn after(bencher: Bencher) {
        let secrets = Secrets::parse(&format!("{SECRET},{OTHER}")).expect("secrets");
        let (header, body) = (header(), body());
        let now = OffsetDateTime::from_unix_timestamp(TS).expect("a time");
        bencher.bench(|| {
            black_box(secrets.verify(Some("msg"), Some("1614265330"), Some(black_box(&header)), &body, now))
                .is_err()
        });
    }

    #[divan::bench]
    fn after_most_entries(bencher: Bencher) {
        let secrets = Secrets::parse(&format!("{SECRET},{OTHER}")).expect("secrets");
        let forged = format!("v1,{}", STANDARD.encode([7u8; 32]));
        let header = [forged.as_str(); baton_core::domain::webhook::MAX_SIGNATURES].join(" ");
        let body = body();
        let now = OffsetDateTime::from_unix_timestamp(TS).expect("a time");
        bencher.bench(|| {
            black_box(secrets.verify(Some("msg"), Some("1614265330"), Some(black_box(&header)), &body, now))
                .is_err()
        });
    }
}
