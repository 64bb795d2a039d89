//! The latest catalog snapshot, kept in memory and replaced atomically whenever the registry
//! reports a change, so list calls never cross a second hop.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mcp_proto::registry::{self as pb, registry_client::RegistryClient};
use mcp_proto::templates::Lazy as LazyTemplate;
use mcp_proto::transport::GrpcChannel;
use mcp_proto::vocab;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::shape;

/// One catalog item as mcp-service serves it.
#[derive(Debug, Clone)]
pub struct Item {
    /// Name, URI or URI template.
    pub key: String,
    pub def: Value,
    pub scopes: Vec<String>,
}

#[derive(Default)]
pub struct CatalogView {
    pub version: u64,
    pub server_info: Value,
    pub instructions: String,
    pub tools: Vec<Item>,
    pub resources: Vec<Item>,
    pub templates: Vec<Item>,
    pub prompts: Vec<Item>,
    /// Whether the catalog can change while served (list-changed and updates are advertised).
    pub live: bool,
    tool_index: Index,
    prompt_index: Index,
    /// Equal for equal content wherever it is computed (every engine of a deployment runs the
    /// same binary): what the gateway's result cache is keyed on.
    pub fingerprint: u64,
    /// Each tool's `inputSchema`, compiled on the tool's first call in this catalog version
    /// (`None` when the schema cannot be compiled; the registry refuses such schemas at load).
    /// A compiled schema takes about 5 KiB: a large catalog pays only for the tools in use.
    validators: Vec<OnceLock<Option<jsonschema::Validator>>>,
    /// `text` tools' templates (index for index with `tools`), each compiled on the tool's
    /// first call in this catalog version: their calls are rendered here, without a call to the
    /// registry.
    /// Boxed: a slot of a tool that is not a `text` tool takes a pointer's room.
    texts: Vec<Option<Box<TextTool>>>,
    /// What a modern result gains besides its own members, serialized once:
    /// `"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":…}`.
    modern_members: Box<str>,
    /// Every listed item shaped for each legacy revision and serialized, made on the first
    /// list of that revision: legacy lists are written from these, not built per request.
    pub(crate) legacy_lists: [OnceLock<LegacyLists>; vocab::LEGACY_REVISIONS.len()],
}

/// Items' positions by name, hashed with foldhash (seeded at random) rather than SipHash: only
/// the operator's names are entered.
type Index = HashMap<String, usize, foldhash::fast::RandomState>;

/// A `text` tool: its template, and the counters of its calls by outcome (`ok`, `tool_error`),
/// made on its first call and kept, rather than looked up by name in the recorder per call.
struct TextTool {
    template: LazyTemplate,
    calls: OnceLock<[metrics::Counter; 2]>,
}

impl TextTool {
    fn count(&self, name: &str, ok: bool) {
        let make = || {
            ["ok", "tool_error"].map(|outcome| {
                metrics::counter!("mcp_text_tool_calls_total", "tool" => name.to_owned(), "outcome" => outcome)
            })
        };
        let index = usize::from(!ok);
        if mcp_proto::telemetry::metrics_installed() {
            self.calls.get_or_init(make)[index].increment(1);
        } else {
            make()[index].increment(1);
        }
    }
}

/// The items of the four lists shaped for one legacy revision, each serialized, in catalog
/// order (index for index with `CatalogView::tools` and the others).
pub struct LegacyLists {
    pub tools: Vec<Box<str>>,
    pub resources: Vec<Box<str>>,
    pub templates: Vec<Box<str>>,
    pub prompts: Vec<Box<str>>,
}

/// `"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":…}` for a server
/// identity `server_info`: what `Engine::wrap_modern` adds to a result tree that is not
/// cacheable, for a result written without one.
fn modern_members(server_info: &Value) -> Box<str> {
    let meta = serde_json::json!({ vocab::meta::SERVER_INFO: server_info });
    format!(r#""resultType":"complete","_meta":{meta}"#).into_boxed_str()
}

/// A tool of a catalog, found by name.
#[derive(Clone, Copy)]
pub struct Tool<'a> {
    catalog: &'a CatalogView,
    at: usize,
}

