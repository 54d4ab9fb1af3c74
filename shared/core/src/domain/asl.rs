//! State machine generation: one Amazon States Language definition per workflow.
//!
//! Step Functions talks to baton only through the progress queue. Each step is one Task state,
//! `sqs:sendMessage.waitForTaskToken`, that sends a `step_ready` message with the task token and
//! parks until baton resumes the token, the step's `TimeoutSeconds` passes, or (with
//! `HeartbeatSeconds`) heartbeats stop. Every other decision lives in baton's record.
//!
//! Transitions are billed, so the happy path is as short as it can be: one state per step and
//! one final report. Only failure paths pay for a `Fail` state, which keeps the console and the
//! execution status honest (FAILED, not SUCCEEDED, when a step failed or timed out).
//!
//! A step's bounded `retry` adds nothing here: its attempts run inside the one token wait (the
//! record decides and the sweeper publishes each next attempt's task), so a step that fails once
//! and then succeeds costs the same one transition as a step that succeeds at once, and its
//! `TimeoutSeconds` covers every attempt. A `Retry` on the Task state would re-enter it for each
//! attempt, a transition and a new token each time. A parallel branch's retry is the same: its
//! attempts run inside its own token wait.
//!
//! Every plain report to the progress queue (the final ones, an optional branch's, the end of a
//! compensation chain) carries a `Retry` on every task failure, about 17 minutes long: a report lost
//! would end the execution with nothing sent. A token wait retries on SQS's errors only, about a
//! minute: each try re-enters it with a new token, and baton takes the newest (the one with the
//! latest deadline) for the wait; a worker's failure is never one of those errors.
//!
//! The progress queue URL is a `DefinitionSubstitutions` placeholder, `${ProgressQueueUrl}`,
//! filled in by SAM at deploy and by `baton local` on the emulator.
//!
//! A parallel group is one `Parallel` state with one branch per branch step, each branch a
//! single token wait with its own `TimeoutSeconds` (and `HeartbeatSeconds`), so the console
//! shows every branch and its state. Why this shape:
//! - a required branch has no Catch of its own: its failure or timeout fails the `Parallel`
//!   state at once, which stops the other branches (Step Functions' own semantics), and the
//!   group's Catch reports it as a step's would be;
//! - an optional branch catches its own failure or timeout, reports it (`branch_ended`) and ends
//!   successfully, so it never fails or holds up the group. It reports its success too: reports
//!   travel apart on an unordered queue, and Step Functions may leave the group before baton
//!   hears how the branch ended. Only the branch's own report says for sure whether Step
//!   Functions took baton's success (a resume that found its token gone, or went out just as the
//!   deadline passed, may or may not have), and the execution's success waits for it to decide
//!   between `succeeded` and `degraded`;
//! - `ResultPath: null` on the state: the branches' outputs stay in the record, not in the
//!   execution's state (a Parallel state's output is an array of every branch's).
//!
//! Compensation is a reverse chain of token waits, one state per position with a step that
//! declares `compensate` (a group's compensations one `Parallel` state, a wait per branch that
//! declares one). From the first such position on, each position's Catch (`States.ALL`, keeping
//! the error in `$.error`) leads to the chain's state for the last such position up to it, so
//! the chain starts where the run stopped and runs last position first. Each wait sends
//! `undo_ready` with its token and the run's error, and parks until baton resumes it (the
//! compensation acknowledged, failed, or skipped) or its `compensate.timeout` passes; either
//! way it goes on (its Catch keeps the error apart, in `$.undo_error`), so one stuck
//! compensation never keeps the others from running, and the record says which one did not end.
//! Then `Report compensation ended` and a `Fail` state (`baton.CompensationEnded`): the
//! execution is FAILED, as the run was. Why this shape, rather than a Map over a plan baton
//! computes: every compensation is a state of its own in the console, with its own deadline,
//! as a step is; the chain is fixed at synth time, and the record fixes the plan (a step that
//! did not complete has its wait answered at once); and it costs nothing on the happy path.
//! A failure path costs, besides the forward states it entered, one transition per
//! compensation wait reached (a group's: its `Parallel` state and each branch's wait, plus a
//! `Pass` for a branch that timed out), then the report and the `Fail`: the same two states a
//! failure without compensation ends with. A workflow without `compensate` gets the definition
//! it always had.
//!
//! A group of n branches, k of them optional, costs n + k + 1 transitions on the happy path
//! (the `Parallel` state, each branch's wait, and each optional branch's report), and the same
//! when an optional branch fails or times out (its report then comes from its Catch). A retry
//! or a Map per branch would cost more, and a Catch on the group alone would lose which branch
//! failed.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::domain::config::{Config, Group, Position, Step, Workflow};
use crate::domain::lifecycle::{CANCELLED_ERROR, Timer};

