//! The `main` of both gateway binaries.
//!
//! `gateway` links every component in, so `--standalone` can run them all in one process.
//! `gateway-edge` is the same edge without them, for the deployment that runs each component
//! as a process of its own: the embedded components' code is then not in the binary, and
//! none of it is mapped in around the code the edge runs (its resident memory under load
//! is about 3 MiB lower; docs/performance.md).

use clap::{CommandFactory as _, FromArgMatches as _};
use futures_util::future::BoxFuture;
use mcp_proto::runtime::refuse_config;
use tokio_util::sync::CancellationToken;

use crate::config::Cli;
use crate::{Config, Error};

/// What `--standalone` runs: every component in this process.
pub type Standalone = fn(Config, CancellationToken) -> BoxFuture<'static, Result<(), Error>>;

/// Parse the command line as `binary`, then serve until a signal; exits the process on a
/// configuration error (64) or a failure (1). Without `standalone`, `--standalone` is a
/// configuration error that names the binary that has it.
pub async fn main(binary: &'static str, standalone: Option<Standalone>) {
    let telemetry = mcp_proto::telemetry::init("gateway");
    mcp_proto::telemetry::every_second(mcp_proto::mimalloc::return_freed_memory);
    let mut command = Cli::command().name(binary).bin_name(binary);
    if standalone.is_none() {
        command = ["standalone", "definitions", "data_dir"]
            .into_iter()
            .fold(command, |c, arg| c.mut_arg(arg, |a| a.hide(true)))
            .about("The MCP HTTP gateway, the edge alone: mcp-service and oauth-service run as processes of their own");
    }
    let matches = command.get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let embedded = match (cli.standalone, standalone) {
        (true, None) => refuse_config(
            binary,
            "--standalone: this binary has only the edge; `gateway --standalone` runs every component in one process",
        ),
        (true, Some(run)) => Some(run),
        (false, _) => None,
    };
    let config = cli.load().unwrap_or_else(|e| refuse_config(binary, e));
    mcp_proto::telemetry::log_runtime();
    let shutdown = mcp_proto::runtime::shutdown_on_signal();
    let outcome = match embedded {
        Some(run) => run(config, shutdown).await,
        None => crate::run(config, shutdown).await,
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "gateway failed");
        std::process::exit(1);
    }
    telemetry.finish().await;
}
