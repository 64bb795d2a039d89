//! MiniJinja templates over a tool's arguments (or a prompt's, or a URI's variables), with the
//! rules both registry-service (every backend) and mcp-service (`text` tools, rendered from its
//! catalog snapshot without a call to the registry) must apply alike.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use minijinja::Environment;
use serde_json::Value;

/// The templates of one item.
pub struct Templates {
    env: Environment<'static>,
}

/// What a value placed in a URL template keeps as is: the unreserved characters of RFC 3986.
const URL_VALUE: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The name of the templates whose values are percent-encoded.
pub const URL: &str = "url";

impl Default for Templates {
    fn default() -> Self {
        let mut env = Environment::new();
        // Optional arguments that are absent render as empty; unknown names are caught at load.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
        // A value placed in a URL cannot change its structure: `/`, `?`, `#`, `@`, `..` and the
        // rest are percent-encoded (`| safe` inserts a value as is, for the operator who means
        // it). Values elsewhere render as they are; templates never evaluate what a value says.
        env.set_formatter(|out, state, value| {
            if state.name() == URL && !value.is_safe() && !value.is_undefined() && !value.is_none() {
                let text = value.to_string();
                write!(out, "{}", percent_encoding::utf8_percent_encode(&text, URL_VALUE)).map_err(|e| {
                    minijinja::Error::new(minijinja::ErrorKind::WriteFailure, "writing the URL failed").with_source(e)
                })
            } else {
                minijinja::escape_formatter(out, state, value)
            }
        });
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

/// One template, compiled on its first use: a compiled template takes about 9 KiB, and most
/// tools of a large catalog are never called.
pub struct Lazy {
    source: String,
    /// The variables it may use.
    allowed: BTreeSet<String>,
    /// Why it does not compile, if it does not.
    compiled: OnceLock<Result<Templates, String>>,
}

impl Lazy {
    /// The template's name in its own `Templates` (not `URL`: values are not percent-encoded).
    const NAME: &str = "text";

    /// A template compiled on first use, and only then found broken if it is.
    pub fn new(source: String, allowed: BTreeSet<String>) -> Self {
        Self { source, allowed, compiled: OnceLock::new() }
    }

    /// A template checked now (compiled once and dropped) and compiled again on first use.
    pub fn checked(source: &str, allowed: &BTreeSet<String>) -> Result<Self, String> {
        Templates::default().add(Self::NAME, source, allowed)?;
        Ok(Self::new(source.to_owned(), allowed.clone()))
    }

    /// Whether it has been compiled (or found not to compile) yet.
    pub fn tried(&self) -> bool {
        self.compiled.get().is_some()
    }

    /// The compiled template, compiling it on the first call; why it does not compile if not.
    pub fn compiled(&self) -> Result<&Templates, &str> {
        let compiled = self.compiled.get_or_init(|| {
            let mut templates = Templates::default();
            templates.add(Self::NAME, &self.source, &self.allowed).map(|()| templates)
        });
        compiled.as_ref().map_err(String::as_str)
    }

    pub fn render(&self, vars: &Value) -> Result<String, String> {
        self.compiled().map_err(str::to_owned)?.render(Self::NAME, vars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(name: &str, source: &str, vars: Value) -> String {
        let mut t = Templates::default();
        let allowed = vars.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
        t.add(name, source, &allowed).expect("template");
        t.render(name, &vars).expect("render")
    }

    #[test]
    fn values_cannot_change_the_structure_of_a_url() {
        let url = "https://api.example/users/{{ id }}?v=1";
        assert_eq!(one(URL, url, json!({"id": "42"})), "https://api.example/users/42?v=1");
        assert_eq!(
            one(URL, url, json!({"id": "1/../../admin?role=root#x"})),
            "https://api.example/users/1%2F..%2F..%2Fadmin%3Frole%3Droot%23x?v=1"
        );
        assert_eq!(
            one(URL, "https://{{ h }}.example/", json!({"h": "evil.test/@x"})),
            "https://evil.test%2F%40x.example/"
        );
        assert_eq!(
            one(URL, "https://a.example/{{ p | safe }}", json!({"p": "v2/items"})),
            "https://a.example/v2/items"
        );
        assert_eq!(
            one(URL, "https://a.example/{{ n }}/{{ missing }}", json!({"n": 7, "missing": null})),
            "https://a.example/7/None"
        );
    }

    #[test]
    fn values_are_never_evaluated_as_templates() {
        assert_eq!(one("text", "Hello {{ name }}", json!({"name": "{{ 7*7 }}{% raw %}"})), "Hello {{ 7*7 }}{% raw %}");
        assert_eq!(
            one("body", "{{ note | tojson }}", json!({"note": "\"}, \"admin\": true"})),
            r#""\"}, \"admin\": true""#
        );
    }

    #[test]
    fn lazy_templates_compile_on_first_use() {
        let allowed: BTreeSet<String> = ["who".to_owned()].into();
        let lazy = Lazy::checked("Hi {{ who }}", &allowed).expect("checked");
        assert!(!lazy.tried(), "checked, not kept");
        assert_eq!(lazy.render(&json!({ "who": "Ada" })), Ok("Hi Ada".to_owned()));
        assert!(lazy.tried());
        assert!(Lazy::checked("{{ secret }}", &allowed).is_err(), "an undeclared variable is refused");
        let broken = Lazy::new("{{ secret }}".to_owned(), allowed);
        assert!(broken.compiled().is_err_and(|e| e.contains("secret")));
        assert!(broken.render(&json!({})).is_err());
    }
}
