//! The functions as Lambda runs them: a Lambda Runtime API on loopback, and the functions' real
//! binaries started against it.
//!
//! Lambda starts a function's `bootstrap` with `AWS_LAMBDA_RUNTIME_API` pointing at the Runtime
//! API. The runtime long-polls `GET /2018-06-01/runtime/invocation/next` for an event and answers
//! with `POST .../invocation/{id}/response` or `.../invocation/{id}/error`; a function that
//! cannot start reports `POST .../runtime/init/error` and exits. [`RuntimeApi`] serves exactly
//! those four routes, with the headers Lambda sends, and [`Function`] runs one binary under it
//! with the environment Lambda gives a function, its stdout and stderr captured.
//!
//! The tests use it to run each function's binary against the emulator (tests/src/functions.rs),
//! and `make bench` to time init and the first invoke (src/bin/function-bench.rs).
//! Reference: <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, oneshot};

/// The account and region the harness's function ARNs name.
pub const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
/// How long an invocation may run, as the template's `Timeout` (30 s) allows.
pub const DEADLINE: Duration = Duration::from_secs(30);
const PREFIX: &str = "/2018-06-01/runtime";

/// What a function answered to one invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST /invocation/{id}/response`: the body, parsed as JSON.
    Response(Value),
    /// `POST /invocation/{id}/error`: the `Lambda-Runtime-Function-Error-Type` header and the body.
    Error(Report),
}

/// An error a function reported: to `/invocation/{id}/error` or to `/init/error`.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The `Lambda-Runtime-Function-Error-Type` header, if sent.
    pub error_type_header: Option<String>,
    /// The body: `{"errorType": ..., "errorMessage": ...}` as the runtime sends it.
    pub body: Value,
}

impl Report {
    pub fn error_type(&self) -> &str {
        self.body.get("errorType").and_then(Value::as_str).unwrap_or_default()
    }
    pub fn error_message(&self) -> &str {
        self.body.get("errorMessage").and_then(Value::as_str).unwrap_or_default()
    }
}

/// One invocation's outcome, and how long the function took: from the moment `next` handed it
/// the event to the moment its answer arrived.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub outcome: Outcome,
    pub took: Duration,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<(String, Bytes)>>,
    queued: Notify,
    answers: Mutex<HashMap<String, oneshot::Sender<(Outcome, Instant)>>>,
    handed_out: Mutex<HashMap<String, Instant>>,
    first_next: Mutex<Option<Instant>>,
    polled: Notify,
    init_error: Mutex<Option<Report>>,
    function_arn: String,
    ids: AtomicU64,
}

/// A Lambda Runtime API for one function, on a free loopback port.
pub struct RuntimeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    /// Serves the Runtime API for the function `name`.
    pub async fn start(name: &str) -> std::io::Result<RuntimeApi> {
        let shared = Arc::new(Shared {
            function_arn: format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"),
            ..Shared::default()
        });
        let app = Router::new()
            .route(&format!("{PREFIX}/invocation/next"), get(next))
            .route(&format!("{PREFIX}/invocation/{{id}}/response"), post(response))
            .route(&format!("{PREFIX}/invocation/{{id}}/error"), post(invocation_error))
            .route(&format!("{PREFIX}/init/error"), post(init_error))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(RuntimeApi { addr, shared, server })
    }

    /// `host:port`, as `AWS_LAMBDA_RUNTIME_API` carries it.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues `event` for the function's next `next`, and waits up to `within` for its answer.
    pub async fn invoke(&self, event: &Value, within: Duration) -> Result<Invocation, HarnessError> {
        let id = format!("{:08x}-baton-harness", self.shared.ids.fetch_add(1, Ordering::Relaxed) + 1);
        let (tx, rx) = oneshot::channel();
        self.shared.answers.lock().expect("answers").insert(id.clone(), tx);
        let body = Bytes::from(serde_json::to_vec(event).expect("an event serializes"));
        self.shared.queue.lock().expect("queue").push_back((id.clone(), body));
        self.shared.queued.notify_one();
        let Ok(Ok((outcome, at))) = tokio::time::timeout(within, rx).await else {
            // Unanswered: forget the event, so a later invoke does not run behind it.
            self.shared.queue.lock().expect("queue").retain(|(queued, _)| *queued != id);
            self.shared.answers.lock().expect("answers").remove(&id);
            self.shared.handed_out.lock().expect("handed out").remove(&id);
            return Err(HarnessError::NoAnswer { request_id: id, waited: within });
        };
        let handed_out = self.shared.handed_out.lock().expect("handed out").remove(&id).unwrap_or(at);
        Ok(Invocation { outcome, took: at.saturating_duration_since(handed_out) })
    }

    /// When the function first asked for an event, if it has.
    pub fn first_next(&self) -> Option<Instant> {
        *self.shared.first_next.lock().expect("first next")
    }

    /// What the function reported to `/init/error`, if anything.
    pub fn init_error(&self) -> Option<Report> {
        self.shared.init_error.lock().expect("init error").clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Why the harness got no answer.
#[derive(Debug)]
pub enum HarnessError {
    Spawn(std::io::Error),
    NoAnswer {
        request_id: String,
        waited: Duration,
    },
    /// The function exited or reported `/init/error` before it asked for an event.
    InitFailed {
        status: Option<std::process::ExitStatus>,
        report: Option<Report>,
        output: String,
    },
    NotReady {
        waited: Duration,
    },
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Spawn(e) => write!(f, "cannot start the binary: {e}"),
            HarnessError::NoAnswer { request_id, waited } => {
                write!(f, "no answer to invocation {request_id} within {waited:?}")
            }
            HarnessError::InitFailed { status, report, output } => {
                write!(f, "init failed (exit {status:?}, init/error {report:?}); its output:\n{output}")
            }
            HarnessError::NotReady { waited } => write!(f, "no call to `next` within {waited:?}"),
        }
    }
}

