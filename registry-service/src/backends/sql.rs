//! Backend `sql`: named queries against named databases (SQLite, PostgreSQL).

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

use super::ToolContext;
use crate::catalog::ToolHandler;
use crate::definitions::model::{DatabaseDef, SqlDef};

/// The databases a definitions file names.
#[derive(Default)]
pub struct Databases {
    names: Vec<String>,
}

impl Databases {
    /// Check the `databases` section; mistakes come back as (place, message).
    pub fn build(defs: &BTreeMap<String, Spanned<DatabaseDef>>) -> (Self, Vec<(u64, u64, String)>) {
        let problems = defs
            .iter()
            .map(|(name, d)| {
                (
                    d.referenced.line(),
                    d.referenced.column(),
                    format!("database `{name}`: the sql backend is not available yet"),
                )
            })
            .collect();
        (Self { names: defs.keys().cloned().collect() }, problems)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

pub fn tool(_def: &SqlDef, _cx: &ToolContext<'_>) -> Result<ToolHandler, Vec<String>> {
    Err(vec!["the sql backend is not available yet".into()])
}