impl<'a> Tool<'a> {
    pub fn item(&self) -> &'a Item {
        &self.catalog.tools[self.at]
    }

    /// Why `arguments` do not fit the tool's `inputSchema` (one line per problem), if they do
    /// not.
    pub fn argument_errors(&self, arguments: &Value) -> Option<String> {
        let validator = self.catalog.validators[self.at]
            .get_or_init(|| {
                self.item().def.get("inputSchema").and_then(|schema| jsonschema::validator_for(schema).ok())
            })
            .as_ref()?;
        let problems: Vec<String> = validator
            .iter_errors(arguments)
            .take(10)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect();
        (!problems.is_empty()).then(|| problems.join("; "))
    }

    /// A `text` tool's rendering of `arguments` (`None`: not a text tool known here), counted
    /// in `mcp_text_tool_calls_total` by its outcome.
    pub fn render_text(&self, arguments: &Value) -> Option<Result<String, String>> {
        let tool = self.catalog.texts[self.at].as_ref()?;
        let name = &self.item().key;
        let text = &tool.template;
        let first = !text.tried();
        match text.compiled() {
            Ok(_) => {
                let rendered = text.render(arguments);
                tool.count(name, rendered.is_ok());
                Some(rendered)
            }
            // The registry checked the template at load; one that does not compile here is
            // left to the registry (called as for any other tool).
            Err(e) => {
                if first {
                    tracing::warn!(tool = %name, error = %e, "text tool left to the registry");
                }
                None
            }
        }
    }
}

// === impl CatalogView ===

impl CatalogView {
    pub fn from_proto(c: pb::Catalog) -> Self {
        let fingerprint = fingerprint(&c);
        fn item(key: String, json: &[u8], scopes: Vec<String>) -> Item {
            let def = serde_json::from_slice(json).unwrap_or(Value::Null);
            Item { key, def, scopes }
        }
        let mut texts = Vec::with_capacity(c.tools.len());
        let mut tools = Vec::with_capacity(c.tools.len());
        for tool in c.tools {
            let def = item(tool.name, &tool.json, tool.scopes);
            texts.push(tool.text_template.map(|source| {
                let allowed = def
                    .def
                    .pointer("/inputSchema/properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                Box::new(TextTool { template: LazyTemplate::new(source, allowed), calls: OnceLock::new() })
            }));
            tools.push(def);
        }
        let server_info: Value = serde_json::from_slice(&c.server_info_json).unwrap_or(Value::Null);
        let prompts: Vec<Item> = c.prompts.into_iter().map(|p| item(p.name, &p.json, p.scopes)).collect();
        Self {
            version: c.version,
            fingerprint,
            live: c.live,
            modern_members: modern_members(&server_info),
            server_info,
            instructions: c.instructions,
            tool_index: tools.iter().enumerate().map(|(i, t)| (t.key.clone(), i)).collect(),
            validators: tools.iter().map(|_| OnceLock::new()).collect(),
            prompt_index: prompts.iter().enumerate().map(|(i, p)| (p.key.clone(), i)).collect(),
            tools,
            prompts,
            resources: c.resources.into_iter().map(|r| item(r.uri, &r.json, r.scopes)).collect(),
            templates: c.resource_templates.into_iter().map(|t| item(t.uri_template, &t.json, t.scopes)).collect(),
            texts,
            legacy_lists: Default::default(),
        }
    }

    /// Whether what `method` answers depends on the caller's scopes (some item it covers
    /// requires scopes).
    pub fn scoped(&self, method: crate::dispatch::Method) -> bool {
        use crate::dispatch::Method;
        let any = |items: &[Item]| items.iter().any(|i| !i.scopes.is_empty());
        match method {
            Method::Discover => false,
            Method::ToolsList => any(&self.tools),
            Method::PromptsList => any(&self.prompts),
            Method::ResourcesList | Method::ResourceTemplatesList | Method::ResourcesRead => {
                any(&self.resources) || any(&self.templates)
            }
            _ => true,
        }
    }

    /// Tool `name`, looked up once for all a call needs of it.
    pub fn tool(&self, name: &str) -> Option<Tool<'_>> {
        self.tool_index.get(name).map(|&at| Tool { catalog: self, at })
    }

