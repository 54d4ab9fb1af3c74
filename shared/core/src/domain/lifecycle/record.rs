//! The record: one workflow instance, its phase ([`State`]), the waits of the position it is at,
//! and what it remembers across steps and generations (the inputs applied, the start events
//! seen, the audit trail).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::compensation::Compensation;
use super::input::Source;
use super::table::Cause;
use super::wait::{FailedAttempt, Role, Wait};
use crate::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};

/// How many start-event ids a record remembers, across generations, to recognise redelivery.
pub const REMEMBERED_START_EVENTS: usize = 16;
/// How many applied inputs a record remembers, across steps and generations.
pub const REMEMBERED_INPUTS: usize = 32;
/// How many audit entries a record keeps; older ones are dropped first.
pub const REMEMBERED_TRANSITIONS: usize = 200;

/// The most a step's gathered inputs may take, as JSON: the record is one DynamoDB item of at
/// most 400 KB, and holds them twice while the resume is owed.
pub const MAX_STEP_INPUT_BYTES: usize = 128 * 1024;

/// The longest `error` Step Functions takes with SendTaskFailure or StopExecution, in
/// characters (counted as UTF-16 code units, as AWS's APIs count them: never fewer than the
/// characters). Longer is refused every time, so a failure that carries one could never be
/// delivered: inputs are checked against it at the edge ([`failure_text_fits`]).
pub const MAX_FAILURE_ERROR_CHARS: usize = 256;
/// The longest `cause`, likewise.
pub const MAX_FAILURE_CAUSE_CHARS: usize = 32_768;

/// Whether `text`, the `field` (`error` or `cause`) of a failure, fits what Step Functions
/// takes; if not, a message that names the field and the limit.
pub fn failure_text_fits(field: &str, text: &str, max: usize) -> Result<(), String> {
    // A character is never more UTF-16 units than UTF-8 bytes: a text of at most `max` bytes
    // fits without being counted (every failure decided is checked, many of them long).
    if text.len() <= max {
        return Ok(());
    }
    let len = text.encode_utf16().count();
    if len <= max {
        return Ok(());
    }
    Err(format!("{field} is {len} characters long; Step Functions takes at most {max}"))
}

/// A state without its data: what the transition table and DynamoDB conditions talk about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Pending,
    Waiting,
    Advancing,
    Succeeded,
    /// Finished, with at least one optional parallel branch that did not succeed.
    Degraded,
    Failed,
    TimedOut,
    Cancelled,
    /// The forward run ended (failed, timed out, or cancelled with `--compensate`) and the
    /// completed steps' compensations run, in reverse.
    Compensating,
    /// Every planned compensation was acknowledged.
    Compensated,
    /// A compensation failed on its last attempt or timed out: some steps stay undone.
    CompensationFailed,
    /// Its execution ended without the report baton waits for (stopped outside baton, or its
    /// report lost): nothing will move the record again, and a person ends it (`baton end`).
    Stranded,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Pending,
        Kind::Waiting,
        Kind::Advancing,
        Kind::Succeeded,
        Kind::Degraded,
        Kind::Failed,
        Kind::TimedOut,
        Kind::Cancelled,
        Kind::Compensating,
        Kind::Compensated,
        Kind::CompensationFailed,
        Kind::Stranded,
    ];
    pub const TERMINAL: [Kind; 7] = [
        Kind::Succeeded,
        Kind::Degraded,
        Kind::Failed,
        Kind::TimedOut,
        Kind::Cancelled,
        Kind::Compensated,
        Kind::CompensationFailed,
    ];

    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Whether a record in this state may owe the sweeper work ([`Record::owes_work`]).
    pub fn may_owe_work(self) -> bool {
        matches!(self, Kind::Pending | Kind::Advancing | Kind::Waiting | Kind::Compensating)
    }

    /// The stable name stored in DynamoDB and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pending => "pending",
            Kind::Waiting => "waiting",
            Kind::Advancing => "advancing",
            Kind::Succeeded => "succeeded",
            Kind::Degraded => "degraded",
            Kind::Failed => "failed",
            Kind::TimedOut => "timed_out",
            Kind::Cancelled => "cancelled",
            Kind::Compensating => "compensating",
            Kind::Compensated => "compensated",
            Kind::CompensationFailed => "compensation_failed",
            Kind::Stranded => "stranded",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record's state. `step` is the zero-based index, in the record's config version, of the first
