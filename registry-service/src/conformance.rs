//! The fixture set the official MCP conformance suite drives (`builtins: [conformance]`):
//! its tools, resources and prompts, with the exact names and payloads the scenarios expect.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::catalog::{
    Content, Exchange, ItemSet, Outcome, Prompt, PromptRenderer, Resource, ResourceTemplate, Tool, ToolContext,
    ToolError, ToolHandler, text_outcome, text_result,
};

/// A 1×1 PNG.
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A short silent 8 kHz mono WAV.
pub const WAV: &str = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

const NO_ARGS: fn() -> Value = || json!({ "type": "object", "properties": {} });

fn tool(name: &str, description: &str, schema: Value, handler: ToolHandler) -> Tool {
    Tool {
        text: None,
        name: name.into(),
        def: json!({ "name": name, "description": description, "inputSchema": schema }),
        scopes: vec![],
        handler,
    }
}

/// A tool whose result does not depend on its arguments.
fn fixed(name: &str, description: &str, result: Value) -> Tool {
    tool(
        name,
        description,
        NO_ARGS(),
        Arc::new(move |_, _| {
            let result = result.clone();
            Box::pin(async move { Ok(Outcome::Complete(result)) })
        }),
    )
}

fn string_prop(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

pub fn set() -> ItemSet {
    ItemSet {
        // The trigger tools change the catalog and announce resource updates.
        changes: true,
        instructions: "Conformance fixtures for the official MCP test suite.".into(),
        tools: tools(),
        resources: resources(),
        templates: templates(),
        prompts: prompts(),
    }
}

fn tools() -> Vec<Tool> {
    vec![
        fixed(
            "test_simple_text",
            "Tests simple text content response",
            text_result("This is a simple text response for testing.", false),
        ),
        fixed(
            "test_image_content",
            "Tests image content response",
            json!({ "content": [{ "type": "image", "data": PNG, "mimeType": "image/png" }] }),
        ),
        fixed(
            "test_audio_content",
            "Tests audio content response",
            json!({ "content": [{ "type": "audio", "data": WAV, "mimeType": "audio/wav" }] }),
        ),
        fixed(
            "test_embedded_resource",
            "Tests embedded resource content response",
            json!({ "content": [{ "type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."
            } }] }),
        ),
        fixed(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            json!({ "content": [
                { "type": "text", "text": "Multiple content types test:" },
                { "type": "image", "data": PNG, "mimeType": "image/png" },
                { "type": "resource", "resource": {
                    "uri": "test://mixed-content-resource", "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}"
                } }
            ] }),
        ),
        fixed(
            "test_error_handling",
            "Tests error response handling",
            text_result("This tool intentionally returns an error for testing", true),
        ),
        tool(
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            NO_ARGS(),
            Arc::new(|_, ctx| Box::pin(with_logging(ctx))),
        ),
        interactive(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            string_schema(&[("prompt", "The prompt to send to the LLM")]),
            Arc::new(|args, ex| {
                let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or_default();
                match ex.response("sample") {
                    None => ask(
                        "sampling",
                        "sample",
                        "sampling/createMessage",
                        json!({
                            "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                            "maxTokens": 100
                        }),
                        ex,
                    ),
                    Some(reply) => {
                        let text = reply.pointer("/content/text").and_then(Value::as_str).unwrap_or_default();
                        Ok(Outcome::Complete(text_result(format!("LLM response: {text}"), false)))
                    }
                }
            }),
        ),
        interactive(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            string_schema(&[("message", "The message to show the user")]),
            Arc::new(|args, ex| {
                let message = args.get("message").and_then(Value::as_str).unwrap_or_default();
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "username": { "type": "string", "description": "User's response" },
                        "email": { "type": "string", "description": "User's email address" }
                    },
                    "required": ["username", "email"]
                });
                elicit(ex, message, schema, "User response")
            }),
        ),
        interactive(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "description": "User name", "default": "John Doe" },
                        "age": { "type": "integer", "description": "User age", "default": 30 },
                        "score": { "type": "number", "description": "User score", "default": 95.5 },
                        "status": { "type": "string", "description": "User status",
                                    "enum": ["active", "inactive", "pending"], "default": "active" },
                        "verified": { "type": "boolean", "description": "Verification status", "default": true }
                    }
                });
                elicit(ex, "Please review and update the form fields with defaults", schema, "Elicitation completed")
            }),
        ),
        interactive(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": { "type": "string", "description": "Choose an option",
                                            "enum": ["option1", "option2", "option3"] },
                        "titledSingle": { "type": "string", "description": "Choose a titled option", "oneOf": [
                            { "const": "value1", "title": "First Option" },
                            { "const": "value2", "title": "Second Option" },
                            { "const": "value3", "title": "Third Option" }
                        ] },
                        "legacyEnum": { "type": "string", "description": "Choose a legacy option",
                                        "enum": ["opt1", "opt2", "opt3"],
                                        "enumNames": ["Option One", "Option Two", "Option Three"] },
                        "untitledMulti": { "type": "array", "description": "Choose multiple options",
                                           "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                        "titledMulti": { "type": "array", "description": "Choose multiple titled options", "items": {
                            "anyOf": [
                                { "const": "value1", "title": "First Choice" },
                                { "const": "value2", "title": "Second Choice" },
                                { "const": "value3", "title": "Third Choice" }
                            ]
                        } }
                    }
                });
                elicit(ex, "Please select options from the enum fields", schema, "Elicitation completed")
            }),
        ),
        interactive(
            "test_missing_capability",
            "Needs the client's sampling capability, to test the missing-capability error",
            NO_ARGS(),
            Arc::new(|_, ex| {
                if ex.has_capability("sampling") {
                    Ok(Outcome::Complete(text_result("The client declared sampling.", false)))
                } else {
                    Ok(Outcome::MissingCapabilities(json!({ "sampling": {} })))
                }
            }),
        ),
        interactive(
            "test_streaming_elicitation",
            "Asks for user input through the request's own stream (never as a separate request)",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let schema = json!({ "type": "object", "properties": { "answer": { "type": "string" } } });
                elicit(ex, "Please answer", schema, "Elicitation completed")
            }),
        ),
        tool(
            "test_logging_tool",
            "Emits log messages, only to clients that asked for them",
            NO_ARGS(),
            Arc::new(|_, ctx| Box::pin(with_logging(ctx))),
        ),
        tool(
            "test_trigger_tool_change",
            "Adds or removes the test_dynamic_tool, changing the tool list",
            NO_ARGS(),
            Arc::new(|_, ctx| {
                Box::pin(async move {
                    ctx.catalog.modify(|c| match c.tools.iter().position(|t| t.name == "test_dynamic_tool") {
                        Some(i) => {
                            c.tools.remove(i);
                        }
                        None => c.tools.push(fixed(
                            "test_dynamic_tool",
                            "A tool that comes and goes",
                            text_result("Dynamic tool result", false),
                        )),
                    });
                    text_outcome("Tool list changed")
                })
            }),
        ),
        tool(
            "test_trigger_prompt_change",
            "Adds or removes the test_dynamic_prompt, changing the prompt list",
            NO_ARGS(),
            Arc::new(|_, ctx| {
                Box::pin(async move {
                    ctx.catalog.modify(|c| match c.prompts.iter().position(|p| p.name == "test_dynamic_prompt") {
                        Some(i) => {
                            c.prompts.remove(i);
                        }
                        None => c.prompts.push(prompt(
                            "test_dynamic_prompt",
                            "A prompt that comes and goes",
                            json!([]),
                            Arc::new(|_, _| {
                                Ok(Outcome::Complete(json!({ "messages": [user_text("Dynamic prompt".into())] })))
                            }),
                        )),
                    });
                    text_outcome("Prompt list changed")
                })
            }),
        ),
        tool(
            "test_trigger_resource_update",
            "Announces that test://watched-resource changed",
            NO_ARGS(),
            Arc::new(|_, ctx| {
                Box::pin(async move {
                    ctx.catalog.resource_updated("test://watched-resource");
                    text_outcome("Resource updated")
                })
            }),
        ),
        Tool {
            text: None,
            name: "json_schema_2020_12_tool".into(),
            def: json!({
                "name": "json_schema_2020_12_tool",
                "description": "Tool with JSON Schema 2020-12 features",
                "inputSchema": {
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": { "address": { "$anchor": "addressDef", "type": "object",
                        "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
                    "properties": {
                        "name": { "type": "string" },
                        "address": { "$ref": "#/$defs/address" },
                        "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                        "phone": { "type": "string" },
                        "email": { "type": "string" }
                    },
                    "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                    "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                    "then": { "required": ["phone"] },
                    "else": { "required": ["email"] },
                    "additionalProperties": false
                }
            }),
            scopes: vec![],
            handler: Arc::new(|args, _| Box::pin(async move { text_outcome(format!("Received: {args}")) })),
        },
        interactive(
            "test_input_required_result_elicitation",
            "Asks for the user's name through an input_required result",
            NO_ARGS(),
            Arc::new(|_, ex| match ex.response("user_name") {
                None => ask("elicitation", "user_name", "elicitation/create", name_form("What is your name?"), ex),
                Some(reply) => {
                    let name = reply.pointer("/content/name").and_then(Value::as_str).unwrap_or("stranger");
                    Ok(Outcome::Complete(text_result(format!("Hello, {name}!"), false)))
                }
            }),
        ),
        interactive(
            "test_input_required_result_sampling",
            "Asks the client's model a question through an input_required result",
            NO_ARGS(),
            Arc::new(|_, ex| match ex.response("capital_question") {
                None => ask(
                    "sampling",
                    "capital_question",
                    "sampling/createMessage",
                    sampling("What is the capital of France?", 100),
                    ex,
                ),
                Some(reply) => {
                    let text = reply.pointer("/content/text").and_then(Value::as_str).unwrap_or_default();
                    Ok(Outcome::Complete(text_result(format!("The model answered: {text}"), false)))
                }
            }),
        ),
        interactive(
            "test_input_required_result_list_roots",
            "Asks for the client's roots through an input_required result",
            NO_ARGS(),
            Arc::new(|_, ex| match ex.response("client_roots") {
                None => ask("roots", "client_roots", "roots/list", json!({}), ex),
                Some(reply) => Ok(Outcome::Complete(text_result(format!("Client roots: {}", roots(reply)), false))),
            }),
        ),
        interactive(
            "test_input_required_result_request_state",
            "Round-trips a request state through an input_required result",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let confirmed = ex.response("confirm").and_then(|r| r.pointer("/content/ok")).cloned();
                match (confirmed, ex.state.get("awaiting").and_then(Value::as_str)) {
                    (Some(ok), Some("confirm")) => {
                        Ok(Outcome::Complete(text_result(format!("state-ok: confirmed={ok}"), false)))
                    }
                    _ => {
                        let form = json!({ "message": "Please confirm", "requestedSchema": {
                            "type": "object", "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] } });
                        ask_with_state(
                            "elicitation",
                            "confirm",
                            "elicitation/create",
                            form,
                            json!({ "awaiting": "confirm" }),
                            ex,
                        )
                    }
                }
            }),
        ),
        interactive(
            "test_input_required_result_multiple_inputs",
            "Asks for a name, a model's greeting and the client's roots at once",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let (name, greeting, client_roots) =
                    (ex.response("user_name"), ex.response("greeting"), ex.response("client_roots"));
                if let (Some(name), Some(greeting), Some(client_roots)) = (name, greeting, client_roots) {
                    let name = name.pointer("/content/name").and_then(Value::as_str).unwrap_or_default();
                    let greeting = greeting.pointer("/content/text").and_then(Value::as_str).unwrap_or_default();
                    return Ok(Outcome::Complete(text_result(
                        format!("name={name}; greeting={greeting}; roots={}", roots(client_roots)),
                        false,
                    )));
                }
                for cap in ["elicitation", "sampling", "roots"] {
                    if !ex.has_capability(cap) {
                        return Ok(Outcome::MissingCapabilities(json!({ cap: {} })));
                    }
                }
                Ok(Outcome::InputRequired {
                    requests: json!({
                        "user_name": { "method": "elicitation/create", "params": name_form("What is your name?") },
                        "greeting": { "method": "sampling/createMessage", "params": sampling("Generate a greeting", 50) },
                        "client_roots": { "method": "roots/list", "params": {} }
                    }),
                    state: json!({ "awaiting": "all" }),
                })
            }),
        ),
        interactive(
            "test_input_required_result_multi_round",
            "Asks for a name, then a favourite colour, in two rounds",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let round = ex.state.get("round").and_then(Value::as_u64).unwrap_or(0);
                match (round, ex.response("step1"), ex.response("step2")) {
                    (1, Some(step1), _) => {
                        let name = step1.pointer("/content/name").and_then(Value::as_str).unwrap_or_default();
                        let form = json!({ "message": "Step 2: What is your favorite color?", "requestedSchema": {
                            "type": "object", "properties": { "color": { "type": "string" } }, "required": ["color"] } });
                        ask_with_state(
                            "elicitation",
                            "step2",
                            "elicitation/create",
                            form,
                            json!({ "round": 2, "name": name }),
                            ex,
                        )
                    }
                    (2, _, Some(step2)) => {
                        let name = ex.state.get("name").and_then(Value::as_str).unwrap_or_default();
                        let color = step2.pointer("/content/color").and_then(Value::as_str).unwrap_or_default();
                        Ok(Outcome::Complete(text_result(format!("{name}'s favorite color is {color}"), false)))
                    }
                    _ => ask_with_state(
                        "elicitation",
                        "step1",
                        "elicitation/create",
                        name_form("Step 1: What is your name?"),
                        json!({ "round": 1 }),
                        ex,
                    ),
                }
            }),
        ),
        interactive(
            "test_input_required_result_tampered_state",
            "Keeps integrity-protected state across an input_required round",
            NO_ARGS(),
            Arc::new(|_, ex| match (ex.response("confirm"), ex.state.get("issued")) {
                (Some(_), Some(_)) => Ok(Outcome::Complete(text_result("state verified", false))),
                _ => {
                    let form = json!({ "message": "Please confirm", "requestedSchema": {
                        "type": "object", "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] } });
                    ask_with_state("elicitation", "confirm", "elicitation/create", form, json!({ "issued": true }), ex)
                }
            }),
        ),
        interactive(
            "test_input_required_result_capabilities",
            "Asks only for what the client declared it can provide",
            NO_ARGS(),
            Arc::new(|_, ex| {
                let answered = ["user_name", "greeting", "client_roots"].iter().any(|k| ex.response(k).is_some());
                let mut requests = serde_json::Map::new();
                if ex.has_capability("elicitation") && ex.response("user_name").is_none() {
                    requests.insert(
                        "user_name".into(),
                        json!({ "method": "elicitation/create", "params": name_form("What is your name?") }),
                    );
                }
                if ex.has_capability("sampling") && ex.response("greeting").is_none() {
                    requests.insert(
                        "greeting".into(),
                        json!({ "method": "sampling/createMessage", "params": sampling("Generate a greeting", 50) }),
                    );
                }
                if ex.has_capability("roots") && ex.response("client_roots").is_none() {
                    requests.insert("client_roots".into(), json!({ "method": "roots/list", "params": {} }));
                }
                if requests.is_empty() || answered {
                    return Ok(Outcome::Complete(text_result("Used only the declared capabilities.", false)));
                }
                Ok(Outcome::InputRequired { requests: Value::Object(requests), state: Value::Null })
            }),
        ),
        tool(
            "test_custom_headers",
            "Echoes a region that also travels as the Mcp-Param-Region header",
            json!({
                "type": "object",
                "properties": {
                    "region": { "type": "string", "description": "Region to route to", "x-mcp-header": "Region" },
                    "note": { "type": "string" }
                },
                "required": ["region"]
            }),
            Arc::new(|args, _| {
                let region = args.get("region").and_then(Value::as_str).unwrap_or_default().to_owned();
                Box::pin(async move { text_outcome(format!("region={region}")) })
            }),
        ),
        tool(
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            NO_ARGS(),
            Arc::new(|_, ctx| Box::pin(with_progress(ctx))),
        ),
    ]
}

/// A tool whose rounds are decided by a pure function of its arguments and the exchange.
type Interaction = Arc<dyn Fn(&Value, &Exchange) -> Result<Outcome, ToolError> + Send + Sync>;

fn interactive(name: &str, description: &str, schema: Value, step: Interaction) -> Tool {
    tool(
        name,
        description,
        schema,
        Arc::new(move |args, ctx| {
            let outcome = step(&args, &ctx.exchange);
            Box::pin(async move { outcome })
        }),
    )
}

/// Ask the client one thing under `key`, if it declared `capability`.
fn ask(capability: &str, key: &str, method: &str, params: Value, ex: &Exchange) -> Result<Outcome, ToolError> {
    if !ex.has_capability(capability) {
        return Ok(Outcome::MissingCapabilities(json!({ capability: {} })));
    }
    Ok(Outcome::InputRequired { requests: json!({ key: { "method": method, "params": params } }), state: Value::Null })
}

/// Like [`ask`], with state for the next round.
fn ask_with_state(
    capability: &str,
    key: &str,
    method: &str,
    params: Value,
    state: Value,
    ex: &Exchange,
) -> Result<Outcome, ToolError> {
    match ask(capability, key, method, params, ex)? {
        Outcome::InputRequired { requests, .. } => Ok(Outcome::InputRequired { requests, state }),
        other => Ok(other),
    }
}

/// An elicitation form asking for a `name`.
fn name_form(message: &str) -> Value {
    json!({ "message": message, "requestedSchema": {
        "type": "object", "properties": { "name": { "type": "string" } }, "required": ["name"] } })
}

fn sampling(text: &str, max_tokens: u32) -> Value {
    json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }], "maxTokens": max_tokens })
}

