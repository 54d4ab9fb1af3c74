//! The orchestrator port: what baton asks of Step Functions, and nothing more.
//!
//! Step Functions owns waiting, deadlines and the console view of a workflow instance; the
//! DynamoDB record owns the truth about progression (docs/ARCHITECTURE.md). The use cases talk to
//! Step Functions only through [`Orchestrator`], so they can be tested against an in-memory
//! double and the adapter (`baton_aws::stepfunctions::StepFunctionsOrchestrator`) can be proven on its own against
//! the emulator.
//!
//! Rules this module keeps:
//! - **Starting is idempotent** (invariant 2). The execution name is derived from
//!   (workflow, key, generation) by [`execution_name`], so a redelivered start event can only
//!   ever name the same execution. Step Functions' `ExecutionAlreadyExists` for the same input
//!   is success; for a different input it is [`OrchestratorError::ExecutionConflict`], because
//!   two different starts for one generation means the caller's state is wrong.
//! - **A dead token is a fact, not a fault.** `InvalidToken`, `TaskTimedOut` and
//!   `TaskDoesNotExist` all become [`OrchestratorError::TokenGone`]: the step can no longer be
//!   resumed, so retrying is pointless and the caller records the outcome instead.
//! - **Step Functions is not trusted to reject a second resume.** The emulator accepts one
//!   silently while the execution runs (docs/EMULATOR_DEVIATIONS.md); exactly-once resumes come from the
//!   record's conditional write, never from this port.
//! - **Tokens never reach a log**: only [`TaskToken::fingerprint`] does.
//! - **Every failure keeps its cause** (`#[source]`) and has a stable `error_type`
//!   ([`ERROR_TYPES`]) and a retry verdict ([`Classified`]).

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::domain::error::Classified;
use crate::domain::ids::{CorrelationKey, TaskToken, WorkflowName};

pub use crate::domain::error::BoxError;

/// What baton needs from a workflow engine.
#[async_trait::async_trait]
pub trait Orchestrator: Send + Sync {
    /// Starts the execution for (workflow, key, generation), named by [`execution_name`].
    ///
    /// Idempotent: if that execution already exists with the same input (running or closed),
    /// this returns its ARN with `already_existed: true`. With a different input it is
    /// [`OrchestratorError::ExecutionConflict`].
    async fn start_execution(&self, req: &StartExecution) -> Result<Started, OrchestratorError>;

    /// Resumes the task waiting on `token` with `output`. A token that can no longer be resumed
    /// is [`OrchestratorError::TokenGone`].
    async fn send_task_success(
        &self,
        token: &TaskToken,
        output: &serde_json::Value,
    ) -> Result<(), OrchestratorError>;

    /// Fails the task waiting on `token`; the state machine's `Catch` sees `error`.
    async fn send_task_failure(
        &self,
        token: &TaskToken,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError>;

    /// Keeps a task with `HeartbeatSeconds` alive.
    async fn send_task_heartbeat(&self, token: &TaskToken) -> Result<(), OrchestratorError>;

    /// The execution's status, dates, input, output, error and cause.
    async fn describe(&self, execution_arn: &str) -> Result<ExecutionInfo, OrchestratorError>;

    /// The execution's whole event history, oldest first.
    async fn history(&self, execution_arn: &str) -> Result<Vec<HistoryEvent>, OrchestratorError>;

    /// Stops a running execution. Idempotent: an execution that has already closed (whatever
    /// its status) is left as it is, and that is `Ok`.
    async fn stop_execution(
        &self,
        execution_arn: &str,
        error: &str,
        cause: &str,
    ) -> Result<(), OrchestratorError>;
}

/// A request to start the execution of one workflow instance.
#[derive(Debug, Clone, PartialEq)]
pub struct StartExecution {
    /// The workflow's state machine.
    pub state_machine_arn: String,
    pub workflow: WorkflowName,
    pub key: CorrelationKey,
    /// Which run of this (workflow, key): 1 for the first, higher after a restart.
    pub generation: u32,
    /// The execution input, a JSON value (Step Functions requires an object or other JSON).
    pub input: serde_json::Value,
}

impl StartExecution {
    /// The name this request's execution gets; see [`execution_name`].
    pub fn execution_name(&self) -> String {
        execution_name(&self.workflow, &self.key, self.generation)
    }
}

/// The outcome of [`Orchestrator::start_execution`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub execution_arn: String,
    /// `true` when Step Functions said the execution already existed (with the same input).
    /// `false` means the call was accepted; Step Functions also accepts a repeat of a start
    /// whose execution is still running and returns its ARN, so `false` does not prove that
    /// this call created it.
    pub already_existed: bool,
}

