//! The wait: the unit of the lifecycle.
//!
//! Everything baton parks on is a [`Wait`]: a Step Functions token (once reached) with a
//! deadline, the inputs it gathers, its failed attempts, and a resume it may owe. A step is a
//! position with one wait, a parallel group a position with one per branch, and each
//! compensation of a saga is a wait of its own. Whatever the [`Role`], a wait lives the same
//! life, in [`WaitStatus`], and every change to it is a row of [`WAIT_TRANSITIONS`]:
//!
//! ```text
//!  unreached ──reach──► open ◄──attempt opened── task due ◄──attempt failed── open
//!      │                  │                         │
//!      │                  └──decide──► owed ──resumed──► resumed ──report / end──► ended
//!      │                                ▲ ▲ repark (a new token) ─┘
//!      └──reach (a timer)──► sleeping ──wake─┘
//!  (any status but ended) ──close / pass / report──► ended
//! ```
//!
//! A timer step's wait sleeps: it takes no input, and the sweeper wakes it when its time comes.
//!
//! Retry, deadlines, heartbeats, owed resumes and "is this attempt's task out yet" are written
//! here once, for every role. What a wait's status implies of its fields is asserted
//! ([`Wait::agrees`]), and an ended wait never changes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::input::Source;
use crate::domain::ids::{EventId, TaskToken};

/// What a wait is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The one wait of a step.
    #[default]
    Step,
    /// One branch of a parallel group.
    Branch,
    /// The compensation of a step (or branch) that completed.
    Compensation,
}

/// The resume a wait owes Step Functions once baton decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resume {
    Success { output: Value },
    Failure { error: String, cause: String },
}

/// How a wait ended. Every wait that was planned ends with exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitOutcome {
    /// Its inputs were all present (a compensation: acknowledged).
    Succeeded,
    /// Its last attempt failed.
    Failed,
    /// Step Functions passed it without baton's answer: its deadline (or heartbeat) ran out.
    TimedOut,
    /// Still open when its group failed, or the run ended or was cancelled: nothing more is
    /// applied to it.
    Closed,
    /// A compensation not run: its step did not complete, or declares none.
    Skipped,
}

impl WaitOutcome {
    /// The stable name operators see, in the words of the wait's role (a compensation that
    /// succeeded was acknowledged).
    pub fn name(self, role: Role) -> &'static str {
        match (self, role) {
            (WaitOutcome::Succeeded, Role::Compensation) => "acknowledged",
            (WaitOutcome::Succeeded, _) => "succeeded",
            (WaitOutcome::Failed, _) => "failed",
            (WaitOutcome::TimedOut, _) => "timed_out",
            (WaitOutcome::Closed, _) => "closed",
            (WaitOutcome::Skipped, _) => "skipped",
        }
    }
}

/// Where a wait stands, with what each status needs and no more. Stored under short names
/// (`w`, `at`, `o`, `v`, `c`: the record's item holds many waits, docs/DATA_MODEL.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "w", rename_all = "snake_case")]
pub enum WaitStatus {
    /// Not reached: Step Functions has not handed over its token (inputs for it are buffered).
    Unreached,
    /// Reached, its running attempt's task out: inputs are gathered.
    Open,
    /// Reached, its running attempt's task not known to be out yet: it is due at `at` (after a
    /// failed attempt's backoff, or at once), and nothing answers that attempt until it is
    /// marked out.
    TaskDue {
        #[serde(with = "micros")]
        at: OffsetDateTime,
    },
    /// Reached, a timer's: nothing answers it; the sweeper wakes it (decides it succeeded) once
    /// its clock reads `until`.
    Sleeping {
        #[serde(rename = "at", with = "micros")]
        until: OffsetDateTime,
    },
    /// Decided by baton: `resume` is owed to its token, since `since`.
    Owed {
        #[serde(rename = "o")]
        outcome: WaitOutcome,
        #[serde(rename = "v")]
        resume: Resume,
        #[serde(rename = "at", with = "micros")]
        since: OffsetDateTime,
    },
    /// Its resume went out: Step Functions took it (`confirmed`), or its token was found gone
    /// (then whether an earlier copy reached it is not known).
    Resumed {
        #[serde(rename = "o")]
        outcome: WaitOutcome,
        #[serde(rename = "c")]
        confirmed: bool,
    },
    /// Ended: nothing is owed to it, and nothing changes it any more.
    Ended {
        #[serde(rename = "o")]
        outcome: WaitOutcome,
    },
}