impl std::error::Error for HarnessError {}

async fn next(State(shared): State<Arc<Shared>>) -> Response {
    shared.first_next.lock().expect("first next").get_or_insert_with(Instant::now);
    shared.polled.notify_waiters();
    let (id, body) = loop {
        let notified = shared.queued.notified();
        if let Some(item) = shared.queue.lock().expect("queue").pop_front() {
            break item;
        }
        notified.await;
    };
    let deadline = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + DEADLINE;
    shared.handed_out.lock().expect("handed out").insert(id.clone(), Instant::now());
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("lambda-runtime-aws-request-id", id.clone()),
        ("lambda-runtime-deadline-ms", deadline.as_millis().to_string()),
        ("lambda-runtime-invoked-function-arn", shared.function_arn.clone()),
        ("lambda-runtime-trace-id", format!("Root=1-00000000-{id:0>24};Parent=0000000000000001;Sampled=0")),
    ];
    let mut response = (StatusCode::OK, body).into_response();
    for (name, value) in headers {
        response.headers_mut().insert(name, value.parse().expect("a header value"));
    }
    response
}

fn report(headers: &HeaderMap, body: &[u8]) -> Report {
    Report {
        error_type_header: headers
            .get("lambda-runtime-function-error-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned())),
    }
}

fn answer(shared: &Shared, id: &str, outcome: Outcome) -> Response {
    match shared.answers.lock().expect("answers").remove(id) {
        Some(tx) => {
            let _ = tx.send((outcome, Instant::now()));
            (StatusCode::ACCEPTED, r#"{"status":"OK"}"#).into_response()
        }
        None => {
            (StatusCode::BAD_REQUEST, r#"{"errorMessage":"unknown or answered request id"}"#).into_response()
        }
    }
}

async fn response(State(shared): State<Arc<Shared>>, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    answer(&shared, &id, Outcome::Response(value))
}

async fn invocation_error(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, &id, Outcome::Error(report(&headers, &body)))
}

async fn init_error(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    *shared.init_error.lock().expect("init error") = Some(report(&headers, &body));
    (StatusCode::ACCEPTED, r#"{"status":"OK"}"#).into_response()
}

/// An HTTP API (payload 2.0) request event for `POST /v1/callbacks`, as API Gateway hands it to
/// the callback function.
pub fn http_api_event(headers: &[(&str, String)], body: &str) -> Value {
    let headers: serde_json::Map<String, Value> =
        headers.iter().map(|(k, v)| ((*k).to_owned(), Value::String(v.clone()))).collect();
    let request_id =
        format!("harness-{}", SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
    serde_json::json!({
        "version": "2.0",
        "routeKey": "POST /v1/callbacks",
        "rawPath": "/v1/callbacks",
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": ACCOUNT, "apiId": "harness", "domainName": "harness.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "harness", "requestId": request_id, "routeKey": "POST /v1/callbacks",
            "stage": "$default", "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1_795_996_800_000_i64,
            "http": {"method": "POST", "path": "/v1/callbacks", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                     "userAgent": "baton-harness"}
        },
        "body": body,
        "isBase64Encoded": false
    })
}

/// A function's binary running under its own [`RuntimeApi`].
pub struct Function {
    pub api: RuntimeApi,
    child: Child,
    spawned: Instant,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

/// The variables Lambda sets for every function, for a function `name` whose Runtime API is at
/// `runtime_api`. The function's own variables (the template's) come on top.
pub fn lambda_environment(name: &str, runtime_api: &str) -> BTreeMap<String, String> {
    [
        ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_owned()),
        ("AWS_LAMBDA_FUNCTION_NAME", name.to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}")),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/12/01/[$LATEST]harness".to_owned()),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_owned()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_DEFAULT_REGION", REGION.to_owned()),
        ("AWS_EXECUTION_ENV", "AWS_Lambda_provided.al2023".to_owned()),
        ("_HANDLER", "bootstrap".to_owned()),
        ("LAMBDA_TASK_ROOT", "/var/task".to_owned()),
        ("LAMBDA_RUNTIME_DIR", "/var/runtime".to_owned()),
        ("TZ", ":UTC".to_owned()),
        ("LANG", "en_US.UTF-8".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

impl Function {
    /// Starts `binary` as Lambda would: a clean environment of Lambda's variables and `env`.
    pub async fn spawn(
        name: &str,
        binary: &Path,
        env: &BTreeMap<String, String>,
    ) -> Result<Function, HarnessError> {
        let api = RuntimeApi::start(name).await.map_err(HarnessError::Spawn)?;
        let mut vars = lambda_environment(name, &api.address());
        vars.extend(env.clone());
        let spawned = Instant::now();
        let mut child = Command::new(binary)
            .env_clear()
            .envs(&vars)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(HarnessError::Spawn)?;
        let stdout = collect_lines(child.stdout.take());
        let stderr = collect_lines(child.stderr.take());
        Ok(Function { api, child, spawned, stdout, stderr })
    }

    /// Waits up to `within` for the function to ask for its first event, and returns how long
    /// init took (spawn to first `next`). Fails if the function exits or reports an init error
    /// first.
    pub async fn ready(&mut self, within: Duration) -> Result<Duration, HarnessError> {
        let until = Instant::now() + within;
        loop {
            let polled = self.api.shared.polled.notified();
            if let Some(at) = self.api.first_next() {
                return Ok(at.saturating_duration_since(self.spawned));
            }
            if let Some(status) = self.child.try_wait().map_err(HarnessError::Spawn)? {
                return Err(self.init_failed(Some(status)));
            }
            if self.api.init_error().is_some() {
                return Err(self.init_failed(None));
            }
            if Instant::now() >= until {
                return Err(HarnessError::NotReady { waited: within });
            }
            let _ = tokio::time::timeout(Duration::from_millis(20), polled).await;
        }
    }

    /// Waits up to `within` for the function to exit; returns its status and what it reported
    /// to `/init/error`.
    pub async fn exit(&mut self, within: Duration) -> (Option<std::process::ExitStatus>, Option<Report>) {
        let status = tokio::time::timeout(within, self.child.wait()).await.ok().and_then(Result::ok);
        (status, self.api.init_error())
    }

    fn init_failed(&self, status: Option<std::process::ExitStatus>) -> HarnessError {
        let output = [self.stdout(), self.stderr()].concat().join("\n");
        HarnessError::InitFailed { status, report: self.api.init_error(), output }
    }

    /// Invokes the function once with `event`.
    pub async fn invoke(&self, event: &Value, within: Duration) -> Result<Invocation, HarnessError> {
        self.api.invoke(event, within).await
    }

    /// Every line the function wrote to stdout so far (CloudWatch Logs, on Lambda).
    pub fn stdout(&self) -> Vec<String> {
        self.stdout.lock().expect("stdout").clone()
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().expect("stderr").clone()
    }

    /// Waits up to `within` for a stdout line that `wanted` accepts (stdout is read by a task of
    /// its own, so a line the function wrote may not be collected yet); returns it.
    pub async fn stdout_line(&self, within: Duration, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let until = Instant::now() + within;
        loop {
            if let Some(line) = self.stdout().into_iter().find(|l| wanted(l)) {
                return Some(line);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the function (Lambda's SIGKILL at the end of an environment's life).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn collect_lines<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    stream: Option<R>,
) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    if let Some(stream) = stream {
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().expect("lines").push(line);
            }
        });
    }
    lines
}
