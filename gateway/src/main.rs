use clap::Parser as _;
use gateway::config::Cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let _telemetry = mcp_proto::telemetry::init("gateway");
    mcp_proto::telemetry::every_second(mcp_proto::mimalloc::return_freed_memory);
    let cli = Cli::parse();
    let config = match cli.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gateway: invalid configuration: {e}");
            std::process::exit(mcp_proto::runtime::EXIT_CONFIG);
        }
    };
    let shutdown = mcp_proto::runtime::shutdown_on_signal();
    let outcome = if cli.standalone {
        gateway::standalone::run(config, shutdown).await
    } else {
        gateway::run(config, shutdown).await
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "gateway failed");
        std::process::exit(1);
    }
}