/// The URIs of a `ListRootsResult`, comma-separated.
fn roots(reply: &Value) -> String {
    let uris: Vec<&str> = reply
        .get("roots")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(|root| root.get("uri").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    uris.join(", ")
}

/// Elicit a form, then report the client's answer prefixed with `label`.
fn elicit(ex: &Exchange, message: &str, schema: Value, label: &str) -> Result<Outcome, ToolError> {
    match ex.response("elicit") {
        None => ask(
            "elicitation",
            "elicit",
            "elicitation/create",
            json!({ "mode": "form", "message": message, "requestedSchema": schema }),
            ex,
        ),
        Some(reply) => {
            let action = reply.get("action").and_then(Value::as_str).unwrap_or("cancel");
            let content = reply.get("content").cloned().unwrap_or(Value::Null);
            Ok(Outcome::Complete(text_result(format!("{label}: action={action}, content={content}"), false)))
        }
    }
}

async fn with_logging(ctx: ToolContext) -> Result<Outcome, ToolError> {
    for (i, message) in
        ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate()
    {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ctx.log("info", json!(message)).await;
    }
    text_outcome("Tool with logging executed successfully")
}

async fn with_progress(ctx: ToolContext) -> Result<Outcome, ToolError> {
    for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ctx.progress(step, Some(100.0), &format!("Completed step {} of 3", i + 1)).await;
    }
    text_outcome("Tool with progress executed successfully")
}

