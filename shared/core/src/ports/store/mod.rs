//! The `WorkflowStore` port: where records, tasks, receipts, buffered inputs and the ledger live.
//!
//! Two implementations keep the same semantics, proven by one contract suite
//! (`tests/tests/store_contract.rs`): `baton_aws::dynamodb::DynamoDbStore` (one table, see
//! docs/DATA_MODEL.md) and [`memory::MemoryStore`] (for unit and simulation tests).
//!
//! Rules every implementation keeps:
//! - A record changes only through [`WorkflowStore::apply`], whose condition is derived from the
//!   lifecycle's transition table ([`condition_for`]) plus the version `decide` saw. A lost race
//!   is an outcome, [`Applied::Lost`], carrying the winner's record, never an error.
//! - Tasks, receipts, inbox entries and ledger entries are put-if-absent. A second put returns
//!   what is stored ([`Claim::Exists`]), so retries are idempotent and conflicts are visible.
//! - Receipts, inbox entries and ledger entries carry an expiry (`expires_at`, DynamoDB TTL).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::domain::error::Classified;
use crate::domain::ids::{CorrelationKey, EventId, WorkflowName};
use crate::domain::lifecycle::{Cause, IgnoreReason, Kind, Record, Source, Write, allowed_prior};

pub mod compact;
pub mod limits;
pub mod memory;

/// How long an inbox entry is kept after its buffer expired, before DynamoDB's TTL deletes it.
/// TTL deletes at some unspecified time after the expiry, possibly before the sweeper settles
/// the entry: without this margin, an expired input could vanish without its `buffer_expired`
/// ledger entry (found by the simulation). Settled entries stay for `baton trace` meanwhile.
pub const INBOX_RETENTION: time::Duration = time::Duration::days(30);

/// The result of a conditional record write.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The write won.
    Written,
    /// Another writer got there first. `current` is the record as it stands (`None`: absent),
    /// returned by the failed write itself, so the caller can decide again without a read.
    Lost { current: Option<Box<Record>> },
}

/// The result of a put-if-absent.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim<T> {
    /// This put created the item.
    Acquired,
    /// The item was already there; this is what is stored.
    Exists(T),
}

/// The condition a record write must meet: the prior states the transition table allows for
/// this (target, cause), and the version `decide` saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The record must not exist.
    Absent,
    /// The record's state must be one of `states` and its version exactly `version`.
    StateAndVersion { states: Vec<Kind>, version: u64 },
}

/// Derives a write's condition from [`crate::domain::lifecycle::TRANSITIONS`].
pub fn condition_for(write: &Write) -> Result<Condition, StoreError> {
    let prior = allowed_prior(write.to.state.kind(), write.cause);
    match (write.from, write.expected_version) {
        (None, None) if prior.contains(&None) => Ok(Condition::Absent),
        (Some(from), Some(version)) if prior.contains(&Some(from.kind())) => {
            Ok(Condition::StateAndVersion { states: prior.into_iter().flatten().collect(), version })
        }
        _ => Err(StoreError::NotInTable {
            from: write.from.map(|s| s.to_string()),
            to: write.to.state.to_string(),
            cause: write.cause,
        }),
    }
}

impl Condition {
    /// Does `current` satisfy the condition? The in-memory store's whole check, and the
    /// reference the DynamoDB condition expression is tested against.
    pub fn holds(&self, current: Option<&Record>) -> bool {
        match (self, current) {
            (Condition::Absent, None) => true,
            (Condition::StateAndVersion { states, version }, Some(r)) => {
                states.contains(&r.state.kind())
                    && (r.version == *version
                        || crate::mutants::active(crate::mutants::Mutation::NoVersionCondition))
            }
            _ => false,
        }
    }
}

/// The operator-facing work for one (workflow, key, generation, step).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    pub generation: u32,
    pub step: u32,
    pub step_name: String,
    /// Stable id: `<workflow>/<key>/g<generation>/<step name>`, then `/undo` for a
    /// compensation, and `/a<attempt>` from the second attempt. The published CloudEvent's id.
    pub id: String,
    /// The attempt it is for (1: the first).
    pub attempt: u32,
    /// The error that failed the attempt before (`error: cause`), from the second attempt on.
    pub previous_error: Option<String>,
    pub title: String,
    pub queue: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Set once the `baton.task.created` event went out.
    pub published: bool,
    /// A step's task, or the task that undoes a completed step, or a reminder of a step's task.
    #[serde(default, skip_serializing_if = "TaskKind::is_step")]
    pub kind: TaskKind,
    /// A reminder's count, or an escalation's level (1 for the first); 0 for a task.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub notice: u32,
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a task asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// The work of a step (`baton.task.created`).
    #[default]
    Step,
    /// The compensation of a completed step (`baton.compensation.requested`).
    Compensation,
    /// A reminder of a step's task still waiting (`baton.task.reminder`): never stored, published
    /// once when the sweeper claims it.
    Reminder,
    /// The step's task given to an escalation level's queue as well (`baton.task.escalated`):
    /// likewise never stored, published once.
    Escalation,
}

