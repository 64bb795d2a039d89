use clap::Parser as _;
use registry_service::config::Cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    mcp_proto::runtime::serve("registry-service", async {
        let telemetry = mcp_proto::telemetry::init("registry-service");
        mcp_proto::telemetry::every_second(mcp_proto::mimalloc::return_freed_memory);
        let cli = Cli::parse();
        let config = cli.load().unwrap_or_else(|e| mcp_proto::runtime::refuse_config("registry-service", e));
        if cli.validate_only {
            match registry_service::load_catalog(&config) {
                Ok(c) => {
                    println!(
                        "ok: {} tools, {} resources, {} resource templates, {} prompts",
                        c.tools.len(),
                        c.resources.len(),
                        c.templates.len(),
                        c.prompts.len()
                    );
                    telemetry.finish().await;
                    return;
                }
                Err(e) => {
                    eprintln!("registry-service: {e}");
                    std::process::exit(1);
                }
            }
        }
        mcp_proto::telemetry::log_runtime();
        let shutdown = mcp_proto::runtime::shutdown_on_signal();
        if let Err(e) = registry_service::run(config, shutdown).await {
            tracing::error!(error = %e, "registry-service failed");
            std::process::exit(1);
        }
        telemetry.finish().await;
    })
}
