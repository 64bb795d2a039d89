//! gateway configuration: defaults < `--config` file < `GATEWAY_*` env < flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::headers::OriginPolicy;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// mcp-service: a URL (`http://host:port`), several separated by commas, or
    /// `dns:///host:port` (calls spread over the replicas). Set by standalone mode itself.
    pub mcp_service: Option<String>,
    /// URL of oauth-service (`http://host:port`). Set by standalone mode itself.
    pub oauth_service: Option<String>,
    /// The public base URL of this gateway (the OAuth issuer in standalone mode).
    pub public_url: Option<Url>,
    /// Largest accepted request body, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Host names accepted in `Host` (empty: loopback names on a loopback bind, else any).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// How long in-flight requests may run after a shutdown signal.
    pub shutdown_grace_secs: u64,
    /// Standalone mode: the definitions file for the embedded registry.
    pub definitions: Option<PathBuf>,
    /// Standalone mode: where embedded state (SQLite) lives.
    pub data_dir: PathBuf,
    /// `off` (default; loopback only unless `allow_unauthenticated`), `oauth` (bearer JWTs from
    /// the authorisation server) or `token` (static API tokens).
    pub auth: String,
    /// The expected token issuer (the authorisation server's public URL); default: the public URL.
    pub issuer: Option<Url>,
    /// Scopes advertised in the protected resource metadata and in challenges.
    pub scopes: Vec<String>,
    /// Clock skew tolerated when checking token expiry, in seconds.
    pub clock_skew_secs: u64,
    /// Static API tokens (by SHA-256), for `--auth token`, and beside OAuth with `--auth oauth`.
    pub api_tokens: Vec<crate::auth::ApiToken>,
    /// `jwt` (default: tokens checked locally against the JWKS) or `introspect` (every token
    /// checked with the authorisation server, so revocation takes effect at once).
    pub token_validation: String,
    /// The gateway's confidential client for introspection (standalone mode makes its own).
    pub introspection_client_id: Option<String>,
    pub introspection_client_secret: Option<String>,
    /// Seconds a client may take to send a request body (408 after).
    pub body_timeout_secs: u64,
    /// Requests per second on `/mcp` per client address (burst of twice that; 0: no limit).
    pub rate_limit_per_ip: u32,
    /// Requests per second on `/mcp` per authenticated caller (0: no limit).
    pub rate_limit_per_client: u32,
    /// Streams one client (the caller, else its address) may keep open on `/mcp`: legacy GET
    /// streams and POST replies sent as SSE (429 past it; 0: no cap).
    pub max_streams_per_client: usize,
    /// Proxies (CIDRs or addresses) whose `X-Forwarded-For` names the client: the right-most
    /// entry not itself in the list is the client's address (empty: the TCP peer always).
    pub trusted_proxies: Vec<String>,
    /// Largest accepted request header section, names and values together, in bytes (431 above).
    pub max_header_bytes: usize,
    /// Bytes of modern `cacheScope: public` results kept and answered again for their `ttlMs`
    /// without asking mcp-service (0: off).
    pub result_cache_bytes: usize,
    /// Shared token presented to mcp-service (see `mcp_proto::trust`).
    pub service_token: Option<String>,
    /// Serve without authentication on a non-loopback address (refused unless set).
    pub allow_unauthenticated: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 8080).into(),
            mcp_service: None,
            oauth_service: None,
            public_url: None,
            max_body_bytes: 4 * 1024 * 1024,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            shutdown_grace_secs: 10,
            definitions: None,
            data_dir: PathBuf::from("data"),
            auth: "off".to_owned(),
            issuer: None,
            scopes: vec!["mcp".to_owned()],
            clock_skew_secs: 30,
            api_tokens: Vec::new(),
            token_validation: "jwt".to_owned(),
            introspection_client_id: None,
            introspection_client_secret: None,
            body_timeout_secs: 30,
            rate_limit_per_ip: 0,
            rate_limit_per_client: 0,
            max_streams_per_client: 32,
            trusted_proxies: Vec::new(),
            max_header_bytes: 32 * 1024,
            result_cache_bytes: 16 * 1024 * 1024,
            service_token: None,
            allow_unauthenticated: false,
        }
    }
}

impl Config {
    /// The public base URL: configured, or the bound address.
    pub fn public_base(&self, bound: SocketAddr) -> String {
        match &self.public_url {
            Some(u) => u.as_str().trim_end_matches('/').to_owned(),
            None => format!("http://{bound}"),
        }
    }

    pub fn oauth(&self) -> bool {
        self.auth == "oauth"
    }

