//! A panic in a handler reaches Lambda as the invocation's error, not as a dead process: what the
//! functions' release profile relies on (`panic = "unwind"`, Cargo.toml; docs/PERFORMANCE.md).
//! With `panic = "abort"` the process would die mid-invocation, Lambda would see only an exit,
//! and an SQS batch would come back whole, with no cause.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use lambda_harness::{Function, Outcome};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_panicking_handler_is_reported_as_the_invocations_error_and_the_function_lives_on() {
    let binary = Path::new(env!("CARGO_BIN_EXE_hello-lambda"));
    let mut function = Function::spawn("hello", binary, &BTreeMap::new()).await.expect("it starts");
    function.ready(WITHIN).await.expect("it asks for an event");

    let answer = function.invoke(&json!({"panic": "the handler gave up"}), WITHIN).await.expect("an answer");
    let Outcome::Error(report) = answer.outcome else { panic!("an error report, got {:?}", answer.outcome) };
    assert!(report.error_message().contains("the handler gave up"), "the panic's message: {report:?}");

    let answer = function.invoke(&json!({}), WITHIN).await.expect("an answer");
    assert_eq!(answer.outcome, Outcome::Response(json!({"hello": "world"})), "the next event is served");
    function.stop().await;
}

/// The release profile the functions ship with unwinds panics, so the test above is what Lambda
/// sees from them too (cargo-lambda would otherwise build with `panic = "abort"`).
#[test]
fn the_release_profile_unwinds_panics() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).unwrap();
    let release = manifest.split("[profile.release]").nth(1).expect("a release profile");
    let release = release.split("\n[").next().unwrap_or_default();
    assert!(release.lines().any(|l| l.trim() == "panic = \"unwind\""), "[profile.release]{release}");
}
