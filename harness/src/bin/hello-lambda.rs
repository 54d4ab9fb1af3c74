//! A Rust hello world on lambda_runtime, answering every event with `{"hello": "world"}`: the
//! calibration row of `make bench`. What it takes to start under the harness on this machine is
//! what any Rust function pays before its own init; baton's functions are measured against it.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        |_: lambda_runtime::LambdaEvent<serde_json::Value>| async {
            Ok::<_, lambda_runtime::Error>(serde_json::json!({"hello": "world"}))
        },
    ))
    .await
}
