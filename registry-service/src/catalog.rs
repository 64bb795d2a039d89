//! The catalog model: what is offered, who may see it, and how each item is produced.
//!
//! Items keep their MCP definition as JSON (camelCase, as clients see it) next to what the
//! registry needs to execute them, so the snapshot sent to mcp-service needs no translation.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use mcp_proto::registry as pb;
use serde_json::Value;
use tokio::sync::mpsc;

/// Produces a `CallToolResult` (or a request for client input) from the call's arguments.
pub type ToolHandler = Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<Outcome, ToolError>> + Send + Sync>;

/// Renders a prompt's `GetPromptResult` (or a request for client input) from its arguments.
pub type PromptRenderer = Arc<dyn Fn(&HashMap<String, String>, &Exchange) -> Result<Outcome, String> + Send + Sync>;

/// What a handler produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The final result object.
    Complete(Value),
    /// The handler needs answers from the client first (multi round-trip requests): input
    /// requests keyed by name, and the state to resume from.
    InputRequired { requests: Value, state: Value },
    /// The call needs client capabilities the client did not declare (`ClientCapabilities`).
    MissingCapabilities(Value),
}

/// What the client sent along for a multi round-trip request, and what it can do.
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    /// `inputResponses` of this round (an object; `Null` on a first call).
    pub input_responses: Value,
    /// The handler's own state from the previous round (`Null` on a first call).
    pub state: Value,
    /// The client capabilities in force.
    pub client_capabilities: Value,
}

impl Exchange {
    pub fn from_wire(responses: &[u8], state: &[u8], capabilities: &[u8]) -> Result<Self, String> {
        let parse = |b: &[u8], what: &str| -> Result<Value, String> {
            if b.is_empty() { Ok(Value::Null) } else { serde_json::from_slice(b).map_err(|e| format!("{what}: {e}")) }
        };
        Ok(Self {
            input_responses: parse(responses, "inputResponses")?,
            state: parse(state, "state")?,
            client_capabilities: parse(capabilities, "client capabilities")?,
        })
    }

    /// The client's answer to input request `key`, if it sent one.
    pub fn response(&self, key: &str) -> Option<&Value> {
        self.input_responses.get(key)
    }

    /// Whether the client declared capability `name` (`sampling`, `elicitation`, `roots`).
    pub fn has_capability(&self, name: &str) -> bool {
        self.client_capabilities.get(name).is_some_and(|v| !v.is_null())
    }
}

/// A failure that is not the tool's own result: the tool could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Internal(String),
}

#[derive(Clone)]
pub struct Tool {
    pub name: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub handler: ToolHandler,
    /// A `text` tool's template: sent with the catalog, so mcp-service renders such tools itself.
    pub text: Option<String>,
}

/// The bytes of a resource.
#[derive(Debug, Clone)]
pub enum Content {
    Text(String),
    Blob(Vec<u8>),
    /// A file, read on every request (its serialized contents kept while it is unchanged).
    File(FileSource),
}

/// A file resource. The file is looked at on every read; its serialized `contents` are kept
/// and served again while it has the same length and modification time, and only once it
/// has not been modified for [`SETTLED`] (a file system whose clock ticks in whole seconds
/// cannot hide a second change within the same tick). A large file is then neither read,
/// checked as UTF-8 nor escaped into JSON again on each read.
#[derive(Debug, Clone)]
pub struct FileSource {
    pub path: PathBuf,
    kept: Arc<Mutex<Option<KeptFile>>>,
}

/// How long a file must have been left alone before its contents are kept.
const SETTLED: Duration = Duration::from_secs(2);
/// The largest file whose contents are kept, and the most kept in all (per process).
const KEEP_AT_MOST: usize = 16 << 20;
const KEEP_IN_ALL: usize = 64 << 20;
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct KeptFile {
    len: u64,
    modified: SystemTime,
    json: Bytes,
    /// [`tag_of`] the kept contents, made once when they are kept.
    tag: String,
}

/// A resource's serialized `contents`, and the tag that names them (empty when they are not
/// named: a file that changed within the last [`SETTLED`], or too large to keep).
#[derive(Debug, Clone)]
pub struct Contents {
    pub json: Bytes,
    pub tag: String,
}

