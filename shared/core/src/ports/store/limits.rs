//! DynamoDB's limits on keys and items, and the keys baton writes, in one place for both stores.
//!
//! The DynamoDB store builds its keys with these functions, and the in-memory store refuses what
//! DynamoDB would refuse with them: a key longer than DynamoDB takes (partition key 2,048 bytes,
//! sort key 1,024 bytes, both in UTF-8), and an item over 400 KB. Without that, a simulation
//! over the in-memory store never sees the `ValidationException` an oversize key or item gets on
//! AWS (an input id of 256 four-byte characters overflowed the `INBOX#…` sort key and was
//! dead-lettered `store_rejected` only on AWS). Both stores give the same error for it:
//! [`StoreError::Rejected`], `store_rejected`, never retried.

use serde_json::Value;

use super::{InboxEntry, StoreError};
use crate::domain::ids::{CorrelationKey, WorkflowName};
use crate::domain::lifecycle::{IgnoreReason, Record, Resume};
pub use crate::json_len::json_len;

/// DynamoDB's limit on one item (400 KB), every kind of item.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// DynamoDB's limit on a partition key value, in UTF-8 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key value, in UTF-8 bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;

// The partition key is made of names of bounded length (`WF#<workflow>#<key>`, at most 40 and
// 128 characters of ASCII): it always fits. The sort keys carry an input id, which may not.
const _: () = assert!(
    "WF#".len() + WorkflowName::MAX_BYTES + "#".len() + CorrelationKey::MAX_BYTES <= MAX_PARTITION_KEY_BYTES
);
const _: () = assert!(MAX_SORT_KEY_BYTES < MAX_ITEM_BYTES);
// The longest sort key an input id goes into is `INBOX#<step>#<mark><id>` (the ledger's reasons
// are shorter than a step name's 40 characters): any id the API accepts must fit it, or its put
// is refused every time (found by review).
const _: () = assert!(
    "RECEIPT#".len()
        + crate::domain::ids::StepName::MAX_BYTES
        + "/undo#".len()
        + crate::domain::ids::EventId::MAX_BYTES
        <= MAX_SORT_KEY_BYTES
);
const _: () = assert!(
    "INBOX#".len()
        + crate::domain::ids::StepName::MAX_BYTES
        + "#".len()
        + CALLBACK_MARK.len_utf8()
        + crate::domain::ids::EventId::MAX_BYTES
        <= MAX_SORT_KEY_BYTES
);

/// What DynamoDB refuses with a `ValidationException` before it looks at the table. The text
/// is DynamoDB's own message, so a log reads the same whichever store refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    #[error(
        "ValidationException: One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of 2048 bytes ({bytes} bytes)"
    )]
    PartitionKey { bytes: usize },
    #[error(
        "ValidationException: One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes ({bytes} bytes)"
    )]
    SortKey { bytes: usize },
    #[error("ValidationException: Item size has exceeded the maximum allowed size ({bytes} bytes)")]
    ItemSize { bytes: usize },
}

impl LimitExceeded {
    /// The store error either store gives for it: what the DynamoDB store maps AWS's
    /// `ValidationException` to (not throttled, not retryable: rejected).
    pub fn rejected(self, op: &'static str) -> StoreError {
        StoreError::Rejected { op, source: Box::new(self) }
    }
}

/// Whether DynamoDB takes a request on the item (`pk`, `sk`).
pub fn check_keys(pk: &str, sk: &str) -> Result<(), LimitExceeded> {
    check_key_bytes(pk.len(), sk)
}

/// [`check_keys`], given the partition key's length in bytes (the in-memory store measures
/// the key of every request it answers, and need not write it out: [`pk_bytes`]).
pub fn check_key_bytes(pk_bytes: usize, sk: &str) -> Result<(), LimitExceeded> {
    if pk_bytes > MAX_PARTITION_KEY_BYTES {
        return Err(LimitExceeded::PartitionKey { bytes: pk_bytes });
    }
    if sk.len() > MAX_SORT_KEY_BYTES {
        return Err(LimitExceeded::SortKey { bytes: sk.len() });
    }
    Ok(())
}

/// Whether DynamoDB takes an item of `bytes` (`baton_aws::dynamodb::item_size`).
pub fn check_item_size(bytes: usize) -> Result<(), LimitExceeded> {
    if bytes > MAX_ITEM_BYTES {
        return Err(LimitExceeded::ItemSize { bytes });
    }
    Ok(())
}

// ---- the keys --------------------------------------------------------------------------------

/// The partition of everything about one (workflow, key).
pub fn pk(workflow: &WorkflowName, key: &CorrelationKey) -> String {
    format!("WF#{workflow}#{key}")
}

/// The length of [`pk`] in bytes, without writing it.
pub fn pk_bytes(workflow: &WorkflowName, key: &CorrelationKey) -> usize {
    "WF#".len() + workflow.as_str().len() + "#".len() + key.as_str().len()
}

/// The record's sort key.
pub const RECORD_SK: &str = "RECORD";

/// A task's sort key: the first attempt's without an attempt suffix, a later one's after it; a
/// compensation's after its step's.
pub fn task_sk(generation: u32, step: u32, attempt: u32, kind: super::TaskKind) -> String {
    let undo = match kind {
        super::TaskKind::Step | super::TaskKind::Reminder | super::TaskKind::Escalation => "",
        super::TaskKind::Compensation => "#undo",
    };
    match attempt {
        0 | 1 => format!("TASK#{generation:010}#{step:05}{undo}"),
        n => format!("TASK#{generation:010}#{step:05}{undo}#a{n:02}"),
    }
}

