//! The definitions file: a complete example served as written, and a table of mistakes, each
//! refused with its place and reason.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use super::load;
use crate::catalog::{Exchange, Outcome};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

const GOOD: &str = r#"
server:
  name: acme-tools
  title: ACME Tools
  version: 1.4.0
  instructions: Use the tools.
  icons: [{ src: "data:image/png;base64,AAAA", mime_type: image/png, sizes: ["16x16"] }]
builtins: [demo]
tools:
  - name: greet
    title: Greet
    description: Says hello
    input_schema:
      type: object
      properties: { name: { type: string }, excited: { type: boolean } }
      required: [name]
    annotations: { read_only_hint: true, open_world_hint: false }
    scopes: [greet:use]
    text: "Hello, {{ name }}{% if excited %}!{% endif %}"
resources:
  - { uri: "docs://handbook", name: handbook, file: handbook.md }
  - { uri: "docs://motto", name: motto, text: "Be kind." }
resource_templates:
  - uri_template: "docs://files/{+path}"
    name: files
    directory: files
  - uri_template: "greeting://{lang}"
    name: greeting
    text: "greeting in {{ lang }}"
    completions: { lang: [en, fr, de] }
prompts:
  - name: summarize_topic
    description: Summarize a topic
    arguments: [{ name: topic, required: true, completions: [sales, support] }, { name: style }]
    messages:
      - { role: user, text: "Summarize {{ topic }} in a {{ style or 'brief' }} way." }
      - { role: assistant, resource: "docs://motto" }
"#;

fn good_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "handbook.md", "# Handbook\n");
    std::fs::create_dir(dir.path().join("files")).expect("mkdir");
    std::fs::create_dir(dir.path().join("files/sub")).expect("mkdir");
    write(&dir.path().join("files/sub"), "a.json", "{\"a\":1}");
    write(dir.path(), "secret.txt", "do not serve");
    // A symlink inside the root that leads outside it.
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), dir.path().join("files/sub/link.txt")).expect("symlink");
    dir
}

#[tokio::test]
async fn a_complete_file_is_served_as_written() {
    let dir = good_dir();
    let catalog = load(&write(dir.path(), "defs.yaml", GOOD)).expect("valid definitions");
    assert_eq!(catalog.server_info["name"], "acme-tools");
    assert_eq!(catalog.server_info["icons"][0]["mimeType"], "image/png");
    assert_eq!(catalog.instructions, "Use the tools.");
    assert!(catalog.tool("echo").is_some(), "the demo set is included");

    let greet = catalog.tool("greet").expect("greet");
    assert_eq!(greet.def["annotations"], json!({"readOnlyHint": true, "openWorldHint": false}));
    assert_eq!(greet.scopes, ["greet:use"]);
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let handle = crate::server::CatalogHandle::new(std::sync::Arc::new(crate::builtin::catalog()));
    let ctx = crate::catalog::ToolContext::new(tx, false, "", Exchange::default(), handle);
    match (greet.handler)(json!({"name": "Ada", "excited": true}), ctx).await {
        Ok(Outcome::Complete(r)) => assert_eq!(r["content"][0]["text"], "Hello, Ada!"),
        other => panic!("{other:?}"),
    }

    let handbook = catalog.resource("docs://handbook").expect("handbook");
    assert_eq!(handbook.def["mimeType"], "text/markdown");
    assert_eq!(handbook.contents().expect("read")[0]["text"], "# Handbook\n");

    let (files, vars) = catalog.template_for("docs://files/sub/a.json").expect("matches");
    match (files.reader)("docs://files/sub/a.json".into(), vars, Exchange::default()).await {
        Ok(Outcome::Complete(c)) => {
            assert_eq!(c[0], json!({"uri":"docs://files/sub/a.json","mimeType":"application/json","text":"{\"a\":1}"}))
        }
        other => panic!("{other:?}"),
    }
    // No escape from the directory.
    for uri in [
        "docs://files/../secret.txt",
        "docs://files/sub/../../secret.txt",
        "docs://files//etc/passwd",
        "docs://files/sub/link.txt",
    ] {
        if let Some((t, vars)) = catalog.template_for(uri) {
            match (t.reader)(uri.into(), vars, Exchange::default()).await {
                Ok(Outcome::Complete(c)) => assert_eq!(c, json!([]), "{uri}"),
                other => panic!("{uri}: {other:?}"),
            }
        }
    }
    let (greeting, _) = catalog.template_for("greeting://fr").expect("matches");
    assert_eq!(greeting.completions["lang"], ["en", "fr", "de"]);

    let prompt = catalog.prompt("summarize_topic").expect("prompt");
    let args: HashMap<String, String> = [("topic".to_owned(), "sales".to_owned())].into();
    match (prompt.render)(&args, &Exchange::default()) {
        Ok(Outcome::Complete(r)) => {
            assert_eq!(r["messages"][0]["content"]["text"], "Summarize sales in a brief way.");
            assert_eq!(r["messages"][1]["role"], "assistant");
            assert_eq!(r["messages"][1]["content"]["resource"]["text"], "Be kind.");
        }
        other => panic!("{other:?}"),
    }
    assert!((prompt.render)(&HashMap::new(), &Exchange::default()).is_err(), "topic is required");
}

