//! A whole baton for an end-to-end test: template.yaml provisioned on the emulator under a
//! stack name of its own, the real state machines generated from the test's config, and the
//! real handlers behind local event source mappings ([`baton_local::in_process::LocalBaton`]).
//! Tests talk to it through SQS, Step Functions and the store, as users and operators do.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::config::Config;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::Record;
use baton_core::ports::metrics::{Captured, Metrics};
use baton_core::ports::store::WorkflowStore;
use baton_core::use_cases::engine::system_clock;
use baton_local::in_process::{LocalBaton, LocalOptions};
use serde_json::Value;

use crate::stack::{clients, load_template_for};
use crate::{Emulator, unique_name};

/// A running baton and the clients to look at it.
pub struct System {
    pub baton: LocalBaton,
    pub config: Config,
    pub sqs: aws_sdk_sqs::Client,
    pub sfn: aws_sdk_sfn::Client,
    pub store: DynamoDbStore,
    pub metrics: Captured,
    stack_name: String,
    paused: Vec<String>,
    env: Vec<(String, String)>,
    /// The definitions of every config deployed, kept until the end.
    _definitions: Vec<tempfile::TempDir>,
}

/// The webhook secret end-to-end tests sign callbacks with.
pub const TEST_SECRET: &str = "whsec_YmF0b24tZW5kLXRvLWVuZC10ZXN0LXNlY3JldA==";

/// Starts baton for `config_yaml` on the emulator `make test` runs.
pub async fn start_system(config_yaml: &str) -> System {
    start_system_with(config_yaml, &[]).await
}

/// Starts baton with the named functions paused: their handlers are there to drive by hand.
pub async fn start_system_with(config_yaml: &str, paused: &[&str]) -> System {
    start_system_full(config_yaml, paused, &[]).await
}

/// Starts baton with these environment variables set on every function.
pub async fn start_system_env(config_yaml: &str, env: &[(&str, &str)]) -> System {
    start_system_full(config_yaml, &[], env).await
}

