//! Compiles the contracts with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["mcp/v1/mcp.proto", "registry/v1/registry.proto"];
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