/// Each mistake, the line it is on, and words its message must contain.
const MISTAKES: &[(&str, u64, &[&str])] = &[
    ("tools:\n  - name: a\n    text: x\n    colour: red\n", 4, &["unknown field `colour`"]),
    ("tools:\n  - name: a\n    text: [1, 2]\n", 3, &["expected string"]),
    ("server:\n  title: no name\n", 2, &["missing field `name`"]),
    ("tools: {}\n", 1, &["expected sequence"]),
    ("tools:\n  - name: a\n    text: x\n  - name: a\n    text: y\n", 4, &["duplicate tool `a`"]),
    ("tools:\n  - name: echo\n    text: x\nbuiltins: [demo]\n", 2, &["duplicate tool `echo`"]),
    ("tools:\n  - name: 'has space'\n    text: x\n", 2, &["tool name `has space`"]),
    ("tools:\n  - name: a\n", 2, &["needs exactly one backend"]),
    (
        "tools:\n  - name: a\n    http: { url: 'https://example.com/a', max_response_bytes: 100000000 }\n",
        2,
        &["http.max_response_bytes must be between 1 and 33554432"],
    ),
    (
        "tools:\n  - name: a\n    http: { url: 'https://example.com/a', max_response_bytes: 0 }\n",
        2,
        &["max_response_bytes"],
    ),
    ("tools:\n  - name: a\n    text: '{{ name'\n", 2, &["template"]),
    (
        "tools:\n  - name: a\n    text: 'Hi {{ nmae }}'\n    input_schema: { type: object, properties: { name: { type: string } } }\n",
        2,
        &["nmae", "known: name"],
    ),
    ("tools:\n  - name: a\n    text: x\n    input_schema: { type: array }\n", 2, &["type: object"]),
    (
        "tools:\n  - name: a\n    text: x\n    input_schema: { type: object, properties: 3 }\n",
        2,
        &["not a valid JSON Schema"],
    ),
    ("resources:\n  - { uri: 'docs://x', name: x, file: missing.md }\n", 2, &["missing.md"]),
    ("resources:\n  - { uri: 'docs://x', name: x }\n", 2, &["exactly one of `text` or `file`"]),
    ("resources:\n  - { uri: 'not a uri', name: x, text: t }\n", 2, &["not an absolute URI"]),
    ("resource_templates:\n  - { uri_template: 'x://fixed', name: x, text: t }\n", 2, &["needs {name}"]),
    ("resource_templates:\n  - { uri_template: 'x://{a}', name: x, directory: nowhere }\n", 2, &["nowhere"]),
    ("resource_templates:\n  - { uri_template: 'x://{a}', name: x, text: '{{ b }}' }\n", 2, &["b not declared"]),
    ("prompts:\n  - name: p\n    messages: [{ role: user, text: '{{ who }}' }]\n", 2, &["who not declared"]),
    ("prompts:\n  - name: p\n    messages: [{ role: robot, text: x }]\n", 3, &["unknown variant `robot`"]),
    (
        "prompts:\n  - name: p\n    messages: [{ role: user, resource: 'docs://none' }]\n",
        2,
        &["no resource `docs://none`"],
    ),
    ("prompts:\n  - name: p\n    messages: []\n", 2, &["at least one message"]),
    ("builtins: [nope]\n", 1, &["unknown set `nope`"]),
    ("server:\n  name: x\n  icons: [{ src: 'http://insecure.example/i.png' }]\n", 2, &["https: or data:"]),
    ("tools:\n  - name: a\n    text: x\n    scopes: yes\n", 4, &["expected sequence"]),
];