/// Names serialized contents: a SHA-256 digest of them (the first 128 bits, base64url), the
/// same on every replica that serves the same contents.
pub fn tag_of(json: &[u8]) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(json);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16])
}

impl Drop for KeptFile {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(self.json.len(), Ordering::Relaxed);
    }
}

// === impl FileSource ===

impl FileSource {
    pub fn new(path: PathBuf) -> Self {
        Self { path, kept: Arc::default() }
    }

    /// The serialized `contents` array of a read of this file as `uri`, named while kept.
    pub fn contents_json(&self, uri: &str, mime: &str) -> Result<Contents, String> {
        let meta = std::fs::metadata(&self.path).map_err(|e| format!("cannot read `{}`: {e}", self.path.display()))?;
        let (len, modified) = (meta.len(), meta.modified().ok());
        let kept = modified.and_then(|modified| {
            let kept = self.kept.lock().ok()?;
            kept.as_ref()
                .filter(|k| k.len == len && k.modified == modified)
                .map(|k| Contents { json: k.json.clone(), tag: k.tag.clone() })
        });
        if let Some(contents) = kept {
            // Shared, not copied: the gRPC answer is written from the kept bytes.
            return Ok(contents);
        }
        let read = crate::definitions::file_contents(uri, &self.path, mime)
            .and_then(|item| crate::definitions::contents_json(uri, &[item]));
        let json = match read {
            Ok(json) => Bytes::from(json),
            Err(e) => {
                // What was kept is not this file's any more.
                self.forget();
                return Err(e);
            }
        };
        let tag = self.keep(len, modified.filter(|m| m.elapsed().is_ok_and(|age| age >= SETTLED)), &json);
        Ok(Contents { json, tag })
    }

    /// Keep `json` as this file's contents if it has settled (`settled`: its modification time
    /// then), within the process's budget; what was kept before is given back either way. The
    /// kept contents' tag, or an empty one when nothing is kept (a file that may still be
    /// changing within its modification time's tick must not be named).
    fn keep(&self, len: u64, settled: Option<SystemTime>, json: &Bytes) -> String {
        let Ok(mut kept) = self.kept.lock() else { return String::new() };
        *kept = None;
        let Some(modified) = settled else { return String::new() };
        let fits = json.len() <= KEEP_AT_MOST
            && KEPT_BYTES
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n + json.len() <= KEEP_IN_ALL).then_some(n + json.len())
                })
                .is_ok();
        if !fits {
            return String::new();
        }
        let tag = tag_of(json);
        *kept = Some(KeptFile { len, modified, json: json.clone(), tag: tag.clone() });
        tag
    }

    /// Give back the kept contents: the file changed although its length and modification time
    /// say otherwise (rewritten by a tool that keeps the time, such as `cp -p` or `rsync -t`).
    pub fn forget(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            *kept = None;
        }
    }

    /// Whether contents are kept now (for tests).
    #[cfg(test)]
    pub fn is_kept(&self) -> bool {
        self.kept.lock().is_ok_and(|k| k.is_some())
    }
}

#[derive(Clone)]
pub struct Resource {
    pub uri: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub mime_type: Option<String>,
    pub content: Content,
}

/// Reads a resource that matched a template (its URI and variables); `Complete` holds the
/// `contents` array, empty when there is no such resource.
pub type TemplateReader =
    Arc<dyn Fn(String, HashMap<String, String>, Exchange) -> BoxFuture<'static, Result<Outcome, String>> + Send + Sync>;

#[derive(Clone)]
pub struct ResourceTemplate {
    pub uri_template: String,
    pub def: Value,
    pub scopes: Vec<String>,
    /// Produces the `contents` array (as `Outcome::Complete`) for a matching URI.
    pub reader: TemplateReader,
    /// Completion values per template variable.
    pub completions: HashMap<String, Vec<String>>,
}