    /// What a modern result gains besides its own members, serialized (no braces, no commas
    /// around it): `resultType` and `_meta` with the server's identity.
    pub fn modern_members(&self) -> &str {
        &self.modern_members
    }

    pub fn prompt(&self, name: &str) -> Option<&Item> {
        self.prompt_index.get(name).map(|i| &self.prompts[*i])
    }

    /// The lists' items as a client of legacy revision `rev` sees them, serialized.
    pub fn legacy_lists(&self, rev: &'static str) -> &LegacyLists {
        let at = vocab::LEGACY_REVISIONS.iter().position(|r| *r == rev).unwrap_or(vocab::LEGACY_REVISIONS.len() - 1);
        self.legacy_lists[at].get_or_init(|| {
            let rev = vocab::LEGACY_REVISIONS[at];
            let each = |items: &[Item], shape: fn(&Value, &str, bool) -> Value| -> Vec<Box<str>> {
                items.iter().map(|i| shape(&i.def, rev, false).to_string().into_boxed_str()).collect()
            };
            LegacyLists {
                tools: each(&self.tools, shape::tool),
                resources: each(&self.resources, shape::item),
                templates: each(&self.templates, shape::item),
                prompts: each(&self.prompts, shape::item),
            }
        })
    }
}

/// A hash of everything in the catalog except the registry's version counter.
fn fingerprint(c: &pb::Catalog) -> u64 {
    use prost::Message as _;
    use std::hash::{Hash as _, Hasher as _};
    let mut content = c.clone();
    content.version = 0;
    let mut h = std::hash::DefaultHasher::new();
    content.encode_to_vec().hash(&mut h);
    // 0 means "no catalog yet" on the wire.
    h.finish().max(1)
}

/// A change clients may be told about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogEvent {
    /// Which lists changed between two catalog versions.
    ListsChanged { tools: bool, resources: bool, prompts: bool },
    /// A resource's contents changed.
    ResourceUpdated(String),
}

/// Follows the registry and always holds its latest catalog (once the first one arrived).
#[derive(Clone)]
pub struct CatalogCache {
    rx: watch::Receiver<Option<Arc<CatalogView>>>,
    events: broadcast::Sender<CatalogEvent>,
}

// === impl CatalogCache ===

impl CatalogCache {
    /// Start following `client`'s catalog until `shutdown`.
    pub fn follow(client: RegistryClient<GrpcChannel>, shutdown: CancellationToken) -> Self {
        let (tx, rx) = watch::channel(None);
        let (events, _) = broadcast::channel(256);
        tokio::spawn(follow(client, tx, events.clone(), shutdown));
        Self { rx, events }
    }

    /// Changes from now on.
    pub fn events(&self) -> broadcast::Receiver<CatalogEvent> {
        self.events.subscribe()
    }

    /// The catalog as it changes (`None` before the first one).
    pub fn watch(&self) -> watch::Receiver<Option<Arc<CatalogView>>> {
        self.rx.clone()
    }

    pub fn current(&self) -> Option<Arc<CatalogView>> {
        self.rx.borrow().clone()
    }

    /// The current catalog, waiting up to `timeout` for the first one.
    pub async fn ready(&self, timeout: Duration) -> Option<Arc<CatalogView>> {
        if let Some(c) = self.current() {
            return Some(c);
        }
        let mut rx = self.rx.clone();
        tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await.ok()?.ok()?.clone()
    }
}

fn lists_changed(old: &CatalogView, new: &CatalogView) -> CatalogEvent {
    fn same(a: &[Item], b: &[Item]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.key == y.key && x.def == y.def && x.scopes == y.scopes)
    }
    CatalogEvent::ListsChanged {
        tools: !same(&old.tools, &new.tools),
        resources: !same(&old.resources, &new.resources) || !same(&old.templates, &new.templates),
        prompts: !same(&old.prompts, &new.prompts),
    }
}