impl TaskKind {
    pub fn is_step(&self) -> bool {
        *self == TaskKind::Step
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Step => "step",
            TaskKind::Compensation => "compensation",
            TaskKind::Reminder => "reminder",
            TaskKind::Escalation => "escalation",
        }
    }
}

impl Task {
    pub fn task_id(
        workflow: &WorkflowName,
        key: &CorrelationKey,
        generation: u32,
        step_name: &str,
        attempt: u32,
        kind: TaskKind,
    ) -> String {
        let undo = match kind {
            TaskKind::Step | TaskKind::Reminder | TaskKind::Escalation => "",
            TaskKind::Compensation => "/undo",
        };
        match attempt {
            0 | 1 => format!("{workflow}/{key}/g{generation}/{step_name}{undo}"),
            n => format!("{workflow}/{key}/g{generation}/{step_name}{undo}/a{n}"),
        }
    }
}

/// Where an idempotency receipt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    /// Written before the effect; a retry that finds it re-runs the (idempotent) apply.
    Pending,
    /// The effect is done; `answer` is what the first caller was told.
    Done,
}

/// An idempotency receipt for one input id (a callback's `webhook-id`, or an event id), scoped
/// to the (workflow, key) the input targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// What the callback answers within the record: its step's name, with `/undo` for a
    /// compensation's acknowledgement ([`Receipt::target_of`]). Receipts are kept per target, so
    /// a sender scoped to one step cannot take another step's task ids (which are predictable)
    /// and have that step's worker refused `idempotency_key_reused` (found by review).
    pub target: String,
    pub id: EventId,
    /// Hash of the input's payload: the same id with another hash is a reused key.
    pub hash: String,
    pub status: ReceiptStatus,
    /// The answer given for it, once done.
    pub answer: Option<Value>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// How many times the same input came again once done and was answered from this receipt
    /// (a sender's retry, a duplicate send), and when last: what lets an operator see a
    /// duplicate in the trace, not only in the logs.
    #[serde(default)]
    pub repeats: u32,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub last_repeat_at: Option<OffsetDateTime>,
    /// The attempt that took a pending receipt over after an earlier one stopped without
    /// finishing (`None`: the attempt that created it, at `created_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Hold>,
}

impl Receipt {
    /// The target of a callback for `step` (its name), or of its compensation's acknowledgement.
    pub fn target_of(step: &str, compensation: bool) -> String {
        if compensation { format!("{step}/undo") } else { step.to_owned() }
    }

    /// Since when its current attempt has held it.
    pub fn held_since(&self) -> OffsetDateTime {
        self.lease.as_ref().map_or(self.created_at, |l| l.at)
    }
}

/// Where a buffered input stands. `buffered`, `draining` and `expiring` are open (the entry is
/// still due for the sweeper); `applied`, `expired` and `ignored` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxStatus {
    Buffered,
    /// A drain has taken it to apply it ([`InboxClaim::Drain`]).
    Draining,
    /// The sweeper has taken it, past its expiry, to expire it ([`InboxClaim::Expire`]).
    Expiring,
    Applied,
    Expired,
    /// Drained, but the lifecycle ignored or refused it; its ledger entry says why.
    Ignored,
}

impl InboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InboxStatus::Buffered => "buffered",
            InboxStatus::Draining => "draining",
            InboxStatus::Expiring => "expiring",
            InboxStatus::Applied => "applied",
            InboxStatus::Expired => "expired",
            InboxStatus::Ignored => "ignored",
        }
    }

    /// Settled for good: applied, expired or ignored.
    pub fn is_final(self) -> bool {
        matches!(self, InboxStatus::Applied | InboxStatus::Expired | InboxStatus::Ignored)
    }
}

