//! `baton rollout plan` as CI runs it before a deploy: the real binary, a config from a file or a
//! git ref, the exit status that stops a pipeline, and the `baton.rollout/v1` document. Offline
//! (no stack): changes that depend on live records need a person.

mod common;

use std::path::Path;
use std::process::Command;

use common::baton_in as baton;

const SAMPLE: &str = include_str!("../../infra/workflows.yaml");
const CONFIG: &str = "infra/workflows.yaml";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A git repository holding the sample config, committed: what a pipeline checks out.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("infra")).unwrap();
    std::fs::write(dir.path().join(CONFIG), SAMPLE).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &["-c", "user.name=ci", "-c", "user.email=ci@example.com", "commit", "-qm", "deployed"],
    ] {
        let out = Command::new("git").args(args).current_dir(dir.path()).output().expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    }
    dir
}

/// The working copy's config changed by `edit`, the committed one left as deployed.
fn change(dir: &Path, edit: impl Fn(&str) -> String) {
    let changed = edit(SAMPLE);
    assert_ne!(changed, SAMPLE, "the edit changes the config");
    std::fs::write(dir.join(CONFIG), changed).unwrap();
}

#[test]
fn an_unchanged_config_is_safe_and_exits_0() {
    let dir = repo();
    let out = baton(dir.path(), &["rollout", "plan", "--from", "HEAD", "--offline"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("(git:HEAD)") && stdout.contains("no change"), "{stdout}");
}

#[test]
fn a_changed_correlation_key_is_breaking_exits_1_and_is_named() {
    let dir = repo();
    change(dir.path(), |c| c.replace("key: /subject", "key: /data/order_id"));
    let out = baton(dir.path(), &["rollout", "plan", "--from", "HEAD", "--offline"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("breaking")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("key_changed") && line.contains("order-review"), "{line}");
}

#[test]
fn a_removed_workflow_offline_needs_a_person_exits_3_and_the_json_says_why() {
    let dir = repo();
    // The deployed config from a file, the working copy without any workflow of it.
    let deployed = dir.path().join("deployed.yaml");
    std::fs::write(&deployed, SAMPLE).unwrap();
    change(dir.path(), |c| c.replace("  order-review:", "  order-review-v2:"));
    let out =
        baton(dir.path(), &["rollout", "plan", "--from", deployed.to_str().unwrap(), "--offline", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}{}", text(&out.stdout), text(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON document");
    assert_eq!(plan["schema"], "baton.rollout/v1");
    assert_eq!((plan["counted"].as_bool(), plan["verdict"].as_str()), (Some(false), Some("needs-human")));
    let removed = plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "workflow_removed")
        .unwrap_or_else(|| panic!("{plan}"));
    assert_eq!(
        (removed["workflow"].as_str(), removed["class"].as_str()),
        (Some("order-review"), Some("needs-human"))
    );
    assert!(removed["why"].as_str().unwrap().contains("not counted"), "{removed}");
    assert_ne!(plan["from_version"], plan["to_version"]);
}

#[test]
fn offline_without_from_and_an_unknown_ref_are_refused_with_the_reason() {
    // No verdict: exit 2, never the 1 of a breaking change a pipeline stops on for its own reason.
    let dir = repo();
    let out = baton(dir.path(), &["rollout", "plan", "--offline"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--offline needs --from"), "{}", text(&out.stderr));
    let out = baton(dir.path(), &["rollout", "plan", "--from", "no-such-ref", "--offline"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--from no-such-ref is neither a file nor a git ref"), "{stderr}");
}
