//! `mcp-service`: the JSON-RPC engine, with registry-service linked in for when no
//! `--registry` is given.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    mcp_proto::runtime::serve("mcp-service", async {
        mcp_service::entry::main("mcp-service", Some(mcp_service::embedded_registry)).await;
    })
}
