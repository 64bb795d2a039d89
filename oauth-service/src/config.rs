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
    /// Storage: `sqlite://PATH` (default: `oauth.db` in the data directory, or in memory
    /// without one).
    pub database: Option<String>,
    /// Where the signing key (and the default database) live.
    pub data_dir: Option<PathBuf>,
    /// The MCP resource tokens are issued for (their audience); default `{issuer}/mcp`.
    pub resource: Option<Url>,
    /// Scopes advertised in the metadata.
    pub scopes: Vec<String>,
    /// A user created (or updated) at start, for a first sign-in.
    pub bootstrap_user: Option<String>,
    pub bootstrap_password: Option<String>,
    /// Dynamic client registration (RFC 7591).
    pub registration: bool,
    pub access_token_ttl_secs: u64,
    pub refresh_token_ttl_secs: u64,
    pub code_ttl_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 9090).into(),
            issuer: Url::parse("http://127.0.0.1:8080").expect("a valid literal URL"),
            database: None,
            data_dir: None,
            resource: None,
            scopes: vec!["mcp".to_owned()],
            bootstrap_user: None,
            bootstrap_password: None,
            registration: true,
            access_token_ttl_secs: 3600,
            refresh_token_ttl_secs: 30 * 24 * 3600,
            code_ttl_secs: 60,
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
            && !db.starts_with("sqlite:")
        {
            return Err("database: must be a sqlite: URL (PostgreSQL storage is not available yet)".into());
        }
        if self.bootstrap_user.is_some() != self.bootstrap_password.is_some() {
            return Err("bootstrap_user and bootstrap_password go together".into());
        }
        Ok(())
    }

    /// The issuer as a string without a trailing slash, used to build endpoint URLs.
    pub fn issuer_base(&self) -> String {
        self.issuer.as_str().trim_end_matches('/').to_owned()
    }

    /// The resource tokens are for, exactly as clients name it.
    pub fn resource_url(&self) -> String {
        match &self.resource {
            Some(r) => r.as_str().to_owned(),
            None => format!("{}/mcp", self.issuer_base()),
        }
    }

    /// The database URL in effect.
    pub fn database_url(&self) -> String {
        match (&self.database, &self.data_dir) {
            (Some(url), _) => url.clone(),
            (None, Some(dir)) => format!("sqlite://{}?mode=rwc", dir.join("oauth.db").display()),
            (None, None) => "sqlite::memory:".to_owned(),
        }
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
    /// Database URL: sqlite://PATH
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
