//! The record's audit trail and applied inputs as the DynamoDB store writes them: positional
//! arrays that leave out what can be told from elsewhere in the item, so that a record write
//! stays within one write unit (1 KB) for workflows of a few steps (docs/COST.md,
//! docs/DATA_MODEL.md). Nothing here is a rule of the lifecycle: a prediction that misses only costs
//! bytes, as the field is then written out.
//!
//! An audit entry is `[µs after the entry before, cause, cause_id, exceptions]`:
//! - the first entry counts its time from the record's `created_at`;
//! - `cause` is a number ([`code`]);
//! - `cause_id` is `null` when the transition had no input, an integer `i >= 0` for the id of
//!   the record's applied input `i`, `-1 - j` for its start event `j`, or the id itself;
//! - `exceptions` is an object of the fields that differ from what the entry before predicts:
//!   `from` its `to`; `generation` its generation; `version` one more than its version (before
//!   the first entry: no state, generation 1, version 0); and `to` what the cause usually leads
//!   to from `from` (`step_ready` from `pending` to `waiting{0}`, from `advancing{n}` to
//!   `waiting{n+1}`; `complete` or `fail_step` from `waiting{n}` to `advancing{n}`; and so on).
//!   `ns` holds the nanoseconds below the microsecond: the lifecycle keeps microseconds, so
//!   only a time set by other hands has any, and keeps them.
//!
//! Trailing `null`s and an empty `exceptions` are left off. A contiguous trail of one generation
//! that followed the usual path has no exceptions at all; a restart carries `generation`, and
//! the first entry kept after older ones were dropped carries `from` and `version`.
//!
//! An applied input is `[id, hash, step, generation]`, trailing `null`s left off.

use std::sync::Arc;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::domain::ids::EventId;
use crate::domain::lifecycle::{AppliedInput, AuditEntry, Cause, Kind, Source, State};

/// A cause's stored number. Append only: a number, once written, keeps its cause. (The match
/// makes a new cause fail to compile until it has one; [`CAUSES`] reads them back.)
fn code(cause: Cause) -> u8 {
    match cause {
        Cause::Start => 0,
        Cause::Restart => 1,
        Cause::StepReady => 2,
        Cause::Merge => 3,
        Cause::Complete => 4,
        Cause::FailStep => 5,
        Cause::ReportSucceeded => 6,
        Cause::ReportFailed => 7,
        Cause::ReportTimedOut => 8,
        Cause::Cancel => 9,
        Cause::BranchReady => 10,
        Cause::BranchDone => 11,
        Cause::BranchResumed => 12,
        Cause::AttemptFailed => 13,
        Cause::AttemptOpened => 14,
        Cause::Compensate => 15,
        Cause::Undo => 16,
        Cause::CompensationEnded => 17,
        Cause::ExecutionGone => 18,
        Cause::End => 19,
        Cause::StepResumed => 20,
        Cause::Notified => 21,
    }
}

/// The causes by their stored number.
const CAUSES: [Cause; 22] = [
    Cause::Start,
    Cause::Restart,
    Cause::StepReady,
    Cause::Merge,
    Cause::Complete,
    Cause::FailStep,
    Cause::ReportSucceeded,
    Cause::ReportFailed,
    Cause::ReportTimedOut,
    Cause::Cancel,
    Cause::BranchReady,
    Cause::BranchDone,
    Cause::BranchResumed,
    Cause::AttemptFailed,
    Cause::AttemptOpened,
    Cause::Compensate,
    Cause::Undo,
    Cause::CompensationEnded,
    Cause::ExecutionGone,
    Cause::End,
    Cause::StepResumed,
    Cause::Notified,
];

/// What an audit trail is written against: the rest of its record.
pub struct Context<'a> {
    /// The record's `created_at`.
    pub base: OffsetDateTime,
    pub applied: &'a [AppliedInput],
    pub start_events: &'a [EventId],
}