/// An execution's status, as Step Functions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionStatus {
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Aborted,
    /// A redrive was requested and has not started yet; the execution is not closed.
    PendingRedrive,
    /// A status this version of baton does not know.
    Other(String),
}

impl ExecutionStatus {
    /// Has the execution ended (its tokens can no longer be resumed)?
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::TimedOut | Self::Aborted)
    }

    /// The name Step Functions uses, e.g. `TIMED_OUT`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::TimedOut => "TIMED_OUT",
            Self::Aborted => "ABORTED",
            Self::PendingRedrive => "PENDING_REDRIVE",
            Self::Other(s) => s,
        }
    }
}

impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Orchestrator::describe`] reports about one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionInfo {
    pub execution_arn: String,
    pub status: ExecutionStatus,
    pub start_date: OffsetDateTime,
    pub stop_date: Option<OffsetDateTime>,
    pub input: Option<serde_json::Value>,
    /// Present once the execution has succeeded.
    pub output: Option<serde_json::Value>,
    /// For a failed, timed-out or aborted execution, e.g. `States.Timeout`.
    pub error: Option<String>,
    pub cause: Option<String>,
}

/// One event of an execution's history, reduced to what an operator's timeline shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEvent {
    /// Increases through the history, starting at 1.
    pub id: i64,
    pub timestamp: OffsetDateTime,
    /// Step Functions' event type, e.g. `TaskScheduled`, `ExecutionFailed`.
    pub event_type: String,
    /// A short summary: the state's name, the task's resource, or the error and cause. Never
    /// the state's input or the task's parameters, which carry the live task token.
    pub detail: String,
}

/// Why a call to the orchestrator failed.
#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    /// The task can no longer be resumed: the token is unknown, its task timed out, or its
    /// execution closed. Permanent: record the outcome, do not retry.
    #[error(
        "{op}: task token {fingerprint} can no longer be used ({code}): its task has ended or never existed"
    )]
    TokenGone {
        op: &'static str,
        fingerprint: String,
        /// What Step Functions said: `InvalidToken`, `TaskTimedOut` or `TaskDoesNotExist`.
        code: &'static str,
        #[source]
        source: BoxError,
    },

    /// An execution with this name exists with a different input: two different starts were
    /// made for one (workflow, key, generation).
    #[error(
        "execution {name} already exists with a different input ({execution_arn}); a start for \
         one generation must always carry the same input"
    )]
    ExecutionConflict { name: String, execution_arn: String },

    #[error("{op}: execution {execution_arn} does not exist")]
    ExecutionNotFound {
        op: &'static str,
        execution_arn: String,
        #[source]
        source: BoxError,
    },

    /// The workflow's state machine is missing or being deleted: a deployment problem.
    #[error("{op}: state machine {state_machine_arn} does not exist or is being deleted")]
    StateMachineNotFound {
        op: &'static str,
        state_machine_arn: String,
        #[source]
        source: BoxError,
    },

    /// Throttled for rate, or over the account's quota of open executions
    /// (`ExecutionLimitExceeded`, which clears as executions close). Retryable, and never a
    /// reason to dead-letter the input.
    #[error("{op}: Step Functions throttled the request; retry later")]
    Throttled {
        op: &'static str,
        #[source]
        source: BoxError,
    },

    /// A 5xx, a timeout or no connection. Retryable.
    #[error("{op}: Step Functions is unavailable; retry later")]
    Unavailable {
        op: &'static str,
        #[source]
        source: BoxError,
    },

    /// Step Functions refused the request (a 4xx other than the cases above). Permanent.
    #[error("{op}: Step Functions rejected the request: {code}: {message}")]
    Rejected {
        op: &'static str,
        code: String,
        message: String,
        #[source]
        source: BoxError,
    },

    /// Step Functions answered with something baton cannot read (e.g. an input that is not
    /// JSON, a date out of range). Permanent.
    #[error("{op}: unreadable {what} in Step Functions' answer")]
    MalformedResponse {
        op: &'static str,
        what: &'static str,
        #[source]
        source: BoxError,
    },
}

/// Every `error_type` an [`OrchestratorError`] can have. RUNBOOK.md documents each one.
pub const ERROR_TYPES: &[&str] = &[
    "token_gone",
    "execution_conflict",
    "execution_not_found",
    "state_machine_not_found",
    "stepfunctions_throttled",
    "stepfunctions_unavailable",
    "stepfunctions_rejected",
    "stepfunctions_malformed_response",
];

impl Classified for OrchestratorError {
    fn error_type(&self) -> &'static str {
        match self {
            Self::TokenGone { .. } => "token_gone",
            Self::ExecutionConflict { .. } => "execution_conflict",
            Self::ExecutionNotFound { .. } => "execution_not_found",
            Self::StateMachineNotFound { .. } => "state_machine_not_found",
            Self::Throttled { .. } => "stepfunctions_throttled",
            Self::Unavailable { .. } => "stepfunctions_unavailable",
            Self::Rejected { .. } => "stepfunctions_rejected",
            Self::MalformedResponse { .. } => "stepfunctions_malformed_response",
        }
    }

    fn retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Throttled { .. })
    }

    fn throttled(&self) -> bool {
        matches!(self, Self::Throttled { .. })
    }
}

/// Step Functions' limit on execution names.
pub const MAX_EXECUTION_NAME_LEN: usize = 80;

/// Hex digits of the hash suffix: 64 bits, so distinct keys of one workflow do not collide.
const HASH_HEX_LEN: usize = 16;

/// The execution name of (workflow, key, generation): `<workflow>-<key>-g<generation>`.
///
/// Deterministic, so every delivery of one start event names the same execution. Step Functions
/// allows 1–80 characters and forbids whitespace, control characters and
/// `< > { } [ ] ? * " # % \ ^ | ~ ` $ & , ; : /`; correlation keys may contain `:` and `/`.
/// When a character had to be replaced (with `_`) or the name would be longer than 80
/// characters, the key part is cut short and a hash of the exact (workflow, key, generation) is
/// appended: `<workflow>-<key prefix>-g<generation>-<16 hex digits>`. Names are distinct for
/// distinct (key, generation) of one workflow: a plain name ends in `-g<digits>` and a hashed
/// one in `-<hex>`, which never starts with `g`. (Across workflows names need not be distinct:
/// each workflow has its own state machine, and names are unique per state machine.)
pub fn execution_name(workflow: &WorkflowName, key: &CorrelationKey, generation: u32) -> String {
    let mut replaced = false;
    let key_part: String = key
        .as_str()
        .chars()
        .map(|c| {
            if allowed_in_execution_name(c) {
                c
            } else {
                replaced = true;
                '_'
            }
        })
        .collect();
    let plain = format!("{workflow}-{key_part}-g{generation}");
    if !replaced && plain.len() <= MAX_EXECUTION_NAME_LEN {
        return plain;
    }

    let hash = name_hash(workflow, key, generation);
    let suffix = format!("-g{generation}-{hash}");
    // WorkflowName is at most 40 characters and a u32 has at most 10 digits, so at least 10
    // characters of the key survive.
    let room = MAX_EXECUTION_NAME_LEN.saturating_sub(workflow.as_str().len() + 1 + suffix.len());
    // Only ASCII remains after the replacement, so cutting at a byte index is safe.
    let prefix = &key_part[..key_part.len().min(room)];
    format!("{workflow}-{prefix}{suffix}")
}

