//! What a decision does: the one record write it needs ([`Write`]), and the work owed besides
//! ([`Effect`]), carried out after the write wins. Each effect that concerns a wait names it,
//! and none depends on another effect of the same decision having happened.

use serde_json::Value;

use super::input::{IgnoreReason, Outcome};
use super::record::{AuditEntry, REMEMBERED_TRANSITIONS, Record, State};
use super::table::{Cause, is_allowed, wait_write};
use super::wait::{Resume, WAIT_TRANSITIONS, WaitCause, WaitId, WaitKind, wait_may};
use crate::domain::ids::TaskToken;

/// The one record write a decision needs, with what its condition must check.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub cause: Cause,
    /// The state the record must be in (`None`: it must not exist).
    pub from: Option<State>,
    /// The version it must have (`None` when it must not exist).
    pub expected_version: Option<u64>,
    /// The record as it will be after the write.
    pub to: Record,
}

impl Write {
    /// Whether this write follows from `prior`, the record as it was read: a row of the record's
    /// table or a wait write of its cause (steps included), every wait it changes a row of the
    /// wait's table, every wait's fields as its status says; the same workflow and key, its
    /// version one past the read one (1 when created), its last audit entry this transition.
    /// `decide` asserts it in every debug build and simulation; the store's condition
    /// (`condition_for`, in the store port) is derived from the same tables.
    pub fn follows(&self, prior: Option<&Record>) -> bool {
        let to = &self.to;
        is_allowed(self.from, to.state, self.cause)
            && self.from == prior.map(|r| r.state)
            && self.expected_version == prior.map(|r| r.version)
            && prior.is_none_or(|r| r.workflow == to.workflow && r.key == to.key)
            && to.version == self.expected_version.map_or(1, |v| v + 1)
            && to.history.last().is_some_and(|a| a.cause == self.cause && a.version == to.version)
            && self.waits_follow(prior)
    }

    /// Every wait the write changes follows the wait's table: by a change its cause stands for
    /// when the write leaves the record's state alone, by any when it moves it; and every wait
    /// agrees with its status.
    fn waits_follow(&self, prior: Option<&Record>) -> bool {
        let changes: &[WaitCause] = match (self.from, prior) {
            (Some(from), Some(_)) if from == self.to.state => {
                wait_write(from.kind(), self.cause).map_or(&[], |w| w.changes)
            }
            _ => &[],
        };
        let moved = |from: WaitKind, to: WaitKind| {
            if changes.is_empty() {
                wait_may(from, to)
            } else {
                from == to
                    || WAIT_TRANSITIONS.iter().any(|(f, t, c)| (*f, *t) == (from, to) && changes.contains(c))
            }
        };
        let before = |step: u32, compensation: bool| {
            prior.and_then(|r| match compensation {
                false => r.wait(step).filter(|_| r.generation == self.to.generation),
                true => r.compensation.as_ref().and_then(|c| c.undo(step)).map(|u| &u.wait),
            })
        };
        let forward = self.to.waits.iter().map(|w| (w, false));
        let undos = self.to.compensation.iter().flat_map(|c| c.undos.iter().map(|u| (&u.wait, true)));
        forward.chain(undos).all(|(w, compensation)| {
            w.agrees()
                && before(w.step, compensation)
                    .is_none_or(|b| b.status == w.status || moved(b.status.kind(), w.status.kind()))
        })
    }
}

/// When the engine tells the record what became of a resume it sent ([`super::Input::Resumed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Always: the record still waits (a branch's sibling, a compensation), and the sweeper must
    /// not send it again.
    Always,
    /// Only when it found its token gone: a delivered one is followed by the next report, and
    /// costs no write; a gone one leaves the sweeper's work list (found by an attack test:
    /// records whose executions were stopped crowded it).
    IfGone,
}

