//! Owed resumes (DESIGN §4.4): each is delivered exactly once in effect. One payload per token,
//! re-sent only after the grace period, accepted at most once.

use std::collections::BTreeMap;

use baton_core::limits::RESEND_RESUME_AFTER;
use time::OffsetDateTime;

use super::{Checker, Seen};
use crate::sfn::ResumeCall;

/// Failures of token calls baton makes to end an execution rather than to answer its step.
const ENDING_ERRORS: &[&str] =
    &["baton.Cancelled", "baton.Terminal", "baton.StaleGeneration", "baton.NoRecord", "baton.UnknownStep"];

/// The resumes baton sent to answer steps, by token, and when each became owed.
pub(super) struct Owed<'a> {
    /// Each token's resume calls, in order: baton's own sends, not the SDK's retries nor the
    /// calls that end an execution.
    pub(super) by_token: BTreeMap<&'a str, Vec<&'a ResumeCall>>,
    /// When each resume became owed: the `updated_at` of the item that moved its record to
    /// `advancing` (the write lands a call's latency later, bounded by the SDK's timeouts).
    pub(super) since: BTreeMap<&'a str, OffsetDateTime>,
}

impl<'a> Owed<'a> {
    pub(super) fn of(s: &'a Seen<'_>) -> Owed<'a> {
        let mut by_token: BTreeMap<&str, Vec<&ResumeCall>> = BTreeMap::new();
        for r in &s.model.resumes {
            if r.sdk_retry || ENDING_ERRORS.iter().any(|e| r.payload == format!("failure {e}")) {
                continue;
            }
            by_token.entry(r.token.as_str()).or_default().push(r);
        }
        let mut since: BTreeMap<&str, OffsetDateTime> = BTreeMap::new();
        for w in s.writes.iter() {
            // Each wait's resume owed from the write that decided it (a step's, or a group's
            // branch's).
            for b in w.to.waits.iter().filter(|b| b.owed().is_some()) {
                if let Some(token) = &b.token {
                    since.entry(token.expose()).or_insert(w.to.updated_at);
                }
            }
        }
        Owed { by_token, since }
    }
}

/// A token is resumed with one payload, however often the resume is sent.
pub(super) fn one_payload_per_resume(c: &mut Checker<'_>, token: &str, calls: &[&ResumeCall]) {
    let first = &calls[0].payload;
    c.check("one_payload_per_resume", calls.iter().all(|r| &r.payload == first), || {
        format!(
            "token {token} was resumed with different payloads: {:?}",
            calls.iter().map(|r| &r.payload).collect::<Vec<_>>()
        )
    });
}

/// A resume is re-sent only once it has been owed for the grace period (the first sender may
/// still be at work); the first send may come whenever its sender gets to it. The grace is
/// counted on the functions' clocks, which may disagree by `skew` (the write's time is its
/// writer's, the re-send's its sender's).
pub(super) fn resume_resent_only_after_the_grace_period(
    c: &mut Checker<'_>,
    token: &str,
    calls: &[&ResumeCall],
    owed_since: Option<&OffsetDateTime>,
    skew: time::Duration,
) {
    if let Some(since) = owed_since {
        for again in calls.iter().skip(1) {
            c.check("resume_resent_only_after_the_grace_period", again.at + skew - *since >= RESEND_RESUME_AFTER, || {
                format!("token {token}: a resume re-sent {} after it became owed, inside the {RESEND_RESUME_AFTER} grace period", again.at - *since)
            });
        }
    }
}

/// Step Functions accepts at most one resume per token.
pub(super) fn at_most_one_resume_accepted(c: &mut Checker<'_>, token: &str, calls: &[&ResumeCall]) {
    c.check("at_most_one_resume_accepted", calls.iter().filter(|r| r.accepted).count() <= 1, || {
        format!("token {token} accepted more than one resume")
    });
}
