//! Where clients come from: the database (dynamic registration, the admin command), the
//! configuration (static clients, written to the database at start), and Client ID Metadata
//! Documents — a `client_id` that is an https URL is fetched, checked and cached.
//!
//! A metadata document must name itself: its `client_id` equals the URL byte for byte. It is a
//! public client (`token_endpoint_auth_method` `none`) with the redirect URIs it lists. Fetches
//! have a size and time limit and the SSRF guard (private and loopback addresses refused unless
//! the operator allows them for tests); answers are cached for their `Cache-Control: max-age`
//! (between one minute and a day; five minutes without one; never with `no-store`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde::Deserialize;

use crate::AppState;
use crate::config::{Config, StaticClient};
use crate::store::Client;

const MAX_DOCUMENT_BYTES: usize = 5 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_TTL: Duration = Duration::from_secs(300);
const MIN_TTL: Duration = Duration::from_secs(60);
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
const MAX_CACHED: usize = 10_000;

/// Why a client could not be used.
#[derive(Debug)]
pub enum Lookup {
    Unknown,
    /// A metadata document that could not be fetched or is not acceptable.
    Invalid(String),
    Store(String),
}

impl std::fmt::Display for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lookup::Unknown => f.write_str("unknown client"),
            Lookup::Invalid(reason) => write!(f, "client metadata document: {reason}"),
            Lookup::Store(e) => write!(f, "storage: {e}"),
        }
    }
}

/// The cache of fetched metadata documents.
pub struct Documents {
    http: Option<reqwest::Client>,
    allow_private: bool,
    cache: Mutex<HashMap<String, (Client, Instant)>>,
}

impl Documents {
    pub fn new(config: &Config) -> Result<Self, String> {
        let http = if config.client_metadata_documents {
            Some(mcp_proto::outbound::client(config.client_metadata_allow_private, FETCH_TIMEOUT)?)
        } else {
            None
        };
        Ok(Self { http, allow_private: config.client_metadata_allow_private, cache: Mutex::new(HashMap::new()) })
    }
}

/// Whether `client_id` is a metadata document URL.
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// The client named `client_id`.
pub async fn find(app: &AppState, client_id: &str) -> Result<Client, Lookup> {
    if is_document_url(client_id) {
        return document(app, client_id).await;
    }
    match app.store.client(client_id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(Lookup::Unknown),
        Err(e) => Err(Lookup::Store(e.to_string())),
    }
}

async fn document(app: &AppState, url: &str) -> Result<Client, Lookup> {
    let docs = &app.documents;
    let Some(http) = &docs.http else { return Err(Lookup::Unknown) };
    if let Ok(cache) = docs.cache.lock()
        && let Some((client, until)) = cache.get(url)
        && *until > Instant::now()
    {
        return Ok(client.clone());
    }
    let parsed = url::Url::parse(url).map_err(|_| Lookup::Invalid("the client_id is not a URL".into()))?;
    if parsed.scheme() != "https" && !(docs.allow_private && parsed.scheme() == "http") {
        return Err(Lookup::Invalid("the client_id must be an https URL".into()));
    }
    if parsed.path() == "/" || parsed.fragment().is_some() || parsed.username() != "" || parsed.password().is_some() {
        return Err(Lookup::Invalid("the client_id URL needs a path and no fragment or credentials".into()));
    }
    if !docs.allow_private
        && let Some(refused) = mcp_proto::outbound::literal_refused(&parsed)
    {
        return Err(Lookup::Invalid(refused));
    }
    let (client, ttl) = fetch(http, url).await.map_err(Lookup::Invalid)?;
    if let (Some(ttl), Ok(mut cache)) = (ttl, docs.cache.lock()) {
        if cache.len() >= MAX_CACHED {
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
        }
        if cache.len() < MAX_CACHED {
            cache.insert(url.to_owned(), (client.clone(), Instant::now() + ttl));
        }
    }
    tracing::info!(client_id = %url, "client metadata document accepted");
    Ok(client)
}

#[derive(Deserialize)]
struct Document {
    client_id: String,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    grant_types: Option<Vec<String>>,
    #[serde(default)]
    application_type: Option<String>,
}