/// The placeholder template.yaml's `DefinitionSubstitutions` fills in.
pub const PROGRESS_QUEUE_PLACEHOLDER: &str = "${ProgressQueueUrl}";
/// Where the generated definitions live, relative to the repository root.
pub const OUT_DIR: &str = "infra/statemachines";

const REPORT_SUCCEEDED: &str = "Report succeeded";
const REPORT_FAILED: &str = "Report failed";
const REPORT_TIMED_OUT: &str = "Report timed out";
const FAILED: &str = "Failed";
const TIMED_OUT: &str = "Timed out";
const REPORT_COMPENSATION_ENDED: &str = "Report compensation ended";
const COMPENSATION_ENDED: &str = "Compensation ended";

/// The error name of the final `Fail` state after the compensation chain.
pub const COMPENSATION_ENDED_ERROR: &str = "baton.CompensationEnded";

/// Whether any step of the workflow declares `compensate`.
fn compensates(workflow: &Workflow) -> bool {
    workflow.steps.iter().any(|s| s.compensate.is_some())
}

// The error names of the final `Fail` states after a step missed its deadline, and after it
// failed: the lifecycle's words (it reads them in reports), which the definitions write.
pub use crate::domain::lifecycle::{FAILED_ERROR, TIMED_OUT_ERROR};

/// The execution input baton starts every execution with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionInput {
    pub workflow: String,
    pub key: String,
    pub generation: u32,
}

/// The path of a workflow's generated definition, relative to the repository root.
pub fn definition_path(workflow: &str) -> String {
    format!("{OUT_DIR}/{workflow}.asl.json")
}

/// The state machine definition for one workflow.
pub fn definition(workflow: &Workflow) -> Value {
    let mut states = serde_json::Map::new();
    let positions = workflow.positions();
    let undoes = |p: &Position<'_>| steps_of(workflow, p).any(|(_, step)| step.compensate.is_some());
    // Whether any failure is reported as before compensation: Step Functions refuses a
    // definition with a state nothing leads to.
    let mut reports_failure = false;
    for (at, position) in positions.iter().enumerate() {
        let next = positions.get(at + 1).map_or(REPORT_SUCCEEDED.to_owned(), name_of);
        let mut state = match position {
            Position::Step(i, step) => {
                let what = match &step.timer {
                    Some(Timer::After(after)) => {
                        format!("Timer {i}, {}s (baton resumes it when its time has come)", after.as_secs())
                    }
                    Some(Timer::Until(pointer)) => format!(
                        "Timer {i}, until the time at {pointer} in the start event (baton resumes it when its time has come)"
                    ),
                    None => format!("Step {i}"),
                };
                wait_state(workflow, *i, step, &what)
            }
            Position::Group(group) => parallel_state(workflow, group),
        };
        // A failure after a step that declares `compensate` enters the compensation chain at the
        // last such position up to this one; before any, it is reported as it always was.
        state["Catch"] = match positions[..=at].iter().rev().find(|p| undoes(p)) {
            Some(undo) => json!([
                { "ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": undo_name(undo) }
            ]),
            None => {
                reports_failure = true;
                json!([
                    { "ErrorEquals": ["States.Timeout"], "ResultPath": "$.error", "Next": REPORT_TIMED_OUT },
                    { "ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": REPORT_FAILED }
                ])
            }
        };
        state["Next"] = json!(next);
        states.insert(name_of(position), state);
    }
    // In the order the chain runs, last position first (the console and `baton trace` list
    // the states as the definition does).
    let chain: Vec<&Position<'_>> = positions.iter().filter(|p| undoes(p)).collect();
    for (at, position) in chain.iter().enumerate().rev() {
        let next =
            at.checked_sub(1).map_or(REPORT_COMPENSATION_ENDED.to_owned(), |before| undo_name(chain[before]));
        states.insert(undo_name(position), undo_state(workflow, position, &next));
    }
    if !chain.is_empty() {
        states.insert(
            REPORT_COMPENSATION_ENDED.into(),
            report(
                workflow,
                json!({"outcome": "compensation_ended", "failure.$": "$.error"}),
                Some(COMPENSATION_ENDED),
            ),
        );
        states.insert(
            COMPENSATION_ENDED.into(),
            json!({"Type": "Fail", "Error": COMPENSATION_ENDED_ERROR, "Cause": "A step failed, timed out or was cancelled, and baton ran the compensations; see `baton compensate plan` for the outcome."}),
        );
    }
    states.insert(REPORT_SUCCEEDED.into(), report(workflow, json!({"outcome": "succeeded"}), None));
    if reports_failure {
        insert_failure_reports(workflow, &mut states);
    }
    machine(workflow, positions.first().map_or(REPORT_SUCCEEDED.to_owned(), name_of), states)
}

