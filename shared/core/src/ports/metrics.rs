//! Counts as CloudWatch metrics, in Embedded Metric Format (EMF).
//!
//! A Lambda function's stdout goes to CloudWatch Logs, which turns each EMF line into metric
//! data points: no PutMetricData call, no extra latency, nothing to fail. The alarms in
//! template.yaml watch these metrics in namespace `baton`, dimension `service = baton`.
//! Each line also carries the workflow, so the same numbers can be broken down per workflow.

use std::io::Write;
use std::sync::{Arc, Mutex};

use time::OffsetDateTime;

/// The namespace of every baton metric.
pub const NAMESPACE: &str = "baton";

/// The metrics baton emits. Names are a public contract (alarms and dashboards use them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// A start event created a record and an execution is owed.
    WorkflowsStarted,
    /// An input was recognised as a duplicate of an earlier one.
    DuplicateInputs,
    /// A domain event matched no workflow.
    NotEligible,
    /// An input was ignored and ledgered.
    InputsIgnored,
    /// An input arrived early and was buffered.
    InputsBuffered,
    /// A message could not be processed and went to a dead-letter queue with its reason.
    PoisonMessages,
    WorkflowsSucceeded,
    /// A workflow finished with at least one optional parallel branch that did not succeed.
    WorkflowsDegraded,
    WorkflowsFailed,
    /// A step missed its deadline and the workflow ended `timed_out`.
    WorkflowsTimedOut,
    WorkflowsCancelled,
    /// A workflow's compensations were all acknowledged.
    WorkflowsCompensated,
    /// A compensation failed on its last attempt or timed out: some completed steps stay
    /// undone. Alarmed: a person must finish them (RUNBOOK).
    WorkflowsCompensationFailed,
    /// The webhook secret's value, read again after a rotation, cannot be used: the callback
    /// function keeps the secrets it had until its next cold start, which will fail.
    SecretsInvalid,
    /// A record's execution ended without the report it waited for: the sweeper moved it to
    /// `stranded`. Alarmed: a person ends it (`baton end`, RUNBOOK).
    RecordsStranded,
}

impl Metric {
    pub const ALL: [Metric; 15] = [
        Metric::WorkflowsStarted,
        Metric::DuplicateInputs,
        Metric::NotEligible,
        Metric::InputsIgnored,
        Metric::InputsBuffered,
        Metric::PoisonMessages,
        Metric::WorkflowsSucceeded,
        Metric::WorkflowsDegraded,
        Metric::WorkflowsFailed,
        Metric::WorkflowsTimedOut,
        Metric::WorkflowsCancelled,
        Metric::WorkflowsCompensated,
        Metric::WorkflowsCompensationFailed,
        Metric::SecretsInvalid,
        Metric::RecordsStranded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::WorkflowsStarted => "WorkflowsStarted",
            Metric::DuplicateInputs => "DuplicateInputs",
            Metric::NotEligible => "NotEligible",
            Metric::InputsIgnored => "InputsIgnored",
            Metric::InputsBuffered => "InputsBuffered",
            Metric::PoisonMessages => "PoisonMessages",
            Metric::WorkflowsSucceeded => "WorkflowsSucceeded",
            Metric::WorkflowsDegraded => "WorkflowsDegraded",
            Metric::WorkflowsFailed => "WorkflowsFailed",
            Metric::WorkflowsTimedOut => "WorkflowsTimedOut",
            Metric::WorkflowsCancelled => "WorkflowsCancelled",
            Metric::WorkflowsCompensated => "WorkflowsCompensated",
            Metric::WorkflowsCompensationFailed => "WorkflowsCompensationFailed",
            Metric::SecretsInvalid => "SecretsInvalid",
            Metric::RecordsStranded => "RecordsStranded",
        }
    }
}

/// Where EMF lines go: stdout in Lambda, a buffer in tests.
#[derive(Clone)]
pub struct Metrics {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Metrics {
    /// EMF on stdout, as Lambda expects it.
    pub fn stdout() -> Self {
        Self::to(Box::new(std::io::stdout()))
    }

