//! registry-service configuration: defaults < `--config` file < `REGISTRY_*` env < flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The operator's definitions file (YAML or JSON).
    pub definitions: Option<PathBuf>,
    /// Where relative SQLite files of the definitions' `databases` live (default: next to the
    /// definitions file). Must be writable: checked at start.
    pub data_dir: Option<PathBuf>,
    /// Shared token callers must present (see `mcp_proto::trust`); unchecked when unset.
    pub service_token: Option<String>,
    /// Admin address serving `/metrics` (Prometheus); none when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// How long in-flight calls may run after a shutdown signal.
    pub shutdown_grace_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 50052).into(),
            definitions: None,
            data_dir: None,
            service_token: None,
            metrics_listen: None,
            shutdown_grace_secs: 10,
        }
    }
}

/// Command-line flags; only the ones given override the file and environment.
#[derive(Debug, clap::Parser, Serialize)]
#[command(name = "registry-service", version, about = "The MCP catalog service (gRPC)")]
pub struct Cli {
    /// Address to listen on (gRPC), e.g. 127.0.0.1:50052.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Definitions file describing tools, resources and prompts.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definitions: Option<PathBuf>,
    /// Check the configuration and definitions, print the result and exit.
    #[arg(long)]
    #[serde(skip)]
    pub validate_only: bool,
    /// TOML configuration file.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl Cli {
    pub fn load(&self) -> Result<Config, Box<figment::Error>> {
        mcp_proto::runtime::load_config(self.config.as_deref(), "REGISTRY_", self)
    }
}
