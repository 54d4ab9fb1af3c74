//! The intake Lambda. The logic is `baton::intake`; `serve_sqs` wires it up once per cold start.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton::runtime::serve_sqs(baton::intake::Intake::new).await
}
