//! oauth-service configuration: defaults < `--config` file < `OAUTH_*` env < flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use url::Url;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The issuer identifier: the public URL clients reach this server at.
    pub issuer: Url,
    /// Storage: `sqlite://PATH` or `postgres://…`.
    pub database: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 9090).into(),
            issuer: Url::parse("http://127.0.0.1:8080").expect("a valid literal URL"),
            database: None,
        }
    }
}

impl Config {
    /// Cross-field checks, with messages that name the key.
    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.issuer.scheme(), "https" | "http") {
            return Err(format!("issuer: `{}` must be an https URL (http only for local testing)", self.issuer));
        }
        if self.issuer.query().is_some() || self.issuer.fragment().is_some() {
            return Err(format!("issuer: `{}` must not have a query or fragment (RFC 8414)", self.issuer));
        }
        if let Some(db) = &self.database
            && !(db.starts_with("sqlite:") || db.starts_with("postgres://") || db.starts_with("postgresql://"))
        {
            return Err("database: must be a sqlite: or postgres:// URL".into());
        }
        Ok(())
    }

    /// The issuer as a string without a trailing slash, used to build endpoint URLs.
    pub fn issuer_base(&self) -> String {
        self.issuer.as_str().trim_end_matches('/').to_owned()
    }
}

#[derive(Debug, clap::Parser, Serialize)]
#[command(name = "oauth-service", version, about = "The OAuth 2.0 authorisation server for MCP")]
pub struct Cli {
    /// Address to listen on (HTTP), e.g. 127.0.0.1:9090.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Issuer URL (the public URL of the authorisation server).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<Url>,
    /// Database URL: sqlite://PATH or postgres://...
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// TOML configuration file.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl Cli {
    pub fn load(&self) -> Result<Config, String> {
        let config: Config =
            mcp_proto::runtime::load_config(self.config.as_deref(), "OAUTH_", self).map_err(|e| e.to_string())?;
        config.validate()?;
        Ok(config)
    }
}
