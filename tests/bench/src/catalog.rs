//! What every server under test serves: `n` text tools that echo their `message`, and one
//! 1 MiB text resource. Written as a definitions file (docs/definitions.md) for the platform;
//! the references build the same tools from the same functions.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The URI of the large resource.
pub const RESOURCE_URI: &str = "bench://big";
/// Its size in bytes (text, served as `text`).
pub const RESOURCE_BYTES: usize = 1 << 20;
/// How many tools the references serve (the smallest catalog).
pub const REFERENCE_TOOLS: usize = 5;

pub fn tool_name(i: usize) -> String {
    format!("tool_{i}")
}

pub fn tool_description(i: usize) -> String {
    format!("Echoes its message back (tool {i} of the benchmark catalog)")
}

/// The input schema of every tool: one required string, `message`.
pub fn input_schema() -> Value {
    json!({ "type": "object", "properties": { "message": { "type": "string" } }, "required": ["message"] })
}

/// The resource's text: 64-byte lines of printable ASCII, `RESOURCE_BYTES` in all.
pub fn resource_text() -> String {
    let line = "The quick brown fox jumps over the lazy dog; 0123456789 abcdefg\n";
    debug_assert_eq!(line.len(), 64);
    line.repeat(RESOURCE_BYTES / line.len())
}

/// The generated files, in a temporary directory removed on drop.
pub struct Files {
    dir: tempfile::TempDir,
    pub resource: PathBuf,
}

impl Files {
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("mcp-bench-").tempdir()?;
        let resource = dir.path().join("big.txt");
        std::fs::write(&resource, resource_text())?;
        Ok(Self { dir, resource })
    }

    /// A file in the benchmark's temporary directory.
    pub fn write(&self, name: &str, text: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// The definitions file with `tools` tools (written once per size).
    pub fn definitions(&self, tools: usize) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("definitions-{tools}.yaml"));
        if !path.exists() {
            std::fs::write(&path, definitions_yaml(tools, &self.resource))?;
        }
        Ok(path)
    }
}

/// The YAML text of a definitions file with `tools` tools and the resource at `resource`.
fn definitions_yaml(tools: usize, resource: &Path) -> String {
    let mut yaml = format!(
        "server: {{ name: bench, version: \"1.0.0\" }}\n\
         resources:\n  - uri: \"{RESOURCE_URI}\"\n    name: big\n    mime_type: text/plain\n    file: {}\n\
         tools:\n",
        serde_json::to_string(&resource.to_string_lossy()).unwrap_or_default()
    );
    let schema = input_schema().to_string();
    for i in 0..tools {
        let _ = write!(
            yaml,
            "  - name: {}\n    description: \"{}\"\n    input_schema: {schema}\n    text: \"{{{{ message }}}}\"\n",
            tool_name(i),
            tool_description(i)
        );
    }
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_is_exactly_one_mib() {
        assert_eq!(resource_text().len(), RESOURCE_BYTES);
    }

    #[test]
    fn definitions_name_every_tool() {
        let yaml = definitions_yaml(3, Path::new("/tmp/big.txt"));
        assert!(yaml.contains("name: tool_2\n"));
        assert!(!yaml.contains("tool_3"));
        assert!(yaml.contains("text: \"{{ message }}\""));
        assert!(yaml.contains("file: \"/tmp/big.txt\""));
    }
}