/// Match `uri` against an RFC 6570 template of `{name}` (one or more characters other than
/// `/`) and `{+name}` (one or more of any) expressions, returning the variables.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let mut rest = uri;
    let mut tpl = template;
    while !tpl.is_empty() {
        if let Some(after_open) = tpl.strip_prefix('{') {
            let close = after_open.find('}')?;
            let expr = &after_open[..close];
            // `{+name}` (reserved expansion) may span `/`; `{name}` is one segment.
            let (name, reserved) = match expr.strip_prefix('+') {
                Some(n) => (n, true),
                None => (expr, false),
            };
            tpl = &after_open[close + 1..];
            // The literal that follows the expression bounds its value.
            let next_literal = tpl.split('{').next().unwrap_or_default();
            let end = match (next_literal.is_empty(), reserved) {
                (true, true) => rest.len(),
                (true, false) => rest.find('/').unwrap_or(rest.len()),
                (false, true) => rest.rfind(next_literal)?,
                (false, false) => rest.find(next_literal)?,
            };
            let value = &rest[..end];
            if value.is_empty() || (!reserved && value.contains('/')) {
                return None;
            }
            vars.insert(name.to_owned(), value.to_owned());
            rest = &rest[end..];
        } else {
            let literal_end = tpl.find('{').unwrap_or(tpl.len());
            let literal = &tpl[..literal_end];
            rest = rest.strip_prefix(literal)?;
            tpl = &tpl[literal_end..];
        }
    }
    rest.is_empty().then_some(vars)
}

#[derive(Clone)]
pub struct Prompt {
    pub name: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub render: PromptRenderer,
    /// Completion values per argument name.
    pub completions: HashMap<String, Vec<String>>,
}

/// Everything the server offers at one version.
#[derive(Clone)]
pub struct Catalog {
    pub version: u64,
    pub server_info: Value,
    pub instructions: String,
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
    /// Whether the catalog can change while served (see `registry.v1.Catalog.live`).
    pub live: bool,
}

/// Whether a caller holding `held` may use an item that requires `required`.
/// A missing caller means authentication is off, and everything is visible.
pub fn permits(caller: Option<&pb::Caller>, required: &[String]) -> bool {
    match caller {
        None => true,
        Some(c) => required.iter().all(|s| c.scopes.iter().any(|h| h == s)),
    }
}

/// A group of items that is served together (a compiled-in set, or a definitions file's).
#[derive(Clone, Default)]
pub struct ItemSet {
    /// Whether items of the set change the catalog (or resource contents) while it is served.
    pub changes: bool,
    pub instructions: String,
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

// === impl Catalog ===

impl Catalog {
    /// Join item sets into one catalog, refusing duplicate names.
    pub fn assemble(server_info: Value, instructions: String, sets: Vec<ItemSet>) -> Result<Self, String> {
        let mut catalog = Catalog {
            version: 1,
            server_info,
            instructions,
            tools: vec![],
            resources: vec![],
            templates: vec![],
            prompts: vec![],
            live: sets.iter().any(|s| s.changes),
        };
        fn add<T>(into: &mut Vec<T>, items: Vec<T>, key: impl Fn(&T) -> &str, kind: &str) -> Result<(), String> {
            for item in items {
                if into.iter().any(|i| key(i) == key(&item)) {
                    return Err(format!("duplicate {kind} `{}`", key(&item)));
                }
                into.push(item);
            }
            Ok(())
        }
        for set in sets {
            add(&mut catalog.tools, set.tools, |t| &t.name, "tool")?;
            add(&mut catalog.resources, set.resources, |r| &r.uri, "resource")?;
            add(&mut catalog.templates, set.templates, |t| &t.uri_template, "resource template")?;
            add(&mut catalog.prompts, set.prompts, |p| &p.name, "prompt")?;
        }
        Ok(catalog)
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn resource(&self, uri: &str) -> Option<&Resource> {
        self.resources.iter().find(|r| r.uri == uri)
    }

    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name == name)
    }

    /// The first template matching `uri`, with its variables.
    pub fn template_for(&self, uri: &str) -> Option<(&ResourceTemplate, HashMap<String, String>)> {
        self.templates.iter().find_map(|t| match_template(&t.uri_template, uri).map(|vars| (t, vars)))
    }

