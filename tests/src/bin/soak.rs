//! `make soak`: WORKFLOWS (default 1,000) workflows of the sample config through `baton local`
//! as a team's systems drive it, with an outage of the emulator in the middle; then the proof
//! that nothing was lost or doubled, and where the time and the CPU went.
//!
//! The stack is the one `make run` starts: the emulator (`tools/emulator.py`, here with
//! `--stats`) and `baton local` (the four functions in-process, the HTTP API), each its own
//! process. The load, from this process:
//!
//! - every `order.placed` event to the intake queue in batches of ten, all at once; one in ten
//!   sent twice (the same CloudEvent id), as an at-least-once producer does;
//! - one key in ten gets its review decision by callback *before* its start event (buffered,
//!   202), and another one in ten its `payment.settled` before its start event (buffered too);
//! - `SOAK_SENDERS` (32) task workers, the example worker of `examples/rust-worker`, long-poll
//!   the `risk-review` queue and answer each review task with a signed callback; a key's
//!   `payment.settled` goes out once its review was answered;
//! - `SOAK_OUTAGE_SECONDS` (15) after the first event, the emulator is stopped (SIGSTOP) for as
//!   long again, then continued: every client, baton's included, sees its calls hang and time out.
//!
//! Then it checks, per key: the record ended `succeeded` in generation 1, one execution, one
//! review task; and every queue, dead-letter queues included, is empty. It prints workflows per
//! second (first event to last success), the CPU each process used, the emulator's calls per
//! workflow by service and the operations it spent its time in, and the DynamoDB lock's wait.
//! Exit status 1 when anything was lost, doubled or stuck.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sfn::types::ExecutionStatus;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::State;
use baton_core::domain::webhook::Secrets;
use baton_core::ports::store::WorkflowStore;
use baton_example_worker::{Handled, Settings, Worker};
use baton_local::info::LocalInfo;
use baton_tests::http;
use baton_tests::system::queue_depth;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const WORKFLOW: &str = "order-review";
const QUEUE: &str = "risk-review";

#[tokio::main]
async fn main() {
    let options = Options::from_env();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut stack = Stack::start(&options, dir.path()).await;
    let code = tokio::select! {
        outcome = soak(&options, &stack) => i32::from(!outcome.report(&options, &stack).await),
        (signal, code) = interrupted() => {
            eprintln!("{signal}: stopping the emulator and baton local");
            code
        }
    };
    stack.stop().await;
    std::process::exit(code);
}

/// SIGINT or SIGTERM, and the exit code a shell gives for it: the soak stops the processes it
/// started before it ends (a process killed by a signal runs no destructor, and the children's
/// `kill_on_drop` with it).
async fn interrupted() -> (&'static str, i32) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => ("SIGINT", 130),
        _ = term.recv() => ("SIGTERM", 143),
    }
}

struct Options {
    workflows: usize,
    senders: usize,
    outage: Duration,
    python: String,
    /// More of the emulator's options (`SOAK_EMULATOR_ARGS`), e.g. `--moto-as-is` to measure
    /// what the emulator's own fixes save.
    emulator_args: String,
    baton: PathBuf,
    /// How long the whole load may take before what is not done counts as stuck
    /// (`SOAK_LIMIT_SECONDS`; 600 s and a second a workflow by default).
    limit: Duration,
}

impl Options {
    fn from_env() -> Options {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}: a number")))
        };
        let workflows: usize =
            std::env::args().nth(1).map_or(1000, |n| n.parse().expect("WORKFLOWS: a number of workflows"));
        Options {
            workflows,
            senders: usize::try_from(number("SOAK_SENDERS", 32)).expect("senders"),
            outage: Duration::from_secs(number("SOAK_OUTAGE_SECONDS", 15)),
            python: std::env::var("BATON_PYTHON").unwrap_or_else(|_| ".venv/bin/python".into()),
            emulator_args: std::env::var("SOAK_EMULATOR_ARGS").unwrap_or_default(),
            baton: std::env::var("BATON_BIN")
                .map_or_else(|_| PathBuf::from("target/debug/baton"), PathBuf::from),
            limit: Duration::from_secs(number("SOAK_LIMIT_SECONDS", 600 + workflows as u64)),
        }
    }
}