fn resources() -> Vec<Resource> {
    let text = |uri: &str, name: &str, description: &str, body: &str| Resource {
        uri: uri.into(),
        def: json!({ "uri": uri, "name": name, "description": description, "mimeType": "text/plain" }),
        scopes: vec![],
        mime_type: Some("text/plain".into()),
        content: Content::Text(body.into()),
    };
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(PNG).expect("a valid literal");
    vec![
        text(
            "test://static-text",
            "Static Text Resource",
            "A static text resource for testing",
            "This is the content of the static text resource.",
        ),
        Resource {
            uri: "test://static-binary".into(),
            def: json!({ "uri": "test://static-binary", "name": "Static Binary Resource",
                         "description": "A static binary resource (image) for testing", "mimeType": "image/png" }),
            scopes: vec![],
            mime_type: Some("image/png".into()),
            content: Content::Blob(png),
        },
        text(
            "test://watched-resource",
            "Watched Resource",
            "A resource that can be subscribed to",
            "Watched resource content",
        ),
    ]
}

fn templates() -> Vec<ResourceTemplate> {
    vec![ResourceTemplate {
        uri_template: "test://template/{id}/data".into(),
        def: json!({ "uriTemplate": "test://template/{id}/data", "name": "Template Resource",
                     "description": "A resource template with parameter substitution", "mimeType": "application/json" }),
        scopes: vec![],
        reader: Arc::new(|uri, vars, _| {
            let id = vars.get("id").cloned().unwrap_or_default();
            let body = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            let contents = json!([{ "uri": uri, "mimeType": "application/json", "text": body.to_string() }]);
            Box::pin(std::future::ready(Ok(Outcome::Complete(contents))))
        }),
        completions: HashMap::new(),
    }]
}

