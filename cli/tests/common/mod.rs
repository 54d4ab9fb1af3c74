//! What the tests of the operator commands share: a whole baton running on the emulator in the
//! test process, the local.json describing it, and the real `baton` binary pointed at it, as
//! `make run` leaves things for an operator.
#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use baton_core::domain::lifecycle::State;
use baton_tests::Emulator;
use baton_tests::system::{System, TEST_SECRET, start_system};
use serde_json::{Value, json};

pub const CONFIG: &str = baton_tests::ORDER_REVIEW;

/// The real `baton` binary, run in `dir` as a user runs it, without a config from the
/// environment (the commands that need no stack).
pub fn baton_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .current_dir(dir)
        .env_remove("BATON_CONFIG")
        .output()
        .expect("the baton binary runs")
}

/// Variables that would point the binary elsewhere than the local.json under test.
pub const TARGET_VARS: [&str; 8] = [
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "BATON_TABLE",
    "BATON_INTAKE_QUEUE_URL",
    "BATON_API_URL",
    "BATON_WEBHOOK_SECRET",
    "BATON_STATE_MACHINE_PREFIX",
    "BATON_CONFIG",
];

/// A running baton, the local.json describing it, and the config the binary reads step names from.
pub struct Stack {
    pub system: System,
    pub dir: tempfile::TempDir,
    pub local: PathBuf,
}

pub async fn stack() -> Stack {
    stack_with(CONFIG).await
}

/// [`stack`] running `config`.
pub async fn stack_with(config: &str) -> Stack {
    let system = start_system(config).await;
    let info = system.baton.info(&Emulator::from_env().endpoint, TEST_SECRET);
    let dir = tempfile::tempdir().expect("a temp dir");
    let local = dir.path().join("local.json");
    info.save(&local).expect("write local.json");
    std::fs::write(dir.path().join("workflows.yaml"), config).expect("write the config");
    Stack { system, dir, local }
}

impl Stack {
    /// Runs `baton <args> --local <local.json>` in the temp dir, with no target variables set.
    pub async fn baton(&self, args: &[&str]) -> Run {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"));
        command.args(args).arg("--local").arg(&self.local).current_dir(self.dir.path());
        for var in TARGET_VARS {
            command.env_remove(var);
        }
        command.env("BATON_CONFIG", self.dir.path().join("workflows.yaml"));
        Run(command.output().await.expect("the baton binary runs"))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub async fn state_is(&self, key: &str, state: State) {
        self.system
            .until(&format!("{key} in {state}"), || async {
                self.system.record("order-review", key).await.filter(|r| r.state == state).map(|_| ())
            })
            .await
    }
    /// Stops `key`'s execution of order-review as the console would. The emulator defers a stop
    /// while the execution is parked on a token, until the wait ends: the parked token is resumed
    /// too, and the execution then ends ABORTED, with no report (docs/EMULATOR_DEVIATIONS.md).
    pub async fn stop_outside_baton(&self, key: &str) {
        let engine = self.system.engine();
        let record = self.system.record("order-review", key).await.expect("the record");
        let workflow = engine.config.workflow("order-review").unwrap();
        let arn = engine.execution_arn(workflow, &record.key, record.generation);
        engine.orchestrator.stop_execution(&arn, "Console", "stopped by hand").await.expect("the stop");
        if let Some(token) = record.step_wait().and_then(|w| w.token.as_ref()) {
            let _ = engine.orchestrator.send_task_success(token, &json!({})).await;
        }
        self.system.execution_ended("order-review", "ABORTED").await;
    }
}

pub struct Run(pub Output);

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }

    pub fn code(&self) -> Option<i32> {
        self.0.status.code()
    }

    /// Asserts success and returns stdout.
    pub fn ok(&self) -> String {
        assert_eq!(self.code(), Some(0), "stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
        self.stdout()
    }

    pub fn json(&self) -> Value {
        let text = self.ok();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }
}

pub fn placed(key: &str) -> String {
    json!({"specversion": "1.0", "id": format!("placed-{key}"), "source": "shop", "type": "order.placed",
        "subject": key, "data": {"total": 2000}})
    .to_string()
}
