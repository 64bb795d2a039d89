//! Compiles the contracts with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["mcp/v1/mcp.proto", "registry/v1/registry.proto"];
    let fds = protox::compile(files, ["proto"])?;
    // The fields that carry whole JSON messages are `bytes::Bytes`: decoding one takes a slice
    // of the received buffer instead of copying it (a megabyte for a large resource).
    let mut config = tonic_prost_build::configure().build_server(true).build_client(true);
    for field in [
        ".mcp.v1.McpRequest.body",
        ".mcp.v1.McpFrame.json",
        ".mcp.v1.PipeCall.request",
        ".mcp.v1.PipeFrame.frame",
        ".mcp.v1.Outline.parts",
        ".registry.v1.ReadResourceResult.contents_json",
    ] {
        config = config.bytes(field);
    }
    config.compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
