//! Every stable code baton can emit, in one place, so docs/RUNBOOK.md can be checked against it.
//!
//! Operators search logs, alarm on metrics and read dead-letter attributes by these codes. A
//! code the runbook does not explain is a page that leaves someone guessing at 3 a.m.; the test
//! below fails when one is added without its runbook entry.

use crate::domain::lifecycle::{IgnoreReason, RejectReason};

/// Every `error_type` (logs, Lambda `Diagnostic`, dead-letter reasons for permanent failures).
pub fn error_types() -> Vec<&'static str> {
    let mut all = Vec::new();
    all.extend_from_slice(crate::ports::store::StoreError::ERROR_TYPES);
    all.extend_from_slice(crate::ports::orchestrator::ERROR_TYPES);
    all.extend_from_slice(crate::ports::outbound::PublishError::ERROR_TYPES);
    all.extend_from_slice(crate::use_cases::engine::EngineError::OWN_ERROR_TYPES);
    all.extend_from_slice(crate::ports::secrets::SecretsError::ERROR_TYPES);
    all
}

/// Every ledger reason (`IgnoreReason`), including `nothing_owed`, which is never ledgered.
pub fn ledger_reasons() -> Vec<&'static str> {
    IgnoreReason::ALL.iter().map(|r| r.as_str()).collect()
}

/// Every reason a lifecycle decision rejects an input.
pub fn reject_reasons() -> Vec<&'static str> {
    [RejectReason::UnknownStep, RejectReason::IdempotencyKeyReused, RejectReason::InputsTooLarge]
        .iter()
        .map(|r| r.as_str())
        .collect()
}

/// Every `baton_reason` a dead-lettered message can carry, besides permanent `error_types`.
pub fn dead_letter_reasons() -> Vec<&'static str> {
    let mut all = crate::domain::event::EventError::REASON_CODES.to_vec();
    all.extend_from_slice(crate::use_cases::progress::ReportError::REASON_CODES);
    all.push(crate::use_cases::intake::MISSING_CORRELATION_KEY);
    all.push(crate::ports::dead_letters::RETRIES_EXHAUSTED);
    all
}

/// Every `error` code of the callback API's JSON error bodies.
pub fn callback_error_codes() -> Vec<&'static str> {
    crate::use_cases::callback::ERROR_CODES.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNBOOK: &str = include_str!("../../../docs/RUNBOOK.md");

    #[test]
    fn the_runbook_explains_every_code_baton_can_emit() {
        let groups = [
            ("error_type", error_types()),
            ("ledger reason", ledger_reasons()),
            ("reject reason", reject_reasons()),
            ("dead-letter reason", dead_letter_reasons()),
            ("callback error", callback_error_codes()),
            ("replay classification", vec!["safe", "noop", "needs-human"]),
        ];
        let mut missing = Vec::new();
        for (group, codes) in &groups {
            assert!(!codes.is_empty(), "{group}: no codes");
            for code in codes {
                if !RUNBOOK.contains(&format!("`{code}`")) {
                    missing.push(format!("{group} `{code}`"));
                }
            }
        }
        assert!(missing.is_empty(), "docs/RUNBOOK.md has no entry for:\n  {}", missing.join("\n  "));
    }
}
