//! The callback Lambda behind API Gateway. The logic is `baton::callback`.

// mimalloc, not the system allocator: about a fifth less CPU per input (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    baton::runtime::serve_callback().await
}
