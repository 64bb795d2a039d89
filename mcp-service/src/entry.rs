//! The `main` of both mcp-service binaries.
//!
//! `mcp-service` links registry-service in, and runs it in process when no `--registry` is
//! given (`mcp-service --stdio --definitions FILE`). `mcp-service-remote` always calls a
//! registry-service over gRPC, for the deployment that runs each component as a process of
//! its own: registry-service's code is then not in the binary, and none of it is mapped in
//! around the code the service runs (docs/performance.md).

use clap::{CommandFactory as _, FromArgMatches as _};
use mcp_proto::runtime::refuse_config;

use crate::EmbeddedRegistry;
use crate::config::Cli;

/// Parse the command line as `binary`, then serve (gRPC, or stdio with `--stdio`) until a
/// signal or the end of stdin; exits the process on a configuration error (64) or a failure (1).
pub async fn main(binary: &'static str, embedded: Option<EmbeddedRegistry>) {
    let telemetry = mcp_proto::telemetry::init("mcp-service");
    mcp_proto::telemetry::every_second(mcp_proto::mimalloc::return_freed_memory);
    let mut command = Cli::command().name(binary).bin_name(binary);
    if embedded.is_none() {
        command = command
            .mut_arg("definitions", |a| a.hide(true))
            .about("The MCP JSON-RPC engine (gRPC or stdio), calling registry-service over gRPC (--registry)");
    }
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    let config = cli.load().unwrap_or_else(|e| refuse_config(binary, e));
    match config.registry.as_deref().map(mcp_proto::balance::Target::parse) {
        Some(Err(e)) => refuse_config(binary, format_args!("registry: {e}")),
        None if embedded.is_none() => refuse_config(binary, crate::NO_EMBEDDED_REGISTRY),
        _ => {}
    }
    mcp_proto::telemetry::log_runtime();
    let shutdown = mcp_proto::runtime::shutdown_on_signal();
    let outcome = if cli.stdio {
        crate::run_stdio(config, embedded, shutdown).await
    } else {
        crate::run(config, embedded, shutdown).await
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "mcp-service failed");
        std::process::exit(1);
    }
    telemetry.finish().await;
}
