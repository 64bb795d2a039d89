//! Checking a parsed definitions file and turning it into catalog items.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use serde_saphyr::Spanned;

use super::Issue;
use super::model::{File, IconDef, MessageDef, PromptDef, ResourceDef, Role, TemplateDef, ToolDef};
use crate::backends::sql::Databases;
use crate::backends::templates::Templates;
use crate::backends::{self, ToolContext};
use crate::builtin;
use crate::catalog::{Catalog, Content, ItemSet, Outcome, Prompt, Resource, ResourceTemplate, Tool, text_result};

/// Collects mistakes with their places.
#[derive(Default)]
struct Issues(Vec<Issue>);

impl Issues {
    fn at<T>(&mut self, item: &Spanned<T>, message: impl Into<String>) {
        self.0.push(Issue { line: item.referenced.line(), column: item.referenced.column(), message: message.into() });
    }
}

/// Tool and prompt names: 1–128 of `A-Z a-z 0-9 _ - .` (the specification's guidance).
fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

fn icons(defs: &[IconDef]) -> Option<Value> {
    if defs.is_empty() {
        return None;
    }
    Some(Value::Array(
        defs.iter()
            .map(|i| {
                let mut icon = Map::new();
                icon.insert("src".into(), json!(i.src));
                if let Some(m) = &i.mime_type {
                    icon.insert("mimeType".into(), json!(m));
                }
                if !i.sizes.is_empty() {
                    icon.insert("sizes".into(), json!(i.sizes));
                }
                if let Some(t) = &i.theme {
                    icon.insert("theme".into(), json!(t));
                }
                Value::Object(icon)
            })
            .collect(),
    ))
}

fn check_icons<T>(issues: &mut Issues, item: &Spanned<T>, defs: &[IconDef]) {
    for icon in defs {
        if !(icon.src.starts_with("https://") || icon.src.starts_with("data:")) {
            issues.at(item, format!("icon `{}`: src must be an https: or data: URI", icon.src));
        }
        if icon.theme.as_deref().is_some_and(|t| t != "light" && t != "dark") {
            issues.at(item, "icon theme must be `light` or `dark`");
        }
    }
}

/// Insert the optional string fields that are present.
fn put(obj: &mut Map<String, Value>, fields: &[(&str, &Option<String>)]) {
    for (key, value) in fields {
        if let Some(v) = value {
            obj.insert((*key).into(), json!(v));
        }
    }
}

/// Compile `source` into `templates` as `name`, reporting a mistake at `at`.
fn template<T>(
    templates: &mut Templates,
    issues: &mut Issues,
    at: &Spanned<T>,
    name: &str,
    source: &str,
    allowed: &BTreeSet<String>,
) {
    if let Err(e) = templates.add(name, source, allowed) {
        issues.at(at, e);
    }
}

/// A path relative to the definitions file, which must exist as a file (or directory).
fn existing(base: &Path, path: &Path, dir: bool) -> Result<PathBuf, String> {
    let full = if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
    let meta = std::fs::metadata(&full).map_err(|e| format!("`{}`: {e}", full.display()))?;
    if dir != meta.is_dir() {
        return Err(format!("`{}` is not a {}", full.display(), if dir { "directory" } else { "file" }));
    }
    full.canonicalize().map_err(|e| format!("`{}`: {e}", full.display()))
}

fn mime_for(path: &Path, declared: &Option<String>) -> String {
    declared.clone().unwrap_or_else(|| {
        mime_guess::from_path(path).first().map_or_else(|| "text/plain".to_owned(), |m| m.essence_str().to_owned())
    })
}

/// Whether contents of this type travel as `text` (else as base64 `blob`).
pub fn is_textual(mime: &str) -> bool {
    mime.starts_with("text/")
        || ["application/json", "application/xml", "application/yaml", "application/javascript", "image/svg+xml"]
            .contains(&mime)
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
}

/// The most raw bytes one answer carries: the largest file a resource is read from, and an
/// `http` tool's largest answer. They travel on to mcp-service, and from there to the gateway,
/// in one message of at most [`mcp_proto::MAX_MESSAGE_BYTES`] (64 MiB), as JSON (base64 for a
/// blob, a third larger; escapes can grow text): 32 MiB.
pub const MAX_RAW_BYTES: u64 = (mcp_proto::MAX_MESSAGE_BYTES / 2) as u64;

