//! The JSON log lines of a test binary, captured as operators would read them in CloudWatch.

use std::sync::OnceLock;

use baton::metrics::Captured;
use serde_json::Value;

/// Installs (once per test binary) a JSON subscriber that keeps every line, and returns it.
pub fn captured() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let sink = Captured::default();
        let writer = sink.clone();
        let _ = tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_writer(move || writer.clone())
            .try_init();
        sink
    })
}

/// Lines whose message contains `message` and whose current span is about `key`.
pub fn lines_about(key: &str, message: &str) -> Vec<Value> {
    captured()
        .lines()
        .into_iter()
        .filter(|l| l["span"]["key"] == key)
        .filter(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains(message)))
        .collect()
}

/// How many resumes (SendTaskSuccess or SendTaskFailure) reached Step Functions for `key`.
pub fn resumes_delivered(key: &str) -> usize {
    lines_about(key, "resume delivered").iter().filter(|l| l["fields"]["resume"] != "heartbeat").count()
}