/// Who may decide a buffered entry's fate. A drain and the sweeper each take the entry before
/// they act on it, so one input never ends both applied and ledgered expired:
///
/// ```text
///  drain:    record waits (its own write, or a read) ─► list inbox ─► claim Drain  ─► apply ─► settle
///  sweeper:  claim Expire ─► consistent read of record ─► waits? Release, drain : ledger ─► settle
/// ```
///
/// A drain that listed the entry before the sweeper's claim did so after its step waited, so
/// the sweeper's read sees the step waiting (or past it, the input applied) and gives the entry
/// back; a drain that lists it after sees `expiring` and leaves it. Drains share their claim
/// (applying through the record is idempotent). The expiry is one sweep's at a time: two sweeps
/// that read the record at different moments could decide differently, so another sweep takes
/// it over only once the holder's lease has run out ([`EXPIRY_LEASE`], past any sweep's run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxClaim {
    /// `buffered | draining` → `draining`, into that (generation, step), taken at that time.
    Drain(DrainTarget, OffsetDateTime),
    /// `draining` → `buffered`: the drain found its step no longer waiting.
    Undrain,
    /// `buffered` past its expiry, or `expiring` held by this sweep or past its lease →
    /// `expiring`, held.
    Expire(Hold),
    /// `expiring` held by this sweep → `buffered`: the step waits after all.
    Release(Hold),
}

/// Where a drain applies an entry: the generation and the step's index in the record's own
/// config version. Kept on the entry while it drains, so that a drain that applied it and died
/// before settling it is recognised exactly (its applied input is at that index of that
/// generation, whatever the entry's own version numbers the step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainTarget {
    pub generation: u32,
    pub step: u32,
}

use crate::limits::EXPIRY_LEASE;

/// Who holds something for a while, and since when: a sweep an entry's expiry
/// ([`InboxClaim::Expire`]), a callback attempt a pending receipt ([`WorkflowStore::take_over_receipt`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The holder's own id (a write id).
    pub by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl InboxClaim {
    /// The status it moves the entry to.
    pub fn to(&self) -> InboxStatus {
        match self {
            InboxClaim::Drain(..) => InboxStatus::Draining,
            InboxClaim::Undrain | InboxClaim::Release(_) => InboxStatus::Buffered,
            InboxClaim::Expire(_) => InboxStatus::Expiring,
        }
    }

    /// Whether the claim may be taken on `entry` as it stands: the rule each store's condition
    /// enforces.
    pub fn allows(&self, entry: &InboxEntry) -> bool {
        use InboxStatus::*;
        let held_by = |hold: &Hold| entry.expiry_hold.as_ref().is_some_and(|h| h.by == hold.by);
        match (self, entry.status) {
            (InboxClaim::Drain(..), Buffered | Draining) | (InboxClaim::Undrain, Draining) => true,
            // Rule: a buffered entry is expired only past its expiry, whoever listed it early (a
            // drain's lease, then a give-back before the sweep's claim, or seen by a lagging
            // index: found by attack).
            (InboxClaim::Expire(hold), Buffered) => entry.expires_at <= hold.at,
            (InboxClaim::Expire(hold), Expiring) => {
                held_by(hold) || entry.expiry_hold.as_ref().is_none_or(|h| h.at + EXPIRY_LEASE <= hold.at)
            }
            (InboxClaim::Release(hold), Expiring) => held_by(hold),
            _ => false,
        }
    }

    /// `entry` as the claim leaves it.
    pub fn apply(&self, entry: &InboxEntry) -> InboxEntry {
        let (expiry_hold, drain_target, drained_at) = match self {
            InboxClaim::Expire(hold) => (Some(hold.clone()), entry.drain_target, entry.drained_at),
            InboxClaim::Release(_) => (None, entry.drain_target, entry.drained_at),
            InboxClaim::Drain(target, at) => (entry.expiry_hold.clone(), Some(*target), Some(*at)),
            InboxClaim::Undrain => (entry.expiry_hold.clone(), None, None),
        };
        InboxEntry { status: self.to(), expiry_hold, drain_target, drained_at, ..entry.clone() }
    }

    /// Whether the store's answer leaves the entry claimed as asked: moved now, or found so (a
    /// drain sharing the claim, or this call's own write whose answer was lost and retried).
    pub fn held(&self, answer: &Claim<InboxEntry>) -> bool {
        match (answer, self) {
            (Claim::Acquired, _) => true,
            (Claim::Exists(e), InboxClaim::Expire(hold)) => {
                e.status == InboxStatus::Expiring && e.expiry_hold.as_ref().is_some_and(|h| h.by == hold.by)
            }
            (Claim::Exists(e), claim) => e.status == claim.to(),
        }
    }
}

/// The order both stores return a trace in: tasks by (generation, step), receipts and ledger
/// entries by time, the inbox by (step, arrival).
pub fn sort_trace(trace: &mut Trace) {
    trace.tasks.sort_by_key(|t| (t.generation, t.step, t.attempt));
    trace.receipts.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    trace.inbox.sort_by(|a, b| (a.step, a.arrived_at, &a.id).cmp(&(b.step, b.arrived_at, &b.id)));
    trace.ledger.sort_by(|a, b| (a.at, &a.input_id).cmp(&(b.at, &b.input_id)));
}