impl Context<'_> {
    fn reference(&self, id: &str) -> Value {
        if let Some(i) = self.applied.iter().position(|a| a.id.as_str() == id) {
            return json!(i);
        }
        match self.start_events.iter().position(|e| e.as_str() == id) {
            Some(j) => json!(-1 - j as i64),
            None => json!(id),
        }
    }

    fn resolve(&self, id: Value) -> Result<Option<Arc<str>>, String> {
        let known = |found: Option<&EventId>| {
            found.map(|e| Some(e.shared())).ok_or_else(|| format!("cause_id {id} refers to no input"))
        };
        match &id {
            Value::Null => Ok(None),
            Value::String(id) => Ok(Some(id.as_str().into())),
            Value::Number(n) => match n.as_i64() {
                Some(i) if i >= 0 => known(self.applied.get(i as usize).map(|a| &a.id)),
                Some(j) => known(usize::try_from(-1 - j).ok().and_then(|j| self.start_events.get(j))),
                None => Err(format!("cause_id {id} is not an index")),
            },
            _ => Err("cause_id is not a string or an index".into()),
        }
    }
}

/// Microseconds, the precision timestamps are stored with, floored as `baton_aws::dynamodb::ts`
/// writes them (before 1970 too).
fn micros(t: OffsetDateTime) -> i128 {
    t.unix_timestamp_nanos().div_euclid(1000)
}

/// What [`micros`] leaves out. New entries have none (the lifecycle keeps microseconds); entries
/// set by other hands keep theirs.
fn sub_micros(t: OffsetDateTime) -> i128 {
    t.unix_timestamp_nanos().rem_euclid(1000)
}

/// The audit trail, compact: its JSON text is what a record item holds (written, or only
/// measured: every record write is).
pub fn history(trail: &[AuditEntry], context: &Context) -> impl Serialize + use<> {
    let mut before = Predicted::start(micros(context.base));
    trail
        .iter()
        .map(|e| {
            let at = micros(e.at);
            let id = e.cause_id.as_deref().map_or(Value::Null, |id| context.reference(id));
            let mut exceptions = Map::new();
            if e.from != before.to {
                exceptions.insert("from".into(), json!(e.from));
            }
            if predicted_to(e.from.as_deref(), e.cause).as_deref() != Some(&*e.to) {
                exceptions.insert("to".into(), json!(e.to));
            }
            if e.generation != before.generation {
                exceptions.insert("generation".into(), json!(e.generation));
            }
            if sub_micros(e.at) != 0 {
                exceptions.insert("ns".into(), json!(sub_micros(e.at) as u64));
            }
            if Some(e.version) != before.version.checked_add(1) {
                exceptions.insert("version".into(), json!(e.version));
            }
            let entry = WrittenEntry { after: at - before.at, cause: code(e.cause), id, exceptions };
            before = Predicted::after(e);
            entry
        })
        .collect::<Vec<WrittenEntry>>()
}

/// One audit entry as [`history`] gives it, serialised straight to text (each record
/// write is measured, and its trail was built as a tree of JSON values first).
struct WrittenEntry {
    /// Microseconds after the entry before.
    after: i128,
    cause: u8,
    id: Value,
    exceptions: Map<String, Value>,
}

impl Serialize for WrittenEntry {
    /// `[after, cause, id, exceptions]`, a trailing `null` id and empty exceptions left off.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let with_exceptions = !self.exceptions.is_empty();
        let with_id = with_exceptions || !self.id.is_null();
        let mut entry = s.serialize_seq(Some(2 + usize::from(with_id) + usize::from(with_exceptions)))?;
        entry.serialize_element(&self.after)?;
        entry.serialize_element(&self.cause)?;
        if with_id {
            entry.serialize_element(&self.id)?;
        }
        if with_exceptions {
            entry.serialize_element(&self.exceptions)?;
        }
        entry.end()
    }
}

/// Reads an audit trail in either form. The error names the entry and what is wrong with it.
pub fn decode_history(text: &str, context: &Context) -> Result<Vec<AuditEntry>, String> {
    let entries: Vec<Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut before = Predicted::start(micros(context.base));
    let mut history = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let decoded = match entry {
            Value::Array(fields) => before.decode(fields, context),
            other => Err(format!("{other} is not an array")),
        }
        .map_err(|e| format!("entry {i}: {e}"))?;
        before = Predicted::after(&decoded);
        history.push(decoded);
    }
    Ok(history)
}

