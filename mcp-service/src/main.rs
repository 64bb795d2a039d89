//! `mcp-service`: the JSON-RPC engine, with registry-service linked in for when no
//! `--registry` is given.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Over stdio it serves one client alone: no other service takes turns with it on a core,
    // and the client waits on each answer, so it keeps the normal scheduling policy unless
    // MCP_SCHED_POLICY says otherwise.
    let stdio = std::env::args_os().skip(1).any(|arg| arg == "--stdio");
    let policy = if stdio { mcp_proto::scheduling::Policy::Normal } else { mcp_proto::scheduling::Policy::Batch };
    mcp_proto::runtime::serve_with_policy("mcp-service", policy, async {
        mcp_service::entry::main("mcp-service", Some(mcp_service::embedded_registry)).await;
    })
}
