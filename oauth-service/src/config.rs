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
    /// Take the client address from the last `X-Forwarded-For` entry (set this when only the
    /// gateway can reach the service, as in standalone mode and the Kubernetes manifests).
    pub trust_forwarded_for: bool,
    /// Registrations accepted per client IP per minute (0: no limit).
    pub registration_per_minute: u32,
    /// Requests to `/oauth/token` accepted per client IP per minute, with a burst of as many
    /// (0: no limit).
    pub token_per_minute: u32,
    pub access_token_ttl_secs: u64,
    pub refresh_token_ttl_secs: u64,
    pub code_ttl_secs: u64,
    /// A rotated refresh token sent again within this many seconds is honoured (clients that
    /// refresh concurrently); later, its reuse revokes the grant.
    pub refresh_reuse_grace_secs: u64,
    /// Client ID Metadata Documents: an https URL as `client_id` is fetched and trusted.
    pub client_metadata_documents: bool,
    /// Allow metadata documents on http and on private or loopback addresses (tests only).
    pub client_metadata_allow_private: bool,
    /// Clients from configuration, so clients keep working with registration off.
    pub clients: Vec<StaticClient>,
    /// How long in-flight requests may run after a shutdown signal.
    pub shutdown_grace_secs: u64,
}

/// A client declared in configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticClient {
    pub client_id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// The SHA-256 of the client secret, Base64url without padding (`oauth-service hash-secret`
    /// prints it); absent for a public client.
    #[serde(default)]
    pub secret_sha256: Option<String>,
    /// Default: `authorization_code` and `refresh_token`, or `client_credentials` for a
    /// confidential client without redirect URIs.
    #[serde(default)]
    pub grant_types: Vec<String>,
    #[serde(default = "default_application_type")]
    pub application_type: String,
}

fn default_application_type() -> String {
    "web".to_owned()
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
            trust_forwarded_for: false,
            registration_per_minute: 20,
            token_per_minute: 3000,
            access_token_ttl_secs: 3600,
            refresh_token_ttl_secs: 30 * 24 * 3600,
            code_ttl_secs: 60,
            refresh_reuse_grace_secs: 5,
            client_metadata_documents: true,
            client_metadata_allow_private: false,
            clients: Vec::new(),
            shutdown_grace_secs: 10,
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
            && !(db.starts_with("sqlite:") || db.starts_with("postgres:") || db.starts_with("postgresql:"))
        {
            return Err("database: must be a sqlite: or postgres: URL".into());
        }
        for (i, c) in self.clients.iter().enumerate() {
            let at = format!("clients[{i}] ({})", c.client_id);
            if c.client_id.is_empty() {
                return Err(format!("{at}: client_id is empty"));
            }
            if c.client_id.starts_with("https://") || c.client_id.starts_with("http://") {
                return Err(format!("{at}: a URL client_id is a metadata document, not a static client"));
            }
            for uri in &c.redirect_uris {
                crate::registration::redirect_allowed(uri, &c.application_type).map_err(|e| format!("{at}: {e}"))?;
            }
            if c.secret_sha256.is_none() && c.redirect_uris.is_empty() {
                return Err(format!("{at}: a public client needs redirect_uris"));
            }
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

    /// The database URL in effect: a relative SQLite file is in the data directory.
    pub fn database_url(&self) -> String {
        match (&self.database, &self.data_dir) {
            (Some(url), Some(dir)) => match sqlite_file(url) {
                Some(file) if file.is_relative() => {
                    let options = url.find('?').map_or("", |i| &url[i..]);
                    format!("sqlite://{}{options}", dir.join(file).display())
                }
                _ => url.clone(),
            },
            (Some(url), None) => url.clone(),
            (None, Some(dir)) => format!("sqlite://{}", dir.join("oauth.db").display()),
            (None, None) => "sqlite::memory:".to_owned(),
        }
    }

    /// Refuse a SQLite database whose directory this process cannot write: SQLite creates its
    /// journal files beside the database, so it would otherwise fail on the first write (a
    /// read-only root filesystem, a read-only mount). Creates the directory when missing.
    pub fn check_database_dir(&self) -> Result<(), String> {
        let Some(file) = sqlite_file(&self.database_url()) else { return Ok(()) };
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        mcp_proto::runtime::check_writable_dir(&dir).map_err(|e| {
            format!(
                "database: {e}: SQLite keeps its journal beside the database; mount a writable volume \
                 there (a relative path is in data_dir), or use PostgreSQL"
            )
        })
    }
}

/// The file of a `sqlite:` URL (none for other databases and in-memory ones).
fn sqlite_file(url: &str) -> Option<PathBuf> {
    use std::str::FromStr as _;
    if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    Some(options.get_filename().to_path_buf())
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
    /// Database URL: sqlite://PATH or postgres://…
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// Data directory: signing keys and the default SQLite database.
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long, global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// An administration command; without one, the server runs.
    #[command(subcommand)]
    #[serde(skip)]
    pub command: Option<crate::admin::Command>,
}

impl Cli {
    pub fn load(&self) -> Result<Config, String> {
        let config: Config =
            mcp_proto::runtime::load_config(self.config.as_deref(), "OAUTH_", self).map_err(|e| e.to_string())?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(database: Option<&str>, data_dir: Option<&std::path::Path>) -> Config {
        Config { database: database.map(str::to_owned), data_dir: data_dir.map(Into::into), ..Config::default() }
    }

    #[test]
    fn a_relative_sqlite_file_is_in_the_data_directory() {
        let dir = std::path::Path::new("/var/lib/oauth");
        assert_eq!(config(Some("sqlite://oauth.db"), Some(dir)).database_url(), "sqlite:///var/lib/oauth/oauth.db");
        assert_eq!(
            config(Some("sqlite:db/o.db?mode=rwc"), Some(dir)).database_url(),
            "sqlite:///var/lib/oauth/db/o.db?mode=rwc"
        );
        assert_eq!(config(Some("sqlite:///srv/o.db"), Some(dir)).database_url(), "sqlite:///srv/o.db", "absolute");
        assert_eq!(config(Some("sqlite::memory:"), Some(dir)).database_url(), "sqlite::memory:");
        assert_eq!(config(Some("postgres://db/oauth"), Some(dir)).database_url(), "postgres://db/oauth");
        assert_eq!(config(Some("sqlite://oauth.db"), None).database_url(), "sqlite://oauth.db", "no data_dir");
    }

    #[test]
    fn an_unwritable_database_directory_is_refused_naming_it() {
        let tmp = tempfile::tempdir().expect("dir");
        assert!(config(None, Some(&tmp.path().join("new"))).check_database_dir().is_ok(), "created when missing");
        assert!(tmp.path().join("new").is_dir());
        assert!(config(Some("postgres://db/oauth"), None).check_database_dir().is_ok());
        assert!(config(None, None).check_database_dir().is_ok(), "in memory");
        // Below a regular file nothing can be created, whoever we run as.
        let file = tmp.path().join("a-file");
        std::fs::write(&file, "").expect("write");
        let err =
            config(Some("sqlite://oauth.db"), Some(&file.join("data"))).check_database_dir().expect_err("refused");
        assert!(err.contains(&file.join("data").display().to_string()) && err.contains("not writable"), "{err}");
    }
}