/// step of the position it is at (a step, or a parallel group's first branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Pending,
    /// The execution is parked on the position's waits; inputs are being gathered.
    Waiting {
        step: u32,
    },
    /// The position is decided; what its waits owe Step Functions goes out.
    Advancing {
        step: u32,
    },
    Succeeded,
    Degraded,
    Failed,
    TimedOut,
    Cancelled,
    /// The compensations of [`Record::compensation`] run.
    Compensating,
    Compensated,
    CompensationFailed,
    /// Its execution is gone without its report: a person ends it. `at` is the step it was at
    /// (waiting or advancing), kept for the plan of what stays undone.
    Stranded {
        at: Option<u32>,
    },
}

impl State {
    pub fn kind(self) -> Kind {
        match self {
            State::Pending => Kind::Pending,
            State::Waiting { .. } => Kind::Waiting,
            State::Advancing { .. } => Kind::Advancing,
            State::Succeeded => Kind::Succeeded,
            State::Degraded => Kind::Degraded,
            State::Failed => Kind::Failed,
            State::TimedOut => Kind::TimedOut,
            State::Cancelled => Kind::Cancelled,
            State::Compensating => Kind::Compensating,
            State::Compensated => Kind::Compensated,
            State::CompensationFailed => Kind::CompensationFailed,
            State::Stranded { .. } => Kind::Stranded,
        }
    }

    pub fn step(self) -> Option<u32> {
        match self {
            State::Waiting { step } | State::Advancing { step } => Some(step),
            State::Stranded { at } => at,
            _ => None,
        }
    }

    pub fn is_terminal(self) -> bool {
        self.kind().is_terminal()
    }

    /// Rebuilds a state from its stored parts. `None` when a step is missing or superfluous.
    pub fn from_parts(kind: Kind, step: Option<u32>) -> Option<State> {
        match (kind, step) {
            (Kind::Waiting, Some(step)) => Some(State::Waiting { step }),
            (Kind::Advancing, Some(step)) => Some(State::Advancing { step }),
            (Kind::Pending, None) => Some(State::Pending),
            (Kind::Succeeded, None) => Some(State::Succeeded),
            (Kind::Degraded, None) => Some(State::Degraded),
            (Kind::Failed, None) => Some(State::Failed),
            (Kind::TimedOut, None) => Some(State::TimedOut),
            (Kind::Cancelled, None) => Some(State::Cancelled),
            (Kind::Compensating, None) => Some(State::Compensating),
            (Kind::Compensated, None) => Some(State::Compensated),
            (Kind::CompensationFailed, None) => Some(State::CompensationFailed),
            (Kind::Stranded, at) => Some(State::Stranded { at }),
            _ => None,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Waiting { step } | State::Advancing { step } => {
                write!(f, "{}{{{step}}}", self.kind())
            }
            other => f.write_str(other.kind().as_str()),
        }
    }
}

/// An input that was applied to a step, remembered to recognise redelivery: in a later step,
/// and in a later generation, it is still the same input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedInput {
    pub id: EventId,
    /// The start of the hash of the input's payload ([`payload_fingerprint`]): the same id with
    /// another payload is a conflict.
    pub hash: String,
    /// The step it was applied to.
    pub step: u32,
    /// The generation it was applied in.
    pub generation: u32,
    /// Where it came from: a domain event's id and a callback's `webhook-id` are chosen by
    /// different parties, so the same text from the other source is another input (found by
    /// review: an event refused as a reuse of a callback's id left its step waiting).
    pub source: Source,
}

