//! `gateway-edge`: the HTTP edge alone, for the deployment that runs each component as a
//! process of its own (`--mcp-service`, `--oauth-service`). It refuses `--standalone`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    mcp_proto::runtime::serve("gateway-edge", async {
        gateway::entry::main("gateway-edge", None).await;
    })
}