async fn follow(
    mut client: RegistryClient<GrpcChannel>,
    tx: watch::Sender<Option<Arc<CatalogView>>>,
    events: broadcast::Sender<CatalogEvent>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let attempt = async {
            let mut changes = client.watch(mcp_proto::trust::outgoing(pb::WatchRequest {})).await?.into_inner();
            // After a reconnection the registry may be another process (restarted, or another
            // replica) whose version counter says nothing about content: fetch once regardless.
            let mut first = true;
            while let Some(change) = changes.message().await? {
                for uri in change.updated_uris {
                    let _ = events.send(CatalogEvent::ResourceUpdated(uri));
                }
                let have = tx.borrow().as_ref().map(|c| c.version);
                if have == Some(change.version) && !std::mem::take(&mut first) {
                    continue;
                }
                first = false;
                let snapshot = client.snapshot(mcp_proto::trust::outgoing(pb::SnapshotRequest {})).await?.into_inner();
                let view = Arc::new(CatalogView::from_proto(snapshot));
                let old = tx.send_replace(Some(view.clone()));
                match old {
                    // The same content again (a reconnection): nothing changed for clients.
                    Some(old) if old.fingerprint == view.fingerprint => {}
                    Some(old) => {
                        tracing::info!(version = view.version, tools = view.tools.len(), "catalog loaded");
                        let _ = events.send(lists_changed(&old, &view));
                    }
                    None => tracing::info!(version = view.version, tools = view.tools.len(), "catalog loaded"),
                }
                backoff = Duration::from_millis(50);
            }
            Ok::<(), tonic::Status>(())
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            outcome = attempt => {
                if let Err(status) = outcome {
                    tracing::warn!(error = %status.message(), code = ?status.code(), "registry watch failed; retrying");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, properties: &[&str], template: Option<&str>) -> pb::Tool {
        let props: serde_json::Map<String, Value> =
            properties.iter().map(|p| ((*p).to_owned(), serde_json::json!({ "type": "string" }))).collect();
        let def = serde_json::json!({ "name": name, "inputSchema": { "type": "object", "properties": props } });
        pb::Tool {
            name: name.to_owned(),
            json: serde_json::to_vec(&def).expect("json"),
            scopes: vec![],
            text_template: template.map(str::to_owned),
        }
    }

    #[test]
    fn text_tools_render_from_the_snapshot() {
        let view = CatalogView::from_proto(pb::Catalog {
            tools: vec![
                tool("greet", &["who"], Some("Hi {{ who }}")),
                tool("url", &["p"], Some("at {{ p }}")),
                tool("remote", &[], None),
                // Uses a variable its schema does not declare: left to the registry.
                tool("odd", &[], Some("{{ secret }}")),
            ],
            ..Default::default()
        });
        // Nothing is compiled before a tool's first call.
        assert!(view.validators.iter().all(|v| v.get().is_none()));
        assert!(view.texts.iter().flatten().all(|t| !t.template.tried()));
        let args = serde_json::json!({ "who": "<b>Ada</b>", "p": "a/b?c" });
        let render = |name: &str| view.tool(name).and_then(|t| t.render_text(&args));
        assert_eq!(render("greet"), Some(Ok("Hi <b>Ada</b>".to_owned())));
        assert_eq!(render("url"), Some(Ok("at a/b?c".to_owned())), "no URL encoding");
        assert_eq!(render("remote"), None);
        assert_eq!(render("odd"), None);
        assert_eq!(render("missing"), None);
        assert_eq!(view.texts.iter().flatten().filter(|t| t.template.tried()).count(), 3, "greet, url, odd");
        let greet = view.tool("greet").expect("greet");
        assert_eq!(greet.item().key, "greet");
        assert_eq!(greet.argument_errors(&serde_json::json!({ "who": 1 })).map(|e| e.contains("string")), Some(true));
        assert_eq!(greet.argument_errors(&args), None);
        assert_eq!(view.validators.iter().filter(|v| v.get().is_some()).count(), 1, "greet's schema only");
    }
}