/// A status without its data: what the wait's table talks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    Unreached,
    Open,
    TaskDue,
    Sleeping,
    Owed,
    Resumed,
    Ended,
}

impl WaitStatus {
    pub fn kind(&self) -> WaitKind {
        match self {
            WaitStatus::Unreached => WaitKind::Unreached,
            WaitStatus::Open => WaitKind::Open,
            WaitStatus::TaskDue { .. } => WaitKind::TaskDue,
            WaitStatus::Sleeping { .. } => WaitKind::Sleeping,
            WaitStatus::Owed { .. } => WaitKind::Owed,
            WaitStatus::Resumed { .. } => WaitKind::Resumed,
            WaitStatus::Ended { .. } => WaitKind::Ended,
        }
    }
}

/// Why a wait changes. Each row of [`WAIT_TRANSITIONS`] names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitCause {
    /// Step Functions handed over its token.
    Reach,
    /// Step Functions handed over a newer token for the same wait (its report's send retried).
    Repark,
    /// An input added data, or was a heartbeat.
    Merge,
    /// An attempt failed with attempts left: the next one is due after its backoff.
    AttemptFailed,
    /// The next attempt's task went out.
    AttemptOpened,
    /// An input completed or failed it: a resume is owed.
    Decide,
    /// Its timer ran out: its success is owed.
    Wake,
    /// Its notices whose time has come (reminders, escalation levels) were claimed by the
    /// sweeper, before they are published.
    Notify,
    /// Its resume went out.
    Resumed,
    /// Step Functions' own report settled it (an optional branch's), or confirmed its success.
    Report,
    /// Closed without baton's answer: its group failed, Step Functions passed it, or the run
    /// ended, was cancelled, or began compensating.
    Close,
}

use WaitKind::{Ended as E, Open as O, Owed as W, Resumed as R, Sleeping as S, TaskDue as D, Unreached as U};

/// Every change a wait may go through, as (from, to, cause). A write of the record is checked
/// against it for every wait it changes (`decide`'s assertion), beside the record's own table.
pub const WAIT_TRANSITIONS: &[(WaitKind, WaitKind, WaitCause)] = &[
    (U, O, WaitCause::Reach),
    // A first attempt whose task goes out by the sweeper (a compensation's).
    (U, D, WaitCause::Reach),
    // Reached after Step Functions had passed it, or a compensation skipped and resumed at once.
    (U, E, WaitCause::Reach),
    (U, W, WaitCause::Reach),
    // A timer, until its time.
    (U, S, WaitCause::Reach),
    (O, O, WaitCause::Repark),
    (S, S, WaitCause::Repark),
    (D, D, WaitCause::Repark),
    (W, W, WaitCause::Repark),
    // A resume that found its old token gone is owed again, to the new one.
    (R, W, WaitCause::Repark),
    (O, O, WaitCause::Merge),
    (O, O, WaitCause::Notify),
    (O, D, WaitCause::AttemptFailed),
    (D, O, WaitCause::AttemptOpened),
    (O, W, WaitCause::Decide),
    (D, W, WaitCause::Decide),
    (S, W, WaitCause::Wake),
    (W, R, WaitCause::Resumed),
    // An optional branch's report: it ended without baton (or corrects a success never taken),
    // or confirms a success.
    (U, E, WaitCause::Report),
    (O, E, WaitCause::Report),
    (D, E, WaitCause::Report),
    (W, E, WaitCause::Report),
    (R, E, WaitCause::Report),
    (U, E, WaitCause::Close),
    (O, E, WaitCause::Close),
    (D, E, WaitCause::Close),
    (S, E, WaitCause::Close),
    (W, E, WaitCause::Close),
    (R, E, WaitCause::Close),
    // Stranded: the run's execution ended without baton; what a wait owed is kept for the plan
    // of what stays undone, and nothing is due any more.
    (D, O, WaitCause::Close),
];

/// Whether a wait may go from `from` to `to` by some row of [`WAIT_TRANSITIONS`].
pub fn wait_may(from: WaitKind, to: WaitKind) -> bool {
    from == to && from != E || WAIT_TRANSITIONS.iter().any(|(f, t, _)| (*f, *t) == (from, to))
}

/// How much of a failed attempt's `cause` a wait keeps: up to ten attempts of Step Functions'
/// 32,768 characters each would not fit the record's one item (400 KB).
pub const MAX_ATTEMPT_CAUSE_CHARS: usize = 512;