/// The definition of `workflow`'s machine: `states`, from `start`.
fn machine(workflow: &Workflow, start: String, states: serde_json::Map<String, Value>) -> Value {
    let name = &workflow.name;
    let comment = format!(
        "baton workflow {name}: generated by `baton synth` from the workflow config. Do not edit by hand."
    );
    object([("Comment", json!(comment)), ("StartAt", json!(start)), ("States", Value::Object(states))])
}

/// An object of `fields`, in their order, each moved in: `json!` copies every value it is
/// given, and a definition's states nest (the simulation builds them for every deploy).
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(name, value)| (name.to_owned(), value)).collect())
}

/// The reports of a failure or a timeout, and the `Fail` states after them.
fn insert_failure_reports(workflow: &Workflow, states: &mut serde_json::Map<String, Value>) {
    states.insert(
        REPORT_TIMED_OUT.into(),
        report(workflow, json!({"outcome": "timed_out", "error.$": "$.error.Error"}), Some(TIMED_OUT)),
    );
    states.insert(
        REPORT_FAILED.into(),
        report(
            workflow,
            json!({"outcome": "failed", "error.$": "$.error.Error", "cause.$": "$.error.Cause"}),
            Some(FAILED),
        ),
    );
    states.insert(
        TIMED_OUT.into(),
        json!({"Type": "Fail", "Error": TIMED_OUT_ERROR, "Cause": "A step missed its deadline; see `baton trace`."}),
    );
    states.insert(
        FAILED.into(),
        json!({"Type": "Fail", "Error": FAILED_ERROR, "Cause": "A step failed; see `baton trace`."}),
    );
}

/// A position's name in the definition: its step's, or its group's.
fn name_of(p: &Position<'_>) -> String {
    match p {
        Position::Step(_, step) => step.name.to_string(),
        Position::Group(g) => g.name.to_string(),
    }
}

/// The name of a position's compensation state.
fn undo_name(p: &Position<'_>) -> String {
    format!("Undo {}", name_of(p))
}

/// The steps of a position, by index: the step, or the group's branches.
fn steps_of<'w>(workflow: &'w Workflow, p: &Position<'_>) -> impl Iterator<Item = (u32, &'w Step)> {
    let (first, last) = match p {
        Position::Step(i, _) => (*i, *i),
        Position::Group(g) => (g.first, g.last),
    };
    (first..=last).filter_map(|i| Some((i, workflow.steps.get(i as usize)?)))
}

/// The compensation of a position, then `next`: a step's wait, or one `Parallel` state whose
/// branches are the group's compensations, side by side. A wait that times out (or is failed)
/// goes on to `next` all the same: the record says which compensation did not end, and one
/// stuck compensation never keeps the others from running.
fn undo_state(workflow: &Workflow, position: &Position<'_>, next: &str) -> Value {
    let waits: Vec<(u32, &Step, Value)> = steps_of(workflow, position)
        .filter_map(|(i, step)| Some((i, step, undo_wait(workflow, i, step)?)))
        .collect();
    if let (Position::Step(..), [(_, _, wait)]) = (position, waits.as_slice()) {
        let mut state = wait.clone();
        state["Catch"] =
            json!([{ "ErrorEquals": ["States.ALL"], "ResultPath": "$.undo_error", "Next": next }]);
        state["Next"] = json!(next);
        return state;
    }
    let branches: Vec<Value> = waits
        .into_iter()
        .map(|(_, step, mut wait)| {
            let (name, passed) = (format!("Undo {}", step.name), format!("Undo {} passed", step.name));
            wait["End"] = json!(true);
            wait["Catch"] =
                json!([{ "ErrorEquals": ["States.ALL"], "ResultPath": "$.undo_error", "Next": passed }]);
            let states = [(name.clone(), wait), (passed, json!({ "Type": "Pass", "End": true }))];
            object([("StartAt", json!(name)), ("States", Value::Object(states.into_iter().collect()))])
        })
        .collect();
    object([
        ("Type", json!("Parallel")),
        ("Comment", json!(format!("The compensations of group {}, side by side", name_of(position)))),
        ("Branches", Value::Array(branches)),
        ("ResultPath", Value::Null),
        ("Next", json!(next)),
    ])
}

/// The wait for the compensation of step `i`, if it declares one: `undo_ready` with the token
/// and the error that ended the run, parked until baton resumes it or its `timeout` passes.
fn undo_wait(workflow: &Workflow, i: u32, step: &Step) -> Option<Value> {
    let timeout = step.compensate.as_ref()?.timeout;
    let mut state =
        parked(workflow, (i, step), ("undo_ready", timeout), &format!("Compensation of {}", step.name));
    state["Parameters"]["MessageBody"]["failure.$"] = json!("$.error");
    state["ResultPath"] = Value::Null;
    Some(state)
}

