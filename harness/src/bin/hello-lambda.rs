//! A Rust hello world on lambda_runtime, answering every event with `{"hello": "world"}`: the
//! calibration row of `make bench`. What it takes to start under the harness on this machine is
//! what any Rust function pays before its own init; baton's functions are measured against it.
//!
//! An event `{"panic": "<message>"}` panics in the handler instead: `harness/tests/panic.rs`
//! shows with it what the functions' release profile relies on (`panic = "unwind"`): a panic is
//! reported to Lambda as that invocation's error, and the function lives on for the next one.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        |event: lambda_runtime::LambdaEvent<serde_json::Value>| async move {
            if let Some(message) = event.payload.get("panic").and_then(|m| m.as_str()) {
                panic!("{message}");
            }
            Ok::<_, lambda_runtime::Error>(serde_json::json!({"hello": "world"}))
        },
    ))
    .await
}