/// How the store that keeps items measures them: each kind of item is held to
/// [`limits::MAX_ITEM_BYTES`] by these sizes, and the engine trims a record's oldest audit entries
/// to stay under it. The wiring gives them to the engine; the DynamoDB adapter supplies
/// DynamoDB's rules (`baton_aws::dynamodb::ITEM_SIZES`), which the store contract and the
/// simulation also hold the in-memory store to.
#[derive(Debug, Clone, Copy)]
pub struct ItemSizes {
    /// At least the record's size, cheap to compute: a record under the limit by it is not
    /// measured.
    pub record_bound: fn(&Record) -> usize,
    /// The record's size as the store writes it.
    pub record: fn(&Record) -> usize,
    pub task: fn(&Task) -> usize,
    pub receipt: fn(&Receipt) -> usize,
    pub inbox: fn(&InboxEntry) -> usize,
    pub ledger: fn(&LedgerEntry) -> usize,
}

impl ItemSizes {
    /// Sizes without a store's layout, for unit tests of the use cases and the in-memory
    /// store's default: a record by [`limits::record_size_bound`] (from above: it counts each byte
    /// of text as six, so a record is refused with about a sixth of the text DynamoDB takes),
    /// every other item by its JSON and 1 KB of attributes (near DynamoDB's size). What must
    /// hold to DynamoDB's limits exactly (the store contract, the simulation) is given
    /// `baton_aws::dynamodb::ITEM_SIZES`.
    pub const ESTIMATE: ItemSizes = ItemSizes {
        record_bound: limits::record_size_bound,
        record: limits::record_size_bound,
        task: |t| estimate(t),
        receipt: |r| estimate(r),
        inbox: |e| estimate(e),
        ledger: |e| estimate(e),
    };
}

fn estimate(item: &impl Serialize) -> usize {
    1024 + limits::json_len(item).unwrap_or(usize::MAX - 1024)
}

/// An input that arrived before its step waited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxEntry {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// The step's index in the config version the input was buffered under.
    pub step: u32,
    /// The step's name: the inbox is kept by name, which every config version agrees on, so an
    /// input buffered under one version (before its record started, or for a later
    /// generation) drains into the step of that name in the version the record runs.
    pub step_name: String,
    /// The config version `step` (and the input's own step) is an index in.
    pub config_version: String,
    pub id: EventId,
    /// The generation the input waits for.
    pub generation: u32,
    /// Arrival time; entries drain in (arrived_at, id) order.
    #[serde(with = "time::serde::rfc3339")]
    pub arrived_at: OffsetDateTime,
    /// The input itself, as the use case stored it.
    pub input: Value,
    pub status: InboxStatus,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// The sweep holding (or that held) its expiry ([`InboxClaim::Expire`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_hold: Option<Hold>,
    /// Where the drain holding it applies it ([`InboxClaim::Drain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_target: Option<DrainTarget>,
    /// When the drain holding it took it ([`InboxClaim::Drain`]): the entry is due for the
    /// sweeper a [`DRAIN_LEASE`](crate::limits::DRAIN_LEASE) later, to finish a drain that died.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    pub drained_at: Option<OffsetDateTime>,
    /// Kept under a key of the callbacks' own ([`limits::inbox_sk`]): a domain event's id and
    /// a callback's `webhook-id` are chosen by different parties, so an early event and an
    /// early callback with one id are two inputs (found by review: the second was refused as
    /// a reuse of the first's id). `false` for events.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub callback_key: bool,
}

impl InboxEntry {
    /// When the sweeper is due to look at it: its expiry, or sooner while a drain holds it, once
    /// the drain's lease has run out (a drain that died is finished there).
    pub fn due_at(&self) -> OffsetDateTime {
        match (self.status, self.drained_at) {
            (InboxStatus::Draining, Some(at)) => self.expires_at.min(at + crate::limits::DRAIN_LEASE),
            _ => self.expires_at,
        }
    }

    /// Where its input came from, as the input says (`None`: not a step input).
    pub fn source(&self) -> Option<Source> {
        Source::deserialize(self.input.get("source")?).ok()
    }

    /// Whether `other` is this entry: the same id from the same source.
    pub fn same_input(&self, other: &InboxEntry) -> bool {
        self.id == other.id && self.source() == other.source()
    }
}

/// The partition of the registered config versions.
pub const CONFIG_PK: &str = "CONFIG";

/// A config version as the functions registered it in the table at cold start: the deployed
/// configs, readable by version after later deploys (`baton rollout plan` reads the newest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredConfig {
    pub version: String,
    /// The config's canonical form; `Config::parse` reads it back.
    pub canonical: String,
    /// When a function first registered it.
    #[serde(with = "time::serde::rfc3339")]
    pub registered_at: OffsetDateTime,
    /// When a function last started on it (each cold start registers again): the deployed
    /// version is the one started last, which after a rollback is an older one.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
}