/// One failed attempt of a wait with attempts: what failed it (its `cause` cut to
/// [`MAX_ATTEMPT_CAUSE_CHARS`]), and who said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedAttempt {
    pub attempt: u32,
    pub error: String,
    pub cause: String,
    /// The input that failed it.
    pub input: EventId,
    pub source: Source,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl FailedAttempt {
    pub(super) fn new(
        attempt: u32,
        (error, cause): (&str, &str),
        (input, source): (&EventId, Source),
        at: OffsetDateTime,
    ) -> FailedAttempt {
        let cause = cause.chars().take(MAX_ATTEMPT_CAUSE_CHARS).collect();
        FailedAttempt { attempt, error: error.to_owned(), cause, input: input.clone(), source, at }
    }
}

/// The attempt after `failed` ones.
pub fn running_attempt(failed: &[FailedAttempt]) -> u32 {
    u32::try_from(failed.len()).map_or(u32::MAX, |n| n.saturating_add(1))
}

/// One wait: a step's, a branch's or a compensation's. Stored under short names (`s`, `r`,
/// `t`, `d`, `i`, `f`, and its status's), times as microseconds since the epoch: a group's
/// record holds one per branch in its one item (docs/DATA_MODEL.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// The step (or branch) it belongs to, by its index in the record's config version.
    #[serde(rename = "s")]
    pub step: u32,
    #[serde(rename = "r", default, skip_serializing_if = "is_step")]
    pub role: Role,
    /// Its task token, once Step Functions reached it.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TaskToken>,
    #[serde(rename = "d", default, with = "micros::option", skip_serializing_if = "Option::is_none")]
    pub deadline: Option<OffsetDateTime>,
    /// The inputs gathered for its running attempt. Shared, not copied, when the wait is: a
    /// record is copied on every read and write (a group's branches may hold up to 128 KiB of
    /// inputs), and a merge changes one wait's inputs (`Arc::make_mut`), usually in a copy.
    #[serde(rename = "i", default, skip_serializing_if = "no_inputs")]
    pub inputs: Arc<Map<String, Value>>,
    /// Its failed attempts, oldest first (empty: its first attempt runs). The attempt running
    /// (or, while its task is due, next to run) is the one after.
    #[serde(rename = "f", default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedAttempt>,
    /// How many of its step's notices (its reminders and escalation levels, in the order of
    /// their times: `StepPlan::notices`) are behind it: sent, or a reminder passed over by a
    /// late sweep.
    #[serde(rename = "n", default, skip_serializing_if = "is_zero")]
    pub notified: u32,
    /// When its next notice is due, while it is open and one is left.
    #[serde(rename = "m", default, with = "micros::option", skip_serializing_if = "Option::is_none")]
    pub notice_at: Option<OffsetDateTime>,
    #[serde(flatten)]
    pub status: WaitStatus,
}

/// A time as whole microseconds since the epoch, in an `i64` (serde's buffering of flattened
/// fields, which a wait's status and an undo's wait go through, holds no `i128`).
mod micros {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use time::OffsetDateTime;

    fn to_micros(t: OffsetDateTime) -> i64 {
        i64::try_from(t.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX)
    }

