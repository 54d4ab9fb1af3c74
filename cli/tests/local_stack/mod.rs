//! `baton local` as a user runs it (`make run`): a subprocess, driven only through public
//! surfaces, and stopped with SIGINT. It starts its own emulator, so it needs the pinned tools in
//! `.venv` (`make tools`).
#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use baton_local::info::LocalInfo;
use serde_json::Value;
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_baton")
}

/// A running `baton local`, stopped with SIGINT when dropped if the test did not stop it.
pub struct Local {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub info_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Local {
    pub fn start() -> Local {
        Local::start_with(&[])
    }

    /// `baton local` with these extra arguments (`--config PATH`, say).
    pub fn start_with(extra: &[&str]) -> Local {
        let dir = tempfile::tempdir().unwrap();
        let python = std::env::var("BATON_PYTHON")
            .unwrap_or_else(|_| root().join(".venv/bin/python").display().to_string());
        let mut child = Command::new(bin())
            .args(["local", "--stack", &baton_tests::unique_name("loc"), "--state-dir"])
            .arg(dir.path())
            .args(extra)
            .current_dir(root())
            .env("BATON_PYTHON", python)
            .env_remove("BATON_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("baton local starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let info_path = dir.path().join("local.json");
        let local = Local { child, lines, info_path, _dir: dir };
        local.wait_for_line("baton local ready", Duration::from_secs(120));
        local
    }

    pub fn wait_for_line(&self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no line containing {needle:?} within {limit:?}"),
            }
        }
    }

    pub fn info(&self) -> LocalInfo {
        LocalInfo::load(&self.info_path).expect("local.json")
    }

    pub fn trace(&self, key: &str) -> Value {
        self.try_trace(key).unwrap_or_else(|| panic!("trace {key}: no such workflow record"))
    }

    /// `baton trace --json` of `key`, or None while nothing is stored for it yet (exit 1, `no
    /// such workflow record`): the start event is on its way through the intake queue.
    pub fn try_trace(&self, key: &str) -> Option<Value> {
        let out = Command::new(bin())
            .args(["trace", "order-review", key, "--json", "--local"])
            .arg(&self.info_path)
            .current_dir(root())
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_REGION")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(1) && stderr.contains("no such workflow record") {
            return None;
        }
        assert!(out.status.success(), "trace failed: {stderr}");
        Some(serde_json::from_slice(&out.stdout).expect("trace JSON"))
    }

    /// `baton rollout plan --to <to>` against this stack: (exit status, stdout).
    pub fn rollout_plan(&self, to: &Path) -> (i32, String) {
        let out = Command::new(bin())
            .args(["rollout", "plan", "--to"])
            .arg(to)
            .arg("--local")
            .arg(&self.info_path)
            .current_dir(root())
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("BATON_TABLE")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let code = out.status.code().unwrap_or(-1);
        assert!(code != 2, "rollout plan failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
        (code, stdout)
    }

    /// SIGHUP: `baton local` deploys its config file again; waits until it says so.
    pub fn reload(&self) -> String {
        let _ = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status();
        self.wait_for_line("baton local reloaded", Duration::from_secs(90))
    }

    /// SIGINT, as Ctrl-C sends it; returns whether it exited within `limit`.
    pub fn interrupt(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() && !self.interrupt(Duration::from_secs(15)) {
            let _ = self.child.kill();
        }
    }
}

pub fn transitions(trace: &Value) -> Vec<String> {
    trace["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "transition")
        .map(|e| e["to"].as_str().unwrap().to_owned())
        .collect()
}

pub async fn eventually_trace(local: &Local, key: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = local.try_trace(key).unwrap_or(Value::Null);
        if !t.is_null() && check(&t) {
            return t;
        }
        if Instant::now() >= deadline {
            let logged: Vec<String> = local.lines.try_iter().filter(|l| !l.contains("\"DEBUG\"")).collect();
            panic!(
                "timed out waiting for {what}; baton local logged:\n{}\nlast trace: {t:#}",
                logged.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