/// An input that was ignored, with its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// The id of the ignored input (for inputs without one, a derived id such as
    /// `finished/g1/timed_out`). With `reason`, it makes the entry idempotent.
    pub input_id: String,
    pub reason: IgnoreReason,
    pub generation: Option<u32>,
    /// The record's state when it was ignored.
    pub state: Option<String>,
    /// What the input was: its kind and payload summary.
    pub detail: Value,
    /// The config version the input's step is an index in. `None` only for a callback refused
    /// as a reuse of its `webhook-id` when its receipt was claimed
    /// ([`IgnoreReason::IdempotencyKeyReused`] from the callback use case): it is refused before
    /// it is read as an input, and its `detail` is the body as sent, which names its step by
    /// name, not by an index in any version. Every other writer (the engine's ledger, the
    /// sweeper's expiry) sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// The most of an ignored input a ledger entry keeps whole, as JSON. A key's ledger holds an
/// entry per (reason, input id), so without a bound one sender could grow it (and every trace
/// of the key) by a whole input per id it sends (found by review: 32 ignored callbacks grew
/// one key's trace from 15 KB to 1 MB). Callbacks and events under it are kept whole, so
/// `baton replay` can re-deliver them.
pub const LEDGER_DETAIL_KEPT: usize = 4096;

/// The key of a [`LedgerEntry::detail`] that was cut ([`ledger_detail`]).
pub const SUMMARIZED: &str = "summarized";

/// What a ledger entry keeps of an ignored input's `detail` (the serialized input, or a
/// report's summary): the whole of it up to [`LEDGER_DETAIL_KEPT`] bytes of JSON. A larger
/// one keeps what an operator reads (its kind, id, source, step, generation, attempt, its
/// outcome with the `error` and the first [`MAX_ATTEMPT_CAUSE_CHARS`] characters of the
/// `cause`, and the payload's hash, `hash`) and, in place of its data, [`SUMMARIZED`]: the
/// size it had (`bytes`) and the limit (`kept_whole_up_to`). Such an entry cannot be
/// re-delivered ([`Summarized::of`]).
///
/// [`MAX_ATTEMPT_CAUSE_CHARS`]: crate::domain::lifecycle::MAX_ATTEMPT_CAUSE_CHARS
pub fn ledger_detail(detail: Value) -> Value {
    let bytes = limits::json_len(&detail).unwrap_or(usize::MAX);
    if bytes <= LEDGER_DETAIL_KEPT {
        return detail;
    }
    let mut kept = match detail {
        Value::Object(mut fields) => {
            fields.remove("data");
            if let Some(Value::Object(outcome)) = fields.get_mut("outcome")
                && let Some(Value::String(cause)) = outcome.get_mut("cause")
            {
                *cause = cause.chars().take(crate::domain::lifecycle::MAX_ATTEMPT_CAUSE_CHARS).collect();
            }
            fields
        }
        _ => serde_json::Map::new(),
    };
    kept.insert(
        SUMMARIZED.into(),
        serde_json::json!({"bytes": bytes, "kept_whole_up_to": LEDGER_DETAIL_KEPT}),
    );
    Value::Object(kept)
}

/// A ledger entry's input kept as its size and hash only ([`ledger_detail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summarized {
    /// The size of the input as it arrived, as JSON.
    pub bytes: u64,
    /// The payload's hash (SHA-256, hex), when the input had one.
    pub hash: Option<String>,
}

impl Summarized {
    /// `None` when `entry` keeps its input whole.
    pub fn of(entry: &LedgerEntry) -> Option<Summarized> {
        let summary = entry.detail.get(SUMMARIZED)?;
        Some(Summarized {
            bytes: summary.get("bytes").and_then(Value::as_u64).unwrap_or(0),
            hash: entry.detail.get("hash").and_then(Value::as_str).map(str::to_owned),
        })
    }
}

/// Everything stored about one (workflow, key).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    pub record: Option<Record>,
    pub tasks: Vec<Task>,
    pub receipts: Vec<Receipt>,
    pub inbox: Vec<InboxEntry>,
    pub ledger: Vec<LedgerEntry>,
}

/// What a record runs and where it stands: what counting live records needs (`baton rollout
/// plan`), without the rest of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHead {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    pub state: crate::domain::lifecycle::State,
    /// The config version its generation runs.
    pub config_version: String,
}

impl RecordHead {
    pub fn of(r: &Record) -> RecordHead {
        RecordHead {
            workflow: r.workflow.clone(),
            key: r.key.clone(),
            state: r.state,
            config_version: r.config_version.clone(),
        }
    }
}

