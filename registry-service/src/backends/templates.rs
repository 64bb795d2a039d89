//! MiniJinja templates over a tool's arguments (or a prompt's, or a URI's variables).

use std::collections::BTreeSet;

use minijinja::Environment;
use serde_json::Value;

/// The templates of one item.
pub struct Templates {
    env: Environment<'static>,
}

impl Default for Templates {
    fn default() -> Self {
        let mut env = Environment::new();
        // Optional arguments that are absent render as empty; unknown names are caught at load.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
        Self { env }
    }
}

impl Templates {
    /// Compile `source` as `name`; every variable it uses must be in `allowed`.
    pub fn add(&mut self, name: &str, source: &str, allowed: &BTreeSet<String>) -> Result<(), String> {
        let mut unknown: Vec<String> = match self.env.template_from_str(source) {
            Err(e) => return Err(format!("template: {e}")),
            Ok(t) => t.undeclared_variables(false).into_iter().filter(|v| !allowed.contains(v)).collect(),
        };
        unknown.sort();
        if !unknown.is_empty() {
            let known =
                if allowed.is_empty() { "none".into() } else { allowed.iter().cloned().collect::<Vec<_>>().join(", ") };
            return Err(format!("template uses {} not declared here (known: {known})", unknown.join(", ")));
        }
        self.env.add_template_owned(name.to_owned(), source.to_owned()).map_err(|e| format!("template: {e}"))
    }

    pub fn render(&self, name: &str, vars: &Value) -> Result<String, String> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(vars))))
            .map_err(|e| format!("rendering failed: {e}"))
    }
}

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