/// A receipt's sort key: by its target (a step name, `/undo` for a compensation), then the id.
pub fn receipt_sk(receipt: &super::Receipt) -> String {
    format!("RECEIPT#{}#{}", receipt.target, receipt.id)
}

/// An inbox entry's sort key: by step name. A callback's entry is kept under its id marked with
/// [`CALLBACK_MARK`], which no id can hold, so an event's entry with the same id is another item.
pub fn inbox_sk(entry: &InboxEntry) -> String {
    format!("INBOX#{}#{}", entry.step_name, inbox_id(entry))
}

/// The part of an inbox entry's key after its step: its id, marked for a callback's entry.
pub fn inbox_id(entry: &InboxEntry) -> String {
    if entry.callback_key { format!("{CALLBACK_MARK}{}", entry.id) } else { entry.id.to_string() }
}

/// Marks a callback's inbox key: a control character, which ids refuse ([`crate::domain::ids::EventId`]).
pub const CALLBACK_MARK: char = '\u{1}';

pub fn ledger_sk(reason: IgnoreReason, input_id: &str) -> String {
    format!("LEDGER#{}#{input_id}", reason.as_str())
}

/// At least the size of a record's item in either of the DynamoDB store's formats, without building
/// the item: what every write checks first, so that
/// only a record that may come near the 400 KB limit pays for the exact size. Each part is
/// bounded from above: a JSON string escapes a byte to six at most, a number prints in 40, an
/// audit entry adds at most 200 bytes to its strings, an applied input 100, and the other attributes
/// (names, timestamps, numbers) take under 1 KB together.
pub fn record_size_bound(record: &Record) -> usize {
    fn text(s: &str) -> usize {
        2 + 6 * s.len()
    }
    fn json(v: &Value) -> usize {
        match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 40,
            Value::String(s) => text(s),
            Value::Array(a) => 2 + a.iter().map(|v| json(v) + 1).sum::<usize>(),
            Value::Object(m) => 2 + m.iter().map(|(k, v)| text(k) + json(v) + 2).sum::<usize>(),
        }
    }
    let planted = crate::mutants::active(crate::mutants::Mutation::BoundWithoutParts);
    // (The planted bug counts a step's inputs and owed resume only, as the bound once did.)
    let step = record.step_wait().filter(|_| planted);
    let inputs = step.map_or(0, |w| 2 + w.inputs.iter().map(|(k, v)| text(k) + json(v) + 2).sum::<usize>());
    let owed = match step.and_then(|w| w.owed()) {
        None => 0,
        Some(Resume::Success { output }) => 100 + json(output),
        Some(Resume::Failure { error, cause }) => 100 + text(error) + text(cause),
    };
    let history: usize = record
        .history
        .iter()
        .map(|e| {
            200 + e.cause_id.as_deref().map_or(0, text) + e.from.as_deref().map_or(0, text) + text(&e.to)
        })
        .sum();
    let applied: usize = record.applied.iter().map(|a| 100 + text(a.id.as_str()) + text(&a.hash)).sum();
    let starts: usize = record.start_events.iter().map(|e| 1 + text(e.as_str())).sum();
    // The parts kept as JSON text whole (the position's waits, the compensation): their text is
    // what DynamoDB counts, so it is measured as written (found by review: left out, a record of
    // 102,869 bytes was bounded at 2,519, and a write DynamoDB refuses every time was decided).
    fn as_json<T: serde::Serialize + ?Sized>(v: &T) -> usize {
        json_len(v).map_or(MAX_ITEM_BYTES + 1, |len| 16 + len)
    }
    let mut nested = 0;
    if !record.waits.is_empty() && !planted {
        nested += as_json(&record.waits);
    }
    if let Some(c) = record.compensation.as_ref().filter(|_| !planted) {
        nested += as_json(c);
    }
    if !record.untils.is_empty() {
        nested += as_json(&record.untils);
    }
    for list in [&record.missed, &record.confirmed, &record.succeeded] {
        nested += list.len() * 12;
    }
    let names = 2 * (record.workflow.as_str().len() + record.key.as_str().len());
    let others = record.write_id.as_ref().map_or(0, String::len) + record.config_version.len();
    1024 + names + nested + inputs + owed + history + applied + starts + others
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_measured_in_utf8_bytes_not_characters() {
        // Given an input id of 256 four-byte characters: 1,024 bytes.
        let id = "😀".repeat(256);
        // Then its ledger key is refused, though it is only 279 characters long.
        let sk = ledger_sk(IgnoreReason::BufferExpired, &id);
        assert_eq!(check_keys("WF#a#b", &sk), Err(LimitExceeded::SortKey { bytes: sk.len() }));
        assert!(sk.len() > MAX_SORT_KEY_BYTES && sk.chars().count() < 300);
        // And 1,024 bytes exactly fits.
        assert_eq!(check_keys("WF#a#b", &"x".repeat(MAX_SORT_KEY_BYTES)), Ok(()));
        assert!(check_keys(&"p".repeat(MAX_PARTITION_KEY_BYTES + 1), "RECORD").is_err());
        let (w, k) =
            (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("order@1234").unwrap());
        assert_eq!(pk_bytes(&w, &k), pk(&w, &k).len());
        assert!(check_item_size(MAX_ITEM_BYTES).is_ok());
        assert_eq!(
            check_item_size(MAX_ITEM_BYTES + 1),
            Err(LimitExceeded::ItemSize { bytes: MAX_ITEM_BYTES + 1 })
        );
    }

    #[test]
    fn a_refusal_is_the_error_the_dynamodb_store_gives_a_validation_exception() {
        use crate::domain::error::Classified;
        let e = LimitExceeded::SortKey { bytes: 2000 }.rejected("PutItem");
        assert_eq!((e.error_type(), e.retryable()), ("store_rejected", false));
    }
}