    pub fn to(sink: Box<dyn Write + Send>) -> Self {
        Metrics { sink: Arc::new(Mutex::new(sink)) }
    }

    /// Counts one occurrence of `metric`, for `workflow` when there is one.
    pub fn count(&self, metric: Metric, workflow: Option<&str>, now: OffsetDateTime) {
        let line = emf_line(metric, workflow, now);
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        // A metric that cannot be written must never fail the work it counts.
        let _ = writeln!(sink, "{line}").and_then(|()| sink.flush());
    }
}

/// One EMF document counting `metric` once. Written out directly rather than built as a JSON
/// value: every decision counts one, so it is on the hot path (`make bench`). Metric names and
/// the namespace are plain identifiers; the workflow name is escaped as JSON.
pub fn emf_line(metric: Metric, workflow: Option<&str>, now: OffsetDateTime) -> String {
    let millis = now.unix_timestamp_nanos() / 1_000_000;
    let name = metric.name();
    let (dimensions, workflow) = match workflow {
        Some(w) => (
            r#"[["service"],["service","workflow"]]"#,
            format!(r#","workflow":{}"#, serde_json::Value::from(w)),
        ),
        None => (r#"[["service"]]"#, String::new()),
    };
    format!(
        r#"{{"_aws":{{"Timestamp":{millis},"CloudWatchMetrics":[{{"Namespace":"{NAMESPACE}","Dimensions":{dimensions},"Metrics":[{{"Name":"{name}","Unit":"Count"}}]}}]}},"service":"baton","{name}":1{workflow}}}"#
    )
}

/// A sink that keeps what was written, for tests that assert on emitted metrics and logs.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// How many times `metric` was counted (for `workflow`, when given).
    pub fn count(&self, metric: Metric, workflow: Option<&str>) -> usize {
        self.lines()
            .into_iter()
            .filter(|doc| doc[metric.name()] == 1)
            .filter(|doc| workflow.is_none_or(|w| doc["workflow"] == w))
            .count()
    }
}

impl Captured {
    /// Every line written that is a JSON object (EMF documents, JSON log lines).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_emf_line_declares_the_metric_and_carries_its_value_and_dimensions() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(&emf_line(Metric::WorkflowsTimedOut, Some("order-review"), now)).unwrap();
        let spec = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(doc["_aws"]["Timestamp"], 1_800_000_000_000i64);
        assert_eq!(spec["Namespace"], "baton");
        assert_eq!(spec["Metrics"][0]["Name"], "WorkflowsTimedOut");
        assert_eq!(spec["Dimensions"][1], json!(["service", "workflow"]));
        assert_eq!((doc["WorkflowsTimedOut"].as_i64(), doc["service"].as_str()), (Some(1), Some("baton")));
        assert_eq!(doc["workflow"], "order-review");
        let doc: serde_json::Value =
            serde_json::from_str(&emf_line(Metric::NotEligible, Some("q\"uote"), now)).unwrap();
        assert_eq!(doc["workflow"], "q\"uote", "the workflow name is escaped");
        let doc: serde_json::Value = serde_json::from_str(&emf_line(Metric::NotEligible, None, now)).unwrap();
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["service"]]));
        assert!(doc.get("workflow").is_none());
    }

    #[test]
    fn captured_metrics_can_be_counted() {
        let captured = Captured::default();
        let metrics = Metrics::to(Box::new(captured.clone()));
        let now = OffsetDateTime::UNIX_EPOCH;
        metrics.count(Metric::NotEligible, None, now);
        metrics.count(Metric::WorkflowsStarted, Some("a"), now);
        metrics.count(Metric::WorkflowsStarted, Some("b"), now);
        assert_eq!(captured.count(Metric::WorkflowsStarted, None), 2);
        assert_eq!(captured.count(Metric::WorkflowsStarted, Some("a")), 1);
        assert_eq!(captured.count(Metric::NotEligible, None), 1);
    }
}