fn allowed_in_execution_name(c: char) -> bool {
    // Non-ASCII is allowed by Step Functions but breaks CloudWatch Logs; keep names ASCII.
    c.is_ascii_graphic() && !"<>{}[]?*\"#%\\^|~`$&,;:/".contains(c)
}

/// The first 64 bits of SHA-256 over a length-prefixed encoding of the three parts, so that
/// no two different triples share an encoding.
fn name_hash(workflow: &WorkflowName, key: &CorrelationKey, generation: u32) -> String {
    let mut h = Sha256::new();
    for part in [workflow.as_str(), key.as_str()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.update(generation.to_be_bytes());
    let digest = h.finalize();
    hex::encode(&digest[..HASH_HEX_LEN / 2])
}

/// The ARN the execution `execution_name` of a state machine has:
/// `arn:<partition>:states:<region>:<account>:stateMachine:<sm>` (optionally with a version or
/// alias suffix) becomes `arn:<partition>:states:<region>:<account>:execution:<sm>:<name>`.
/// `None` when `state_machine_arn` is not a state machine ARN.
pub fn execution_arn(state_machine_arn: &str, execution_name: &str) -> Option<String> {
    let parts: Vec<&str> = state_machine_arn.split(':').collect();
    match parts.as_slice() {
        // A qualified ARN (a version or an alias) names the same executions.
        ["arn", partition, "states", region, account, "stateMachine", sm, ..]
            if parts.len() <= 8
                && [partition, region, account, sm].iter().all(|p| !p.is_empty())
                && !execution_name.is_empty() =>
        {
            Some(format!("arn:{partition}:states:{region}:{account}:execution:{sm}:{execution_name}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(s: &str) -> WorkflowName {
        WorkflowName::parse(s).unwrap()
    }

    fn key(s: &str) -> CorrelationKey {
        CorrelationKey::parse(s).unwrap()
    }

    fn valid_name(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_EXECUTION_NAME_LEN
            && name.chars().all(allowed_in_execution_name)
    }

    #[test]
    fn a_plain_key_gives_a_readable_name() {
        // Given a key with only characters Step Functions allows
        // When the name is derived
        let name = execution_name(&wf("order-review"), &key("order-42"), 1);
        // Then it is the plain form, with no hash
        assert_eq!(name, "order-review-order-42-g1");
    }

    #[test]
    fn names_are_deterministic() {
        for k in ["order-42", "urn:order:42", &"x".repeat(128)] {
            assert_eq!(execution_name(&wf("w"), &key(k), 7), execution_name(&wf("w"), &key(k), 7));
        }
    }

    #[test]
    fn forbidden_characters_are_replaced_and_hashed() {
        // Given keys that differ only in a forbidden character
        let slash = execution_name(&wf("w"), &key("a/b"), 1);
        let colon = execution_name(&wf("w"), &key("a:b"), 1);
        let underscore = execution_name(&wf("w"), &key("a_b"), 1);
        // Then all three names are valid and distinct
        for n in [&slash, &colon, &underscore] {
            assert!(valid_name(n), "{n}");
        }
        assert_ne!(slash, colon);
        assert_ne!(slash, underscore);
        assert_ne!(colon, underscore);
        assert_eq!(underscore, "w-a_b-g1");
        assert!(slash.starts_with("w-a_b-g1-"), "{slash}");
        assert_eq!(slash.len(), "w-a_b-g1-".len() + HASH_HEX_LEN);
    }

    #[test]
    fn long_names_are_cut_to_80_and_stay_distinct() {
        // Given the longest workflow name, long keys sharing a long prefix, and a large generation
        let w = wf(&"w".repeat(40));
        let a = execution_name(&w, &key(&format!("{}a", "k".repeat(127))), u32::MAX);
        let b = execution_name(&w, &key(&format!("{}b", "k".repeat(127))), u32::MAX);
        // Then both fit, keep the generation visible, and differ
        for n in [&a, &b] {
            assert!(valid_name(n), "{n}");
            assert!(n.contains(&format!("-g{}-", u32::MAX)), "{n}");
        }
        assert_ne!(a, b);
    }

    #[test]
    fn the_generation_is_part_of_the_name() {
        let k = key("acme/orders/42");
        assert_ne!(execution_name(&wf("w"), &k, 1), execution_name(&wf("w"), &k, 2));
        assert_ne!(execution_name(&wf("w"), &key("o"), 1), execution_name(&wf("w"), &key("o"), 2));
    }

    #[test]
    fn plain_and_hashed_names_cannot_collide() {
        // Given a key crafted to look like a hashed name once a generation is appended
        let hashed = execution_name(&wf("w"), &key("a/b"), 1);
        let tail = hashed.strip_prefix("w-").unwrap();
        // When that tail is used as a plain key
        let plain = execution_name(&wf("w"), &key(tail), 1);
        // Then the names still differ (a plain name ends in -g<digits>)
        assert_ne!(plain, hashed);
    }

    #[test]
    fn every_key_shape_gives_a_valid_name() {
        let keys = ["a", "urn:order:42", "acme/orders/42", "a@b.c", "X_1+2=3", "a.b-c", "::://"];
        for k in keys {
            for g in [0, 1, 99, u32::MAX] {
                let n = execution_name(&wf("order-review"), &key(k), g);
                assert!(valid_name(&n), "{k} {g} -> {n}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_key_gives_a_valid_name_and_distinct_inputs_distinct_names(
            k1 in "[A-Za-z0-9_.:/@+=-]{1,128}",
            k2 in "[A-Za-z0-9_.:/@+=-]{1,128}",
            g1 in 0u32..4,
            g2 in 0u32..4,
        ) {
            let w = wf("order-review");
            let n1 = execution_name(&w, &key(&k1), g1);
            let n2 = execution_name(&w, &key(&k2), g2);
            proptest::prop_assert!(valid_name(&n1), "{} -> {}", k1, n1);
            proptest::prop_assert_eq!(k1 == k2 && g1 == g2, n1 == n2, "{} {} / {} {}", k1, g1, k2, g2);
        }

        #[test]
        fn keys_differing_in_one_character_get_distinct_names(
            prefix in "[a-z0-9:/_-]{0,120}",
            a in "[:/_]",
            b in "[:/_]",
        ) {
            proptest::prop_assume!(a != b);
            let w = wf("w");
            let na = execution_name(&w, &key(&format!("{prefix}{a}")), 1);
            let nb = execution_name(&w, &key(&format!("{prefix}{b}")), 1);
            proptest::prop_assert_ne!(na, nb);
        }
    }

    #[test]
    fn execution_arns_come_from_state_machine_arns() {
        assert_eq!(
            execution_arn("arn:aws:states:us-east-1:123456789012:stateMachine:baton-order", "x-g1"),
            Some("arn:aws:states:us-east-1:123456789012:execution:baton-order:x-g1".to_owned())
        );
        assert_eq!(
            execution_arn("arn:aws-cn:states:cn-north-1:1:stateMachine:sm:live", "n"),
            Some("arn:aws-cn:states:cn-north-1:1:execution:sm:n".to_owned())
        );
        assert_eq!(execution_arn("arn:aws:sqs:us-east-1:1:queue", "n"), None);
        assert_eq!(execution_arn("arn:aws:states:us-east-1:1:execution:sm:e", "n"), None);
        assert_eq!(execution_arn("arn:aws:states:us-east-1:1:stateMachine:", "n"), None);
        assert_eq!(execution_arn("arn:aws:states:us-east-1:1:stateMachine:sm", ""), None);
    }

    #[test]
    fn only_throttles_and_unavailability_are_retryable_and_every_type_is_listed() {
        let boxed = || -> BoxError { "cause".into() };
        let errors = [
            OrchestratorError::TokenGone {
                op: "send_task_success",
                fingerprint: "tok-1".into(),
                code: "InvalidToken",
                source: boxed(),
            },
            OrchestratorError::ExecutionConflict { name: "n".into(), execution_arn: "a".into() },
            OrchestratorError::ExecutionNotFound {
                op: "describe",
                execution_arn: "a".into(),
                source: boxed(),
            },
            OrchestratorError::StateMachineNotFound {
                op: "start_execution",
                state_machine_arn: "a".into(),
                source: boxed(),
            },
            OrchestratorError::Throttled { op: "start_execution", source: boxed() },
            OrchestratorError::Unavailable { op: "describe", source: boxed() },
            OrchestratorError::Rejected {
                op: "describe",
                code: "InvalidArn".into(),
                message: "m".into(),
                source: boxed(),
            },
            OrchestratorError::MalformedResponse { op: "describe", what: "input", source: boxed() },
        ];
        let types: Vec<&str> = errors.iter().map(Classified::error_type).collect();
        assert_eq!(types, ERROR_TYPES, "one example per error type, in ERROR_TYPES order");
        for e in &errors {
            let (throttled, unavailable) =
                (e.error_type() == "stepfunctions_throttled", e.error_type() == "stepfunctions_unavailable");
            assert_eq!(e.retryable(), throttled || unavailable, "{e}");
            assert_eq!(e.throttled(), throttled, "{e}");
            assert!(std::error::Error::source(e).is_some() || e.error_type() == "execution_conflict");
        }
    }

    #[test]
    fn closed_statuses() {
        assert!(!ExecutionStatus::Running.is_closed());
        assert!(!ExecutionStatus::PendingRedrive.is_closed());
        for s in [
            ExecutionStatus::Succeeded,
            ExecutionStatus::Failed,
            ExecutionStatus::TimedOut,
            ExecutionStatus::Aborted,
        ] {
            assert!(s.is_closed(), "{s}");
        }
    }
}
