//! `mcp-service-remote`: the JSON-RPC engine for the deployment that runs each component as a
//! process of its own. It calls registry-service over gRPC and refuses to start without
//! `--registry`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    mcp_service::entry::main("mcp-service-remote", None).await;
}