    /// The wire form served by `Snapshot`.
    pub fn to_proto(&self) -> pb::Catalog {
        let json = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
        pb::Catalog {
            version: self.version,
            server_info_json: json(&self.server_info),
            instructions: self.instructions.clone(),
            tools: self
                .tools
                .iter()
                .map(|t| pb::Tool {
                    name: t.name.clone(),
                    json: json(&t.def),
                    scopes: t.scopes.clone(),
                    text_template: t.text.clone(),
                })
                .collect(),
            resources: self
                .resources
                .iter()
                .map(|r| pb::Resource { uri: r.uri.clone(), json: json(&r.def), scopes: r.scopes.clone() })
                .collect(),
            resource_templates: self
                .templates
                .iter()
                .map(|t| pb::ResourceTemplate {
                    uri_template: t.uri_template.clone(),
                    json: json(&t.def),
                    scopes: t.scopes.clone(),
                })
                .collect(),
            prompts: self
                .prompts
                .iter()
                .map(|p| pb::Prompt { name: p.name.clone(), json: json(&p.def), scopes: p.scopes.clone() })
                .collect(),
            live: self.live,
        }
    }
}

// === impl Resource ===

impl Resource {
    /// The `contents` array of a `ReadResourceResult` (a file is read now).
    pub fn contents(&self) -> Result<Value, String> {
        use base64::Engine as _;
        let mime = self.mime_type.as_deref().unwrap_or("text/plain");
        let item = match &self.content {
            Content::Text(t) => serde_json::json!({ "uri": self.uri, "mimeType": mime, "text": t }),
            Content::Blob(b) => serde_json::json!({
                "uri": self.uri, "mimeType": mime, "blob": base64::engine::general_purpose::STANDARD.encode(b)
            }),
            Content::File(file) => crate::definitions::file_contents(&self.uri, &file.path, mime)?,
        };
        Ok(Value::Array(vec![item]))
    }

    /// The same, serialized (a file's as kept while it is unchanged), and named.
    pub fn contents_json(&self) -> Result<Contents, String> {
        match &self.content {
            Content::File(file) => file.contents_json(&self.uri, self.mime_type.as_deref().unwrap_or("text/plain")),
            _ => {
                let json = serde_json::to_vec(&self.contents()?).map_err(|e| e.to_string())?;
                Ok(Contents { tag: tag_of(&json), json: json.into() })
            }
        }
    }
}

/// What a running tool may report before its result.
pub struct ToolContext {
    events: mpsc::Sender<Result<pb::ToolEvent, tonic::Status>>,
    wants_progress: bool,
    /// Minimum log rank the client asked for; `None` means no log events.
    log_rank: Option<usize>,
    /// What the client sent for a multi round-trip request, and its capabilities.
    pub exchange: Exchange,
    /// The live catalog, for tools that change what the server offers.
    pub catalog: crate::server::CatalogHandle,
}

// === impl ToolContext ===

impl ToolContext {
    pub fn new(
        events: mpsc::Sender<Result<pb::ToolEvent, tonic::Status>>,
        wants_progress: bool,
        log_level: &str,
        exchange: Exchange,
        catalog: crate::server::CatalogHandle,
    ) -> Self {
        Self { events, wants_progress, log_rank: mcp_proto::vocab::log_level_rank(log_level), exchange, catalog }
    }

    /// Report progress, if the client asked for it.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        if !self.wants_progress {
            return;
        }
        let event = pb::tool_event::Event::Progress(pb::Progress { progress, total, message: message.to_owned() });
        let _ = self.events.send(Ok(pb::ToolEvent { event: Some(event) })).await;
    }

    /// Emit a log message, if the client asked for this level or a lower one.
    pub async fn log(&self, level: &str, data: Value) {
        let Some(min) = self.log_rank else { return };
        if mcp_proto::vocab::log_level_rank(level).is_none_or(|r| r < min) {
            return;
        }
        let event = pb::tool_event::Event::Log(pb::LogMessage {
            level: level.to_owned(),
            logger: String::new(),
            data_json: serde_json::to_vec(&data).unwrap_or_default(),
        });
        let _ = self.events.send(Ok(pb::ToolEvent { event: Some(event) })).await;
    }

    /// Whether the caller has gone away (the call was cancelled).
    pub fn is_cancelled(&self) -> bool {
        self.events.is_closed()
    }
}

/// A text-only `CallToolResult`.
pub fn text_result(text: impl Into<String>, is_error: bool) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }], "isError": is_error })
}

