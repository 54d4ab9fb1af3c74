//! What a workflow's config says, as far as the lifecycle needs it: one [`StepPlan`] per step,
//! in order. `config` builds it ([`crate::domain::config::Workflow::plan`]); nothing here reads
//! the config, so the dependency points one way only (`tests/tests/function_deps.rs` checks it).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// May a start event after a terminal state open a new generation?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRestart {
    #[default]
    AfterTerminal,
    Never,
}

/// A step's bounded retry: `attempts` in all, the first included; before attempt n (n >= 2)
/// baton waits `backoff` doubled n - 2 times, capped by the step's timeout. The step's deadline
/// covers every attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub backoff: Duration,
}

impl Retry {
    /// The most attempts a step may declare: retries are bounded, never a loop.
    pub const MAX_ATTEMPTS: u32 = 10;

    /// The wait before attempt `attempt` (2 or later), for a step whose timeout is `timeout`.
    pub fn wait_before(&self, attempt: u32, timeout: Duration) -> Duration {
        let doublings = attempt.saturating_sub(2).min(31);
        self.backoff.saturating_mul(1 << doublings).min(timeout)
    }
}

/// A step's reminders: the first `after` its wait began, then one every `every`, `times` in
/// all. Each reminds whoever holds the step's task; none goes out once the wait is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remind {
    pub after: Duration,
    pub every: Duration,
    pub times: u32,
}

impl Remind {
    /// The most reminders a step may declare.
    pub const MAX_TIMES: u32 = 10;

    /// How long after the wait began reminder `n` (1 for the first) is due.
    pub fn due_after(&self, n: u32) -> Duration {
        self.after.saturating_add(self.every.saturating_mul(n.saturating_sub(1)))
    }
}

/// What the sweeper publishes while a step waits, each at its time from when the wait began: a
/// reminder of its task (its count), or its task given to an escalation level's queue (its level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    Reminder(u32),
    Escalation(u32),
}

/// What a step needs before it advances: at least `at_least` of the inputs `of` (all of them,
/// any one, or N of M), each counted once by its name, and only when present and not null.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Requires {
    pub of: Vec<String>,
    pub at_least: usize,
}

impl Requires {
    /// Every one of `names` (the `requires: [a, b]` of a config).
    pub fn all(names: &[&str]) -> Requires {
        Requires { of: names.iter().map(|n| (*n).to_owned()).collect(), at_least: names.len() }
    }

    /// Whether `inputs` meet the rule. An input named twice is one input: it is kept by name,
    /// and a later value replaces the earlier.
    pub fn met(&self, inputs: &Map<String, Value>) -> bool {
        let present = self.of.iter().filter(|name| inputs.get(*name).is_some_and(|v| !v.is_null())).count();
        let counted = if crate::mutants::active(crate::mutants::Mutation::QuorumCountsNulls) {
            self.of.iter().filter(|name| inputs.contains_key(*name)).count()
        } else {
            present
        };
        counted >= self.at_least
    }

    /// Whether the rule asks for every input it names.
    pub fn is_all(&self) -> bool {
        self.at_least == self.of.len()
    }
}

impl std::fmt::Display for Requires {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = self.of.join(", ");
        match self.at_least {
            _ if self.is_all() => write!(f, "all of [{list}]"),
            1 => write!(f, "any of [{list}]"),
            n => write!(f, "{n} of [{list}]"),
        }
    }
}

/// The steps one parallel group spans: its branches, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub first: u32,
    pub last: u32,
}

impl Span {
    pub fn contains(self, step: u32) -> bool {
        (self.first..=self.last).contains(&step)
    }

    /// The steps it spans.
    pub fn steps(self) -> std::ops::RangeInclusive<u32> {
        self.first..=self.last
    }
}

/// What a timer step waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timer {
    /// This long after Step Functions reached it (`timer: { after: 24h }`).
    After(Duration),
    /// The time the start event holds at this JSON pointer (`timer: { until: /data/starts_at }`),
    /// read when the event started the run ([`super::Until`]).
    Until(String),
}

impl std::fmt::Display for Timer {
    /// As the config says it: `after 86400s`, `until /data/starts_at`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Timer::After(after) => write!(f, "after {}s", after.as_secs()),
            Timer::Until(pointer) => write!(f, "until {pointer}"),
        }
    }
}

/// One step (or parallel branch) of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepPlan {
    /// The inputs that must be present before it advances: all, any or N of a list.
    pub requires: Requires,
    /// The parallel group it is a branch of.
    pub group: Option<Span>,
    /// A branch whose failure never fails its group.
    pub optional: bool,
    /// Its timeout, which caps each wait between attempts.
    pub timeout: Duration,
    /// Its heartbeat: Step Functions hears no worker while baton waits between attempts, so
    /// baton itself beats when an attempt fails and when the next one's task goes out.
    pub heartbeat: Option<Duration>,
    /// Its bounded retry.
    pub retry: Option<Retry>,
    /// How many times its compensation's task may go out, when it declares `compensate`.
    pub compensate: Option<u32>,
    /// A timer step's wait: when the sweeper wakes it. A timer takes no input and publishes no
    /// task.
    pub timer: Option<Timer>,
    /// Its reminders, if it declares `remind`.
    pub remind: Option<Remind>,
    /// Its escalation levels' times from when its wait began, in order (`escalate`).
    pub escalate: Vec<Duration>,
}

