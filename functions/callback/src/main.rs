//! The callback Lambda behind API Gateway. The logic is `baton::callback`.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton::runtime::serve_callback().await
}
