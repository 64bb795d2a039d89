//! `mcp-service-remote`: the JSON-RPC engine for the deployment that runs each component as a
//! process of its own. It calls registry-service over gRPC and refuses to start without
//! `--registry`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    mcp_proto::runtime::serve("mcp-service-remote", async {
        mcp_service::entry::main("mcp-service-remote", None).await;
    })
}
