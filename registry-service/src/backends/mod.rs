//! Where tool results come from. Each backend turns its part of the definitions file into a
//! tool handler, checking what it can before anything is served.
//!
//! - [`templates`]: MiniJinja templates over arguments, checked for unknown variables.
//! - [`http`]: an upstream HTTP API, with an SSRF guard.
//! - [`sql`]: named queries against named databases.

pub mod http;
pub mod sql;
pub mod templates;

use std::collections::BTreeSet;

use serde_json::Value;

/// What a backend may know about the tool it serves.
pub struct ToolContext<'a> {
    pub name: &'a str,
    /// The argument names the input schema declares.
    pub properties: &'a BTreeSet<String>,
    pub output_schema: Option<&'a Value>,
    /// `allow_private_networks` from the file.
    pub allow_private: bool,
    pub databases: &'a sql::Databases,
}

/// A `CallToolResult` for a JSON value: `structuredContent` when the tool declares an output
/// schema, always with the JSON text mirror.
pub fn json_result(value: &Value, output_schema: Option<&Value>) -> Value {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut result = serde_json::json!({ "content": [{ "type": "text", "text": text }], "isError": false });
    if output_schema.is_some() {
        result["structuredContent"] = value.clone();
    }
    result
}