impl StepPlan {
    /// Its reminders and escalation levels, in the order of their times (a reminder before a
    /// level due at the same time).
    pub fn notices(&self) -> Vec<(Duration, Notice)> {
        let times = self.remind.map_or(0, |r| {
            if crate::mutants::active(crate::mutants::Mutation::RemindersUnbounded) {
                r.times + 10
            } else {
                r.times
            }
        });
        let reminders =
            self.remind.iter().flat_map(|r| (1..=times).map(|n| (r.due_after(n), Notice::Reminder(n))));
        let levels = (1u32..).zip(&self.escalate).map(|(level, after)| (*after, Notice::Escalation(level)));
        let mut all: Vec<(Duration, Notice)> = reminders.chain(levels).collect();
        all.sort_by_key(|(after, _)| *after);
        all
    }

    /// A step that requires these inputs, with nothing else declared.
    pub fn requiring(requires: &[&str]) -> StepPlan {
        StepPlan { requires: Requires::all(requires), ..StepPlan::default() }
    }
}

/// What the workflow's config says, as far as `decide` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every step and parallel branch, in order: a step's index is its place here.
    pub steps: Vec<StepPlan>,
    pub on_restart: OnRestart,
    /// The config version a new generation starts on (empty in tests that need none).
    pub version: String,
}

impl Plan {
    /// A straight line of steps with these requirements (tests and tools).
    pub fn line(steps: Vec<Vec<String>>) -> Plan {
        let steps = steps
            .into_iter()
            .map(|of| StepPlan { requires: Requires { at_least: of.len(), of }, ..StepPlan::default() })
            .collect();
        Plan { steps, on_restart: OnRestart::default(), version: String::new() }
    }

    /// The plan with steps `first..=last` a parallel group (tests and tools).
    pub fn grouped(mut self, first: u32, last: u32) -> Plan {
        for step in first..=last {
            if let Some(s) = self.steps.get_mut(step as usize) {
                s.group = Some(Span { first, last });
            }
        }
        self
    }

    /// The step's plan.
    pub fn step(&self, step: u32) -> Option<&StepPlan> {
        self.steps.get(step as usize)
    }

    /// The step's plan, to change (tests and tools).
    pub fn step_mut(&mut self, step: u32) -> Option<&mut StepPlan> {
        self.steps.get_mut(step as usize)
    }

    /// Whether `step` is in the plan.
    pub fn has(&self, step: u32) -> bool {
        (step as usize) < self.steps.len()
    }

    /// The group `step` is a branch of.
    pub fn group_of(&self, step: u32) -> Option<Span> {
        self.step(step).and_then(|s| s.group)
    }

    /// The position `step` belongs to: its group's span, or the step alone.
    pub fn position(&self, step: u32) -> Span {
        self.group_of(step).unwrap_or(Span { first: step, last: step })
    }

    pub fn is_optional(&self, step: u32) -> bool {
        self.step(step).is_some_and(|s| s.optional)
    }

    /// The optional branches, by step.
    pub fn optional(&self) -> impl Iterator<Item = u32> + '_ {
        (0u32..).zip(&self.steps).filter(|(_, s)| s.optional).map(|(i, _)| i)
    }

    /// How many times the compensation of `step` may go out, if it declares one.
    pub fn compensation_of(&self, step: u32) -> Option<u32> {
        self.step(step).and_then(|s| s.compensate)
    }

    /// Whether baton keeps `step`'s token alive between its attempts: it is retried and
    /// declares a heartbeat.
    pub fn beats_between_attempts(&self, step: u32) -> bool {
        self.step(step).is_some_and(|s| s.retry.is_some() && s.heartbeat.is_some())
            && !crate::mutants::active(crate::mutants::Mutation::SilentBackoff)
    }

    /// What the timer of `step` waits for, if it is a timer step.
    pub fn timer_of(&self, step: u32) -> Option<&Timer> {
        self.step(step).and_then(|s| s.timer.as_ref())
    }

    /// The first step of the position after the one `step` belongs to.
    pub fn next_position(&self, step: u32) -> Option<u32> {
        self.position(step).last.checked_add(1)
    }

    /// The first step of the last position: where the record is when the execution's success
    /// report may come.
    pub fn last_position(&self) -> u32 {
        let last = u32::try_from(self.steps.len().saturating_sub(1)).unwrap_or(u32::MAX);
        self.position(last).first
    }
}