/// What an applied input keeps of its payload's hash: 64 bits, in 16 hex characters. That tells
/// a redelivery from another payload under the same id with a chance of error of 2^-64 (and a
/// sender who forged a collision would only have its own second input taken as a repeat of its
/// first), at a quarter of the bytes the record spends per step on the whole hash.
pub fn payload_fingerprint(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// The time a `timer: { until: /pointer }` step waits until, as its run's start event held it:
/// read once, when the event started the run (the record keeps no other part of the event), or
/// why it could not be read. A wait reached with an error fails its step at once, with that
/// error, rather than wait for a time nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Until {
    #[serde(rename = "s")]
    pub step: u32,
    /// The pointer it read: a deploy between the start and the step's first report may have
    /// changed it, and then this is not that step's time (found by an attack test).
    #[serde(rename = "p")]
    pub pointer: String,
    #[serde(
        rename = "t",
        with = "time::serde::rfc3339::option",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub at: Option<OffsetDateTime>,
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Until {
    /// The longest error text an [`Until`] keeps: the pointer, and what was found there, cut.
    pub const MAX_ERROR_CHARS: usize = 240;

    /// What the timer of `step` read from `event` (normalised) at `pointer`: an RFC 3339 time,
    /// rounded up to the microsecond the record's waits keep (found by an attack test: a time
    /// of nanoseconds, cut to microseconds in the store, woke 500 ns early).
    pub fn read(step: u32, pointer: &str, event: &serde_json::Value) -> Until {
        use time::format_description::well_known::Rfc3339;
        let found = match event.pointer(pointer) {
            None | Some(serde_json::Value::Null) => Err(format!("the start event has no time at {pointer}")),
            Some(serde_json::Value::String(text)) => OffsetDateTime::parse(text, &Rfc3339).map_err(|e| {
                let shown: String = text.chars().take(64).collect();
                format!("the start event's {pointer} is not an RFC 3339 time ({shown:?}: {e})")
            }),
            Some(other) => Err(format!(
                "the start event's {pointer} is not an RFC 3339 time but {}",
                match other {
                    serde_json::Value::Bool(_) => "a boolean",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::Array(_) => "an array",
                    _ => "an object",
                }
            )),
        };
        let pointer = pointer.to_owned();
        match found {
            Ok(at) => {
                let cut = i64::from(at.nanosecond() % 1_000);
                let at =
                    if cut == 0 { at } else { at.saturating_add(time::Duration::nanoseconds(1_000 - cut)) };
                Until { step, pointer, at: Some(at), error: None }
            }
            Err(e) => Until {
                step,
                pointer,
                at: None,
                error: Some(e.chars().take(Self::MAX_ERROR_CHARS).collect()),
            },
        }
    }
}

/// One transition, as the audit trail records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub generation: u32,
    /// The state before (`None`: the record was created). Text behind an `Arc`, like the
    /// fields below: a record, and its whole trail, is cloned on every write.
    pub from: Option<Arc<str>>,
    pub to: Arc<str>,
    pub cause: Cause,
    /// The id of the input that caused it, when it has one.
    pub cause_id: Option<Arc<str>>,
    /// The record's version after the transition.
    pub version: u64,
}

/// One workflow instance: everything `decide` needs to know about (workflow, key).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// 1 for the first run; each restart after a terminal state adds one.
    pub generation: u32,
    pub state: State,
    /// Incremented by every write; every conditional write checks it.
    pub version: u64,
    /// The waits of the position the record is at: a step's one, or one per branch of a
    /// parallel group, in step order. They stay, ended, in a record that ended there.
    pub waits: Vec<Wait>,
    /// The inputs applied, oldest first, across steps and generations (bounded): a redelivery
    /// is recognised as the input it repeats wherever the record has got to.
    pub applied: Vec<AppliedInput>,
    /// The start events seen, newest last, across generations (bounded).
    pub start_events: Vec<EventId>,
    /// Every transition, oldest first (bounded): the audit trail `baton trace` shows. It lives
    /// in the record so that auditing costs no extra write.
    pub history: Vec<AuditEntry>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    /// Which write produced this version: a fresh id the engine gives each write attempt.
    /// When the answer to a write is lost and the SDK's retry finds the condition failed, the
    /// item returned carries this id if the "winner" was that very write, so the engine counts
    /// it as its own and does not mistake it for a duplicate. `None` until the engine sets it.
    pub write_id: Option<String>,
    /// The config version this generation runs: written at its start, confirmed by its first
    /// step's report.
    pub config_version: String,
    /// The optional branches of this generation that did not succeed, by step: a workflow that
    /// finishes with any ends `degraded`.
    pub missed: Vec<u32>,
    /// The optional branches of this generation whose success Step Functions itself reported
    /// (each optional branch reports how it ended, on its way out of the group). The execution's
    /// success is decided once every optional branch is here or in [`Record::missed`].
    pub confirmed: Vec<u32>,
    /// The steps and branches of this generation whose success baton applied (their senders
    /// were told `applied`) but Step Functions may not have taken: a success that raced its
    /// deadline still did its work, and compensation undoes it (found by review: it was planned
    /// `not_completed`).
    pub succeeded: Vec<u32>,
    /// The compensation of this generation, once it began: its plan, fixed then, and how each
    /// compensation's wait stands. It stays in the record that ended it.
    pub compensation: Option<Compensation>,
    /// The times this generation's `timer: { until }` steps wait until, read from its start
    /// event (empty without such a step).
    pub untils: Vec<Until>,
}