/// The storage port. Every method is one request (or a paginated query) to the backing store.
#[async_trait::async_trait]
pub trait WorkflowStore: Send + Sync {
    /// The record, read strongly consistently. Shared: a store that keeps records in memory
    /// hands out the one it holds, and a caller that changes it decides a new one anyway.
    async fn load(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
    ) -> Result<Option<Arc<Record>>, StoreError>;

    /// Carries out a decision's write under its [`condition_for`].
    async fn apply(&self, write: &Write) -> Result<Applied, StoreError>;

    /// Creates the task if no task exists for its (workflow, key, generation, step).
    async fn put_task(&self, task: &Task) -> Result<Claim<Task>, StoreError>;

    /// Records that the task's event was published. Idempotent.
    async fn mark_task_published(&self, task: &Task) -> Result<(), StoreError>;

    /// Writes the receipt if none exists for its (workflow, key, id); else returns the stored one.
    async fn put_receipt(&self, receipt: &Receipt) -> Result<Claim<Receipt>, StoreError>;

    /// Moves a receipt from pending to done with its answer. Idempotent.
    async fn complete_receipt(&self, receipt: &Receipt, answer: Value) -> Result<(), StoreError>;

    /// Takes a pending receipt over for the attempt `hold`, if it is still pending and held as
    /// `stored` (as read) shows it: of two retries that find the same stale receipt, one goes on
    /// and the other sees the fresh lease. `Exists` with the receipt as it stands otherwise (held
    /// by `hold` all the same when this call's own write landed and its answer was lost).
    async fn take_over_receipt(&self, stored: &Receipt, hold: &Hold) -> Result<Claim<Receipt>, StoreError>;

    /// Deletes `receipt` if it is still pending as its own attempt wrote it (never taken over,
    /// created at its `created_at`): that attempt applied nothing and asked its sender to retry,
    /// so the retry starts afresh instead of waiting out the receipt's lease. Otherwise nothing.
    async fn release_receipt(&self, receipt: &Receipt) -> Result<(), StoreError>;

    /// Counts one more repeat of the receipt's input at `at` (`repeats`, `last_repeat_at`). A
    /// receipt gone (expired) is not created again. Not idempotent: a retried call may count
    /// one repeat twice, which only overstates a count an operator reads.
    async fn note_repeat(&self, receipt: &Receipt, at: OffsetDateTime) -> Result<(), StoreError>;

    /// Buffers an input for its step, unless an entry with its (step, id) exists.
    async fn buffer(&self, entry: &InboxEntry) -> Result<Claim<InboxEntry>, StoreError>;

    /// The inbox of the step named `step_name`, strongly consistent, in arrival order, every
    /// status.
    async fn inbox(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        step_name: &str,
    ) -> Result<Vec<InboxEntry>, StoreError>;

    /// Moves an entry from the open status its caller holds (`from`: draining for a drain,
    /// expiring for the sweeper) to `to` (applied, expired or ignored), for good. Exactly one
    /// caller wins; the loser gets the entry as it stands.
    async fn settle(
        &self,
        entry: &InboxEntry,
        from: InboxStatus,
        to: InboxStatus,
    ) -> Result<Claim<InboxEntry>, StoreError>;

    /// Takes `claim` on an entry ([`InboxClaim`]) when [`InboxClaim::allows`] it, keeping it due
    /// for the sweeper; `Exists` with the entry as it stands otherwise ([`InboxClaim::held`]
    /// tells whether it is claimed as asked all the same).
    async fn claim(&self, entry: &InboxEntry, claim: &InboxClaim) -> Result<Claim<InboxEntry>, StoreError>;

    /// Records an ignored input. Idempotent per (input id, reason).
    async fn put_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError>;

    /// Registers `config`: the first registration's `canonical` and `registered_at` stand.
    /// `started`: a function started on it (a cold start), which moves `started_at`; otherwise
    /// (an operator's write, say) `started_at` is set only if the version was never registered,
    /// so the deployed version is not taken for one an operator's checkout carries.
    async fn register_config(&self, config: &RegisteredConfig, started: bool) -> Result<(), StoreError>;

    /// Every registered config version, oldest registration first.
    async fn configs(&self) -> Result<Vec<RegisteredConfig>, StoreError>;

    /// Whether the input `input_id` was ledgered for `reason` (strongly consistent).
    async fn ledgered(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        input_id: &str,
        reason: IgnoreReason,
    ) -> Result<bool, StoreError>;

