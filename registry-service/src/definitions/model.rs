//! The definitions file as written: YAML keys in snake_case, every item with its location so
//! that mistakes found after parsing still name their line and column.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// The server's identity, shown to clients.
    #[serde(default)]
    pub server: Option<Spanned<ServerDef>>,
    /// Compiled-in item sets to serve besides the file's own: `demo`, `conformance`.
    #[serde(default)]
    pub builtins: Vec<Spanned<String>>,
    #[serde(default)]
    pub tools: Vec<Spanned<ToolDef>>,
    #[serde(default)]
    pub resources: Vec<Spanned<ResourceDef>>,
    #[serde(default)]
    pub resource_templates: Vec<Spanned<TemplateDef>>,
    #[serde(default)]
    pub prompts: Vec<Spanned<PromptDef>>,
    /// Named databases for `sql` tools: `sqlite://…` or `postgres://…`; `${VAR}` is replaced by
    /// the environment variable (for credentials).
    #[serde(default)]
    pub databases: BTreeMap<String, Spanned<DatabaseDef>>,
    /// Let `http` tools reach private, loopback and link-local addresses (off: SSRF guard).
    #[serde(default)]
    pub allow_private_networks: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseDef {
    pub url: String,
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Statements run once, before the database is first used (to create an example's tables).
    #[serde(default)]
    pub init: Vec<String>,
}

/// Backend `http`: call an upstream API. Every string is a template over the arguments;
/// `${VAR}` in `url` and `headers` is replaced by the environment variable (secrets).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpDef {
    #[serde(default = "default_method")]
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// The request body (sent as JSON when it renders to JSON, else as text).
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Largest response accepted, in bytes (default 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<usize>,
}

fn default_method() -> String {
    "GET".into()
}

/// Backend `sql`: a named query against a named database, parameters bound by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlDef {
    pub database: String,
    /// `:name` placeholders are bound from the arguments, never interpolated.
    pub query: String,
    /// Run outside a read-only transaction.
    #[serde(default)]
    pub writes: bool,
    #[serde(default)]
    pub max_rows: Option<usize>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerDef {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub website_url: Option<String>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub icons: Vec<IconDef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IconDef {
    /// An `https:` or `data:` URI.
    pub src: String,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub sizes: Vec<String>,
    /// `light` or `dark`.
    #[serde(default)]
    pub theme: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotations {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub read_only_hint: Option<bool>,
    #[serde(default)]
    pub destructive_hint: Option<bool>,
    #[serde(default)]
    pub idempotent_hint: Option<bool>,
    #[serde(default)]
    pub open_world_hint: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema (2020-12) with `type: object` at the root. Default: no arguments.
    #[serde(default)]
    pub input_schema: Option<Value>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub annotations: Option<Annotations>,
    #[serde(default)]
    pub icons: Vec<IconDef>,
    /// Scopes a caller needs to see and call the tool.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Backend `text`: a template rendered from the arguments.
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub http: Option<HttpDef>,
    #[serde(default)]
    pub sql: Option<SqlDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceDef {
    pub uri: String,
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Default: from the file's extension, else `text/plain`.
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub icons: Vec<IconDef>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Inline contents.
    #[serde(default)]
    pub text: Option<String>,
    /// A file, relative to the definitions file; read on every `resources/read`.
    #[serde(default)]
    pub file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateDef {
    /// RFC 6570: `{name}` matches one path segment, `{+name}` any rest of the URI.
    pub uri_template: String,
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub icons: Vec<IconDef>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Completion values per template variable.
    #[serde(default)]
    pub completions: BTreeMap<String, Vec<String>>,
    /// Contents rendered from the URI's variables.
    #[serde(default)]
    pub text: Option<String>,
    /// Files under a directory; the template's one variable is the path below it.
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// Rows of a query whose `:name` parameters are the URI's variables (as JSON).
    #[serde(default)]
    pub sql: Option<SqlDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptDef {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub icons: Vec<IconDef>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub arguments: Vec<ArgumentDef>,
    pub messages: Vec<MessageDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgumentDef {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub required: bool,
    /// Values offered by `completion/complete`.
    #[serde(default)]
    pub completions: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageDef {
    pub role: Role,
    /// A template rendered from the prompt's arguments.
    #[serde(default)]
    pub text: Option<String>,
    /// An image file, relative to the definitions file.
    #[serde(default)]
    pub image: Option<PathBuf>,
    /// A resource of this catalog, embedded (by URI).
    #[serde(default)]
    pub resource: Option<String>,
}