/// The state a cause usually leads to from `from`; `None` when there is no usual one.
fn predicted_to(from: Option<&str>, cause: Cause) -> Option<String> {
    let step = |kind: Kind| {
        from?.strip_prefix(kind.as_str())?.strip_prefix('{')?.strip_suffix('}')?.parse::<u32>().ok()
    };
    let to = match cause {
        Cause::Start | Cause::Restart => State::Pending,
        Cause::StepReady if from == Some(Kind::Pending.as_str()) => State::Waiting { step: 0 },
        Cause::StepReady => State::Waiting { step: step(Kind::Advancing)?.checked_add(1)? },
        Cause::Merge
        | Cause::BranchReady
        | Cause::BranchResumed
        | Cause::AttemptFailed
        | Cause::AttemptOpened
        | Cause::Notified => State::Waiting { step: step(Kind::Waiting)? },
        Cause::BranchDone | Cause::StepResumed => return from.map(str::to_owned),
        Cause::Complete | Cause::FailStep => State::Advancing { step: step(Kind::Waiting)? },
        Cause::ReportSucceeded => State::Succeeded,
        Cause::ReportFailed => State::Failed,
        Cause::ReportTimedOut => State::TimedOut,
        Cause::Cancel => State::Cancelled,
        Cause::Compensate | Cause::Undo => State::Compensating,
        Cause::ExecutionGone => State::Stranded { at: None },
        // Compensated, compensation_failed, or how the run ended: written out.
        Cause::CompensationEnded | Cause::End => return None,
    };
    Some(to.to_string())
}

/// What the entry before says about the next one.
struct Predicted {
    at: i128,
    to: Option<Arc<str>>,
    generation: u32,
    version: u64,
}

impl Predicted {
    fn start(at: i128) -> Predicted {
        Predicted { at, to: None, generation: 1, version: 0 }
    }

    fn after(e: &AuditEntry) -> Predicted {
        Predicted { at: micros(e.at), to: Some(e.to.clone()), generation: e.generation, version: e.version }
    }

    fn decode(&self, fields: Vec<Value>, context: &Context) -> Result<AuditEntry, String> {
        let mut fields = fields.into_iter();
        let delta = fields.next().and_then(|v| v.as_i64()).ok_or("the time is missing or not an integer")?;
        let cause = fields.next().ok_or("the cause is missing")?;
        let cause = cause
            .as_u64()
            .and_then(|i| CAUSES.get(usize::try_from(i).ok()?))
            .copied()
            .ok_or_else(|| format!("the cause {cause} is not one of 0..{}", CAUSES.len()))?;
        let cause_id = context.resolve(fields.next().unwrap_or(Value::Null))?;
        let exceptions = match fields.next() {
            None => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err("the exceptions are not an object".into()),
        };
        let text = |name: &str| -> Result<Option<Option<Arc<str>>>, String> {
            match exceptions.get(name) {
                None => Ok(None),
                Some(Value::Null) => Ok(Some(None)),
                Some(Value::String(s)) => Ok(Some(Some(s.as_str().into()))),
                Some(_) => Err(format!("{name} is not a string")),
            }
        };
        let number = |name: &str| -> Result<Option<u64>, String> {
            exceptions.get(name).map(|v| v.as_u64().ok_or(format!("{name} is not a number"))).transpose()
        };
        let ns = number("ns")?.unwrap_or(0);
        let at =
            OffsetDateTime::from_unix_timestamp_nanos((self.at + i128::from(delta)) * 1000 + i128::from(ns))
                .map_err(|e| format!("the time: {e}"))?;
        let from = text("from")?.unwrap_or_else(|| self.to.clone());
        let to = match text("to")? {
            Some(to) => to.ok_or("to is not a string")?,
            None => {
                predicted_to(from.as_deref(), cause).ok_or("to is missing and cannot be predicted")?.into()
            }
        };
        let generation = match number("generation")? {
            Some(g) => u32::try_from(g).map_err(|_| "generation is out of range".to_owned())?,
            None => self.generation,
        };
        let version = match number("version")? {
            Some(v) => v,
            None => self.version.checked_add(1).ok_or("version is missing and cannot be predicted")?,
        };
        Ok(AuditEntry { at, generation, from, to, cause, cause_id, version })
    }
}

/// The applied inputs, compact: as [`history`], their JSON text is what a record item holds.
pub fn applied(inputs: &[AppliedInput]) -> impl Serialize + use<'_> {
    inputs
        .iter()
        .map(|a| {
            let source: u8 = match a.source {
                Source::Callback => 0,
                Source::Event => 1,
            };
            (&a.id, &a.hash, a.step, a.generation, source)
        })
        .collect::<Vec<_>>()
}

