//! The callback Lambda behind API Gateway. The logic is `baton_core::use_cases::callback`.

// mimalloc, not the system allocator: about a fifth less CPU per input (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton_lambda::serve_callback(baton_secrets_manager::SecretsManagerSource::shared).await
}