fn prompt(name: &str, description: &str, arguments: Value, render: PromptRenderer) -> Prompt {
    Prompt {
        name: name.into(),
        def: json!({ "name": name, "description": description, "arguments": arguments }),
        scopes: vec![],
        render,
        completions: HashMap::new(),
    }
}

fn user_text(text: String) -> Value {
    json!({ "role": "user", "content": { "type": "text", "text": text } })
}

fn required<'a>(args: &'a HashMap<String, String>, name: &str) -> Result<&'a str, String> {
    args.get(name).map(String::as_str).ok_or_else(|| format!("missing required argument `{name}`"))
}

fn prompts() -> Vec<Prompt> {
    let mut with_args = prompt(
        "test_prompt_with_arguments",
        "A prompt with required arguments",
        json!([
            { "name": "arg1", "description": "First test argument", "required": true },
            { "name": "arg2", "description": "Second test argument", "required": true }
        ]),
        Arc::new(|args, _| {
            let (a, b) = (required(args, "arg1")?, required(args, "arg2")?);
            Ok(Outcome::Complete(
                json!({ "messages": [user_text(format!("Prompt with arguments: arg1='{a}', arg2='{b}'"))] }),
            ))
        }),
    );
    with_args.completions.insert("arg1".into(), vec!["paris".into(), "park".into(), "party".into()]);
    vec![
        prompt(
            "test_simple_prompt",
            "A simple prompt without arguments",
            json!([]),
            Arc::new(|_, _| {
                Ok(Outcome::Complete(json!({ "messages": [user_text("This is a simple prompt for testing.".into())] })))
            }),
        ),
        with_args,
        prompt(
            "test_prompt_with_embedded_resource",
            "A prompt that includes an embedded resource",
            json!([{ "name": "resourceUri", "description": "URI of the resource to embed", "required": true }]),
            Arc::new(|args, _| {
                let uri = required(args, "resourceUri")?;
                Ok(Outcome::Complete(json!({ "messages": [
                    { "role": "user", "content": { "type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."
                    } } },
                    user_text("Please process the embedded resource above.".into())
                ] })))
            }),
        ),
        prompt(
            "test_input_required_result_prompt",
            "A prompt that asks the user for context first",
            json!([]),
            Arc::new(|_, ex| match ex.response("user_context") {
                None => {
                    let form = json!({ "message": "What context should the prompt use?", "requestedSchema": {
                        "type": "object", "properties": { "context": { "type": "string" } }, "required": ["context"] } });
                    ask("elicitation", "user_context", "elicitation/create", form, ex).map_err(|e| e.to_string())
                }
                Some(reply) => {
                    let context = reply.pointer("/content/context").and_then(Value::as_str).unwrap_or_default();
                    Ok(Outcome::Complete(json!({ "messages": [user_text(format!("Use this context: {context}"))] })))
                }
            }),
        ),
        prompt(
            "test_prompt_with_image",
            "A prompt that includes an image",
            json!([]),
            Arc::new(|_, _| {
                Ok(Outcome::Complete(json!({ "messages": [
                    { "role": "user", "content": { "type": "image", "data": PNG, "mimeType": "image/png" } },
                    user_text("Please analyze the image above.".into())
                ] })))
            }),
        ),
    ]
}

fn string_schema(props: &[(&str, &str)]) -> Value {
    let properties: serde_json::Map<String, Value> =
        props.iter().map(|(k, d)| ((*k).to_owned(), string_prop(d))).collect();
    let required: Vec<&str> = props.iter().map(|(k, _)| *k).collect();
    json!({ "type": "object", "properties": properties, "required": required })
}