    fn from_micros<E: Error>(us: i64) -> Result<OffsetDateTime, E> {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000).map_err(E::custom)
    }

    pub fn serialize<S: Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(to_micros(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OffsetDateTime, D::Error> {
        from_micros(i64::deserialize(d)?)
    }

    pub mod option {
        use super::{Deserialize, Deserializer, OffsetDateTime, Serializer, from_micros, to_micros};

        #[expect(clippy::ref_option, reason = "serde's `with` passes a reference to the field")]
        pub fn serialize<S: Serializer>(t: &Option<OffsetDateTime>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_some(&to_micros(*t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OffsetDateTime>, D::Error> {
            Option::<i64>::deserialize(d)?.map(from_micros).transpose()
        }
    }
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_step(role: &Role) -> bool {
    *role == Role::Step
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn no_inputs(inputs: &Arc<Map<String, Value>>) -> bool {
    inputs.is_empty()
}

impl Wait {
    /// A wait not reached yet.
    pub fn unreached(step: u32, role: Role) -> Wait {
        Wait {
            step,
            role,
            token: None,
            deadline: None,
            inputs: Arc::default(),
            failed: Vec::new(),
            notified: 0,
            notice_at: None,
            status: WaitStatus::Unreached,
        }
    }

    /// A wait Step Functions reached with `token`, until `deadline`.
    pub fn reached(step: u32, role: Role, token: &TaskToken, deadline: OffsetDateTime) -> Wait {
        Wait {
            token: Some(token.clone()),
            deadline: Some(deadline),
            status: WaitStatus::Open,
            ..Wait::unreached(step, role)
        }
    }

    /// The attempt running (or, while its task is due, next to run).
    pub fn attempt(&self) -> u32 {
        running_attempt(&self.failed)
    }

    /// Not decided yet: unreached, open, its task due, or sleeping.
    pub fn is_open(&self) -> bool {
        matches!(
            self.status,
            WaitStatus::Unreached
                | WaitStatus::Open
                | WaitStatus::TaskDue { .. }
                | WaitStatus::Sleeping { .. }
        )
    }

    /// Reached and not decided: its token is what an input for it (or a cancel) would resume.
    pub fn waits(&self) -> bool {
        self.token.is_some()
            && matches!(
                self.status,
                WaitStatus::Open | WaitStatus::TaskDue { .. } | WaitStatus::Sleeping { .. }
            )
    }

    /// When its timer wakes it, while it sleeps.
    pub fn wakes_at(&self) -> Option<OffsetDateTime> {
        let WaitStatus::Sleeping { until } = self.status else { return None };
        if crate::mutants::active(crate::mutants::Mutation::TimerWakesEarly) {
            return Some(until - crate::limits::RESEND_RESUME_AFTER);
        }
        Some(until)
    }

    /// How it ended, or how baton decided it (`None`: not decided).
    pub fn outcome(&self) -> Option<WaitOutcome> {
        match &self.status {
            WaitStatus::Owed { outcome, .. }
            | WaitStatus::Resumed { outcome, .. }
            | WaitStatus::Ended { outcome } => Some(*outcome),
            _ => None,
        }
    }

    /// The resume it owes Step Functions.
    pub fn owed(&self) -> Option<&Resume> {
        match &self.status {
            WaitStatus::Owed { resume, .. } => Some(resume),
            _ => None,
        }
    }

    /// Its success went out and found its token gone: Step Functions may never have taken it.
    pub fn unconfirmed(&self) -> bool {
        matches!(self.status, WaitStatus::Resumed { outcome: WaitOutcome::Succeeded, confirmed: false })
    }

    /// Decided by baton, its resume not known to have reached Step Functions: still owed, or
    /// found its token gone.
    pub fn unsure(&self) -> bool {
        self.owed().is_some() || self.unconfirmed()
    }

    /// When its running attempt's task is due, while it is not out.
    pub fn task_due(&self) -> Option<OffsetDateTime> {
        match self.status {
            WaitStatus::TaskDue { at } => Some(at),
            _ => None,
        }
    }

    /// Whether it owes the sweeper work: a resume, an attempt's task, a timer's wake, or a
    /// notice (a reminder, an escalation level).
    pub fn owes_work(&self) -> bool {
        matches!(
            self.status,
            WaitStatus::Owed { .. } | WaitStatus::TaskDue { .. } | WaitStatus::Sleeping { .. }
        ) || self.status == WaitStatus::Open && self.notice_at.is_some()
    }

    /// When the sweeper must look at it, which it does a grace after: an owed resume's re-send
    /// waits out the grace from when it was owed; an attempt's task and a timer's wake are listed
    /// on time; an open wait's deadline is watched.
    pub fn due_at(&self, grace: time::Duration) -> Option<OffsetDateTime> {
        match &self.status {
            WaitStatus::Owed { since, .. } => Some(*since),
            WaitStatus::TaskDue { at } => Some(*at - grace),
            WaitStatus::Sleeping { .. } => self.wakes_at().map(|at| at - grace),
            // An open wait's next notice is listed on time.
            WaitStatus::Open => match (self.deadline, self.notice_at) {
                (Some(deadline), Some(at)) => Some(deadline.min(at - grace)),
                (deadline, at) => deadline.or(at.map(|at| at - grace)),
            },
            _ => None,
        }
    }

    /// Whether what its status says agrees with its fields: a token once reached (but for a wait
    /// that ended, which keeps what it had); nothing gathered before.
    pub fn agrees(&self) -> bool {
        // A notice is due only while its wait is open (or between its attempts).
        let notice_ok =
            self.notice_at.is_none() || matches!(self.status, WaitStatus::Open | WaitStatus::TaskDue { .. });
        notice_ok && self.status_agrees()
    }

    fn status_agrees(&self) -> bool {
        match &self.status {
            WaitStatus::Unreached => self.token.is_none() && self.inputs.is_empty() && self.failed.is_empty(),
            WaitStatus::Open | WaitStatus::TaskDue { .. } | WaitStatus::Owed { .. } => self.token.is_some(),
            // A timer gathers nothing and has no attempts.
            WaitStatus::Sleeping { .. } => {
                self.token.is_some() && self.inputs.is_empty() && self.failed.is_empty()
            }
            WaitStatus::Resumed { .. } | WaitStatus::Ended { .. } => true,
        }
    }

    /// Ends it with `outcome`: nothing is owed to it any more, and no notice goes out.
    pub fn end(&mut self, outcome: WaitOutcome) {
        self.status = WaitStatus::Ended { outcome };
        self.notice_at = None;
    }

    /// Decides it with `outcome`: `resume` is owed to its token from `now`, and no notice goes
    /// out.
    pub fn decide(&mut self, outcome: WaitOutcome, resume: Resume, now: OffsetDateTime) {
        self.status = WaitStatus::Owed { outcome, resume, since: now };
        self.notice_at = None;
    }

    /// Its owed resume went out: taken (`delivered`), or its token found gone.
    pub fn resumed(&mut self, delivered: bool) {
        if let Some(outcome) = self.outcome().filter(|_| self.owed().is_some()) {
            self.status = WaitStatus::Resumed { outcome, confirmed: delivered };
        }
    }

    /// Settled for good, whatever it owed: the run it belongs to has ended.
    pub fn settle(&mut self) {
        if let Some(outcome) = self.outcome() {
            self.end(outcome);
        }
    }

    /// Attempt `attempt` failed with attempts left: the next is due at `due`, gathering afresh.
    pub(super) fn fail_attempt(&mut self, failed: FailedAttempt, due: OffsetDateTime) {
        self.failed.push(failed);
        self.inputs = Arc::default();
        self.status = WaitStatus::TaskDue { at: due };
    }

    /// The running attempt's task went out (its mark): `None` when that attempt is not due.
    pub(super) fn attempt_opened(&mut self, attempt: u32) -> Option<()> {
        (self.task_due().is_some() && self.attempt() == attempt).then(|| self.status = WaitStatus::Open)
    }

    /// Step Functions reported the wait again with a newer token (its report's send retried):
    /// only that one can be resumed now, and a resume that found the old one gone is owed to it.
    pub(super) fn repark(
        &mut self,
        token: &TaskToken,
        deadline: OffsetDateTime,
        now: OffsetDateTime,
        again: impl FnOnce(&Wait) -> Resume,
    ) {
        if let WaitStatus::Resumed { outcome, confirmed: false } = self.status {
            let resume = again(self);
            self.status = WaitStatus::Owed { outcome, resume, since: now };
        }
        self.token = Some(token.clone());
        self.deadline = Some(deadline);
    }

    /// Whether a newer token for it is taken, with what it owes: while it is open, owes a
    /// resume, or its resume found the old token gone (whatever its role).
    pub fn reparks(&self) -> bool {
        self.is_open()
            || self.owed().is_some()
            || matches!(self.status, WaitStatus::Resumed { confirmed: false, .. })
    }

    /// Whether a report with this deadline is newer than the one the wait was reached by.
    pub fn newer(&self, token: &TaskToken, deadline: OffsetDateTime) -> bool {
        self.token.as_ref() != Some(token) && self.deadline.is_some_and(|d| deadline > d)
    }
}

/// A wait named across the record: its generation, its step, and whether it is that step's
/// compensation. Effects and the engine's marks name the wait they are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WaitId {
    pub generation: u32,
    pub step: u32,
    /// The step's compensation, not the step (or branch) itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compensation: bool,
}

impl std::fmt::Display for WaitId {
    /// `g<generation>/s<step>`, then `/undo` for a compensation: as logs and ledger ids name it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "g{}/s{}{}", self.generation, self.step, if self.compensation { "/undo" } else { "" })
    }
}

impl WaitId {
    pub fn of(generation: u32, w: &Wait) -> WaitId {
        WaitId { generation, step: w.step, compensation: w.role == Role::Compensation }
    }
}
