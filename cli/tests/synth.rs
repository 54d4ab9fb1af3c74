//! `baton synth` and `baton synth --check`, on a copy of the repository's infra files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::baton_in as baton;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scratch repository with the real config and template, and no generated files.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("infra")).unwrap();
    std::fs::copy(root().join("infra/workflows.yaml"), dir.path().join("infra/workflows.yaml")).unwrap();
    std::fs::copy(root().join("template.yaml"), dir.path().join("template.yaml")).unwrap();
    dir
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const DEF: &str = "infra/statemachines/order-review.asl.json";

#[test]
fn the_committed_definitions_are_up_to_date() {
    let out = baton(&root(), &["synth", "--check"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn check_fails_on_missing_then_passes_after_synth_then_fails_when_stale() {
    let dir = scratch();
    let missing = baton(dir.path(), &["synth", "--check"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains(&format!("{DEF}: stale or missing")), "{}", stderr(&missing));

    assert!(baton(dir.path(), &["synth"]).status.success());
    assert!(baton(dir.path(), &["synth", "--check"]).status.success());

    // A config change without a new synth is caught.
    let config = dir.path().join("infra/workflows.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replace("timeout: 7d", "timeout: 6d");
    std::fs::write(&config, text).unwrap();
    let stale = baton(dir.path(), &["synth", "--check"]);
    assert_eq!(stale.status.code(), Some(1));
    assert!(stderr(&stale).contains("stale or missing"));
}

#[test]
fn check_fails_when_a_token_wait_has_no_deadline_or_a_definition_is_stray() {
    let dir = scratch();
    assert!(baton(dir.path(), &["synth"]).status.success());
    let path = dir.path().join(DEF);
    let mut def: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    def["States"]["payment"].as_object_mut().unwrap().remove("TimeoutSeconds");
    std::fs::write(&path, serde_json::to_string_pretty(&def).unwrap()).unwrap();
    std::fs::write(dir.path().join("infra/statemachines/old.asl.json"), "{}").unwrap();
    let out = baton(dir.path(), &["synth", "--check"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("waitForTaskToken state \"payment\" has no TimeoutSeconds"), "{err}");
    assert!(
        err.contains("infra/statemachines/old.asl.json: no workflow in the config generates it"),
        "{err}"
    );
}

#[test]
fn check_fails_when_the_template_lacks_a_workflows_state_machine() {
    let dir = scratch();
    assert!(baton(dir.path(), &["synth"]).status.success());
    let template = dir.path().join("template.yaml");
    let text =
        std::fs::read_to_string(&template).unwrap().replace(DEF, "infra/statemachines/elsewhere.asl.json");
    std::fs::write(&template, text).unwrap();
    let out = baton(dir.path(), &["synth", "--check"]);
    assert!(
        stderr(&out).contains(&format!("no AWS::Serverless::StateMachine has DefinitionUri {DEF}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_fails_when_a_states_grant_misses_a_workflows_state_machine() {
    let dir = scratch();
    assert!(baton(dir.path(), &["synth"]).status.success());
    let template = dir.path().join("template.yaml");
    // A second state machine (as for a second workflow) that the grants do not name.
    let text = std::fs::read_to_string(&template).unwrap().replace(
        "  # ---- alarms",
        "  OtherStateMachine:\n    Type: AWS::Serverless::StateMachine\n    Properties:\n      DefinitionUri: x.json\n\n  # ---- alarms",
    );
    std::fs::write(&template, text).unwrap();
    let out = baton(dir.path(), &["synth", "--check"]);
    for policy in ["StartWorkflowsPolicy", "ResumeStepsPolicy", "HeartbeatStepsPolicy"] {
        assert!(
            stderr(&out)
                .contains(&format!("{policy} grants states: actions but does not name OtherStateMachine")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn check_fails_naming_a_task_queue_the_template_lacks_and_synth_writes_it() {
    let dir = scratch();
    assert!(baton(dir.path(), &["synth"]).status.success());
    // A team's queue renamed in the config, the template left as it was.
    let config = dir.path().join("infra/workflows.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replace("queue: risk-review", "queue: fraud");
    std::fs::write(&config, text).unwrap();
    let out = baton(dir.path(), &["synth", "--check"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "template.yaml: no task queue for `queue: fraud` (workflow order-review, step manual-review); run `baton synth`"
        ),
        "{err}"
    );
    assert!(
        err.contains("declares the task queue of `risk-review`, which no task in the config names"),
        "{err}"
    );

    // `baton synth` writes the section for the config: the new team's queue, its DLQ, policy and
    // alarms, and no longer the old one's.
    assert!(baton(dir.path(), &["synth"]).status.success());
    assert!(baton(dir.path(), &["synth", "--check"]).status.success());
    let template = std::fs::read_to_string(dir.path().join("template.yaml")).unwrap();
    for id in [
        "TaskQueueFraud:",
        "TaskDLQFraud:",
        "TaskQueuePolicyFraud:",
        "TaskQueueAgeAlarmFraud:",
        "TaskDLQDepthAlarmFraud:",
    ] {
        assert!(template.contains(id), "{id}");
    }
    assert!(template.contains(r#"Fn::Sub: "${AWS::StackName}_tasks-fraud""#));
    assert!(!template.contains("RiskReview"), "the old team's queue is gone");
}

/// The compensation example of the docs (a workflow named as the template's state machine).
const SAGA: &str = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: payment
        requires: [payment_ref]
        timeout: 7d
        compensate:
          task: { title: "Refund payment for {key}", queue: payments }
          timeout: 3d
          attempts: 3          # optional, default 3: the task is published again after each failure
      - name: shipping
        requires: [tracking]
        timeout: 5d
"#;

#[test]
fn a_compensated_step_passes_validate_and_synth_into_a_reverse_chain_that_asl_validator_accepts() {
    let dir = scratch();
    let config = dir.path().join("infra/workflows.yaml");
    std::fs::write(&config, SAGA).unwrap();
    let out = baton(dir.path(), &["validate", "infra/workflows.yaml"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout.contains(r#"payment (needs payment_ref, timeout 7d, undone by "Refund payment for {key}" within 3d, 3 attempt(s))"#),
        "{stdout}"
    );
    println!("{stdout}");
    let out = baton(dir.path(), &["synth"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(baton(dir.path(), &["synth", "--check"]).status.success());
    let path = dir.path().join(DEF);
    let def: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Both steps' failures enter the chain at payment's compensation, which reports the end.
    for step in ["payment", "shipping"] {
        assert_eq!(def["States"][step]["Catch"][0]["Next"], "Undo payment", "{step}");
    }
    assert_eq!(def["States"]["Undo payment"]["TimeoutSeconds"], 3 * 86_400);
    assert_eq!(def["States"]["Undo payment"]["Next"], "Report compensation ended");
    // The state machine check: asl-validator, installed by `make test` (`make tools`).
    let validator = root().join("node_modules/.bin/asl-validator");
    assert!(validator.exists(), "asl-validator is missing: run `make tools` (make test does)");
    let checked = std::process::Command::new(validator).arg("--json-path").arg(&path).output().unwrap();
    assert!(checked.status.success(), "{}{}", String::from_utf8_lossy(&checked.stdout), stderr(&checked));
}