#[test]
fn mistakes_are_refused_with_their_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut wrong = Vec::new();
    for (i, (text, line, words)) in MISTAKES.iter().enumerate() {
        let path = write(dir.path(), &format!("m{i}.yaml"), text);
        let Some(err) = load(&path).err().map(|e| e.to_string()) else {
            wrong.push(format!("case {i} was accepted:\n{text}"));
            continue;
        };
        let placed = err.contains(&format!("m{i}.yaml"))
            && (err.contains(&format!(":{line}:")) || err.contains(&format!("line {line} ")));
        if !placed || !words.iter().all(|w| err.contains(w)) {
            wrong.push(format!("case {i} (line {line}, {words:?}): {err}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn every_mistake_is_reported_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "tools:\n  - name: a\n  - name: 'b c'\n    text: x\nprompts:\n  - name: p\n    messages: []\n";
    let err = load(&write(dir.path(), "multi.yaml", text)).err().expect("refused");
    assert_eq!(err.issues.len(), 3, "{err}");
    let _ = Value::Null;
}

/// The published JSON Schema for the file accepts every example and refuses what the loader
/// refuses for its shape, so editors and the server agree.
#[tokio::test]
async fn the_published_schema_matches_the_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/definitions.schema.json")).expect("schema"))
            .expect("schema is JSON");
    jsonschema::meta::validate(&schema).expect("a valid 2020-12 schema");
    let validator = jsonschema::validator_for(&schema).expect("compiles");
    for example in ["examples/catalog.yaml", "examples/conformance.yaml"] {
        let text = std::fs::read_to_string(root.join(example)).expect("example");
        let doc: Value = serde_saphyr::from_str(&text).expect("YAML");
        let problems: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(problems.is_empty(), "{example}: {problems:?}");
        assert!(load(&root.join(example)).is_ok(), "{example} loads");
    }
    for (text, _, _) in MISTAKES.iter().take(4) {
        let doc: Value = serde_saphyr::from_str(text).expect("YAML");
        assert!(!validator.is_valid(&doc), "the schema refuses too:\n{text}");
    }
}

#[test]
fn json_is_accepted_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = r#"{"server": {"name": "j"}, "tools": [{"name": "hi", "text": "hi {{ who }}",
        "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}}}]}"#;
    let catalog = load(&write(dir.path(), "defs.json", text)).expect("JSON is YAML");
    assert_eq!(catalog.server_info["name"], "j");
    assert!(catalog.tool("hi").is_some());
}

#[test]
fn a_file_too_large_to_carry_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    let file = std::fs::File::create(&path).expect("create");
    file.set_len(super::MAX_RAW_BYTES + 1).expect("sparse");
    let refused = super::file_contents("test://big", &path, "application/octet-stream").expect_err("too large");
    assert!(refused.starts_with("`test://big` is 33554433 bytes, above the 32 MiB"), "{refused}");
    assert!(!refused.contains(dir.path().to_str().unwrap_or("/")), "no server path: {refused}");
    file.set_len(3).expect("shrink");
    let read = super::file_contents("test://big", &path, "application/octet-stream").expect("read");
    assert_eq!(read["blob"], "AAAA");
    // The JSON of one answer: up to 63 MiB, and no more than that made to find out.
    let most = super::build::MAX_CONTENTS_JSON_BYTES;
    assert_eq!(most, 63 * 1024 * 1024);
    let fits = "a".repeat(most - 2);
    assert_eq!(super::contents_json("u", &fits).map(|j| j.len()), Ok(most));
    let over = "a".repeat(most - 1);
    let refused = super::contents_json("u", &over).expect_err("one byte over");
    assert!(refused.contains("`u`: more than 63 MiB as JSON"), "{refused}");
    // Escapes count: 12 MiB of NUL characters are 72 MiB as JSON.
    assert!(super::contents_json("u", &"\0".repeat(12 * 1024 * 1024)).is_err());
}

#[test]
fn a_file_that_cannot_be_read_is_named_by_its_uri_not_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("gone.txt");
    let refused = super::file_contents("test://gone", &missing, "text/plain").expect_err("gone");
    assert_eq!(refused, "`test://gone` cannot be read: entity not found");
}