/// Work owed besides the record write, carried out after the write wins.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// StartExecution with the name derived from (workflow, key, generation); idempotent.
    StartExecution {
        generation: u32,
    },
    /// Create the task of `attempt` of the wait (1 for the first), idempotently, and publish it
    /// once: a step's or branch's task as Step Functions reaches it.
    CreateTask {
        wait: WaitId,
        attempt: u32,
    },
    /// A reminder (the `count`th) of the task of `attempt` of the wait, claimed: published once,
    /// to the step's queue.
    Remind {
        wait: WaitId,
        attempt: u32,
        count: u32,
    },
    /// The task of `attempt` of the wait given to escalation `level`'s queue, claimed: published
    /// once.
    Escalate {
        wait: WaitId,
        attempt: u32,
        level: u32,
    },
    /// The task of `attempt` of the wait, whose turn has come: a heartbeat first when `beat`
    /// names the token baton keeps alive between attempts, then the task, then the mark that
    /// it went out ([`super::Input::AttemptOpened`]), once both landed.
    OpenAttempt {
        wait: WaitId,
        attempt: u32,
        beat: Option<TaskToken>,
    },
    /// Apply the step's buffered inputs for this generation, in arrival order (strongly
    /// consistent read).
    DrainInbox {
        generation: u32,
        step: u32,
    },
    /// Store the input in the step's inbox until the step waits in `generation`: an input
    /// buffered for one run of the workflow never applies to a later one.
    Buffer {
        generation: u32,
        step: u32,
    },
    /// The resume the wait is owed, to `token`; then, as `mark` says, what became of it.
    Resume {
        wait: WaitId,
        token: TaskToken,
        resume: Resume,
        mark: Mark,
    },
    /// Answer a token no wait of the record owes anything (another generation's, a terminal
    /// record's, a cancelled one's, a compensation the plan skips): no mark follows.
    Answer {
        token: TaskToken,
        resume: Resume,
    },
    SendTaskHeartbeat {
        token: TaskToken,
    },
    StopExecution {
        generation: u32,
        cause: String,
    },
    /// Record the ignored input with its reason.
    Ledger {
        reason: IgnoreReason,
    },
}

impl Effect {
    /// The effect that fails `token` with `error` and `cause`, checked against what Step
    /// Functions takes.
    pub fn fail(token: &TaskToken, error: &str, cause: &str) -> Effect {
        Effect::Answer { token: token.clone(), resume: failure(error, cause) }
    }
}

/// A failure resume. Checked at the edge (callbacks, cancel): a failure Step Functions refuses
/// is owed forever. (The planted bug that skips that check is left for the simulation's model
/// to catch.)
pub(super) fn failure(error: &str, cause: &str) -> Resume {
    if crate::CHECKED && !crate::mutants::active(crate::mutants::Mutation::UncheckedFailureText) {
        use super::record::{MAX_FAILURE_CAUSE_CHARS, MAX_FAILURE_ERROR_CHARS, failure_text_fits};
        assert!(failure_text_fits("error", error, MAX_FAILURE_ERROR_CHARS).is_ok());
        assert!(failure_text_fits("cause", cause, MAX_FAILURE_CAUSE_CHARS).is_ok());
    }
    Resume::Failure { error: error.to_owned(), cause: cause.to_owned() }
}

/// A success resume with `output`.
pub(super) fn success(output: Value) -> Resume {
    Resume::Success { output }
}

/// What to do about one input: its classification, the record write, and the effects owed.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub outcome: Outcome,
    pub write: Option<Write>,
    pub effects: Vec<Effect>,
}

impl Decision {
    pub(super) fn new(outcome: Outcome) -> Decision {
        Decision { outcome, write: None, effects: Vec::new() }
    }

    /// Ignored for `reason`, ledgered.
    pub fn ignored(reason: IgnoreReason) -> Decision {
        Decision { outcome: Outcome::Ignored(reason), write: None, effects: vec![Effect::Ledger { reason }] }
    }

    /// Nothing owed: ignored without a ledger line (the sweeper's and the engine's own inputs).
    pub(super) fn nothing_owed() -> Decision {
        Decision::new(Outcome::Ignored(IgnoreReason::NothingOwed))
    }

    pub(super) fn with_write(mut self, cause: Cause, prior: Option<&Record>, mut to: Record) -> Decision {
        // Microseconds, the precision every store keeps timestamps with.
        let at = to.updated_at;
        to.history.push(AuditEntry {
            at: at.replace_nanosecond(at.nanosecond() / 1000 * 1000).unwrap_or(at),
            generation: to.generation,
            from: prior.map(|r| r.state.to_string().into()),
            to: to.state.to_string().into(),
            cause,
            cause_id: None,
            version: to.version,
        });
        let excess = to.history.len().saturating_sub(REMEMBERED_TRANSITIONS);
        to.history.drain(..excess);
        self.write = Some(Write {
            cause,
            from: prior.map(|r| r.state),
            expected_version: prior.map(|r| r.version),
            to,
        });
        self
    }

    pub(super) fn effect(mut self, effect: Effect) -> Decision {
        self.effects.push(effect);
        self
    }

    pub(super) fn effects(mut self, effects: impl IntoIterator<Item = Effect>) -> Decision {
        self.effects.extend(effects);
        self
    }

    /// The state before and after, when the decision writes.
    pub fn transition(&self) -> Option<(Option<State>, State)> {
        self.write.as_ref().map(|w| (w.from, w.to.state))
    }
}
