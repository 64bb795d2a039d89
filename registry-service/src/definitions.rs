//! The operator's definitions file: YAML (JSON is accepted, being YAML too).
//!
//! Today the file names the server and chooses which compiled-in item sets to serve; tools,
//! resources and prompts with HTTP, SQL, file and text backends extend this format. Mistakes
//! are refused with the file, line, column and reason, and nothing is half-loaded.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::builtin;
use crate::catalog::Catalog;

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definitions {
    /// The server's identity, shown to clients.
    #[serde(default)]
    pub server: Option<ServerIdentity>,
    /// Compiled-in item sets to serve: `demo`, `conformance`. Default: `[demo]`.
    #[serde(default)]
    pub builtins: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerIdentity {
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
}

/// A definitions file that cannot be served, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct DefinitionsError {
    pub path: String,
    pub reason: String,
}

/// Read, validate and assemble the catalog a definitions file describes.
pub fn load(path: &Path) -> Result<Catalog, DefinitionsError> {
    let fail = |reason: String| DefinitionsError { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let defs: Definitions =
        serde_saphyr::from_str_with_options(&text, serde_saphyr::options! { strict_booleans: true })
            .map_err(|e| fail(e.to_string()))?;
    assemble(defs).map_err(fail)
}

/// Build the catalog from parsed definitions.
pub fn assemble(defs: Definitions) -> Result<Catalog, String> {
    let names = defs.builtins.unwrap_or_else(|| vec!["demo".to_owned()]);
    let mut sets = Vec::new();
    for name in &names {
        sets.push(
            builtin::set(name)
                .ok_or_else(|| format!("builtins: unknown set `{name}` (known: {})", builtin::SETS.join(", ")))?,
        );
    }
    let mut server_info = builtin::server_info();
    let mut instructions = sets.iter().map(|s| s.instructions.as_str()).collect::<Vec<_>>().join(" ");
    if let Some(server) = defs.server {
        let mut info = Map::new();
        info.insert("name".into(), json!(server.name));
        info.insert("version".into(), json!(server.version.unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())));
        for (key, value) in
            [("title", server.title), ("description", server.description), ("websiteUrl", server.website_url)]
        {
            if let Some(v) = value {
                info.insert(key.into(), json!(v));
            }
        }
        server_info = Value::Object(info);
        if let Some(i) = server.instructions {
            instructions = i;
        }
    }
    Catalog::assemble(server_info, instructions, sets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Catalog, String> {
        let defs: Definitions = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        assemble(defs)
    }

    #[test]
    fn sets_and_identity() {
        let c = parse("server: { name: acme, title: ACME }\nbuiltins: [demo, conformance]\n").expect("valid");
        assert_eq!(c.server_info["name"], "acme");
        assert!(c.tool("echo").is_some() && c.tool("test_simple_text").is_some());
    }

    #[test]
    fn mistakes_name_their_place() {
        let e = parse("server: { name: acme }\ntools_typo: []\n").err().expect("refused");
        assert!(e.contains("tools_typo") && e.contains("line 2"), "{e}");
        let e = parse("builtins: [nope]\n").err().expect("refused");
        assert!(e.contains("unknown set `nope`"), "{e}");
        let e = parse("builtins: [demo, demo]\n").err().expect("refused");
        assert!(e.contains("duplicate"), "{e}");
    }
}