impl Record {
    pub(super) fn next(&self, state: State, now: OffsetDateTime) -> Record {
        Record { state, version: self.version + 1, updated_at: now, write_id: None, ..self.clone() }
    }

    /// The wait of `step` at the position the record is at (a step's, or a branch's).
    pub fn wait(&self, step: u32) -> Option<&Wait> {
        self.waits.iter().find(|w| w.step == step)
    }

    pub(super) fn wait_mut(&mut self, step: u32) -> Option<&mut Wait> {
        self.waits.iter_mut().find(|w| w.step == step)
    }

    /// The one wait of the step the record is at, when its position is a step (not a group).
    pub fn step_wait(&self) -> Option<&Wait> {
        self.waits.first().filter(|w| w.role == Role::Step)
    }

    /// The branches of the parallel group the record is at (empty anywhere else).
    pub fn branches(&self) -> impl Iterator<Item = &Wait> {
        self.waits.iter().filter(|w| w.role == Role::Branch)
    }

    /// Whether the record is at a parallel group.
    pub fn at_group(&self) -> bool {
        self.waits.first().is_some_and(|w| w.role == Role::Branch)
    }

    /// Whether `step` waits for its inputs: reached, open, at the position the record waits at.
    pub fn waits_at(&self, step: u32) -> bool {
        self.token_at(step).is_some()
    }

    /// The token of `step` while it waits ([`Record::waits_at`]).
    pub fn token_at(&self, step: u32) -> Option<&TaskToken> {
        if self.state.kind() != Kind::Waiting {
            return None;
        }
        self.wait(step).filter(|w| w.waits()).and_then(|w| w.token.as_ref())
    }

    /// The waits the sweeper looks after in this state: the position's, or the compensation's.
    pub fn live_waits(&self) -> impl Iterator<Item = &Wait> + '_ {
        // (Not boxed: the sweeper's index reads ask every record for its due time.)
        let (waits, compensation): (&[Wait], _) = match self.state.kind() {
            Kind::Waiting | Kind::Advancing => (&self.waits, None),
            Kind::Compensating => (&[], self.compensation.as_ref()),
            _ => (&[], None),
        };
        waits.iter().chain(compensation.into_iter().flat_map(|c| c.undos.iter().map(|u| &u.wait)))
    }

    /// When the record is due for the sweeper (its `due_at` in the store's `by_due` index), which
    /// lists it a grace after: the earliest its waits need ([`Wait::due_at`]: an owed resume when
    /// it was owed, a next attempt's task on time, else an open wait's deadline), or its last
    /// update (a pending record's start, an advancing one's next report).
    pub fn due_at(&self) -> OffsetDateTime {
        let grace = crate::limits::RESEND_RESUME_AFTER;
        self.live_waits().filter_map(|w| w.due_at(grace)).min().unwrap_or(self.updated_at)
    }

    /// Whether something is owed at [`Record::due_at`], for the sweeper to carry out: a
    /// pending record's start, or a wait's resume or next attempt's task. A record that owes
    /// nothing only has its deadlines watched.
    pub fn owes_work(&self) -> bool {
        let planted = crate::mutants::active(crate::mutants::Mutation::OneDueList);
        match self.state.kind() {
            Kind::Waiting | Kind::Compensating if planted => false,
            Kind::Pending => true,
            _ => self.live_waits().any(Wait::owes_work),
        }
    }

    /// What this generation read for the timer of `step` until the time at `pointer`: its time,
    /// or why there is none. A run whose start was read by a config that did not have this timer
    /// (a deploy came between the start and the step's first report) has none: its start event
    /// is not kept, so the time cannot be known, and the timer fails rather than guess.
    pub fn until_of(&self, step: u32, pointer: &str) -> Result<OffsetDateTime, String> {
        match self.untils.iter().find(|u| u.step == step && u.pointer == pointer) {
            Some(Until { at: Some(at), .. }) => Ok(*at),
            Some(Until { error: Some(e), .. }) => Err(e.clone()),
            _ => Err(format!(
                "the run started before a deploy made this step wait until the time at {pointer}, and its start \
                 event is not kept: the time cannot be known"
            )),
        }
    }

    /// The failed attempts of `step`: its compensation's while compensating, else its wait's at
    /// the position the record is at; else none.
    pub fn failed_attempts(&self, step: u32) -> &[FailedAttempt] {
        if let Some(c) = &self.compensation {
            return c.undo(step).map_or(&[], |u| &u.wait.failed);
        }
        self.wait(step).map_or(&[], |w| &w.failed)
    }
}