    /// Everything about one (workflow, key).
    async fn trace(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Result<Trace, StoreError>;

    /// The records on `list` whose due time ([`Record::due_at`]) is at or before `before`,
    /// oldest first, at most `limit`. Shared, as [`Self::load`]'s.
    async fn due(
        &self,
        list: DueList,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError>;

    /// The heads of the records of state `kind` due at or before `before`, on either list,
    /// oldest first, at most `limit`: the same index reads as [`Self::due`], and nothing else (a
    /// task token kept in its own item is not read).
    async fn due_heads(
        &self,
        kind: Kind,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<RecordHead>, StoreError> {
        let mut records = Vec::new();
        for list in DueList::of_state(kind) {
            records.extend(self.due(list, before, limit).await?);
        }
        records.sort_by_key(|r| r.due_at());
        records.truncate(limit);
        Ok(records.iter().map(|r| RecordHead::of(r)).collect())
    }

    /// Open inbox entries (buffered, draining or expiring) that expired at or before `before`, at
    /// most `limit`.
    async fn expired_buffers(
        &self,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError>;

    /// How many records are in each state, counted up to `up_to`: a state holding more says so
    /// ([`Count::MoreThan`]) instead of reading every record it holds. States with none are left
    /// out.
    async fn count_by_state(&self, up_to: u64) -> Result<BTreeMap<Kind, Count>, StoreError>;
}

/// The bound `baton status` and the console count each state up to by default. What a count
/// reads is then bounded by it (DynamoDB: about this many index entries and one more a state,
/// [`BoundedCount`]), not by how many records the table holds (docs/SCALE.md).
pub const COUNT_UP_TO: u64 = 1_000;

/// One of the sweeper's lists in the `by_due` index: the records of a state that owe work at
/// their due time (a start, a resume, a next attempt's task, a compensation's), or those that
/// do not (a deadline only watched; a terminal record, counted). Owed work has a list of its own
/// so that it goes out on time however many records sit past their deadlines with nothing owed
/// (found by review: 100 records whose executions were gone filled the sweeper's batch for good,
/// and no retried step's next attempt went out again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DueList {
    pub kind: Kind,
    pub work: bool,
}

impl DueList {
    /// The list `record` is on.
    pub fn of(record: &Record) -> DueList {
        DueList { kind: record.state.kind(), work: record.owes_work() }
    }

    /// The lists that hold records of state `kind`.
    pub fn of_state(kind: Kind) -> Vec<DueList> {
        let watch = DueList { kind, work: false };
        if kind.may_owe_work() { vec![DueList { kind, work: true }, watch] } else { vec![watch] }
    }

    /// The list's `due_kind` prefix in the index: `work#<state>` or `record#<state>`.
    pub fn prefix(self) -> String {
        let list = if self.work { "work" } else { "record" };
        format!("{list}#{}", self.kind)
    }
}

/// How many records one state holds ([`WorkflowStore::count_by_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Exact(u64),
    /// More than this many: the bound the count stopped at.
    MoreThan(u64),
}

impl Count {
    /// `n` records counted against the bound `up_to`.
    pub fn of(n: u64, up_to: u64) -> Self {
        if n > up_to { Self::MoreThan(up_to) } else { Self::Exact(n) }
    }

    /// The number counted: the exact count, or the bound.
    pub fn counted(self) -> u64 {
        match self {
            Self::Exact(n) | Self::MoreThan(n) => n,
        }
    }
}

/// Counting one state, spread over several index partitions, up to a bound, reading no more than
/// it takes: each round asks every partition that may hold more for an equal share of what is
/// left to read past the bound. Keys hash evenly over the shards, so a large state is decided in
/// the first round, after about the bound and one more entries, however many shards it has.
#[derive(Debug, Clone)]
pub struct BoundedCount {
    up_to: u64,
    counted: Vec<u64>,
    open: Vec<bool>,
}

impl BoundedCount {
    pub fn new(partitions: usize, up_to: u64) -> Self {
        Self { up_to, counted: vec![0; partitions], open: vec![true; partitions] }
    }

    /// The reads of the next round, (partition, at most how many entries), side by side; `None`
    /// once the count is known.
    pub fn round(&self) -> Option<Vec<(usize, u64)>> {
        let total: u64 = self.counted.iter().sum();
        let open: Vec<usize> = (0..self.open.len()).filter(|i| self.open[*i]).collect();
        if total > self.up_to || open.is_empty() {
            return None;
        }
        let share = (self.up_to - total).saturating_add(1).div_ceil(open.len() as u64);
        Some(open.into_iter().map(|i| (i, share)).collect())
    }

    /// Partition `i` answered a read with `read` entries, and `more` when it may hold others.
    pub fn answered(&mut self, i: usize, read: u64, more: bool) {
        self.counted[i] += read;
        self.open[i] = more;
    }

    /// The count of partitions holding `sizes` entries, and how many entries it read: what the
    /// store's rounds of queries would find (the scale model, tests).
    pub fn over(sizes: &[u64], up_to: u64) -> (Count, u64) {
        let mut count = Self::new(sizes.len(), up_to);
        while let Some(reads) = count.round() {
            for (i, limit) in reads {
                let n = limit.min(sizes[i] - count.counted[i]);
                count.answered(i, n, count.counted[i] + n < sizes[i]);
            }
        }
        (count.count(), count.counted.iter().sum())
    }

    pub fn count(&self) -> Count {
        Count::of(self.counted.iter().sum(), self.up_to)
    }
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `decide` produced a write the transition table does not allow: a bug, never retried.
    #[error("refusing a write outside the transition table: {from:?} -> {to} by {cause:?}")]
    NotInTable { from: Option<String>, to: String, cause: Cause },
    /// The backing store throttled the request (rate or throughput): retry later; never a
    /// reason to dead-letter the input.
    #[error("the store throttled {op}")]
    Throttled {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backing store is timing out or failing: retry later.
    #[error("the store is unavailable during {op}")]
    Unavailable {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backing store refused the request: retrying will not help.
    #[error("the store rejected {op}")]
    Rejected {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored item could not be read back: a field is missing or malformed.
    #[error("stored item {pk}/{sk} is corrupt: {problem}")]
    Corrupt { pk: String, sk: String, problem: String },
}

impl Classified for StoreError {
    fn error_type(&self) -> &'static str {
        match self {
            StoreError::NotInTable { .. } => "transition_not_in_table",
            StoreError::Throttled { .. } => "store_throttled",
            StoreError::Unavailable { .. } => "store_unavailable",
            StoreError::Rejected { .. } => "store_rejected",
            StoreError::Corrupt { .. } => "store_corrupt",
        }
    }

    fn retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. } | StoreError::Throttled { .. })
    }

    fn throttled(&self) -> bool {
        matches!(self, StoreError::Throttled { .. })
    }
}

impl StoreError {
    /// Every `error_type` this module can produce (RUNBOOK.md documents each).
    pub const ERROR_TYPES: &[&str] = &[
        "transition_not_in_table",
        "store_throttled",
        "store_unavailable",
        "store_rejected",
        "store_corrupt",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::lifecycle::{Input, OnRestart, Plan, decide};

    #[test]
    fn a_bounded_count_reads_about_the_bound_however_the_entries_spread() {
        // One big partition among empty and small ones: decided past the bound.
        let (count, read) = BoundedCount::over(&[0, 5, 1_000, 3], 10);
        assert_eq!(count, Count::MoreThan(10));
        assert!((11..=14).contains(&read), "the bound and one more, rounded up to a share each: {read}");
        // Exactly at the bound, and one under: exact, every entry read.
        assert_eq!(BoundedCount::over(&[2, 3, 4], 9), (Count::Exact(9), 9));
        assert_eq!(BoundedCount::over(&[2, 3, 4], 8), (Count::MoreThan(8), 9));
        assert_eq!(BoundedCount::over(&[], 8), (Count::Exact(0), 0));
        assert_eq!(BoundedCount::over(&[7], 0), (Count::MoreThan(0), 1));
        // Evenly spread, as hashed keys are: one round, the bound and one more.
        assert_eq!(BoundedCount::over(&[400; 9], 1_000), (Count::MoreThan(1_000), 1_008));
    }

    #[test]
    fn conditions_come_from_the_transition_table() {
        let plan = Plan {
            steps: vec![Default::default()],
            on_restart: OnRestart::AfterTerminal,
            version: String::new(),
        };
        let w = WorkflowName::parse("wf").unwrap();
        let k = CorrelationKey::parse("k").unwrap();
        let now = OffsetDateTime::UNIX_EPOCH;
        let start = decide(&plan, (&w, &k), None, &Input::start(EventId::parse("e").unwrap()), now);
        let write = start.write.unwrap();
        assert_eq!(condition_for(&write).unwrap(), Condition::Absent);
        assert!(Condition::Absent.holds(None));
        assert!(!Condition::Absent.holds(Some(&write.to)));

        let cancel = decide(&plan, (&w, &k), Some(&write.to), &Input::Cancel { reason: "r".into() }, now);
        let cw = cancel.write.unwrap();
        let cond = condition_for(&cw).unwrap();
        assert_eq!(
            cond,
            Condition::StateAndVersion {
                states: vec![Kind::Pending, Kind::Waiting, Kind::Advancing],
                version: 1
            }
        );
        assert!(cond.holds(Some(&write.to)));
        assert!(!cond.holds(Some(&cw.to)), "a cancelled record no longer satisfies it");

        // A hand-made write outside the table is refused before it reaches the store.
        let mut bogus = cw.clone();
        bogus.cause = Cause::ReportSucceeded;
        assert!(matches!(condition_for(&bogus), Err(StoreError::NotInTable { .. })));
    }
}