/// Reads applied inputs back.
pub fn decode_applied(text: &str) -> Result<Vec<AppliedInput>, String> {
    /// `[id, hash, step, generation, source]`; the source is 0 for a callback, 1 for an event.
    #[derive(Deserialize)]
    struct Compact(EventId, String, u32, u32, u8);

    let entries: Vec<Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let decode = |entry: Value| {
        let Compact(id, hash, step, generation, source) =
            serde_json::from_value(entry).map_err(|e| e.to_string())?;
        let source = match source {
            0 => Source::Callback,
            1 => Source::Event,
            n => return Err(format!("source {n} is neither 0 (callback) nor 1 (event)")),
        };
        Ok(AppliedInput { id, hash, step, generation, source })
    };
    let entries = entries.into_iter().enumerate();
    entries.map(|(i, entry)| decode(entry).map_err(|e| format!("applied input {i}: {e}"))).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use time::macros::datetime;

    use super::*;

    const CREATED: OffsetDateTime = datetime!(2026-12-01 09:00:00.000001 UTC);

    /// The text a record item holds for its trail.
    fn encode_history(trail: &[AuditEntry], context: &Context) -> String {
        serde_json::to_string(&history(trail, context)).unwrap()
    }

    fn encode_applied(inputs: &[AppliedInput]) -> String {
        serde_json::to_string(&super::applied(inputs)).unwrap()
    }

    fn entry(
        at_us: i64,
        from: Option<&str>,
        to: &str,
        cause: Cause,
        id: Option<&str>,
        generation: u32,
        version: u64,
    ) -> AuditEntry {
        AuditEntry {
            at: CREATED + time::Duration::microseconds(at_us),
            generation,
            from: from.map(Into::into),
            to: to.into(),
            cause,
            cause_id: id.map(Into::into),
            version,
        }
    }

    fn applied(id: &str) -> AppliedInput {
        AppliedInput {
            id: EventId::parse(id).unwrap(),
            hash: "ab".into(),
            step: 0,
            generation: 1,
            source: Source::Callback,
        }
    }

    fn round_trip(trail: &[AuditEntry], context: &Context) -> String {
        let text = encode_history(trail, context);
        assert_eq!(decode_history(&text, context).unwrap(), trail, "{text}");
        text
    }

    #[test]
    fn a_trail_on_the_usual_path_keeps_only_times_causes_and_references_to_its_inputs() {
        let trail = [
            entry(0, None, "pending", Cause::Start, Some("evt-1"), 1, 1),
            entry(1500, Some("pending"), "waiting{0}", Cause::StepReady, None, 1, 2),
            entry(2500, Some("waiting{0}"), "advancing{0}", Cause::Complete, Some("cb-\"1\""), 1, 3),
            entry(2600, Some("advancing{0}"), "waiting{1}", Cause::StepReady, None, 1, 4),
            entry(2700, Some("waiting{1}"), "waiting{1}", Cause::Merge, Some("not remembered"), 1, 5),
        ];
        let inputs = [applied("cb-0"), applied("cb-\"1\"")];
        let starts = [EventId::parse("evt-0").unwrap(), EventId::parse("evt-1").unwrap()];
        let context = Context { base: CREATED, applied: &inputs, start_events: &starts };
        assert_eq!(
            round_trip(&trail, &context),
            r#"[[0,0,-2],[1500,2],[1000,4,1],[100,2],[100,3,"not remembered"]]"#
        );
    }

    #[test]
    fn a_restart_a_cut_trail_and_an_unusual_state_carry_what_cannot_be_predicted() {
        let trail = [
            entry(10, Some("advancing{1}"), "succeeded", Cause::ReportSucceeded, None, 1, 7),
            entry(20, Some("succeeded"), "pending", Cause::Restart, Some("evt-2"), 2, 8),
            entry(30, Some("pending"), "waiting{4}", Cause::StepReady, None, 2, 9),
        ];
        let context = Context { base: CREATED, applied: &[], start_events: &[] };
        assert_eq!(
            round_trip(&trail, &context),
            r#"[[10,6,null,{"from":"advancing{1}","version":7}],[10,1,"evt-2",{"generation":2}],[10,2,null,{"to":"waiting{4}"}]]"#
        );
    }

    #[test]
    fn edges_read_back_too_a_base_before_1970_and_the_last_step_number() {
        let base = OffsetDateTime::UNIX_EPOCH - time::Duration::nanoseconds(500);
        let context = Context { base, applied: &[], start_events: &[] };
        let trail = [AuditEntry {
            at: OffsetDateTime::UNIX_EPOCH - time::Duration::nanoseconds(1_500),
            generation: 1,
            from: Some("advancing{4294967295}".into()),
            to: "waiting{0}".into(),
            cause: Cause::StepReady,
            cause_id: None,
            version: 1,
        }];
        round_trip(&trail, &context);
    }

    #[test]
    fn a_damaged_trail_names_the_entry_and_what_is_wrong() {
        let context = Context { base: CREATED, applied: &[], start_events: &[] };
        let err = |text: &str| decode_history(text, &context).unwrap_err();
        assert_eq!(err(r#"[[0,0],[5,22]]"#), "entry 1: the cause 22 is not one of 0..22");
        assert_eq!(err(r#"[["0",0]]"#), "entry 0: the time is missing or not an integer");
        assert_eq!(err(r#"[[0,0,3]]"#), "entry 0: cause_id 3 refers to no input");
        assert_eq!(err(r#"[[0,3]]"#), "entry 0: to is missing and cannot be predicted");
        assert!(
            err(r#"[{"at":"2026-12-01T09:00:00Z"}]"#).starts_with("entry 0: {"),
            "an object is not an entry"
        );
        let err = decode_applied(r#"[["cb-1"]]"#).unwrap_err();
        assert!(err.starts_with("applied input 0:"), "{err}");
    }

    fn causes() -> impl Strategy<Value = Cause> {
        prop::sample::select(CAUSES.to_vec())
    }

    #[test]
    fn every_cause_reads_back_from_its_number() {
        for (i, cause) in CAUSES.into_iter().enumerate() {
            assert_eq!(usize::from(code(cause)), i, "{cause:?}");
        }
    }

    fn ids() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "-3", "0", "é\"\\"]).prop_map(str::to_owned)
    }

    fn entries() -> impl Strategy<Value = AuditEntry> {
        let state = prop::sample::select(vec![
            "pending",
            "waiting{0}",
            "waiting{1}",
            "advancing{0}",
            "advancing{3}",
            "succeeded",
            "waiting{x}",
        ]);
        (
            -1_000_000i64..100_000_000_000,
            prop::option::of(state.clone()),
            state,
            causes(),
            prop::option::of(ids()),
            prop_oneof![1u32..4, Just(u32::MAX)],
            prop_oneof![0u64..12, Just(u64::MAX)],
        )
            .prop_map(|(at, from, to, cause, id, generation, version)| {
                entry(at, from, to, cause, id.as_deref(), generation, version)
            })
            .prop_flat_map(|e| {
                // Times set by other hands may have nanoseconds.
                (Just(e), prop_oneof![Just(0i64), 1i64..1000])
                    .prop_map(|(e, ns)| AuditEntry { at: e.at + time::Duration::nanoseconds(ns), ..e })
            })
    }

    proptest! {
        #[test]
        fn any_trail_and_any_applied_list_read_back_as_written(
            trail in prop::collection::vec(entries(), 0..12),
            inputs in prop::collection::vec(
                (
                    ids(),
                    "[0-9a-f]{0,64}",
                    0u32..50,
                    1u32..5,
                    prop::bool::ANY,
                ),
                0..4,
            ),
            starts in prop::collection::vec(ids(), 0..3),
        ) {
            let inputs: Vec<AppliedInput> = inputs
                .into_iter()
                .map(|(id, hash, step, generation, event)| AppliedInput {
                    id: EventId::parse(&id).unwrap(),
                    hash,
                    step,
                    generation,
                    source: if event { Source::Event } else { Source::Callback },
                })
                .collect();
            prop_assert_eq!(decode_applied(&encode_applied(&inputs)).unwrap(), inputs.clone());
            let starts: Vec<EventId> = starts.iter().map(|s| EventId::parse(s).unwrap()).collect();
            let context = Context { base: CREATED, applied: &inputs, start_events: &starts };
            prop_assert_eq!(decode_history(&encode_history(&trail, &context), &context).unwrap(), trail);
        }
    }
}