async fn start_system_full(config_yaml: &str, paused: &[&str], env: &[(&str, &str)]) -> System {
    let config = Config::parse(config_yaml).unwrap_or_else(|e| panic!("test config: {e}"));
    let stack_name = unique_name("e2e");
    let paused: Vec<String> = paused.iter().map(|p| p.to_string()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let metrics = Captured::default();
    let (baton, dir) = launch(&config, &stack_name, &paused, &env, &metrics).await;
    let table = baton.provisioned.tables.get("Table").expect("the table").clone();
    let clients = clients(&Emulator::from_env()).await;
    System {
        store: DynamoDbStore::new(clients.dynamodb.clone(), table),
        sqs: clients.sqs,
        sfn: clients.sfn,
        baton,
        config,
        metrics,
        stack_name,
        paused,
        env,
        _definitions: vec![dir],
    }
}

/// Provisions the stack for `config` (creating it, or updating it as a deploy does) and starts
/// its functions.
async fn launch(
    config: &Config,
    stack_name: &str,
    paused: &[String],
    env: &[(String, String)],
    metrics: &Captured,
) -> (LocalBaton, tempfile::TempDir) {
    // The template's DefinitionUri paths, generated for this config.
    let dir = tempfile::tempdir().expect("a temp dir");
    for (rel, text) in baton_core::domain::asl::render_all(config) {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write definition");
    }
    let options = LocalOptions {
        config: config.clone(),
        root: dir.path().to_owned(),
        stack_name: stack_name.to_owned(),
        parameters: Default::default(),
        webhook_secret: TEST_SECRET.to_owned(),
        env: env.iter().cloned().collect(),
        visibility_timeout: Some(2),
        wait_seconds: 1,
        metrics: Metrics::to(Box::new(metrics.clone())),
        clock: system_clock(),
        paused: paused.to_vec(),
        http_port: 0,
        // The sweeper is run by hand in tests, at chosen times.
        sweep_every: Some(Duration::from_secs(3600)),
    };
    let clients = clients(&Emulator::from_env()).await;
    let baton = LocalBaton::start(&load_template_for(config), &clients, options)
        .await
        .unwrap_or_else(|e| panic!("baton: {e:?}"));
    if let Some(api_url) = &baton.api_url {
        callbacks_answer(api_url).await;
    }
    (baton, dir)
}

/// Waits, up to [`WAIT`], until the callback API answers as it does once started: the callback
/// function reads its webhook secrets from Secrets Manager as it starts, and answers 503 until
/// that read succeeds (it is tried again within seconds). An unsigned request is then refused
/// 401, so tests that send one attempt and check its answer see what they test, not a start.
async fn callbacks_answer(api_url: &str) {
    let url = format!("{api_url}/v1/callbacks");
    let reply = eventually("the callback API to answer", WAIT, || async {
        let reply = crate::http::post(&url, &[], b"{}".to_vec()).await;
        (reply.status != 503).then_some(reply)
    })
    .await;
    assert_eq!(reply.status, 401, "an unsigned callback is refused: {}", reply.body);
}
impl System {
    pub fn queue_url(&self, logical_id: &str) -> String {
        self.baton
            .provisioned
            .queues
            .get(logical_id)
            .unwrap_or_else(|| panic!("no queue {logical_id}"))
            .url
            .clone()
    }

    pub fn state_machine_arn(&self, workflow: &str) -> String {
        self.engine().state_machine_arn(workflow)
    }

    pub fn engine(&self) -> Arc<baton_core::use_cases::engine::Engine> {
        self.baton.engine().expect("an engine")
    }

    /// Sends a domain event to the intake queue, as a producer would.
    pub async fn send_event(&self, body: &str) {
        self.sqs
            .send_message()
            .queue_url(self.queue_url("IntakeQueue"))
            .message_body(body)
            .send()
            .await
            .expect("send");
    }

    /// Puts a message straight into the intake dead-letter queue (a poison message, or one an
    /// operator fixed by hand).
    pub async fn to_intake_dlq(&self, body: &str) {
        self.sqs
            .send_message()
            .queue_url(self.queue_url("IntakeDLQ"))
            .message_body(body)
            .send()
            .await
            .expect("send");
    }

    /// Messages on a queue, visible or not, without receiving (and so hiding) them.
    pub async fn queue_depth(&self, logical_id: &str) -> u64 {
        queue_depth(&self.sqs, &self.queue_url(logical_id)).await
    }

    pub async fn record(&self, workflow: &str, key: &str) -> Option<Record> {
        let (w, k) = (WorkflowName::parse(workflow).unwrap(), CorrelationKey::parse(key).unwrap());
        self.store.load(&w, &k).await.expect("load").map(Arc::unwrap_or_clone)
    }

    /// The ledger of (`workflow`, `key`): each ignored input's id and reason.
    pub async fn ledger(
        &self,
        workflow: &str,
        key: &str,
    ) -> Vec<(String, baton_core::domain::lifecycle::IgnoreReason)> {
        let (w, k) = (WorkflowName::parse(workflow).unwrap(), CorrelationKey::parse(key).unwrap());
        let trace = self.store.trace(&w, &k).await.expect("trace");
        trace.ledger.into_iter().map(|l| (l.input_id, l.reason)).collect()
    }

    /// Waits (as [`System::until`]) for the record of (`workflow`, `key`) to satisfy `want`,
    /// and returns it.
    pub async fn record_until(
        &self,
        workflow: &str,
        key: &str,
        what: &str,
        want: impl Fn(&Record) -> bool,
    ) -> Record {
        self.until(what, || async { self.record(workflow, key).await.filter(|r| want(r)) }).await
    }

    /// Sends the callback (as [`System::callback`]) and checks its HTTP status and the answer's
    /// `status`; returns the answer.
    pub async fn answered(&self, id: &str, body: Value, (status, answer_status): (u16, &str)) -> Value {
        let (got, answer) = self.callback(id, &body).await;
        assert_eq!((got, answer["status"].as_str()), (status, Some(answer_status)), "{id}: {answer}");
        answer
    }

    /// The executions of a workflow's state machine, newest first.
    pub async fn executions(&self, workflow: &str) -> Vec<aws_sdk_sfn::types::ExecutionListItem> {
        self.sfn
            .list_executions()
            .state_machine_arn(self.state_machine_arn(workflow))
            .send()
            .await
            .expect("list executions")
            .executions
    }

    /// Waits, up to [`WAIT`], until the workflow's newest execution has ended `status`
    /// (`SUCCEEDED`, `FAILED`, ...): a state machine sends its final report to baton, then ends,
    /// so a terminal record can be seen a moment before its execution closes.
    pub async fn execution_ended(&self, workflow: &str, status: &str) {
        eventually(&format!("the {workflow} execution {status}"), WAIT, || async {
            let executions = self.executions(workflow).await;
            (executions.first()?.status().as_str() == status).then_some(())
        })
        .await
    }

    /// Every message on a queue right now (received and kept invisible for a minute).
    pub async fn drain_queue(&self, logical_id: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        loop {
            let out = self
                .sqs
                .receive_message()
                .queue_url(self.queue_url(logical_id))
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            match out.messages {
                Some(m) if !m.is_empty() => all.extend(m),
                _ => return all,
            }
        }
    }

    /// The logical id of the task queue of `queue` (a task's `queue`).
    pub fn task_queue(&self, queue: &str) -> String {
        baton_local::task_queues::TaskQueue { name: queue.to_owned(), named_by: String::new() }.queue_id()
    }

    /// Drains every task queue of the config, side by side (a drain ends on an empty receive
    /// of a second): the task messages, each parsed, with the `queue` name of the queue it was on.
    async fn drain_task_queues(&self) -> Vec<(String, Value)> {
        let queues = baton_local::task_queues::task_queues(&self.config).expect("the config's task queues");
        let drains = queues.iter().map(|queue| async move {
            let messages = self.drain_queue(&queue.queue_id()).await;
            let parsed = messages.into_iter().filter_map(|m| serde_json::from_str::<Value>(m.body()?).ok());
            parsed.map(|task| (queue.name.clone(), task)).collect::<Vec<_>>()
        });
        futures::future::join_all(drains).await.into_iter().flatten().collect()
    }

    /// Bodies of the task messages on every task queue, parsed, once at least `expected` have
    /// arrived (a step's task goes out just after the step starts waiting). Waits up to [`WAIT`].
    /// Each was on the queue its `data.queue` names, its team's own: that is asserted here.
    pub async fn published_tasks(&self, expected: usize) -> Vec<Value> {
        let start = Instant::now();
        let mut tasks: Vec<(String, Value)> = Vec::new();
        while tasks.len() < expected {
            assert!(
                start.elapsed() < WAIT,
                "timed out waiting for {expected} published task(s); got {tasks:#?}"
            );
            tasks.extend(self.drain_task_queues().await);
        }
        // Anything more (a duplicate) would arrive with those: take what is there now too.
        tasks.extend(self.drain_task_queues().await);
        for (queue, task) in &tasks {
            assert_eq!(
                task["data"]["queue"].as_str(),
                Some(queue.as_str()),
                "a task on another team's queue"
            );
        }
        tasks.into_iter().map(|(_, task)| task).collect()
    }

    /// Sends a signed callback to the local HTTP API as a sender does (a 503 is retried with the
    /// same `webhook-id` after its `Retry-After`); returns the final status and JSON body.
    pub async fn callback(&self, id: &str, body: &Value) -> (u16, Value) {
        let secrets = baton_core::domain::webhook::Secrets::parse(TEST_SECRET).expect("the test secret");
        crate::http::send_callback(self.api_url(), &secrets, id, body).await
    }

    /// Sends a signed callback once, with no retry: for tests of the answer to one attempt.
    pub async fn callback_once(&self, id: &str, body: &Value) -> crate::http::Reply {
        self.callback_text(id, body.to_string()).await
    }

    /// Sends a body exactly as written (a `Value` would re-serialise it), signed, once.
    pub async fn callback_text(&self, id: &str, text: String) -> crate::http::Reply {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let secrets = baton_core::domain::webhook::Secrets::parse(TEST_SECRET).expect("the test secret");
        let headers = [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", now.to_string()),
            ("webhook-signature", secrets.sign(id, now, text.as_bytes())),
        ];
        crate::http::post(&format!("{}/v1/callbacks", self.api_url()), &headers, text.into_bytes()).await
    }

    pub fn api_url(&self) -> &str {
        self.baton.api_url.as_deref().expect("the HTTP API")
    }

    /// POSTs raw headers and body to `/v1/callbacks`, once.
    pub async fn post(&self, headers: &[(&str, String)], body: Vec<u8>) -> (u16, Value) {
        crate::http::post_json(&format!("{}/v1/callbacks", self.api_url()), headers, body).await
    }

    /// Waits, up to [`WAIT`], for `check` to return `Some`, running the sweeper every few seconds
    /// meanwhile, as its schedule does in production: what a crash or a failed call left owed (a
    /// resume, a start) is repaired as it would be on AWS, not waited for in vain.
    pub async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let sweeper = self.baton.sweeper.clone().expect("the sweeper");
        let mut last_sweep = Instant::now();
        eventually(what, WAIT, || {
            let sweep = last_sweep.elapsed() >= SWEEP_EVERY;
            if sweep {
                last_sweep = Instant::now();
            }
            let (sweeper, checked) = (sweeper.clone(), check());
            async move {
                if sweep && let Err(e) = sweeper.run_once(sweeper.now()).await {
                    tracing::warn!(error = %e, "test sweep failed; the next one retries");
                }
                checked.await
            }
        })
        .await
    }

    /// Runs the sweeper once as of `at`, as its schedule would: a sweep that fails for a reason
    /// that can pass is run again, as the next scheduled run would, up to five times.
    pub async fn sweep(&self, at: time::OffsetDateTime) -> baton_core::use_cases::sweeper::SweepReport {
        use baton_core::domain::error::Classified;
        let sweeper = self.baton.sweeper.clone().expect("the sweeper");
        for _ in 0..5 {
            match sweeper.run_once(at).await {
                Ok(report) => return report,
                Err(e) if e.retryable() => tokio::time::sleep(Duration::from_secs(1)).await,
                Err(e) => panic!("the sweep failed: {e:?}"),
            }
        }
        sweeper.run_once(at).await.unwrap_or_else(|e| panic!("the sweep kept failing: {e:?}"))
    }

    /// Hands `event` to an SQS handler as Lambda's event source mapping does: the messages it
    /// reports as failed are delivered again (after a pause, as after a visibility timeout),
    /// until none fails or [`REDELIVERIES`] redeliveries have been made.
    pub async fn deliver(
        &self,
        handler: &dyn baton_core::use_cases::batch::SqsHandler,
        event: SqsEvent,
    ) -> SqsBatchResponse {
        let mut event = event;
        for _ in 0..REDELIVERIES {
            let response = handler.handle(event.clone()).await;
            if response.batch_item_failures.is_empty() {
                return response;
            }
            let failed: Vec<&str> =
                response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
            event.records.retain(|m| m.message_id.as_deref().is_some_and(|id| failed.contains(&id)));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        handler.handle(event).await
    }

    /// The history of an execution, oldest first (its first page: the tests' executions are short).
    pub async fn history(&self, execution_arn: &str) -> Vec<aws_sdk_sfn::types::HistoryEvent> {
        let history = self
            .sfn
            .get_execution_history()
            .execution_arn(execution_arn)
            .send()
            .await
            .expect("execution history");
        history.events().to_vec()
    }

    /// How many times Step Functions resumed a step of (workflow, key), across its generations:
    /// the `TaskSucceeded` and `TaskFailed` events of token waits in the execution histories.
    /// This is the effect a workflow saw; a second resume of a used token adds no event.
    pub async fn resumes(&self, workflow: &str, key: &str) -> usize {
        let (w, k) = (WorkflowName::parse(workflow).unwrap(), CorrelationKey::parse(key).unwrap());
        let mut count = 0;
        for execution in self.executions(workflow).await {
            let named = (1..=64)
                .any(|g| baton_core::ports::orchestrator::execution_name(&w, &k, g) == execution.name());
            if !named {
                continue;
            }
            count += self
                .history(execution.execution_arn())
                .await
                .iter()
                .filter(|e| {
                    let resource = e
                        .task_succeeded_event_details()
                        .map(|d| d.resource())
                        .or_else(|| e.task_failed_event_details().map(|d| d.resource()));
                    resource.is_some_and(|r| r.ends_with(".waitForTaskToken"))
                })
                .count();
        }
        count
    }

    /// Deploys `config_yaml` over the running stack, as `sam deploy` does: the state machines
    /// are updated, the functions on the new config start (on a new HTTP port) while the old
    /// ones still run, as Lambda's old and new versions overlap, and then the old ones stop.
    pub async fn deploy(&mut self, config_yaml: &str) {
        let config = Config::parse(config_yaml).unwrap_or_else(|e| panic!("deployed config: {e}"));
        let (baton, dir) = launch(&config, &self.stack_name, &self.paused, &self.env, &self.metrics).await;
        let old = std::mem::replace(&mut self.baton, baton);
        old.shutdown().await;
        self.config = config;
        self._definitions.push(dir);
    }

    pub async fn stop(self) {
        self.baton.shutdown().await;
    }
}

/// Messages on the queue at `url`, visible or not, without receiving (and so hiding) them.
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("queue attributes");
    let attrs = out.attributes.unwrap_or_default();
    let n = |a: A| attrs.get(&a).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(A::ApproximateNumberOfMessages) + n(A::ApproximateNumberOfMessagesNotVisible)
}

/// How long an end-to-end wait lasts at most: generous, since only a failing test waits that
/// long, and a loaded machine must not fail a passing one.
pub const WAIT: Duration = Duration::from_secs(90);
/// How often [`System::until`] runs the sweeper.
const SWEEP_EVERY: Duration = Duration::from_secs(3);
/// How often [`System::deliver`] redelivers a failed message before giving up.
const REDELIVERIES: usize = 10;

/// Waits, up to `limit`, for `check` to return `Some`; panics with `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > limit {
            panic!(
                "timed out after {limit:?} waiting for {what}; warnings and errors logged:\n{}",
                crate::logs::problems()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
