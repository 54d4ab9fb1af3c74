//! The sweeper Lambda, run on a schedule. The logic is `baton::sweeper`.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton::runtime::serve_sweeper().await
}
