//! mcp-service configuration: defaults < `--config` file < `MCP_SERVICE_*` env < flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dispatch::Settings;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// registry-service: a URL (`http://host:port`), several separated by commas, or
    /// `dns:///host:port` (calls spread over the replicas); without it a registry runs
    /// in-process.
    pub registry: Option<String>,
    /// Definitions file for the in-process registry.
    pub definitions: Option<PathBuf>,
    /// Items per page of `tools/list`, `resources/list`, `prompts/list`.
    pub page_size: usize,
    /// `ttlMs` of list and discovery results (2026-07-28).
    pub list_ttl_ms: u64,
    /// `ttlMs` of `resources/read` results (2026-07-28).
    pub read_ttl_ms: u64,
    /// Secret that seals `requestState` and legacy session ids; every replica needs the same
    /// one (random per process when unset).
    pub state_secret: Option<String>,
    /// Shared token callers must present, and this service presents to registry-service
    /// (see `mcp_proto::trust`); unchecked when unset.
    pub service_token: Option<String>,
    /// Admin address serving `/metrics` (Prometheus); none when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// How long in-flight requests and open streams may run after a shutdown signal.
    pub shutdown_grace_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        let s = Settings::default();
        Self {
            listen: ([127, 0, 0, 1], 50051).into(),
            registry: None,
            definitions: None,
            page_size: s.page_size,
            list_ttl_ms: s.list_ttl_ms,
            read_ttl_ms: s.read_ttl_ms,
            state_secret: None,
            service_token: None,
            metrics_listen: None,
            shutdown_grace_secs: 10,
        }
    }
}

impl Config {
    pub fn settings(&self) -> Settings {
        Settings {
            page_size: self.page_size.max(1),
            list_ttl_ms: self.list_ttl_ms,
            read_ttl_ms: self.read_ttl_ms,
            ..Settings::default()
        }
    }
}

/// Command-line flags; only the ones given override the file and environment.
#[derive(Debug, clap::Parser, Serialize)]
#[command(name = "mcp-service", version, about = "The MCP JSON-RPC engine (gRPC or stdio)")]
pub struct Cli {
    /// Address to listen on (gRPC), e.g. 127.0.0.1:50051.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// registry-service: a URL (http://127.0.0.1:50052), several separated by commas, or
    /// dns:///host:port (every address of the name; calls spread over them).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Definitions file for the in-process registry (when no --registry is given).
    #[arg(long, conflicts_with = "registry")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definitions: Option<PathBuf>,
    /// Serve one client on stdin/stdout instead of gRPC.
    #[arg(long)]
    #[serde(skip)]
    pub stdio: bool,
    /// TOML configuration file.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl Cli {
    pub fn load(&self) -> Result<Config, Box<figment::Error>> {
        mcp_proto::runtime::load_config(self.config.as_deref(), "MCP_SERVICE_", self)
    }
}