/// The emulator and `baton local`, each a process of its own.
struct Stack {
    emulator: Child,
    local: Child,
    info: LocalInfo,
    info_path: PathBuf,
    sqs: aws_sdk_sqs::Client,
    sfn: aws_sdk_sfn::Client,
    store: DynamoDbStore,
}

impl Stack {
    async fn start(options: &Options, dir: &Path) -> Stack {
        let ready = dir.join("emulator.url");
        let emulator = Command::new(&options.python)
            .args(["tools/emulator.py", "--port", "0", "--stats", "--ready-file"])
            .arg(&ready)
            .args(options.emulator_args.split_whitespace())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("emulator.log")).expect("emulator.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("the emulator starts (run `make tools`, or set BATON_PYTHON)");
        let endpoint = wait_for_file(&ready, "the emulator's URL").await;
        let state = dir.join("state");
        let local = Command::new(&options.baton)
            .args(["local", "--stack", "soak", "--emulator", endpoint.trim(), "--state-dir"])
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("local.log")).expect("local.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("baton local starts (cargo build -p baton-cli)");
        let info_path = state.join("local.json");
        wait_for_file(&info_path, "baton local's local.json").await;
        let info = LocalInfo::load(&info_path).expect("local.json");
        let config = baton_local::emulator_sdk_config(&info.aws_endpoint).await;
        let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&config), info.table.clone());
        println!(
            "stack up: emulator {} (pid {}), baton local (pid {}), logs in {}",
            info.aws_endpoint,
            emulator.id().unwrap_or(0),
            local.id().unwrap_or(0),
            dir.display()
        );
        Stack {
            emulator,
            local,
            info,
            info_path,
            sqs: aws_sdk_sqs::Client::new(&config),
            sfn: aws_sdk_sfn::Client::new(&config),
            store,
        }
    }

    fn pids(&self) -> [(&'static str, u32); 3] {
        [
            ("emulator (moto)", self.emulator.id().unwrap_or(0)),
            ("baton local (4 functions, HTTP API)", self.local.id().unwrap_or(0)),
            ("this load (producers, 32 workers, checks)", std::process::id()),
        ]
    }

    async fn stop(&mut self) {
        let _ =
            Command::new("kill").args(["-TERM", &self.local.id().unwrap_or(0).to_string()]).status().await;
        if tokio::time::timeout(Duration::from_secs(15), self.local.wait()).await.is_err() {
            let _ = self.local.kill().await;
        }
        let _ = self.emulator.kill().await;
    }
}

async fn wait_for_file(path: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what} not there after 120 s ({})", path.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// CPU seconds (user and system) a process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The fields after the command name (which may hold spaces) are space-separated.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// What happened to each key, as the load saw it.
#[derive(Default)]
struct Seen {
    /// Distinct review task ids per key.
    tasks: HashMap<String, HashSet<String>>,
    deliveries: u64,
    callbacks: BTreeMap<String, u64>,
}

struct Outcome {
    started: Instant,
    finished: Option<Instant>,
    done: HashMap<String, Duration>,
    stuck: Vec<String>,
    seen: Arc<Mutex<Seen>>,
    cpu_before: Vec<f64>,
    cpu_after: Vec<f64>,
    keys: Vec<String>,
}

fn key_of(i: usize) -> String {
    format!("soak-{}-{i}", std::process::id())
}

fn event(id: String, kind: &str, key: &str, data: Value) -> String {
    json!({"specversion": "1.0", "id": id, "source": "shop", "type": kind, "subject": key, "data": data})
        .to_string()
}

fn placed(key: &str) -> String {
    event(format!("placed-{key}"), "order.placed", key, json!({"total": 1500}))
}

fn settled(key: &str) -> String {
    event(format!("settled-{key}"), "payment.settled", key, json!({"payment_ref": format!("pay-{key}")}))
}

