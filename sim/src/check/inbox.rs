//! The inbox: buffered inputs are never stranded (the handshake), and each ends with one fate
//! that is true of it, in the generation it was buffered for.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::lifecycle::{Cause, IgnoreReason, Record, State, payload_fingerprint};
use baton_core::ports::store::{InboxEntry, InboxStatus, Trace};
use serde_json::Value;

use super::{Checker, Seen};
use crate::world::lock;

/// No lost wake-up: an entry put while its step already waited is followed by its invocation
/// reading the record (and draining if the step still waits) or by a read of that inbox.
pub(super) fn no_lost_wake_up(c: &mut Checker<'_>, s: &Seen<'_>) {
    // Otherwise the progress side may have drained before the entry landed. An invocation that
    // failed or died is followed by a read of the inbox: the sender's retry, a redelivery.
    for late in lock(&s.stack.store.late_puts).iter() {
        if s.cursed == Some(late.key.as_str()) {
            continue;
        }
        // Not stranded: a redelivery of the input was applied straight to its step, or another
        // input completed the step (the late one was then not needed; it expires, ledgered).
        let applied = s.records.iter().any(|r| {
            r.workflow.as_str() == late.workflow
                && r.key.as_str() == late.key
                && r.applied.iter().any(|a| a.id.as_str() == late.id && a.step == late.step)
        });
        let completed = s.writes_of(&late.workflow, &late.key).any(|(_, w)| {
            w.to.generation == late.generation
                && w.from == Some(State::Waiting { step: late.step })
                && w.to.state == State::Advancing { step: late.step }
        });
        c.check("no_lost_wake_up", applied || completed, || {
            format!(
                "{} buffered an input for {} step {} while the step waited, and nothing read the record or that inbox after",
                late.actor, late.key, late.step
            )
        });
    }
}

/// An input is applied only to the generation it was meant for (DESIGN §4.9): a buffered entry
/// is applied, to its step, in one generation at most.
pub(super) fn applied_only_to_its_generation(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    record: &Record,
    entry: &InboxEntry,
) {
    let applied_in: BTreeSet<u32> = s
        .writes
        .iter()
        .filter(|w| w.to.key == record.key && w.to.workflow == record.workflow)
        .filter(|w| matches!(w.to.history.last(), Some(a) if a.cause_id.as_deref() == Some(entry.id.as_str()) && matches!(a.cause, Cause::Merge | Cause::Complete | Cause::FailStep)))
        .filter(|w| w.to.state.step() == Some(entry.step))
        .map(|w| w.to.generation)
        .collect();
    c.check("applied_only_to_its_generation", applied_in.len() <= 1, || {
        format!(
            "{}/{} input {} (step {}) was applied in generations {applied_in:?}",
            record.workflow, record.key, entry.id, entry.step
        )
    });
}

/// An entry marked applied has no ledger line saying it expired (a step that began waiting
/// inside the sweep's expiry, found by review).
pub(super) fn applied_input_never_ledgered_expired(
    c: &mut Checker<'_>,
    t: &Trace,
    record: &Record,
    entry: &InboxEntry,
) {
    let ledgered_expired = t.ledger.iter().any(|l| {
        l.input_id == entry.id.as_str()
            && l.reason == IgnoreReason::BufferExpired
            && l.generation == Some(entry.generation)
            && l.detail.get("step") == entry.input.get("step")
    });
    c.check(
        "applied_input_never_ledgered_expired",
        !(entry.status == InboxStatus::Applied && ledgered_expired),
        || {
            format!(
                "{}/{} input {} (step {}, generation {}) is applied, and ledgered buffer_expired",
                record.workflow, record.key, entry.id, entry.step, entry.generation
            )
        },
    );
}

/// A buffered input ends with the one classification that is true of it: an entry marked
/// applied was applied to its step in its generation, one marked expired or ignored never was
/// before its fate was decided, and none is left held by a drain or a sweep.
pub(super) fn inbox_status_matches_what_happened(
    c: &mut Checker<'_>,
    s: &Seen<'_>,
    record: &Record,
    entry: &InboxEntry,
) {
    // This very input (the same payload, not another one reusing its id) applied to its step
    // (by name, in the version of the write that applied it: a deploy may number the steps
    // otherwise than the entry's buffering version did): in which generations, first by which
    // landed write (its index).
    let hash = entry.input.get("hash").and_then(Value::as_str).map(payload_fingerprint);
    let mut first_applied: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, w) in s.writes_of(record.workflow.as_str(), record.key.as_str()) {
        let config = s.version_of(Some(&w.to.config_version));
        let steps = config.as_ref().and_then(|c| c.workflow(w.to.workflow.as_str())).map(|wf| &wf.steps);
        let its_step = |step: Option<u32>| match (steps, entry.step_name.as_str()) {
            (Some(steps), name) if !name.is_empty() => {
                step.and_then(|i| steps.get(i as usize)).is_some_and(|st| st.name.as_str() == name)
            }
            _ => step == Some(entry.step),
        };
        for a in &w.to.applied {
            if a.id == entry.id && its_step(Some(a.step)) && Some(payload_fingerprint(&a.hash)) == hash {
                first_applied.entry(a.generation).or_insert(i);
            }
        }
    }
    let this_applied_in: BTreeSet<u32> = first_applied.keys().copied().collect();
    // Settled expired or ignored, it was never applied before its fate was decided (its ledger
    // line, or its settle): a delivery of the same id after that (a redelivered event finding its
    // step waiting) is applied on its own merits; the trace shows both.
    let settled_at = s
        .settles
        .iter()
        .filter(|x| x.key == record.key.as_str() && x.id == entry.id.as_str())
        .filter(|x| x.step_name.as_ref().is_none_or(|n| *n == entry.step_name))
        .map(|x| x.after_writes)
        .min()
        .unwrap_or(usize::MAX);
    let applied_before_settle = |g: u32| first_applied.iter().any(|(ag, i)| g == *ag && *i < settled_at);
    let consistent = match entry.status {
        InboxStatus::Buffered => true,
        // Held by a drain or a sweep that never finished: nothing finished it after the faults
        // stopped, the sweeps ran and every deadline passed.
        InboxStatus::Draining | InboxStatus::Expiring => s.cursed == Some(record.key.as_str()),
        // Applied in the generation it waited for, not merely somewhere.
        InboxStatus::Applied => this_applied_in.contains(&entry.generation),
        InboxStatus::Expired | InboxStatus::Ignored => !applied_before_settle(entry.generation),
    };
    c.check("inbox_status_matches_what_happened", consistent, || {
        format!(
            "{}/{} input {} (step {}, generation {}) is {} in the inbox, and was applied in generations {this_applied_in:?}",
            record.workflow,
            record.key,
            entry.id,
            entry.step,
            entry.generation,
            entry.status.as_str()
        )
    });
}
