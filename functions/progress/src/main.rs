//! The progress Lambda. The logic is `baton_core::use_cases::progress`; `serve_sqs` wires it up once per cold start.

// mimalloc, not the system allocator: about a fifth less CPU per input (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton_lambda::serve_sqs(baton_core::use_cases::progress::Progress::new).await
}