    /// Refuse to serve an unauthenticated endpoint beyond this machine by accident.
    pub fn check_exposure(&self, bound: SocketAddr) -> Result<(), String> {
        if self.auth == "off" && !bound.ip().is_loopback() && !self.allow_unauthenticated {
            return Err(format!(
                "auth: refusing to serve {bound} without authentication; use --auth oauth or token, or set \
                 allow_unauthenticated = true (GATEWAY_ALLOW_UNAUTHENTICATED=true) if something in front authenticates"
            ));
        }
        Ok(())
    }

    pub fn origin_policy(&self, bound: SocketAddr) -> OriginPolicy {
        OriginPolicy {
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_origins: self.allowed_origins.clone(),
            loopback_only: bound.ip().is_loopback(),
        }
    }
}

#[derive(Debug, clap::Parser, Serialize)]
#[command(name = "gateway", version, about = "The MCP HTTP gateway; --standalone runs every component in one process")]
pub struct Cli {
    /// Run all four components in this process (embedded default).
    #[arg(long)]
    #[serde(skip)]
    pub standalone: bool,
    /// Address to listen on (HTTP), e.g. 127.0.0.1:8080.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// mcp-service: a URL (http://127.0.0.1:50051), several separated by commas, or
    /// dns:///host:port (every address of the name; calls spread over them).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_service: Option<String>,
    /// oauth-service URL, e.g. http://127.0.0.1:9090.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth_service: Option<String>,
    /// Public base URL of this gateway, e.g. https://mcp.example.com.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<Url>,
    /// Definitions file (standalone mode).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definitions: Option<PathBuf>,
    /// Data directory (standalone mode).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// `off`, `oauth` (bearer JWTs from the authorisation server) or `token` (static API tokens).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// TOML configuration file.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl Cli {
    pub fn load(&self) -> Result<Config, String> {
        let config: Config =
            mcp_proto::runtime::load_config(self.config.as_deref(), "GATEWAY_", self).map_err(|e| e.to_string())?;
        if !self.standalone {
            if config.mcp_service.is_none() {
                return Err(
                    "mcp_service: required (flag --mcp-service or GATEWAY_MCP_SERVICE), unless `gateway --standalone` runs every component".into()
                );
            }
            if let Some(target) = &config.mcp_service {
                mcp_proto::balance::Target::parse(target).map_err(|e| format!("mcp_service: {e}"))?;
            }
            if config.oauth_service.is_none() {
                return Err(
                    "oauth_service: required (flag --oauth-service or GATEWAY_OAUTH_SERVICE), unless `gateway --standalone` runs every component"
                        .into(),
                );
            }
        }
        if !["off", "oauth", "token"].contains(&config.auth.as_str()) {
            return Err(format!("auth: `{}` must be off, oauth or token", config.auth));
        }
        config.check_exposure(config.listen)?;
        if config.token_validation != "jwt" && config.token_validation != "introspect" {
            return Err(format!("token_validation: `{}` must be jwt or introspect", config.token_validation));
        }
        if !self.standalone
            && config.token_validation == "introspect"
            && (config.introspection_client_id.is_none() || config.introspection_client_secret.is_none())
        {
            return Err(
                "token_validation = introspect needs introspection_client_id and introspection_client_secret".into()
            );
        }
        if config.auth == "token" && config.api_tokens.is_empty() {
            return Err("auth: `token` needs at least one entry in api_tokens".into());
        }
        for (i, t) in config.api_tokens.iter().enumerate() {
            if t.name.is_empty() || t.sha256.len() != 43 {
                return Err(format!(
                    "api_tokens[{i}]: needs a name and the token's SHA-256, Base64url (43 characters)"
                ));
            }
        }
        if config.max_body_bytes == 0 {
            return Err("max_body_bytes: must be greater than 0".into());
        }
        // A body travels to mcp-service in one message, with the call's other fields around it.
        const MIB: usize = 1024 * 1024;
        let most = mcp_proto::MAX_MESSAGE_BYTES - MIB;
        if config.max_body_bytes > most {
            return Err(format!(
                "max_body_bytes: at most {most} ({} MiB: the services pass messages of up to {} MiB, a body and what travels with it)",
                most / MIB,
                mcp_proto::MAX_MESSAGE_BYTES / MIB
            ));
        }
        crate::client_addr::TrustedProxies::parse(&config.trusted_proxies)?;
        if config.max_header_bytes < 1024 {
            return Err("max_header_bytes: must be at least 1024".into());
        }
        Ok(config)
    }
}