/// One key in ten of each kind: a duplicated start, an early decision, an early payment.
fn duplicated(i: usize) -> bool {
    i.is_multiple_of(10)
}
fn early_decision(i: usize) -> bool {
    i % 10 == 3
}
fn early_payment(i: usize) -> bool {
    i % 10 == 6
}

#[expect(clippy::too_many_lines, reason = "the load, in the order it happens")]
async fn soak(options: &Options, stack: &Stack) -> Outcome {
    let keys: Vec<String> = (0..options.workflows).map(key_of).collect();
    let secrets = Secrets::parse(&stack.info.webhook_secret).expect("the stack's webhook secret");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (pay_tx, mut pay_rx) = mpsc::unbounded_channel::<String>();
    let cpu_before: Vec<f64> = stack.pids().iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
    let started = Instant::now();

    // The workers: each answers the review tasks it receives, as examples/rust-worker does.
    let mut workers = Vec::new();
    for _ in 0..options.senders {
        let settings = Settings::from_local(&stack.info_path, QUEUE).expect("the worker's settings");
        let worker = Worker::new(settings).await.expect("a worker");
        let (seen, pay_tx) = (seen.clone(), pay_tx.clone());
        workers.push(tokio::spawn(async move {
            let log = move |h: Handled| note(&seen, &pay_tx, &h);
            loop {
                // Long polls, as the example worker's own loop makes them.
                if worker.poll(20, &log).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }));
    }

    // The outage: the emulator stopped, then continued.
    let emulator = stack.emulator.id().unwrap_or(0);
    let outage = options.outage;
    let outage_task = tokio::spawn(async move {
        if outage.is_zero() {
            return;
        }
        tokio::time::sleep(outage).await;
        println!("outage: emulator stopped for {} s", outage.as_secs());
        signal(emulator, "-STOP").await;
        tokio::time::sleep(outage).await;
        signal(emulator, "-CONT").await;
        println!("outage over");
    });

    // Early inputs, then the start events (the duplicates after the rest).
    let mut sent_at = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        if early_decision(i) {
            let answer = callback(&stack.info.api_url, &secrets, &format!("early-{key}"), key).await;
            *seen.lock().expect("seen").callbacks.entry(format!("early {answer}")).or_default() += 1;
        }
    }
    let early: Vec<String> =
        keys.iter().enumerate().filter(|(i, _)| early_payment(*i)).map(|(_, k)| settled(k)).collect();
    send_all(stack, &early).await;
    for chunk in keys.chunks(10) {
        let bodies: Vec<String> = chunk.iter().map(|k| placed(k)).collect();
        send_all(stack, &bodies).await;
        let now = Instant::now();
        for key in chunk {
            sent_at.insert(key.clone(), now);
        }
    }
    let again: Vec<String> =
        keys.iter().enumerate().filter(|(i, _)| duplicated(*i)).map(|(_, k)| placed(k)).collect();
    send_all(stack, &again).await;
    println!(
        "{} start events sent ({} twice) in {:.1} s",
        keys.len(),
        again.len(),
        started.elapsed().as_secs_f64()
    );

    // Payments once reviewed (not for the keys that paid early), and the check for the end.
    let paid_early: HashSet<String> =
        keys.iter().enumerate().filter(|(i, _)| early_payment(*i)).map(|(_, k)| k.clone()).collect();
    let mut paid: HashSet<String> = HashSet::new();
    let mut done: HashMap<String, Duration> = HashMap::new();
    let mut last_report = Instant::now();
    let mut last_check = Instant::now();
    let deadline = started + options.limit;
    while done.len() < keys.len() && Instant::now() < deadline {
        let mut to_pay = Vec::new();
        while let Ok(key) = pay_rx.try_recv() {
            if !paid_early.contains(&key) && paid.insert(key.clone()) {
                to_pay.push(settled(&key));
            }
        }
        send_all(stack, &to_pay).await;
        // The end, seen cheaply: an execution ends after its last report went to baton, so the
        // records of the executions that succeeded are the only ones worth reading.
        if last_check.elapsed() >= Duration::from_secs(2) {
            last_check = Instant::now();
            for key in executions_by_key(stack, Some(ExecutionStatus::Succeeded)).await.into_keys() {
                if !done.contains_key(&key)
                    && sent_at.contains_key(&key)
                    && matches!(state_of(stack, &key).await, Some((State::Succeeded, _)))
                {
                    done.insert(key.clone(), sent_at[&key].elapsed());
                }
            }
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            println!(
                "  {:>6.1} s: {} of {} succeeded",
                started.elapsed().as_secs_f64(),
                done.len(),
                keys.len()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let finished = (done.len() == keys.len()).then(Instant::now);
    // A worker may be in a 20-second long poll: nothing is left for it.
    let cpu_after: Vec<f64> = stack.pids().iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
    for w in workers {
        w.abort();
    }
    let _ = outage_task.await;
    let stuck = keys.iter().filter(|k| !done.contains_key(*k)).cloned().collect();
    Outcome { started, finished, done, stuck, seen, cpu_before, cpu_after, keys }
}

/// The log of a worker: its tasks and answers, and the payment owed once a review is answered.
fn note(seen: &Mutex<Seen>, pay: &mpsc::UnboundedSender<String>, h: &Handled) {
    let mut seen = seen.lock().expect("seen");
    let Some(task) = &h.task_id else { return };
    let Some(key) = task.strip_prefix(&format!("{WORKFLOW}/")).and_then(|rest| rest.split('/').next()) else {
        return;
    };
    if h.http.is_none() && h.answer.is_none() {
        return;
    }
    seen.tasks.entry(key.to_owned()).or_default().insert(task.clone());
    seen.deliveries += 1;
    let answer =
        format!("{} {}", h.http.map_or("-".into(), |s| s.to_string()), h.answer.as_deref().unwrap_or("-"));
    *seen.callbacks.entry(format!("worker {answer}")).or_default() += 1;
    if h.http.is_some_and(|s| (200..300).contains(&s)) {
        let _ = pay.send(key.to_owned());
    }
}

async fn signal(pid: u32, which: &str) {
    let status = Command::new("kill").args([which, &pid.to_string()]).status().await.expect("kill");
    assert!(status.success(), "kill {which} {pid}");
}

/// A decision callback, retried through 503s as a sender would, for up to two minutes. Returns
/// "<status> <answer status or error>".
async fn callback(api_url: &str, secrets: &Secrets, id: &str, key: &str) -> String {
    let body = json!({"workflow": WORKFLOW, "key": key, "step": "manual-review", "outcome": "succeeded",
        "data": {"decision": "approve"}});
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, answer) = http::send_callback(api_url, secrets, id, &body).await;
        if status != 503 || Instant::now() > deadline {
            let what = answer["status"].as_str().or(answer["error"].as_str()).unwrap_or("-");
            return format!("{status} {what}");
        }
    }
}

/// Sends bodies to the intake queue in batches of ten, each retried until SQS took it.
async fn send_all(stack: &Stack, bodies: &[String]) {
    for chunk in bodies.chunks(10) {
        let mut left: Vec<(String, &String)> =
            chunk.iter().enumerate().map(|(i, b)| (i.to_string(), b)).collect();
        while !left.is_empty() {
            let entries = left.iter().map(|(id, body)| {
                SendMessageBatchRequestEntry::builder().id(id).message_body(*body).build().expect("an entry")
            });
            match stack
                .sqs
                .send_message_batch()
                .queue_url(&stack.info.queues.intake)
                .set_entries(Some(entries.collect()))
                .send()
                .await
            {
                Ok(out) => {
                    let failed: HashSet<String> = out.failed().iter().map(|f| f.id().to_owned()).collect();
                    left.retain(|(id, _)| failed.contains(id));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

async fn state_of(stack: &Stack, key: &str) -> Option<(State, u32)> {
    let (w, k) = (WorkflowName::parse(WORKFLOW).ok()?, CorrelationKey::parse(key).ok()?);
    let record = stack.store.load(&w, &k).await.ok()??;
    Some((record.state, record.generation))
}

impl Outcome {
    /// Prints the figures and the checks; whether nothing was lost, doubled or stuck.
    #[expect(clippy::too_many_lines, reason = "the report, check by check and figure by figure")]
    async fn report(&self, options: &Options, stack: &Stack) -> bool {
        let mut problems = Vec::new();
        let n = self.keys.len();
        let end = self.finished.unwrap_or_else(Instant::now);
        let wall = end.duration_since(self.started).as_secs_f64();
        for key in &self.stuck {
            problems.push(format!(
                "{key}: not succeeded after {:.0} s ({:?})",
                wall,
                state_of(stack, key).await
            ));
        }
        // Doubled: more than one generation, execution or review task for a key.
        for key in self.done.keys() {
            if let Some((_, generation)) = state_of(stack, key).await.filter(|(_, g)| *g != 1) {
                problems.push(format!("{key}: generation {generation}, not 1"));
            }
        }
        let executions = executions_by_key(stack, None).await;
        for key in &self.keys {
            let count = executions.get(key).copied().unwrap_or(0);
            if count != 1 {
                problems.push(format!("{key}: {count} executions, not 1"));
            }
        }
        let (deliveries, answers) = {
            let seen = self.seen.lock().expect("seen");
            for (key, tasks) in &seen.tasks {
                if tasks.len() > 1 {
                    problems.push(format!("{key}: {} review tasks ({tasks:?})", tasks.len()));
                }
            }
            (seen.deliveries, seen.callbacks.clone())
        };
        // Lost: anything left on a queue, or dead-lettered.
        let queues = &stack.info.queues;
        let task = &queues.tasks[QUEUE];
        for (name, url) in [
            ("intake", &queues.intake),
            ("intake DLQ", &queues.intake_dlq),
            ("progress", &queues.progress),
            ("progress DLQ", &queues.progress_dlq),
            ("risk-review", &task.url),
            ("risk-review DLQ", &task.dlq),
        ] {
            let depth = queue_depth(&stack.sqs, url).await;
            if depth != 0 {
                problems.push(format!("{name} queue: {depth} message(s) left"));
            }
        }

        println!();
        println!(
            "{n} workflows, {} senders, emulator stopped for {} s",
            options.senders,
            options.outage.as_secs()
        );
        println!(
            "  {} of {n} succeeded in {wall:.1} s: {:.2} workflows a second",
            self.done.len(),
            self.done.len() as f64 / wall
        );
        let mut latencies: Vec<f64> = self.done.values().map(Duration::as_secs_f64).collect();
        latencies.sort_by(f64::total_cmp);
        let at =
            |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0.0);
        println!(
            "  start event to seen succeeded: p50 {:.1} s, p99 {:.1} s, max {:.1} s",
            at(0.5),
            at(0.99),
            at(1.0)
        );
        println!("  task deliveries {deliveries}, answers: {answers:?}");
        println!("  CPU while the load ran ({wall:.0} s of wall time):");
        for (i, (name, _)) in stack.pids().iter().enumerate() {
            let used = self.cpu_after[i] - self.cpu_before[i];
            println!("    {name:<42} {used:>7.1} s  ({:>5.1} % of one core)", 100.0 * used / wall);
        }
        emulator_figures(stack, n).await;
        if problems.is_empty() {
            println!(
                "nothing lost or doubled: {n} of {n} succeeded, one execution and one task each, every queue empty"
            );
            true
        } else {
            println!("{} problem(s):", problems.len());
            for p in problems.iter().take(50) {
                println!("  {p}");
            }
            false
        }
    }
}

/// Executions of the workflow's state machine, by key (`<workflow>-<key>-g<generation>`).
async fn executions_by_key(stack: &Stack, status: Option<ExecutionStatus>) -> HashMap<String, u64> {
    let arn = &stack.info.state_machines[WORKFLOW];
    let mut by_key = HashMap::new();
    let mut token = None;
    loop {
        let out = stack
            .sfn
            .list_executions()
            .state_machine_arn(arn)
            .set_next_token(token)
            .set_status_filter(status.clone())
            .max_results(1000)
            .send()
            .await
            .expect("ListExecutions");
        for e in out.executions() {
            let name = e.name();
            if let Some(key) =
                name.strip_prefix(&format!("{WORKFLOW}-")).and_then(|r| r.rsplit_once("-g")).map(|(k, _)| k)
            {
                *by_key.entry(key.to_owned()).or_default() += 1;
            }
        }
        token = out.next_token().map(str::to_owned);
        if token.is_none() {
            return by_key;
        }
    }
}

/// The emulator's own figures (`--stats`): calls per workflow by service, the operations it
/// spent its time in, and the DynamoDB lock.
async fn emulator_figures(stack: &Stack, workflows: usize) {
    let reply = http::get(&format!("{}/_baton/stats", stack.info.aws_endpoint)).await;
    assert_eq!(reply.status, 200, "the emulator's stats: {}", reply.body);
    let k = workflows as f64;
    // baton's calls (its functions' and its state machines'), and the load's (producers,
    // workers, this program's checks), by service.
    let mut by_service: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut by_operation: BTreeMap<String, (u64, f64, f64)> = BTreeMap::new();
    for op in reply.body["operations"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = op["operation"].as_str().unwrap_or("other").to_owned();
        let count = op["count"].as_u64().unwrap_or(0);
        let service = match name.split('.').next().unwrap_or("") {
            s if s.starts_with("DynamoDB") => "DynamoDB",
            "AmazonSQS" => "SQS",
            "AWSStepFunctions" => "Step Functions",
            _ => "other",
        };
        let whose = if op["caller"] == "other" { "the load" } else { "baton" };
        *by_service.entry((whose, service)).or_default() += count as f64 / k;
        let entry = by_operation.entry(name).or_default();
        entry.0 += count;
        entry.1 += op["seconds"].as_f64().unwrap_or(0.0);
        entry.2 += op["cpu_seconds"].as_f64().unwrap_or(0.0);
    }
    for whose in ["baton", "the load"] {
        let mine: Vec<_> = by_service.iter().filter(|((w, _), _)| *w == whose).collect();
        let total: f64 = mine.iter().map(|(_, n)| **n).sum();
        println!(
            "  emulator calls per workflow, {whose}'s: {total:.1} ({})",
            mine.iter().map(|((_, s), n)| format!("{s} {n:.1}")).collect::<Vec<_>>().join(", ")
        );
    }
    let mut operations: Vec<(String, u64, f64, f64)> =
        by_operation.into_iter().map(|(o, (n, t, c))| (o, n, t, c)).collect();
    operations.sort_by(|a, b| b.3.total_cmp(&a.3));
    println!(
        "  emulator by operation: CPU of the request's thread, and request in to answer out (a long poll's wait included), summed over threads:"
    );
    for (name, count, seconds, cpu) in operations.iter().take(12) {
        let each = |s: f64| 1000.0 * s / (*count).max(1) as f64;
        println!(
            "    {name:<40} {count:>7} calls  CPU {cpu:>7.1} s {:>6.2} ms each  answer {seconds:>8.1} s {:>7.2} ms each",
            each(*cpu),
            each(*seconds)
        );
    }
    let lock = &reply.body["dynamodb_lock"];
    println!(
        "  DynamoDB lock: {} requests, {:.1} s waiting for it, {:.1} s held",
        lock["requests"],
        lock["wait_seconds"].as_f64().unwrap_or(0.0),
        lock["held_seconds"].as_f64().unwrap_or(0.0)
    );
    collector_figures(&reply.body);
}

/// Python's cycle collector in the emulator, by generation (`--stats`).
fn collector_figures(stats: &serde_json::Value) {
    let collections: Vec<String> = stats["gc"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|g| {
            format!(
                "generation {}: {} collections, {:.1} s",
                g["generation"],
                g["collections"],
                g["seconds"].as_f64().unwrap_or(0.0)
            )
        })
        .collect();
    println!(
        "  Python's cycle collector in the emulator ({} objects tracked at the end): {}",
        stats["objects"],
        collections.join("; ")
    );
}