/// The Task state that parks on step (or branch) `i`'s token until baton resumes it, or its
/// deadline passes.
fn wait_state(workflow: &Workflow, i: u32, step: &Step, what: &str) -> Value {
    let mut state = parked(workflow, (i, step), ("step_ready", step.timeout), what);
    state["ResultPath"] = json!("$.result");
    if let Some(heartbeat) = step.heartbeat {
        state["HeartbeatSeconds"] = json!(heartbeat.as_secs());
    }
    state
}

/// A `waitForTaskToken` state for step `i` that reports `kind` with its token and parks until
/// `timeout` passes.
fn parked(
    workflow: &Workflow,
    (i, step): (u32, &Step),
    (kind, timeout): (&str, std::time::Duration),
    what: &str,
) -> Value {
    let timeout = timeout.as_secs();
    json!({
        "Type": "Task",
        "Comment": format!("{what}: parks until baton resumes the token or the deadline passes"),
        "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
        "Parameters": {
            "QueueUrl": PROGRESS_QUEUE_PLACEHOLDER,
            "MessageBody": {
                "kind": kind,
                "workflow.$": "$.workflow",
                "key.$": "$.key",
                "generation.$": "$.generation",
                "step": i,
                "step_name": step.name.as_str(),
                "config_version": workflow.config_version.as_str(),
                "token.$": "$$.Task.Token",
                "entered_at.$": "$$.State.EnteredTime",
                "timeout_seconds": timeout,
            }
        },
        "TimeoutSeconds": timeout,
        "Retry": wait_retry(),
    })
}

/// The errors Step Functions names a failed send to SQS with (an SQS service error, or the
/// client's own): a callback may not name its failure so (`callback.rs`), so that a worker's
/// failure is never retried as a send.
pub const SQS_SEND_ERRORS: [&str; 3] =
    ["SQS.AmazonSQSException", "SQS.SdkClientException", "SQS.SqsException"];

/// How a token wait is retried when its report's send fails: on SQS's errors only (never a
/// worker's failure, a timeout or a definition's fault), six times from 1 s doubling (about a
/// minute). Each try re-enters the wait with a new token; a report that did go out before its
/// send was counted failed leaves baton the older token, which it replaces with the newer
/// (`lifecycle`: a wait reported again with a later deadline).
fn wait_retry() -> Value {
    if crate::mutants::active(crate::mutants::Mutation::SendsUnretried) {
        return json!([]);
    }
    json!([{ "ErrorEquals": SQS_SEND_ERRORS, "IntervalSeconds": 1, "BackoffRate": 2.0, "MaxAttempts": 6 }])
}

/// A parallel group: one branch per branch step, each a token wait with its own deadline. A
/// required branch has no Catch of its own, so its failure or timeout fails the `Parallel`
/// state (which stops the other branches) and the workflow through the group's Catch. An
/// optional branch catches its own failure or timeout, reports it (`branch_ended`) and ends
/// successfully, so its siblings and the group go on; it reports its success as well.
fn parallel_state(workflow: &Workflow, group: &Group) -> Value {
    let branches: Vec<Value> = (group.first..=group.last)
        .filter_map(|i| Some((i, workflow.steps.get(i as usize)?)))
        .map(|(i, step)| {
            let name = step.name.to_string();
            let mut wait = wait_state(workflow, i, step, &format!("Branch {i} of {}", group.name));
            let mut states = serde_json::Map::new();
            if step.optional {
                let (succeeded, ended) = (format!("Report {name} succeeded"), format!("Report {name} ended"));
                wait["Next"] = json!(succeeded);
                wait["Catch"] =
                    json!([{ "ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": ended }]);
                // A cancel with `--compensate` fails the group, not just this branch: caught
                // here, it would let the group go on (and a last group end the run a success).
                if compensates(workflow) {
                    let cancelled = format!("{name} cancelled");
                    let catch = json!({ "ErrorEquals": [CANCELLED_ERROR], "Next": cancelled });
                    if let Some(list) = wait["Catch"].as_array_mut() {
                        list.insert(0, catch);
                    }
                    states.insert(cancelled, json!({"Type": "Fail", "Error": CANCELLED_ERROR, "Cause": "cancelled with --compensate"}));
                }
                states.insert(succeeded, branch_report(workflow, i, step, None));
                states.insert(ended, branch_report(workflow, i, step, Some("$.error.Error")));
            } else {
                wait["End"] = json!(true);
            }
            states.insert(name.clone(), wait);
            object([("StartAt", json!(name)), ("States", Value::Object(states))])
        })
        .collect();
    object([
        ("Type", json!("Parallel")),
        (
            "Comment",
            json!(format!(
                "Group {}: its branches wait side by side; it ends once each has an outcome",
                group.name
            )),
        ),
        ("Branches", Value::Array(branches)),
        ("ResultPath", Value::Null),
    ])
}

