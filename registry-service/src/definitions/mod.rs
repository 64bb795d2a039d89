//! The operator's definitions file: YAML (JSON is accepted, being YAML too).
//!
//! It names the server and declares tools, resources, resource templates and prompts, and may
//! add compiled-in item sets. Everything is checked before anything is served: unknown keys and
//! wrong types (by the parser), duplicate names, invalid schemas, bad templates, missing files
//! (by [`build`]), each reported with the file, line, column and reason. Nothing is
//! half-loaded: a file with any mistake yields no catalog.
//!
//! - [`model`]: the file as written.
//! - [`build`]: checking it and turning it into catalog items.

mod build;
pub mod model;
pub mod watch;

pub use build::{MAX_RAW_BYTES, contents_json, file_contents, under_root};

use std::fmt;
use std::path::Path;

use crate::catalog::Catalog;

/// One mistake, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

/// A definitions file that cannot be served, with every mistake found.
#[derive(Debug, Clone)]
pub struct DefinitionsError {
    pub path: String,
    /// A parse error (syntax, unknown key, wrong type): the parser's own report, with its place.
    pub parse: Option<String>,
    pub issues: Vec<Issue>,
}

impl fmt::Display for DefinitionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parse) = &self.parse {
            return write!(f, "{}: {parse}", self.path);
        }
        let lines: Vec<String> =
            self.issues.iter().map(|i| format!("{}:{}:{}: {}", self.path, i.line, i.column, i.message)).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for DefinitionsError {}

/// Read, check and assemble the catalog a definitions file describes.
pub fn load(path: &Path) -> Result<Catalog, DefinitionsError> {
    load_in(path, None)
}

/// [`load`], with relative SQLite files of `databases` in `data_dir` when given (else next to
/// the definitions file, like its other relative paths).
pub fn load_in(path: &Path, data_dir: Option<&Path>) -> Result<Catalog, DefinitionsError> {
    let shown = path.display().to_string();
    let fail = |parse: String| DefinitionsError { path: shown.clone(), parse: Some(parse), issues: vec![] };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_str_in(&text, &base, data_dir, &shown)
}

/// The same from text: `base` is where relative paths point, `shown` names the file in errors.
pub fn load_str(text: &str, base: &Path, shown: &str) -> Result<Catalog, DefinitionsError> {
    load_str_in(text, base, None, shown)
}

/// [`load_str`] with the data directory of [`load_in`].
pub fn load_str_in(text: &str, base: &Path, data_dir: Option<&Path>, shown: &str) -> Result<Catalog, DefinitionsError> {
    let fail = |parse: String| DefinitionsError { path: shown.to_owned(), parse: Some(parse), issues: vec![] };
    let file: model::File = serde_saphyr::from_str_with_options(text, serde_saphyr::options! { strict_booleans: true })
        .map_err(|e| fail(e.to_string()))?;
    build::catalog(file, base, data_dir).map_err(|issues| DefinitionsError {
        path: shown.to_owned(),
        parse: None,
        issues,
    })
}

#[cfg(test)]
mod tests;