/// The largest serialized `contents` of one read (the reply around them and the message's other
/// fields take the rest of a message).
pub const MAX_CONTENTS_JSON_BYTES: usize = mcp_proto::MAX_MESSAGE_BYTES - 1024 * 1024;

/// `value` as JSON, unless it is longer than [`MAX_CONTENTS_JSON_BYTES`]: then why, without
/// having made more of it than that. `what` names it (a resource's URI, a prompt, a tool).
pub fn contents_json(what: &str, value: &impl serde::Serialize) -> Result<Vec<u8>, String> {
    /// A buffer that refuses to grow past the limit.
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + buf.len() > MAX_CONTENTS_JSON_BYTES {
                return Err(std::io::Error::other("too large"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    match serde_json::to_writer(&mut out, value) {
        Ok(()) => Ok(out.0),
        Err(e) if e.is_io() => Err(format!(
            "`{what}`: more than {} MiB as JSON, the most one answer may carry",
            MAX_CONTENTS_JSON_BYTES / (1024 * 1024)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The `contents` entry for a file read now. A file above [`MAX_RAW_BYTES`] is refused,
/// and no more than that is ever read (a file that grows while it is read is refused too). The
/// errors name the URI, not the file (a template's reach the client): the file's path goes to
/// the log.
pub fn file_contents(uri: &str, path: &Path, mime: &str) -> Result<Value, String> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| {
        tracing::warn!(uri, path = %path.display(), error = %e, "a resource's file cannot be read");
        format!("`{uri}` cannot be read: {}", e.kind())
    };
    let too_large = |len: String| {
        format!(
            "`{uri}` is {len} bytes, above the {} MiB a resource's file may have (its contents travel between the services in one message)",
            MAX_RAW_BYTES / (1024 * 1024)
        )
    };
    let file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if len > MAX_RAW_BYTES {
        return Err(too_large(len.to_string()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_RAW_BYTES + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > MAX_RAW_BYTES {
        // It grew while it was read.
        return Err(too_large(format!("more than {MAX_RAW_BYTES}")));
    }
    let mut item = json!({ "uri": uri, "mimeType": mime });
    if is_textual(mime) {
        match String::from_utf8(bytes) {
            Ok(text) => item["text"] = json!(text),
            Err(e) => item["blob"] = json!(STANDARD.encode(e.into_bytes())),
        }
    } else {
        item["blob"] = json!(STANDARD.encode(bytes));
    }
    Ok(item)
}

/// Resolve `relative` under `root` without escaping it (no `..`, no absolute path, no symlink
/// that leads outside). `None` when the path is refused or does not exist.
pub fn under_root(root: &Path, relative: &str) -> Option<PathBuf> {
    let rel = Path::new(relative);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let resolved = root.join(rel).canonicalize().ok()?;
    (resolved.starts_with(root) && resolved.is_file()).then_some(resolved)
}

/// Check the whole file and build the catalog, or report every mistake.
pub fn catalog(file: File, base: &Path, data_dir: Option<&Path>) -> Result<Catalog, Vec<Issue>> {
    let mut issues = Issues::default();

    let mut sets = Vec::new();
    let mut seen_sets = HashSet::new();
    for name in &file.builtins {
        if !seen_sets.insert(name.value.clone()) {
            issues.at(name, format!("builtins: `{}` listed twice", name.value));
        } else if let Some(set) = builtin::set(&name.value) {
            sets.push(set);
        } else {
            issues.at(name, format!("builtins: unknown set `{}` (known: {})", name.value, builtin::SETS.join(", ")));
        }
    }

    let (databases, problems) = Databases::build(&file.databases, data_dir.unwrap_or(base));
    for (line, column, message) in problems {
        issues.0.push(Issue { line, column, message });
    }
    let mut own = ItemSet::default();
    for def in &file.tools {
        if let Some(tool) = tool(def, &file, &databases, &mut issues) {
            own.tools.push(tool);
        }
    }
    let uris: HashSet<&str> = file.resources.iter().map(|r| r.value.uri.as_str()).collect();
    for def in &file.resources {
        if let Some(resource) = resource(def, base, &mut issues) {
            own.resources.push(resource);
        }
    }
    for def in &file.resource_templates {
        if let Some(t) = resource_template(def, base, &databases, &mut issues) {
            own.templates.push(t);
        }
    }
    let resources_by_uri: Arc<HashMap<String, Resource>> =
        Arc::new(own.resources.iter().map(|r| (r.uri.clone(), r.clone())).collect());
    for def in &file.prompts {
        if let Some(p) = prompt(def, base, &uris, &resources_by_uri, &mut issues) {
            own.prompts.push(p);
        }
    }

    // The file itself is watched: its catalog can always change.
    own.changes = true;
    let (server_info, instructions) = server(&file, &sets, &mut issues);
    sets.push(own);
    // Names must be unique across everything served.
    let catalog = match Catalog::assemble(server_info, instructions, sets) {
        Ok(c) => Some(c),
        Err(e) => {
            duplicates(&file, &mut issues, &e);
            None
        }
    };
    match catalog {
        Some(c) if issues.0.is_empty() => Ok(c),
        _ => {
            issues.0.sort_by_key(|i| (i.line, i.column));
            Err(issues.0)
        }
    }
}

/// Report a duplicate at the place of its second definition (or the top when it clashes with
/// a compiled-in set).
fn duplicates(file: &File, issues: &mut Issues, message: &str) {
    let name = message.split('`').nth(1).unwrap_or_default();
    let places: Vec<(u64, u64)> = file
        .tools
        .iter()
        .filter(|t| t.value.name == name)
        .map(|t| (t.referenced.line(), t.referenced.column()))
        .chain(
            file.resources.iter().filter(|r| r.value.uri == name).map(|r| (r.referenced.line(), r.referenced.column())),
        )
        .chain(
            file.resource_templates
                .iter()
                .filter(|t| t.value.uri_template == name)
                .map(|t| (t.referenced.line(), t.referenced.column())),
        )
        .chain(
            file.prompts.iter().filter(|p| p.value.name == name).map(|p| (p.referenced.line(), p.referenced.column())),
        )
        .collect();
    let (line, column) = places.get(1).or(places.first()).copied().unwrap_or((1, 1));
    issues.0.push(Issue { line, column, message: message.to_owned() });
}

fn server(file: &File, sets: &[ItemSet], issues: &mut Issues) -> (Value, String) {
    let mut instructions = sets.iter().map(|s| s.instructions.as_str()).collect::<Vec<_>>().join(" ");
    let Some(spanned) = &file.server else { return (builtin::server_info(), instructions) };
    let server = &spanned.value;
    check_icons(issues, spanned, &server.icons);
    let mut info = Map::new();
    info.insert("name".into(), json!(server.name));
    info.insert(
        "version".into(),
        json!(server.version.clone().unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())),
    );
    put(
        &mut info,
        &[("title", &server.title), ("description", &server.description), ("websiteUrl", &server.website_url)],
    );
    if let Some(i) = icons(&server.icons) {
        info.insert("icons".into(), i);
    }
    if server.name.trim().is_empty() {
        issues.at(spanned, "server.name must not be empty");
    }
    if let Some(i) = &server.instructions {
        instructions = i.clone();
    }
    (Value::Object(info), instructions)
}

fn check_schema(issues: &mut Issues, at: &Spanned<ToolDef>, what: &str, schema: &Value, object_root: bool) {
    if let Err(e) = jsonschema::meta::validate(schema) {
        issues.at(at, format!("{what} is not a valid JSON Schema: {e}"));
        return;
    }
    if let Err(e) = jsonschema::validator_for(schema) {
        issues.at(at, format!("{what} cannot be compiled: {e}"));
    }
    if object_root && schema.get("type").and_then(Value::as_str) != Some("object") {
        issues.at(at, format!("{what} must have `type: object` at its root"));
    }
}

fn tool(def: &Spanned<ToolDef>, file: &File, databases: &Databases, issues: &mut Issues) -> Option<Tool> {
    let t = &def.value;
    let before = issues.0.len();
    if !valid_name(&t.name) {
        issues.at(def, format!("tool name `{}` must be 1-128 characters of A-Z a-z 0-9 _ - .", t.name));
    }
    let input_schema =
        t.input_schema.clone().unwrap_or_else(|| json!({ "type": "object", "additionalProperties": false }));
    check_schema(issues, def, "input_schema", &input_schema, true);
    if let Some(out) = &t.output_schema {
        check_schema(issues, def, "output_schema", out, false);
    }
    check_icons(issues, def, &t.icons);
    let properties: BTreeSet<String> = input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let cx = ToolContext {
        name: &t.name,
        properties: &properties,
        output_schema: t.output_schema.as_ref(),
        allow_private: file.allow_private_networks,
        databases,
    };
    let handler = match (&t.text, &t.http, &t.sql) {
        (Some(source), None, None) => {
            // Checked now, compiled again on the tool's first call.
            match mcp_proto::templates::Lazy::checked(source, &properties) {
                Err(e) => Err(vec![e]),
                Ok(text) => {
                    let text = Arc::new(text);
                    let handler: crate::catalog::ToolHandler = Arc::new(move |args, _| {
                        let rendered = text.render(&args);
                        Box::pin(async move {
                            match rendered {
                                Ok(text) => Ok(Outcome::Complete(text_result(text, false))),
                                Err(e) => Err(crate::catalog::ToolError::Internal(e)),
                            }
                        })
                    });
                    Ok(handler)
                }
            }
        }
        (None, Some(http), None) => backends::http::tool(http, &cx),
        (None, None, Some(sql)) => backends::sql::tool(sql, &cx),
        _ => Err(vec!["needs exactly one backend: `text`, `http` or `sql`".to_owned()]),
    };
    let handler = match handler {
        Ok(h) => Some(h),
        Err(problems) => {
            for p in problems {
                issues.at(def, format!("tool `{}`: {p}", t.name));
            }
            None
        }
    };
    if issues.0.len() > before {
        return None;
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(t.name));
    put(&mut obj, &[("title", &t.title), ("description", &t.description)]);
    obj.insert("inputSchema".into(), input_schema);
    if let Some(out) = &t.output_schema {
        obj.insert("outputSchema".into(), out.clone());
    }
    if let Some(a) = &t.annotations {
        let mut ann = Map::new();
        put(&mut ann, &[("title", &a.title)]);
        for (key, value) in [
            ("readOnlyHint", a.read_only_hint),
            ("destructiveHint", a.destructive_hint),
            ("idempotentHint", a.idempotent_hint),
            ("openWorldHint", a.open_world_hint),
        ] {
            if let Some(v) = value {
                ann.insert(key.into(), json!(v));
            }
        }
        obj.insert("annotations".into(), Value::Object(ann));
    }
    if let Some(i) = icons(&t.icons) {
        obj.insert("icons".into(), i);
    }
    Some(Tool {
        name: t.name.clone(),
        def: Value::Object(obj),
        scopes: t.scopes.clone(),
        handler: handler?,
        text: t.text.clone(),
    })
}

fn resource(def: &Spanned<ResourceDef>, base: &Path, issues: &mut Issues) -> Option<Resource> {
    let r = &def.value;
    check_icons(issues, def, &r.icons);
    if url::Url::parse(&r.uri).is_err() {
        issues.at(def, format!("resource uri `{}` is not an absolute URI", r.uri));
        return None;
    }
    let (content, mime) = match (&r.text, &r.file) {
        (Some(text), None) => (Content::Text(text.clone()), r.mime_type.clone().unwrap_or_else(|| "text/plain".into())),
        (None, Some(path)) => match existing(base, path, false) {
            Ok(full) => {
                let mime = mime_for(&full, &r.mime_type);
                (Content::File(crate::catalog::FileSource::new(full)), mime)
            }
            Err(e) => {
                issues.at(def, format!("resource `{}`: file {e}", r.uri));
                return None;
            }
        },
        _ => {
            issues.at(def, format!("resource `{}` needs exactly one of `text` or `file`", r.uri));
            return None;
        }
    };
    let mut obj = Map::new();
    obj.insert("uri".into(), json!(r.uri));
    obj.insert("name".into(), json!(r.name));
    put(&mut obj, &[("title", &r.title), ("description", &r.description)]);
    obj.insert("mimeType".into(), json!(mime));
    if let Content::Text(t) = &content {
        obj.insert("size".into(), json!(t.len()));
    }
    if let Some(i) = icons(&r.icons) {
        obj.insert("icons".into(), i);
    }
    Some(Resource {
        uri: r.uri.clone(),
        def: Value::Object(obj),
        scopes: r.scopes.clone(),
        mime_type: Some(mime),
        content,
    })
}

fn template_vars(uri_template: &str) -> Vec<String> {
    uri_template
        .split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(v, _)| v.trim_start_matches('+').to_owned()))
        .collect()
}

fn resource_template(
    def: &Spanned<TemplateDef>,
    base: &Path,
    databases: &Databases,
    issues: &mut Issues,
) -> Option<ResourceTemplate> {
    let t = &def.value;
    let before = issues.0.len();
    check_icons(issues, def, &t.icons);
    let vars = template_vars(&t.uri_template);
    if vars.is_empty()
        || vars.iter().any(|v| v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        issues.at(def, format!("uri_template `{}` needs {{name}} or {{+name}} variables", t.uri_template));
    }
    for key in t.completions.keys() {
        if !vars.contains(key) {
            issues.at(def, format!("completions for `{key}`, which is not a variable of `{}`", t.uri_template));
        }
    }
    let reader: crate::catalog::TemplateReader = match (&t.text, &t.directory, &t.sql) {
        (Some(source), None, None) => {
            let allowed: BTreeSet<String> = vars.iter().cloned().collect();
            let mut env = Templates::default();
            template(&mut env, issues, def, "text", source, &allowed);
            let mime = t.mime_type.clone().unwrap_or_else(|| "text/plain".into());
            let env = Arc::new(env);
            Arc::new(move |uri, found, _| {
                let contents = env
                    .render("text", &json!(found))
                    .map(|text| Outcome::Complete(json!([{ "uri": uri, "mimeType": mime, "text": text }])));
                Box::pin(std::future::ready(contents))
            })
        }
        (None, Some(dir), None) => {
            if vars.len() != 1 {
                issues.at(def, "a `directory` template has exactly one variable: the path below the directory");
            }
            match existing(base, dir, true) {
                Ok(root) => {
                    let declared = t.mime_type.clone();
                    let var = vars.first().cloned().unwrap_or_default();
                    Arc::new(move |uri, found, _| {
                        let contents = match found.get(&var).and_then(|rel| under_root(&root, rel)) {
                            None => Ok(json!([])),
                            Some(path) => file_contents(&uri, &path, &mime_for(&path, &declared)).map(|c| json!([c])),
                        };
                        Box::pin(std::future::ready(contents.map(Outcome::Complete)))
                    })
                }
                Err(e) => {
                    issues.at(def, format!("directory {e}"));
                    return None;
                }
            }
        }
        (None, None, Some(sql)) => {
            let allowed: BTreeSet<String> = vars.iter().cloned().collect();
            match backends::sql::resource_reader(sql, databases, &allowed) {
                Ok(reader) => reader,
                Err(problems) => {
                    for p in problems {
                        issues.at(def, p);
                    }
                    return None;
                }
            }
        }
        _ => {
            issues.at(
                def,
                format!("resource template `{}` needs exactly one of `text`, `directory` or `sql`", t.uri_template),
            );
            return None;
        }
    };
    if issues.0.len() > before {
        return None;
    }
    let mut obj = Map::new();
    obj.insert("uriTemplate".into(), json!(t.uri_template));
    obj.insert("name".into(), json!(t.name));
    put(&mut obj, &[("title", &t.title), ("description", &t.description), ("mimeType", &t.mime_type)]);
    if let Some(i) = icons(&t.icons) {
        obj.insert("icons".into(), i);
    }
    Some(ResourceTemplate {
        uri_template: t.uri_template.clone(),
        def: Value::Object(obj),
        scopes: t.scopes.clone(),
        reader,
        completions: t.completions.clone().into_iter().collect(),
    })
}

fn prompt(
    def: &Spanned<PromptDef>,
    base: &Path,
    uris: &HashSet<&str>,
    resources: &Arc<HashMap<String, Resource>>,
    issues: &mut Issues,
) -> Option<Prompt> {
    let p = &def.value;
    let before = issues.0.len();
    if !valid_name(&p.name) {
        issues.at(def, format!("prompt name `{}` must be 1-128 characters of A-Z a-z 0-9 _ - .", p.name));
    }
    check_icons(issues, def, &p.icons);
    let args: BTreeSet<String> = p.arguments.iter().map(|a| a.name.clone()).collect();
    if args.len() != p.arguments.len() {
        issues.at(def, format!("prompt `{}` declares an argument twice", p.name));
    }
    if p.messages.is_empty() {
        issues.at(def, format!("prompt `{}` needs at least one message", p.name));
    }
    let mut env = Templates::default();
    let parts: Vec<(Role, PromptPart)> = p
        .messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| message(def, i, m, base, uris, &mut env, &args, issues).map(|part| (m.role, part)))
        .collect();
    if issues.0.len() > before {
        return None;
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(p.name));
    put(&mut obj, &[("title", &p.title), ("description", &p.description)]);
    let arguments: Vec<Value> = p
        .arguments
        .iter()
        .map(|a| {
            let mut arg = Map::new();
            arg.insert("name".into(), json!(a.name));
            put(&mut arg, &[("title", &a.title), ("description", &a.description)]);
            arg.insert("required".into(), json!(a.required));
            Value::Object(arg)
        })
        .collect();
    obj.insert("arguments".into(), Value::Array(arguments));
    if let Some(i) = icons(&p.icons) {
        obj.insert("icons".into(), i);
    }
    let required: Vec<String> = p.arguments.iter().filter(|a| a.required).map(|a| a.name.clone()).collect();
    let completions = p.arguments.iter().map(|a| (a.name.clone(), a.completions.clone())).collect();
    let description = p.description.clone();
    let resources = resources.clone();
    let env = Arc::new(env);
    Some(Prompt {
        name: p.name.clone(),
        def: Value::Object(obj),
        scopes: p.scopes.clone(),
        render: Arc::new(move |args, _| {
            if let Some(missing) = required.iter().find(|r| !args.contains_key(*r)) {
                return Err(format!("missing required argument `{missing}`"));
            }
            let vars = json!(args);
            let mut messages = Vec::new();
            for (role, part) in &parts {
                let content = match part {
                    PromptPart::Text(name) => json!({ "type": "text", "text": env.render(name, &vars)? }),
                    PromptPart::Image { data, mime } => json!({ "type": "image", "data": data, "mimeType": mime }),
                    PromptPart::Resource(uri) => {
                        let r = resources.get(uri).ok_or_else(|| format!("resource `{uri}` is gone"))?;
                        let contents = r.contents()?;
                        json!({ "type": "resource", "resource": contents.get(0).cloned().unwrap_or(Value::Null) })
                    }
                };
                let role = if *role == Role::User { "user" } else { "assistant" };
                messages.push(json!({ "role": role, "content": content }));
            }
            let mut result = json!({ "messages": messages });
            if let Some(d) = &description {
                result["description"] = json!(d);
            }
            Ok(Outcome::Complete(result))
        }),
        completions,
    })
}

/// What one prompt message becomes.
#[derive(Clone)]
pub enum PromptPart {
    Text(String),
    Image { data: String, mime: String },
    Resource(String),
}

#[allow(clippy::too_many_arguments)]
fn message(
    def: &Spanned<PromptDef>,
    index: usize,
    m: &MessageDef,
    base: &Path,
    uris: &HashSet<&str>,
    env: &mut Templates,
    args: &BTreeSet<String>,
    issues: &mut Issues,
) -> Option<PromptPart> {
    let name = &def.value.name;
    match (&m.text, &m.image, &m.resource) {
        (Some(source), None, None) => {
            let template_name = index.to_string();
            template(env, issues, def, &template_name, source, args);
            Some(PromptPart::Text(template_name))
        }
        (None, Some(path), None) => match existing(base, path, false) {
            Ok(full) => match std::fs::read(&full) {
                Ok(bytes) => Some(PromptPart::Image { data: STANDARD.encode(bytes), mime: mime_for(&full, &None) }),
                Err(e) => {
                    issues.at(def, format!("prompt `{name}` message {}: {e}", index + 1));
                    None
                }
            },
            Err(e) => {
                issues.at(def, format!("prompt `{name}` message {}: image {e}", index + 1));
                None
            }
        },
        (None, None, Some(uri)) => {
            if !uris.contains(uri.as_str()) {
                issues.at(def, format!("prompt `{name}` message {}: no resource `{uri}` in this file", index + 1));
            }
            Some(PromptPart::Resource(uri.clone()))
        }
        _ => {
            issues.at(
                def,
                format!("prompt `{name}` message {} needs exactly one of `text`, `image` or `resource`", index + 1),
            );
            None
        }
    }
}