/// An optional branch's own report of how it ended: succeeded (`error: None`), or caught by
/// its Catch (`error`: the path of the error caught, a timeout or its task's failure).
fn branch_report(workflow: &Workflow, i: u32, step: &Step, error: Option<&str>) -> Value {
    let mut state = json!({
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage",
        "Parameters": {
            "QueueUrl": PROGRESS_QUEUE_PLACEHOLDER,
            "MessageBody": {
                "kind": "branch_ended",
                "workflow.$": "$.workflow",
                "key.$": "$.key",
                "generation.$": "$.generation",
                "step": i,
                "step_name": step.name.as_str(),
                "config_version": workflow.config_version.as_str(),
            }
        },
        "ResultPath": null,
        "Retry": report_retry(),
        "End": true,
    });
    if let Some(error) = error {
        state["Parameters"]["MessageBody"]["error.$"] = json!(error);
    }
    state
}

/// How a report to the progress queue is retried when the send fails: every task failure
/// (`States.TaskFailed`: SQS's errors; not `States.Runtime`, a definition's own fault, which AWS
/// never retries and the emulator would retry for 17 minutes), for about 17 minutes (1 s
/// doubling, 10 times). A report lost ends the execution with nothing sent, and
/// the record would wait for it (found by review); sent twice, the second copy is a duplicate
/// baton recognises. Token waits are not retried so: a retry re-enters the state with a new
/// token, and a send that failed only in its answer would park the step on a token baton never
/// heard of; their Catch reports the failure instead.
fn report_retry() -> Value {
    if crate::mutants::active(crate::mutants::Mutation::SendsUnretried) {
        return json!([]);
    }
    json!([{ "ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": 1, "BackoffRate": 2.0, "MaxAttempts": 10 }])
}

/// A `finished` report to the progress queue, then `next` (or the end).
fn report(workflow: &Workflow, fields: Value, next: Option<&str>) -> Value {
    let mut body = json!({
        "kind": "finished",
        "workflow.$": "$.workflow",
        "key.$": "$.key",
        "generation.$": "$.generation",
        "config_version": workflow.config_version.as_str(),
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), fields) {
        body.extend(extra);
    }
    let mut state = object([
        ("Type", json!("Task")),
        ("Resource", json!("arn:aws:states:::sqs:sendMessage")),
        ("Parameters", object([("QueueUrl", json!(PROGRESS_QUEUE_PLACEHOLDER)), ("MessageBody", body)])),
        ("ResultPath", Value::Null),
        ("Retry", report_retry()),
    ]);
    match next {
        Some(next) => state["Next"] = json!(next),
        None => state["End"] = json!(true),
    }
    state
}

/// The file text for a workflow's definition: pretty JSON with a final newline.
pub fn render(workflow: &Workflow) -> String {
    let mut text = serde_json::to_string_pretty(&definition(workflow)).unwrap_or_default();
    text.push('\n');
    text
}

/// Every (path, text) `baton synth` writes for a config.
pub fn render_all(config: &Config) -> Vec<(String, String)> {
    config.workflows.iter().map(|w| (definition_path(w.name.as_str()), render(w))).collect()
}

