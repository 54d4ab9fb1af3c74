//! The error taxonomy every adapter and use case shares. How an AWS SDK failure is classified
//! is the AWS adapters' (`baton_aws::sdk`).
//!
//! Each module has its own `thiserror` enum; this trait is what they have in common. A caller
//! needs two answers about any failure: may it simply try again (`retryable`), and what stable
//! name does it go by in logs, metrics, Lambda's `Diagnostic` and RUNBOOK.md (`error_type`).
//! `error_type` strings are a public contract: operators alarm and search on them. Add new
//! ones, never rename them.

/// The cause of a failure an adapter reports, of whatever type its SDK gives.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A classified failure.
pub trait Classified {
    /// A stable snake_case name, e.g. `dynamodb_unavailable`.
    fn error_type(&self) -> &'static str;
    /// Would the same call, retried later unchanged, possibly succeed?
    fn retryable(&self) -> bool;
    /// Was it AWS refusing for rate or quota (a throttle)? Such a failure passes with time and
    /// says nothing about the input: it is never dead-lettered (docs/SCALE.md). Implies
    /// `retryable`.
    fn throttled(&self) -> bool {
        false
    }
}

/// An error and its causes on one line, for logs and dead-letter attributes.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