/// A finished text-only tool outcome.
pub fn text_outcome(text: impl Into<String>) -> Result<Outcome, ToolError> {
    Ok(Outcome::Complete(text_result(text, false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_matching() {
        let vars = match_template("test://template/{id}/data", "test://template/123/data").expect("match");
        assert_eq!(vars["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/datax").is_none());
        let vars = match_template("crm://customers/{id}", "crm://customers/42").expect("match");
        assert_eq!(vars["id"], "42");
        let vars = match_template("x://{a}-{b}", "x://one-two").expect("match");
        assert_eq!((vars["a"].as_str(), vars["b"].as_str()), ("one", "two"));
        let vars = match_template("docs://files/{+path}", "docs://files/a/b.md").expect("match");
        assert_eq!(vars["path"], "a/b.md");
    }

    /// Write `text` to `path` and date its modification `age` ago.
    fn write_aged(path: &std::path::Path, text: &str, age: Duration) {
        std::fs::write(path, text).expect("write");
        let file = std::fs::File::options().write(true).open(path).expect("open");
        file.set_modified(SystemTime::now() - age).expect("set mtime");
    }

    fn text_of(json: &[u8]) -> String {
        let v: Value = serde_json::from_slice(json).expect("json");
        v[0]["text"].as_str().expect("text").to_owned()
    }

    #[test]
    fn a_settled_file_is_kept_until_it_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.txt");
        let file = FileSource::new(path.clone());
        let read = || file.contents_json("file://a", "text/plain").expect("read");

        // Just written: served, not kept (a second change within its clock tick could hide),
        // and not named.
        write_aged(&path, "one", Duration::ZERO);
        let fresh = read();
        assert_eq!(text_of(&fresh.json), "one");
        assert!(!file.is_kept());
        assert_eq!(fresh.tag, "");
        // Left alone: kept, and what is kept is what the file holds, named by its digest.
        write_aged(&path, "one", Duration::from_secs(60));
        let first = read();
        assert_eq!(text_of(&first.json), "one");
        assert!(file.is_kept());
        assert_eq!(first.tag, tag_of(&first.json));
        let again = read();
        assert_eq!(text_of(&again.json), "one");
        assert_eq!(again.tag, first.tag);
        // Changed, even to the same length: read again, under another name.
        write_aged(&path, "two", Duration::from_secs(30));
        let second = read();
        assert_eq!(text_of(&second.json), "two");
        assert!(file.is_kept());
        assert_ne!(second.tag, first.tag);
        assert_eq!(second.tag, tag_of(&second.json));
        // Changed just now: read again, and nothing stale stays kept or named.
        write_aged(&path, "three", Duration::ZERO);
        let third = read();
        assert_eq!(text_of(&third.json), "three");
        assert!(!file.is_kept());
        assert_eq!(third.tag, "");
        // Gone: an error, not the kept contents.
        std::fs::remove_file(&path).expect("remove");
        assert!(file.contents_json("file://a", "text/plain").is_err());
    }

    #[test]
    fn forgotten_contents_are_read_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.txt");
        let file = FileSource::new(path.clone());
        write_aged(&path, "one", Duration::from_secs(60));
        let first = file.contents_json("file://a", "text/plain").expect("read");
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).expect("mtime");
        // Rewritten keeping its length and time: what is kept still looks current...
        std::fs::write(&path, "two").expect("write");
        std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(modified)).expect("set mtime");
        assert_eq!(text_of(&file.contents_json("file://a", "text/plain").expect("read").json), "one");
        // ...until it is forgotten (the watcher does so when the file's digest changes).
        file.forget();
        let second = file.contents_json("file://a", "text/plain").expect("read");
        assert_eq!(text_of(&second.json), "two");
        assert_ne!(second.tag, first.tag);
    }

    #[test]
    fn tags_name_contents() {
        let a = tag_of(br#"[{"uri":"a","text":"x"}]"#);
        assert_eq!(a, tag_of(br#"[{"uri":"a","text":"x"}]"#));
        assert_ne!(a, tag_of(br#"[{"uri":"a","text":"y"}]"#));
        // 128 bits, base64url without padding: safe in any header or log.
        assert_eq!(a.len(), 22);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }
}