/// Every `waitForTaskToken` state that lacks `TimeoutSeconds`, by state name. A parked task
/// without a deadline can wait for a year; baton requires one on every step.
pub fn states_without_timeout(definition: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for (name, state) in definition["States"].as_object().into_iter().flatten() {
        if state["Resource"].as_str().is_some_and(|r| r.ends_with(".waitForTaskToken"))
            && state.get("TimeoutSeconds").is_none()
            && state.get("TimeoutSecondsPath").is_none()
        {
            found.push(name.clone());
        }
        // A Parallel state's branches are definitions of their own.
        for branch in state["Branches"].as_array().into_iter().flatten() {
            found.extend(states_without_timeout(branch));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Workflow {
        let config = Config::parse(include_str!("../../../../infra/workflows.yaml")).expect("sample config");
        config.workflows.into_iter().next().expect("one workflow")
    }

    #[test]
    fn each_step_parks_on_a_token_with_its_deadline_and_reports_to_the_progress_queue() {
        let def = definition(&sample());
        assert_eq!(def["StartAt"], "manual-review");
        let review = &def["States"]["manual-review"];
        assert_eq!(review["Resource"], "arn:aws:states:::sqs:sendMessage.waitForTaskToken");
        assert_eq!(review["TimeoutSeconds"], 172_800);
        assert_eq!(review["HeartbeatSeconds"], 3600);
        assert_eq!(review["Next"], "payment");
        let body = &review["Parameters"]["MessageBody"];
        assert_eq!(body["kind"], "step_ready");
        assert_eq!(body["token.$"], "$$.Task.Token");
        assert_eq!((body["step"].as_u64(), body["step_name"].as_str()), (Some(0), Some("manual-review")));
        assert_eq!(review["Parameters"]["QueueUrl"], PROGRESS_QUEUE_PLACEHOLDER);

        let payment = &def["States"]["payment"];
        assert!(payment.get("HeartbeatSeconds").is_none());
        assert_eq!(payment["Next"], REPORT_SUCCEEDED);
        assert_eq!(payment["Catch"][0]["ErrorEquals"][0], "States.Timeout");
        assert_eq!(payment["Catch"][0]["Next"], REPORT_TIMED_OUT);
        assert_eq!(payment["Catch"][1]["Next"], REPORT_FAILED);
        assert_eq!(def["States"][REPORT_SUCCEEDED]["End"], true);
        assert_eq!(def["States"][REPORT_FAILED]["Parameters"]["MessageBody"]["outcome"], "failed");
    }

    #[test]
    fn the_happy_path_has_one_state_per_step_plus_one_report() {
        let def = definition(&sample());
        let mut at = def["StartAt"].as_str().unwrap().to_owned();
        let mut visited = 1;
        while let Some(next) = def["States"][&at]["Next"].as_str() {
            at = next.to_owned();
            visited += 1;
        }
        assert_eq!(def["States"][&at]["End"], true);
        assert_eq!(visited, sample().steps.len() + 1);
    }

    #[test]
    fn a_timer_step_is_a_state_of_its_own_parked_for_its_time_and_margin() {
        let yaml = r#"
workflows:
  payout:
    start: { when: { type: ["payout.requested"] }, key: /subject }
    steps:
      - { name: approve, requires: [ok], timeout: 1d }
      - { name: cool-off, timer: { after: 24h } }
      - { name: pay, requires: [paid], timeout: 1h }
"#;
        let config = crate::domain::config::Config::parse(yaml).expect("valid");
        let def = definition(config.workflow("payout").unwrap());
        assert_eq!(def["States"]["approve"]["Next"], "cool-off");
        let timer = &def["States"]["cool-off"];
        assert_eq!(timer["TimeoutSeconds"], 24 * 3600 + 15 * 60);
        assert_eq!(timer["Parameters"]["MessageBody"]["kind"], "step_ready");
        assert_eq!(timer["Next"], "pay");
        assert!(timer["Comment"].as_str().unwrap().starts_with("Timer 1, 86400s"), "{timer}");
    }

    #[test]
    fn a_token_wait_without_timeout_is_found() {
        let mut def = definition(&sample());
        assert!(states_without_timeout(&def).is_empty());
        def["States"]["payment"].as_object_mut().unwrap().remove("TimeoutSeconds");
        assert_eq!(states_without_timeout(&def), ["payment"]);
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(render(&sample()), render(&sample()));
        assert!(render(&sample()).ends_with("}\n"));
    }

    #[test]
    fn a_group_is_one_parallel_state_whose_branches_each_wait_on_their_own_deadline() {
        let config = Config::parse(crate::domain::config::tests::GROUPED).unwrap();
        let def = definition(&config.workflows[0]);
        assert_eq!(def["States"]["manual-review"]["Next"], "checks");
        let group = &def["States"]["checks"];
        assert_eq!((group["Type"].as_str(), group["Next"].as_str()), (Some("Parallel"), Some("payment")));
        assert_eq!(group["ResultPath"], Value::Null);
        assert_eq!(group["Catch"][0]["Next"], REPORT_TIMED_OUT);
        assert_eq!(group["Catch"][1]["Next"], REPORT_FAILED);
        let branches = group["Branches"].as_array().unwrap();
        let starts: Vec<&str> = branches.iter().map(|b| b["StartAt"].as_str().unwrap()).collect();
        assert_eq!(starts, ["fraud-check", "credit-check", "address-check"]);
        let fraud = &branches[0]["States"]["fraud-check"];
        assert_eq!((fraud["TimeoutSeconds"].as_u64(), fraud["End"].as_bool()), (Some(86_400), Some(true)));
        assert_eq!(fraud["Parameters"]["MessageBody"]["step"], 1);
        // A required branch has no Catch: its failure fails the group, which stops the others.
        assert!(fraud.get("Catch").is_none());
        // An optional one catches its own failure or timeout and reports it, with the error.
        let address = &branches[2]["States"]["address-check"];
        assert_eq!(address["TimeoutSeconds"], 7200);
        assert_eq!(address["Catch"][0]["ErrorEquals"][0], "States.ALL");
        let ended = &branches[2]["States"][address["Catch"][0]["Next"].as_str().unwrap()];
        assert_eq!(ended["Parameters"]["MessageBody"]["kind"], "branch_ended");
        assert_eq!(ended["Parameters"]["MessageBody"]["step"], 3);
        assert_eq!(ended["Parameters"]["MessageBody"]["error.$"], "$.error.Error");
        assert_eq!(ended["End"], true);
        // Its success is reported too, without an error: only this report says for sure that
        // Step Functions took baton's success.
        let succeeded = &branches[2]["States"][address["Next"].as_str().unwrap()];
        assert_eq!(succeeded["Parameters"]["MessageBody"]["kind"], "branch_ended");
        assert_eq!(succeeded["Parameters"]["MessageBody"]["step"], 3);
        assert!(succeeded["Parameters"]["MessageBody"].get("error.$").is_none());
        assert_eq!((succeeded["End"].as_bool(), address.get("End")), (Some(true), None));
        // Every wait has a deadline, in the branches too.
        assert!(states_without_timeout(&def).is_empty());
        let mut broken = def.clone();
        broken["States"]["checks"]["Branches"][1]["States"]["credit-check"]
            .as_object_mut()
            .unwrap()
            .remove("TimeoutSeconds");
        assert_eq!(states_without_timeout(&broken), ["credit-check"]);
    }

    const SAGA: &str = r#"
workflows:
  saga:
    start: { when: { type: [t] }, key: /subject }
    steps:
      - { name: review, requires: [d], timeout: 1h }
      - name: reserve
        timeout: 1h
        compensate: { task: { title: "Release {key}", queue: q }, timeout: 2h }
      - parallel:
          name: checks
          branches:
            - name: fraud
              timeout: 1h
              compensate: { task: { title: "Clear {key}", queue: q }, timeout: 30m, attempts: 2 }
            - { name: credit, timeout: 1h }
            - { name: address, timeout: 1h, optional: true }
      - name: payment
        timeout: 1h
        compensate: { task: { title: "Refund {key}", queue: q }, timeout: 3d }
      - { name: shipping, timeout: 1h }
"#;

    /// Every state, with those of Parallel branches, by name.
    fn all_states(def: &Value) -> Vec<(String, Value)> {
        let mut all = Vec::new();
        for (name, state) in def["States"].as_object().into_iter().flatten() {
            all.push((name.clone(), state.clone()));
            for branch in state["Branches"].as_array().into_iter().flatten() {
                all.extend(all_states(branch));
            }
        }
        all
    }

    /// Every report (the final ones, an optional branch's, the compensation chain's end) is
    /// retried on any task failure, so a moment of SQS trouble never ends an execution with nothing
    /// sent; a token wait only on SQS's own errors, so a worker's failure is never retried.
    #[test]
    fn every_report_is_retried_and_a_token_wait_only_on_sqs_errors() {
        let config = Config::parse(SAGA).unwrap();
        let states = all_states(&definition(&config.workflows[0]));
        let reports: Vec<&(String, Value)> =
            states.iter().filter(|(_, s)| s["Resource"] == "arn:aws:states:::sqs:sendMessage").collect();
        assert!(reports.len() >= 6, "{} reports", reports.len());
        for (name, state) in reports {
            assert_eq!(state["Retry"][0]["ErrorEquals"], json!(["States.TaskFailed"]), "{name}");
            assert!(state["Retry"][0]["MaxAttempts"].as_u64() >= Some(5), "{name}");
        }
        for (name, state) in states
            .iter()
            .filter(|(_, s)| s["Resource"].as_str().is_some_and(|r| r.ends_with(".waitForTaskToken")))
        {
            assert_eq!(state["Retry"][0]["ErrorEquals"], json!(SQS_SEND_ERRORS), "{name}: SQS's errors only");
        }
    }

    /// Every message a definition sends to the progress queue (every kind of report, a token
    /// wait's or not) names the config version it was generated from: progress refuses one
    /// without it as malformed.
    #[test]
    fn every_report_names_its_config_version() {
        let config = Config::parse(SAGA).unwrap();
        let workflow = &config.workflows[0];
        let states = all_states(&definition(workflow));
        let reports: Vec<&(String, Value)> = states
            .iter()
            .filter(|(_, s)| s["Parameters"]["QueueUrl"] == PROGRESS_QUEUE_PLACEHOLDER)
            .collect();
        let kinds: std::collections::BTreeSet<&str> =
            reports.iter().filter_map(|(_, s)| s["Parameters"]["MessageBody"]["kind"].as_str()).collect();
        assert_eq!(kinds, ["branch_ended", "finished", "step_ready", "undo_ready"].into(), "every kind");
        for (name, state) in reports {
            let body = &state["Parameters"]["MessageBody"];
            assert_eq!(body["config_version"], workflow.config_version.as_str(), "{name}");
        }
    }

    /// The states a path from `start` enters, following `Next` (a Parallel state counted with the
    /// states of its branches, each branch taken to its end).
    fn path_len(def: &Value, start: &str) -> usize {
        let mut at = start.to_owned();
        let mut count = 0;
        loop {
            let state = &def["States"][&at];
            count += 1;
            for branch in state["Branches"].as_array().into_iter().flatten() {
                count += path_len(branch, branch["StartAt"].as_str().unwrap());
            }
            match state["Next"].as_str() {
                Some(next) => at = next.to_owned(),
                None => return count,
            }
        }
    }

    #[test]
    fn a_failure_after_a_compensated_step_enters_a_reverse_chain_and_the_happy_path_is_unchanged() {
        let config = Config::parse(SAGA).unwrap();
        let def = definition(&config.workflows[0]);
        let catch = |state: &str| def["States"][state]["Catch"].clone();
        // Before any step that declares `compensate`, a failure is reported as it always was.
        assert_eq!(catch("review")[0]["Next"], REPORT_TIMED_OUT);
        // From the first one on, every failure enters the chain at the last compensable position
        // up to it, keeping the run's error in `$.error` for the compensation waits.
        let entries: Vec<(&str, Value)> = ["reserve", "checks", "payment", "shipping"]
            .into_iter()
            .map(|s| (s, catch(s)[0]["Next"].clone()))
            .collect();
        assert_eq!(
            entries,
            [
                ("reserve", json!("Undo reserve")),
                ("checks", json!("Undo checks")),
                ("payment", json!("Undo payment")),
                ("shipping", json!("Undo payment"))
            ]
        );
        assert_eq!(
            (catch("shipping")[0]["ErrorEquals"][0].as_str(), catch("shipping")[0]["ResultPath"].as_str()),
            (Some("States.ALL"), Some("$.error"))
        );
        // The chain runs in reverse, and every compensation's end (or timeout) goes on.
        let undo = &def["States"]["Undo payment"];
        assert_eq!(
            (undo["Next"].as_str(), undo["Catch"][0]["Next"].as_str()),
            (Some("Undo checks"), Some("Undo checks"))
        );
        assert_eq!(undo["Catch"][0]["ResultPath"], "$.undo_error", "the run's error is kept");
        let body = &undo["Parameters"]["MessageBody"];
        assert_eq!(
            (body["kind"].as_str(), body["step"].as_u64(), body["failure.$"].as_str()),
            (Some("undo_ready"), Some(5), Some("$.error"))
        );
        assert_eq!(undo["TimeoutSeconds"], 3 * 86_400);
        // A group's compensations are one Parallel state: only the branches that declare one.
        let group = &def["States"]["Undo checks"];
        assert_eq!(
            (group["Type"].as_str(), group["Next"].as_str()),
            (Some("Parallel"), Some("Undo reserve"))
        );
        let branches = group["Branches"].as_array().unwrap();
        assert_eq!(branches.len(), 1);
        let fraud = &branches[0]["States"]["Undo fraud"];
        assert_eq!((fraud["TimeoutSeconds"].as_u64(), fraud["End"].as_bool()), (Some(1800), Some(true)));
        assert_eq!(branches[0]["States"][fraud["Catch"][0]["Next"].as_str().unwrap()]["Type"], "Pass");
        assert_eq!(def["States"]["Undo reserve"]["Next"], REPORT_COMPENSATION_ENDED);
        assert_eq!(def["States"][REPORT_COMPENSATION_ENDED]["Next"], COMPENSATION_ENDED);
        assert_eq!(def["States"][COMPENSATION_ENDED]["Error"], COMPENSATION_ENDED_ERROR);
        assert!(states_without_timeout(&def).is_empty());
        // An optional branch lets a cancel with --compensate fail its group, not only itself.
        let address = &def["States"]["checks"]["Branches"][2]["States"]["address"];
        assert_eq!(address["Catch"][0]["ErrorEquals"][0], CANCELLED_ERROR);

        // The happy path: the same states as without any `compensate`.
        let plain = Config::parse(&SAGA.replace("compensate:", "ignored:")).map(|_| ()).unwrap_err();
        assert!(plain.to_string().contains("ignored"), "the config refuses unknown fields");
        let mut bare = config.workflows[0].clone();
        for step in &mut bare.steps {
            step.compensate = None;
        }
        let (with, without) = (path_len(&def, "review"), path_len(&definition(&bare), "review"));
        assert_eq!(with, without);
        // The failure path after payment completed, shipping failing: shipping, then the chain
        // (payment's wait, the group's Parallel and fraud's wait, reserve's wait), the report
        // and the Fail: 7 transitions after the happy path's states up to shipping.
        assert_eq!(path_len(&def, "Undo payment"), 6);
    }
}
