use clap::Parser as _;
use mcp_service::config::Cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let _telemetry = mcp_proto::telemetry::init("mcp-service");
    mcp_proto::telemetry::every_second(mcp_proto::mimalloc::return_freed_memory);
    let cli = Cli::parse();
    let config = match cli.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-service: invalid configuration: {e}");
            std::process::exit(mcp_proto::runtime::EXIT_CONFIG);
        }
    };
    if let Some(Err(e)) = config.registry.as_deref().map(mcp_proto::balance::Target::parse) {
        eprintln!("mcp-service: invalid configuration: registry: {e}");
        std::process::exit(mcp_proto::runtime::EXIT_CONFIG);
    }
    let shutdown = mcp_proto::runtime::shutdown_on_signal();
    let outcome = if cli.stdio {
        mcp_service::run_stdio(config, shutdown).await
    } else {
        mcp_service::run(config, shutdown).await
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "mcp-service failed");
        std::process::exit(1);
    }
}
