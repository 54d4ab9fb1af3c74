//! Deliberate bugs, for proving that the deterministic simulation catches them (`baton-sim`).
//!
//! Each [`Mutation`] disables one of the rules baton's safety rests on. Only a build with the
//! `mutants` feature can switch one on, and only for the current thread (the simulation runs one
//! schedule per thread); in every other build [`active`] is a constant `false` the compiler
//! removes. The simulation's mutation test switches each one on in turn and requires that the
//! smoke run of schedules reports a violation.

/// One deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The buffering side of the inbox handshake skips its consistent read of the record (and
    /// so never drains): the lost wake-up.
    SkipHandshakeRead,
    /// A record write's condition checks the state but not the version: lost updates.
    NoVersionCondition,
    /// An owed resume is re-sent at once, without the grace period: a second resume while the
    /// first is in flight.
    NoResendGrace,
    /// The callback receipt is completed (answered `applied`) before the effect is applied.
    ReceiptBeforeEffect,
    /// A live record is decided on the deployed config instead of the version it started on.
    Unpinned,
    /// The sweeper reads the record before it claims an expired entry's expiry (and so may ledger
    /// an input expired that a drain applies meanwhile).
    ExpireWithoutClaim,
    /// The sweeper decides whether it takes an expiry over from a sweep that died on the
    /// `by_due` index's copy of the entry, which may lag behind the table: an input ledgered
    /// expired by the dead sweep is drained and applied as well. Only a lagging index shows it.
    /// Not yet in [`Mutation::ALL`]: the smoke run's 2,000 schedules do not reach it (a sweep
    /// must die between its ledger write and its settle, and the index still lag past the
    /// lease); `sim/tests/regressions.rs` provokes it directly.
    TrustIndexStatus,
    /// An SQS batch takes no notice of the invocation's deadline: Lambda kills it mid-batch, with
    /// no partial batch response.
    IgnoreDeadline,
    /// A callback's `error` and `cause` are not checked against what SendTaskFailure takes: the
    /// step is answered `applied` and its failure is refused by Step Functions every time.
    /// Only a Step Functions model that keeps AWS's lengths shows it.
    UncheckedFailureText,
    /// An input id is limited in characters but not in bytes: 256 four-byte characters pass,
    /// and the `INBOX#`/`LEDGER#` sort keys built from them exceed DynamoDB's 1,024 bytes.
    /// Only a store that keeps DynamoDB's key limits shows it.
    IdWithoutByteLimit,
    /// An optional parallel branch's failure is taken as a required one's: it closes its
    /// siblings and fails the group.
    OptionalFailsGroup,
    /// A branch's input is merged into every open branch of its group, not its own only.
    SiblingMerge,
    /// A workflow that finishes with an optional branch not succeeded ends `succeeded`, not
    /// `degraded`.
    DegradedForgotten,
    /// A retried step's failed attempt always gets another: `attempts` is not a limit.
    RetryUnbounded,
    /// The next attempt is due at once, without its backoff.
    RetryWithoutBackoff,
    /// An input naming an earlier attempt is applied to the running one.
    EarlierAttemptApplied,
    /// A failure marked not retryable is retried all the same.
    NonRetryableRetried,
    /// A workflow whose compensation failed or timed out ends `compensated` all the same.
    CompensatedDespiteFailure,
    /// The compensation plan runs a step that declares `compensate` whether it completed or not.
    UndoOfIncompleteStep,
    /// A compensation's failed attempt always gets another: `compensate.attempts` is no limit.
    UndoRetryUnbounded,
    /// A forward input that arrives while the workflow compensates is ignored, but not ledgered.
    CompensatingNotLedgered,
    /// baton sends no heartbeat when a retried step's attempt fails or its next attempt opens:
    /// Step Functions times a step with a `heartbeat` out during a backoff. Only a world with
    /// heartbeats on retried steps, and attempts failing late in their window, shows it.
    SilentBackoff,
    /// Whether a retried step's next attempt's task is out is judged by the clock against its
    /// due time, not by its mark: an answer within the skew between the callback function's
    /// clock and the sweeper's is ignored for good. Only a world with a clock per function
    /// shows it.
    PublishedByTheClock,
    /// A parallel branch whose success baton applied, but which Step Functions timed out before
    /// the resume arrived, is left out of the compensation plan (`not_completed`), though its
    /// sender did the work.
    RacedSuccessForgotten,
    /// A compensation's acknowledgement (and its wait's report) is not found again by step
    /// name in the record's config version: after a deploy that renumbered steps, it lands on
    /// another step's compensation. Only deploys that renumber a compensating saga show it.
    UndoUnpinned,
    /// Owed work shares the index list of the waits only watched: a crowd of records past their
    /// deadlines with nothing owed fills the sweeper's batch, and owed work waits. Only crowds
    /// show it.
    OneDueList,
    /// The cheap bound of a record's size leaves out its branches, attempts and compensation: a
    /// record DynamoDB refuses is written as if it fitted. Only records near the item limit,
    /// measured exactly, show it.
    BoundWithoutParts,
    /// The state machines' sends to SQS carry no `Retry`: a transient failure fails the run, or
    /// ends it with no report. Only a world where Step Functions' own sends fail shows it.
    SendsUnretried,
    /// An N-of-M step counts an input sent as null (an approver who withdrew) as present: the
    /// step completes one approval short. Only quorum steps whose senders withdraw show it.
    QuorumCountsNulls,
    /// A timer's time is taken with the grace the sweeper's lists allow an owed resume: the
    /// sweeper wakes it 30 seconds early.
    TimerWakesEarly,
    /// A step's reminders are not held to `times`: the sweeper reminds until the wait ends.
    RemindersUnbounded,
    /// The sweeper forgets which escalation levels went out: each claim publishes every level
    /// due so far again.
    EscalationsRepeated,
}

impl Mutation {
    pub const ALL: [Mutation; 30] = [
        Mutation::SkipHandshakeRead,
        Mutation::NoVersionCondition,
        Mutation::NoResendGrace,
        Mutation::ReceiptBeforeEffect,
        Mutation::Unpinned,
        Mutation::ExpireWithoutClaim,
        Mutation::IgnoreDeadline,
        Mutation::UncheckedFailureText,
        Mutation::IdWithoutByteLimit,
        Mutation::OptionalFailsGroup,
        Mutation::SiblingMerge,
        Mutation::DegradedForgotten,
        Mutation::RetryUnbounded,
        Mutation::RetryWithoutBackoff,
        Mutation::EarlierAttemptApplied,
        Mutation::NonRetryableRetried,
        Mutation::CompensatedDespiteFailure,
        Mutation::UndoOfIncompleteStep,
        Mutation::UndoRetryUnbounded,
        Mutation::CompensatingNotLedgered,
        Mutation::SilentBackoff,
        Mutation::PublishedByTheClock,
        Mutation::UndoUnpinned,
        Mutation::OneDueList,
        Mutation::BoundWithoutParts,
        Mutation::SendsUnretried,
        Mutation::QuorumCountsNulls,
        Mutation::TimerWakesEarly,
        Mutation::RemindersUnbounded,
        Mutation::EscalationsRepeated,
    ];
}

#[cfg(feature = "mutants")]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// Is `m` switched on for this thread?
#[cfg(feature = "mutants")]
pub fn active(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Is `m` switched on? Never, without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub fn active(_: Mutation) -> bool {
    false
}

/// Switches `m` on (or every mutation off, with `None`) for this thread.
#[cfg(feature = "mutants")]
pub fn set(m: Option<Mutation>) {
    ACTIVE.with(|a| a.set(m));
}
