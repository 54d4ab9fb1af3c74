//! Dead letters: each one baton sent says why, and none is a throttled message.

use baton_core::ports::dead_letters::{DETAIL_ATTRIBUTE, REASON_ATTRIBUTE, REQUEUE_FAILED, SOURCE_ATTRIBUTE};

use super::Checker;
use super::Seen;
use crate::sqs::{DIED_ATTRIBUTE, Message, SEND_FAILED_ATTRIBUTE};

/// Whether dead letter `m` is one baton could not give a reason for, or the reasonless twin of
/// one it did: the checks of dead letters skip it.
pub(super) fn excused(s: &Seen<'_>, m: &Message) -> bool {
    // The cursed key fails every call for good; if the dead-letter send also failed on its last
    // receive, SQS's redrive moved it without a reason. So it does when the function died on the
    // last receive, or its own dead-letter send failed: baton could not say why (RUNBOOK.md says
    // so).
    if s.cursed.is_some_and(|k| m.body.contains(&format!("\"{k}\"")))
        || m.attributes.contains_key(DIED_ATTRIBUTE)
        || m.attributes.contains_key(SEND_FAILED_ATTRIBUTE)
    {
        return true;
    }
    // baton's own dead-letter send landed but its answer was lost: the function failed the
    // receive and SQS moved the message too. The reasoned copy names this one as its source.
    s.dead().iter().any(|d| {
        d.attributes.get(SOURCE_ATTRIBUTE) == Some(&m.id) && d.attributes.contains_key(REASON_ATTRIBUTE)
    })
}

/// A throttle says nothing about the message: it is requeued, never dead-lettered (unless the
/// requeue itself failed).
pub(super) fn no_throttled_message_dead_lettered(c: &mut Checker<'_>, m: &Message) {
    let detail = m.attributes.get(DETAIL_ATTRIBUTE).map(String::as_str).unwrap_or("");
    let throttled = detail.split_whitespace().next().unwrap_or("").ends_with("_throttled");
    c.check("no_throttled_message_dead_lettered", !throttled || detail.contains(REQUEUE_FAILED), || {
        format!("a throttled message was dead-lettered: {} ({detail})", m.id)
    });
}

/// Every dead letter baton sent carries its reason.
pub(super) fn every_dead_letter_has_a_reason(c: &mut Checker<'_>, m: &Message) {
    c.check("every_dead_letter_has_a_reason", m.attributes.contains_key(REASON_ATTRIBUTE), || {
        format!(
            "dead-lettered message {} has no reason: {}",
            m.id,
            m.body.chars().take(120).collect::<String>()
        )
    });
}
