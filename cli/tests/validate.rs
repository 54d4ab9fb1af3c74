//! `baton validate` and `baton match`, run as a user runs them: the real binary, real files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn baton(args: &[&str]) -> Output {
    common::baton_in(&root(), args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn given_the_sample_config_when_validated_then_it_exits_0_with_a_line_per_workflow() {
    let out = baton(&["validate"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(stdout.lines().any(|l| l.starts_with("order-review: key /subject")), "{stdout}");
    assert!(
        stdout.contains(
            "manual-review (needs decision, timeout 2d) -> payment (needs payment_ref, timeout 7d)"
        ),
        "{stdout}"
    );
    // The config's version: the hash of its canonical form, as records and rollout plans name it.
    let config =
        baton_core::domain::config::Config::load(&root().join(baton_core::domain::config::DEFAULT_PATH))
            .unwrap();
    assert!(config.version.starts_with('v') && config.version.len() == 13, "{}", config.version);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with(&format!("1 workflow(s), valid, version {}", config.version)), "{stdout}");
}

#[test]
fn given_each_invalid_config_when_validated_then_it_fails_naming_every_expected_path() {
    let dir = root().join("tests/fixtures/configs/invalid");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 8, "at least 8 invalid configs, found {}", files.len());
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<&str> = source.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
        assert!(!expected.is_empty(), "{} has no `# expect:` line", file.display());
        let out = baton(&["validate", file.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", file.display());
        for want in &expected {
            assert!(stderr.contains(want), "{}: expected {want:?} in:\n{stderr}", file.display());
        }
        // Every problem is listed, not only the first: the header counts them.
        assert!(
            stderr.contains(&format!("({} problem", expected.len())) || expected == ["duplicate"],
            "{}: {stderr}",
            file.display()
        );
    }
}

#[test]
fn given_an_eligible_event_when_matched_then_the_workflow_and_key_are_named() {
    let out = baton(&["match", "tests/fixtures/events/order-placed.cloudevents.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("order-review: starts, key order-1001"), "{}", text(&out.stdout));
}

#[test]
fn given_an_ineligible_event_when_matched_then_no_workflow_starts_but_accepting_steps_are_named() {
    let out = baton(&[
        "match",
        "--config",
        "infra/workflows.yaml",
        "tests/fixtures/events/payment-settled.cloudevents.json",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.contains("starts no workflow"), "{stdout}");
    assert!(stdout.contains("step 1 (payment) accepts this event"), "{stdout}");
}

#[test]
fn given_an_invalid_event_when_matched_then_it_fails_naming_the_field() {
    let out = baton(&["match", "tests/fixtures/events/invalid/missing-source.cloudevents.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing required field `source`"), "{}", text(&out.stderr));
}

#[test]
fn a_parallel_group_is_shown_with_its_branches_side_by_side_and_a_bad_one_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "workflows:\n  wf:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
         - { name: review, requires: [d], timeout: 1h }\n      \
         - parallel:\n          name: checks\n          branches:\n            \
         - { name: fraud, requires: [s], timeout: 1d }\n            \
         - { name: address, requires: [a], timeout: 2h, optional: true }\n",
    )
    .unwrap();
    let out = baton(&["validate", good.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "review (needs d, timeout 1h) -> checks [fraud (needs s, timeout 1d) | address (needs a, timeout 2h, optional)]"
        ),
        "{}",
        text(&out.stdout)
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "workflows:\n  wf:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
         - parallel:\n          name: checks\n          branches:\n            \
         - { name: fraud, requires: [s] }\n",
    )
    .unwrap();
    let out = baton(&["validate", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "workflows.wf.steps[0].parallel.branches: a parallel group needs at least two branches, found 1"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("workflows.wf.steps[0].parallel.branches[0].timeout: missing"), "{stderr}");
}
