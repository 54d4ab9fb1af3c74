//! The JSON log lines of a test binary, captured as operators would read them in CloudWatch.

use std::sync::OnceLock;

use baton_core::ports::metrics::Captured;
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

/// How many resumes (SendTaskSuccess or SendTaskFailure) baton sent for `key` on behalf of an
/// input (a callback, an event, a step_ready's drain), as its logs say. The sweeper's re-sends of
/// an owed resume (span input `tick`) are left out: after the grace period they are deliberate,
/// and Step Functions refuses them once the first has arrived (the emulator accepts them
/// silently). What a workflow saw is counted by `System::resumes`, from the execution history.
pub fn resumes_sent_for_inputs(key: &str) -> usize {
    lines_about(key, "resume delivered")
        .iter()
        .filter(|l| l["fields"]["resume"] != "heartbeat" && l["span"]["input"] != "tick")
        .count()
}

/// The warnings and errors logged so far, one per line: what a failing test prints for context.
pub fn problems() -> String {
    captured()
        .lines()
        .into_iter()
        .filter(|l| l["level"] == "WARN" || l["level"] == "ERROR")
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
