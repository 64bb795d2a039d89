use clap::Parser as _;
use oauth_service::config::Cli;

fn main() {
    mcp_proto::runtime::serve("oauth-service", async {
        let telemetry = mcp_proto::telemetry::init("oauth-service");
        let mut cli = Cli::parse();
        let command = cli.command.take();
        let config = cli.load().unwrap_or_else(|e| mcp_proto::runtime::refuse_config("oauth-service", e));
        if let Some(command) = command {
            match oauth_service::admin::run(command, &config).await {
                Ok(out) => {
                    if !out.is_empty() {
                        println!("{out}");
                    }
                    telemetry.finish().await;
                    return;
                }
                Err(e) => {
                    eprintln!("oauth-service: {e}");
                    std::process::exit(1);
                }
            }
        }
        mcp_proto::telemetry::log_runtime();
        let shutdown = mcp_proto::runtime::shutdown_on_signal();
        if let Err(e) = oauth_service::run(config, shutdown).await {
            tracing::error!(error = %e, "oauth-service failed");
            std::process::exit(1);
        }
        telemetry.finish().await;
    })
}
