//! `make bench`: the four functions as they ship, measured under the Runtime API harness.
//!
//! For each function's Lambda zip (`make package`): its size, then SPAWNS cold starts of the
//! `bootstrap` inside it, each timed from spawn to its first `next` (init, the warm-up
//! included), and each followed by a first invoke that makes no AWS call, timed from the event
//! being handed out to the answer arriving. Prints the median and p90, and one line against the
//! published anchors.
//!
//! Usage: function-bench ZIP_DIR AWS_ENDPOINT HELLO [SPAWNS]
//!   ZIP_DIR       where `make package` put the zips (target/lambda)
//!   AWS_ENDPOINT  the emulator the warm-up calls (make bench starts one)
//!   HELLO         the hello-lambda binary, built with the release profile like the functions

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_harness::{Function, Outcome};
use serde_json::{Value, json};

/// The published figures this is compared with.
const ANCHOR_ZIP_MB: f64 = 5.0;
const ANCHOR_INIT_MS: f64 = 13.9;
const FUNCTIONS: [&str; 4] = ["baton-intake", "baton-progress", "baton-callback", "baton-sweeper"];
const WAIT: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(endpoint), Some(hello)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: function-bench ZIP_DIR AWS_ENDPOINT HELLO [SPAWNS]");
        std::process::exit(2);
    };
    let spawns: usize = args.get(3).map(|n| n.parse().expect("SPAWNS is a number")).unwrap_or(20);
    let work = std::env::temp_dir().join(format!("baton-bench-{}", std::process::id()));
    println!("{spawns} cold starts per function under the Runtime API harness; warm-up against {endpoint}");
    println!(
        "{:<16} {:>9} {:>10} {:>10} {:>14} {:>14}",
        "function", "zip MB", "init p50", "init p90", "1st invoke p50", "1st invoke p90"
    );
    // Calibration: a Rust hello world on lambda_runtime, built with the same profile and started
    // the same way. What it takes is the floor any Rust function starts from here.
    let hello = PathBuf::from(hello);
    let (mut inits, mut invokes) = (Vec::new(), Vec::new());
    for _ in 0..spawns {
        let (init, invoke) = cold_start("hello-lambda", &hello, endpoint).await;
        inits.push(init);
        invokes.push(invoke);
    }
    row("hello world", None, &mut inits, &mut invokes, "  (calibration: lambda_runtime alone)");
    let mut worst = (0.0f64, 0.0f64);
    for function in FUNCTIONS {
        let zip = Path::new(dir).join(function).join("bootstrap.zip");
        let zip_mb = std::fs::metadata(&zip)
            .unwrap_or_else(|e| panic!("{}: {e} (run `make package` first)", zip.display()))
            .len() as f64
            / 1_000_000.0;
        let bootstrap = unzip(&zip, &work.join(function));
        let (mut inits, mut invokes) = (Vec::new(), Vec::new());
        for _ in 0..spawns {
            let (init, invoke) = cold_start(function, &bootstrap, endpoint).await;
            inits.push(init);
            invokes.push(invoke);
        }
        let note = if function == "baton-sweeper" { "  (a sweep: AWS calls)" } else { "" };
        let init50 = row(function, Some(zip_mb), &mut inits, &mut invokes, note);
        worst = (worst.0.max(zip_mb), worst.1.max(init50));
    }
    println!(
        "anchors: largest zip {:.2} MB vs {ANCHOR_ZIP_MB} MB published for a Rust Lambda with the AWS SDK and LTO; \
         slowest median init {:.2} ms here vs {ANCHOR_INIT_MS} ms cold init of a Rust hello world on Lambda",
        worst.0, worst.1
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Prints one function's line; returns its median init.
fn row(name: &str, zip_mb: Option<f64>, inits: &mut [f64], invokes: &mut [f64], note: &str) -> f64 {
    let (init50, init90) = (percentile(inits, 50), percentile(inits, 90));
    let (inv50, inv90) = (percentile(invokes, 50), percentile(invokes, 90));
    let zip = zip_mb.map(|mb| format!("{mb:.2}")).unwrap_or_else(|| "-".into());
    println!("{name:<16} {zip:>9} {init50:>8.2}ms {init90:>8.2}ms {inv50:>12.2}ms {inv90:>12.2}ms{note}");
    init50
}

/// One cold start of `bootstrap` and its first invoke: (init ms, first invoke ms).
async fn cold_start(function: &str, bootstrap: &Path, endpoint: &str) -> (f64, f64) {
    let mut f = Function::spawn(function, bootstrap, &environment(endpoint)).await.expect("spawns");
    let init = f.ready(WAIT).await.unwrap_or_else(|e| panic!("{function}: {e}"));
    let invocation =
        f.invoke(&first_event(function), WAIT).await.unwrap_or_else(|e| panic!("{function}: {e}"));
    if function != "baton-sweeper"
        && let Outcome::Error(report) = &invocation.outcome
    {
        panic!("{function} failed its first invoke: {report:?}");
    }
    f.stop().await;
    emulator_settled(endpoint).await;
    (init.as_secs_f64() * 1000.0, invocation.took.as_secs_f64() * 1000.0)
}

/// Returns once the emulator's DynamoDB has worked through what was sent to it before: one
/// `ListTables`, answered only once it gets its turn behind them (tools/emulator.py serializes
/// DynamoDB requests; its lock is not strictly first come, first served, so this settles the
/// queue mostly, not provably). A sweep stopped after its first error leaves queries behind it;
/// without this the next cold start's warm-up queued behind them, and the sweeper's init was
/// timed with its previous sweep's work in it (2 to 8 ms more than the others' here; with this,
/// the same as theirs). On Lambda no sweep runs just before a cold start.
async fn emulator_settled(endpoint: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else { return };
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {address}\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    if stream.write_all(request.as_bytes()).await.is_ok() {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
    }
}

/// A first event each function answers without calling AWS: an empty SQS batch; a callback
/// with a current timestamp and a bad signature (the HMAC is computed and compared, then 401,
/// before any read); the sweeper's schedule, which does query.
fn first_event(function: &str) -> Value {
    match function {
        "baton-callback" => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs().to_string();
            let headers = [
                ("content-type", "application/json".to_owned()),
                ("webhook-id", "bench".to_owned()),
                ("webhook-timestamp", now),
                ("webhook-signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()),
            ];
            lambda_harness::http_api_event(
                &headers,
                r#"{"workflow": "order-review", "key": "k", "step": "s"}"#,
            )
        }
        "baton-sweeper" => {
            json!({"version": "0", "id": "bench", "detail-type": "Scheduled Event", "source": "aws.events",
                                  "account": "123456789012", "time": "2026-12-01T00:00:00Z", "region": "us-east-1",
                                  "resources": [], "detail": {}})
        }
        _ => json!({"Records": []}),
    }
}

/// What template.yaml gives the functions, for a stack `bench` on the emulator. The table is
/// not created: the warm-up's PutItem gets ResourceNotFound, one full round trip all the same.
fn environment(endpoint: &str) -> BTreeMap<String, String> {
    [
        ("BATON_TABLE", "baton-bench"),
        ("BATON_STATE_MACHINE_PREFIX", "arn:aws:states:us-east-1:123456789012:stateMachine:bench-"),
        ("BATON_STATE_MACHINE_ALIAS", "live"),
        ("BATON_DLQ_URL", "http://127.0.0.1/123456789012/bench-dlq"),
        ("BATON_TASK_QUEUE_URL_PREFIX", "http://127.0.0.1/123456789012/bench_tasks-"),
        ("BATON_WEBHOOK_SECRETS", "whsec_YmF0b24tYmVuY2gtc2VjcmV0LTI0LWJ5dGVz"),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_SESSION_TOKEN", "testing"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    // Where the TLS roots are read from: the caller's bundle file, as Lambda's AL2023 has one
    // (/etc/pki/tls/certs/ca-bundle.crt). Not a certificate directory: this machine's holds
    // about 140 files, which the SDK's TLS setup reads one by one (about 5 ms of init here),
    // where Lambda's image has a bundle and a few files.
    .chain(std::env::var("SSL_CERT_FILE").ok().map(|file| ("SSL_CERT_FILE".to_owned(), file)))
    .collect()
}

fn unzip(zip: &Path, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).expect("a work dir");
    let status = std::process::Command::new("unzip")
        .args(["-o", "-q"])
        .arg(zip)
        .arg("-d")
        .arg(into)
        .status()
        .expect("unzip runs");
    assert!(status.success(), "unzip {}", zip.display());
    into.join("bootstrap")
}

fn percentile(values: &mut [f64], p: usize) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * p).div_ceil(100).max(1) - 1;
    values[rank.min(values.len() - 1)]
}
