//! Templates (shared with mcp-service: [`mcp_proto::templates`]) and `${VAR}` expansion.

pub use mcp_proto::templates::{Templates, URL};

/// Replace `${VAR}` with environment variables (for secrets kept out of the file).
pub fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed `${{` in `{text}`"))?;
        let name = &after[..end];
        let value = std::env::var(name).map_err(|_| format!("environment variable `{name}` is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
