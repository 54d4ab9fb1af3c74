//! The intake function's real binary, run under a Lambda Runtime API on loopback against the
//! emulator (the scenario: tests/src/functions.rs).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_intake_binary_runs_under_the_lambda_runtime_api() {
    baton_tests::functions::intake_scenario(env!("CARGO_BIN_EXE_baton-intake")).await;
}