async fn fetch(http: &reqwest::Client, url: &str) -> Result<(Client, Option<Duration>), String> {
    let response = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("cannot fetch {url}: {}", mcp_proto::outbound::error_chain(&e)))?;
    if !response.status().is_success() {
        return Err(format!("{url} answered {}", response.status()));
    }
    let ttl = cache_ttl(response.headers());
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| format!("reading {url}: {e}"))?;
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("the document is larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let doc: Document = serde_json::from_slice(&body).map_err(|e| format!("not a client metadata document: {e}"))?;
    if doc.client_id != url {
        return Err(format!("its client_id `{}` is not the URL it was fetched from", doc.client_id));
    }
    let method = doc.token_endpoint_auth_method.unwrap_or_else(|| "none".into());
    if method != "none" {
        return Err(format!("token_endpoint_auth_method `{method}`: only `none` is supported for metadata documents"));
    }
    if doc.redirect_uris.is_empty() {
        return Err("redirect_uris is missing".into());
    }
    let application_type = doc.application_type.unwrap_or_else(|| "web".into());
    for uri in &doc.redirect_uris {
        crate::registration::redirect_allowed(uri, &application_type)?;
    }
    let grant_types = doc.grant_types.unwrap_or_else(|| vec!["authorization_code".into(), "refresh_token".into()]);
    if grant_types.iter().any(|g| g != "authorization_code" && g != "refresh_token") {
        return Err("grant_types: authorization_code and refresh_token only".into());
    }
    let client = Client {
        client_id: url.to_owned(),
        secret_hash: None,
        redirect_uris: doc.redirect_uris,
        name: doc.client_name,
        application_type,
        auth_method: method,
        grant_types,
        source: "metadata-document".into(),
    };
    Ok((client, ttl))
}

/// How long an answer may be cached: `None` for `no-store`.
fn cache_ttl(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::CACHE_CONTROL).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let mut ttl = DEFAULT_TTL;
    for directive in value.split(',').map(|d| d.trim().to_ascii_lowercase()) {
        if directive == "no-store" || directive == "no-cache" {
            return None;
        }
        if let Some(age) = directive.strip_prefix("max-age=").and_then(|a| a.trim_matches('"').parse::<u64>().ok()) {
            ttl = Duration::from_secs(age);
        }
    }
    Some(ttl.clamp(MIN_TTL, MAX_TTL))
}

/// A static client as stored.
pub fn from_config(c: &StaticClient) -> Client {
    let grant_types = if c.grant_types.is_empty() {
        if c.secret_sha256.is_some() && c.redirect_uris.is_empty() {
            vec!["client_credentials".to_owned()]
        } else {
            vec!["authorization_code".to_owned(), "refresh_token".to_owned()]
        }
    } else {
        c.grant_types.clone()
    };
    Client {
        client_id: c.client_id.clone(),
        secret_hash: c.secret_sha256.clone(),
        redirect_uris: c.redirect_uris.clone(),
        name: c.name.clone(),
        application_type: c.application_type.clone(),
        auth_method: if c.secret_sha256.is_some() { "client_secret_basic" } else { "none" }.to_owned(),
        grant_types,
        source: "static".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_lifetimes_follow_cache_control() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(cache_ttl(&h), Some(DEFAULT_TTL));
        h.insert(reqwest::header::CACHE_CONTROL, "public, max-age=7200".parse().expect("header"));
        assert_eq!(cache_ttl(&h), Some(Duration::from_secs(7200)));
        h.insert(reqwest::header::CACHE_CONTROL, "max-age=1".parse().expect("header"));
        assert_eq!(cache_ttl(&h), Some(MIN_TTL));
        h.insert(reqwest::header::CACHE_CONTROL, "max-age=999999999".parse().expect("header"));
        assert_eq!(cache_ttl(&h), Some(MAX_TTL));
        h.insert(reqwest::header::CACHE_CONTROL, "no-store".parse().expect("header"));
        assert_eq!(cache_ttl(&h), None);
    }
}
