//! The catalog compiled into the binary: a few small, useful items that show each kind of
//! primitive working end to end before an operator writes a definitions file.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::catalog::{Catalog, Content, ItemSet, Outcome, Prompt, Resource, Tool, ToolError, text_outcome};

const ABOUT: &str = "# MCP platform\n\nA dual-era Model Context Protocol server: legacy revisions \
2024-11-05 to 2025-11-25 through the initialize handshake, and the stateless revision \
2026-07-28 through per-request `_meta`, over stdio and Streamable HTTP.\n";

/// A small icon, inline so that clients need fetch nothing.
pub const ICON: &str = "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxNiAxNiI+PGNpcmNsZSBjeD0iOCIgY3k9IjgiIHI9IjciIGZpbGw9IiMyYjZjYjAiLz48L3N2Zz4=";

pub fn icons() -> Value {
    json!([{ "src": ICON, "mimeType": "image/svg+xml", "sizes": ["any"] }])
}

pub fn server_info() -> Value {
    json!({
        "name": "mcp-platform",
        "title": "MCP Platform",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "A dual-era MCP server platform",
        "icons": icons(),
    })
}

/// The names of the compiled-in item sets.
pub const SETS: [&str; 2] = ["demo", "conformance"];

/// A compiled-in item set by name.
pub fn set(name: &str) -> Option<ItemSet> {
    match name {
        "demo" => Some(demo()),
        "conformance" => Some(crate::conformance::set()),
        _ => None,
    }
}

/// The default catalog: the demo set.
pub fn catalog() -> Catalog {
    let demo = demo();
    let instructions = demo.instructions.clone();
    Catalog::assemble(server_info(), instructions, vec![demo]).expect("the demo set is consistent")
}

/// Small, useful items that show each kind of primitive working end to end before an
/// operator writes a definitions file.
pub fn demo() -> ItemSet {
    ItemSet {
        changes: false,
        instructions: "Demonstration items: `echo`, `add` and `count` tools, the `about://server` resource and \
                       the `summarize` prompt."
            .into(),
        tools: vec![echo(), add(), count()],
        resources: vec![Resource {
            uri: "about://server".into(),
            def: json!({
                "uri": "about://server",
                "name": "about",
                "title": "About this server",
                "description": "What this server is and which protocol revisions it speaks",
                "mimeType": "text/markdown",
                "size": ABOUT.len(),
            }),
            scopes: vec![],
            mime_type: Some("text/markdown".into()),
            content: Content::Text(ABOUT.into()),
        }],
        templates: vec![],
        prompts: vec![summarize()],
    }
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidArguments(format!("`{name}` must be a string")))
}

fn number_arg(args: &Value, name: &str) -> Result<f64, ToolError> {
    args.get(name)
        .and_then(Value::as_f64)
        .ok_or_else(|| ToolError::InvalidArguments(format!("`{name}` must be a number")))
}

fn echo() -> Tool {
    Tool {
        text: None,
        name: "echo".into(),
        def: json!({
            "name": "echo",
            "title": "Echo",
            "description": "Returns the message it is given",
            "icons": icons(),
            "inputSchema": {
                "type": "object",
                "properties": { "message": { "type": "string", "description": "Text to send back" } },
                "required": ["message"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false }
        }),
        scopes: vec![],
        handler: Arc::new(|args, _ctx| {
            Box::pin(async move {
                let message = string_arg(&args, "message")?;
                text_outcome(message)
            })
        }),
    }
}

fn add() -> Tool {
    Tool {
        text: None,
        name: "add".into(),
        def: json!({
            "name": "add",
            "title": "Add two numbers",
            "description": "Adds a and b and returns the sum, as text and as structured content",
            "inputSchema": {
                "type": "object",
                "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
                "required": ["a", "b"],
                "additionalProperties": false
            },
            "outputSchema": {
                "type": "object",
                "properties": { "sum": { "type": "number" } },
                "required": ["sum"]
            },
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false }
        }),
        scopes: vec![],
        handler: Arc::new(|args, _ctx| {
            Box::pin(async move {
                let sum = number_arg(&args, "a")? + number_arg(&args, "b")?;
                let structured = json!({ "sum": mcp_proto::jsonrpc::number(sum) });
                Ok(Outcome::Complete(json!({
                    "content": [{ "type": "text", "text": structured.to_string() }],
                    "structuredContent": structured,
                    "isError": false
                })))
            })
        }),
    }
}

fn count() -> Tool {
    Tool {
        text: None,
        name: "count".into(),
        def: json!({
            "name": "count",
            "title": "Count slowly",
            "description": "Counts from 1 to `to`, one step every `interval_ms`, reporting progress and logging each step",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "to": { "type": "integer", "minimum": 1, "maximum": 100, "default": 3 },
                    "interval_ms": { "type": "integer", "minimum": 0, "maximum": 1000, "default": 50 }
                },
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false }
        }),
        scopes: vec![],
        handler: Arc::new(|args, ctx| {
            Box::pin(async move {
                let to = match args.get("to") {
                    None => 3,
                    Some(v) => v
                        .as_u64()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| ToolError::InvalidArguments("`to` must be an integer from 1 to 100".into()))?,
                };
                let interval = match args.get("interval_ms") {
                    None => 50,
                    Some(v) => v.as_u64().filter(|n| *n <= 1000).ok_or_else(|| {
                        ToolError::InvalidArguments("`interval_ms` must be an integer from 0 to 1000".into())
                    })?,
                };
                for i in 1..=to {
                    if ctx.is_cancelled() {
                        return Err(ToolError::Internal("cancelled".into()));
                    }
                    tokio::time::sleep(Duration::from_millis(interval)).await;
                    ctx.log("info", json!(format!("step {i} of {to}"))).await;
                    ctx.progress(i as f64, Some(to as f64), &format!("step {i} of {to}")).await;
                }
                text_outcome(format!("counted to {to}"))
            })
        }),
    }
}

fn summarize() -> Prompt {
    let topics = ["sales", "support", "engineering", "security", "roadmap"];
    let mut completions = HashMap::new();
    completions.insert("topic".to_owned(), topics.iter().map(|s| s.to_string()).collect());
    completions.insert("style".to_owned(), vec!["brief".to_owned(), "detailed".to_owned()]);
    Prompt {
        name: "summarize".into(),
        def: json!({
            "name": "summarize",
            "title": "Summarize a topic",
            "description": "Asks the model for a summary of what is known about a topic",
            "arguments": [
                { "name": "topic", "description": "What to summarize", "required": true },
                { "name": "style", "description": "brief or detailed", "required": false }
            ]
        }),
        scopes: vec![],
        render: Arc::new(|args, _exchange| {
            let topic = args.get("topic").ok_or("missing required argument `topic`")?;
            let style = args.get("style").map(String::as_str).unwrap_or("brief");
            Ok(Outcome::Complete(json!({
                "description": format!("Summary of {topic}"),
                "messages": [{
                    "role": "user",
                    "content": { "type": "text", "text": format!("Give a {style} summary of what we know about {topic}.") }
                }]
            })))
        }),
        completions,
    }
}
