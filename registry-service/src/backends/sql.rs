//! Backend `sql`: named queries against named databases (SQLite and PostgreSQL).
//!
//! Arguments are bound by name (`:city`) as parameters, never interpolated into the text.
//! Queries run read-only unless the tool declares `writes: true` (SQLite: a read-only
//! connection; PostgreSQL: a `READ ONLY` transaction that is rolled back), with a row limit and
//! a time limit. Rows come back as `structuredContent` (`{"rows": [...]}`) plus a text table.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt as _;
use serde_json::{Map, Value, json};
use serde_saphyr::Spanned;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{Column as _, Row as _, TypeInfo as _, ValueRef as _};

use super::ToolContext;
use super::templates::expand_env;
use crate::catalog::{Outcome, ToolError, ToolHandler, text_result};
use crate::definitions::model::{DatabaseDef, SqlDef};

const DEFAULT_MAX_ROWS: usize = 1000;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One named database: separate pools for reading and writing on SQLite, so that a read-only
/// tool cannot write even by mistake; and the `init` statements, run once before first use.
struct Database {
    pools: Pools,
    init: Vec<String>,
    initialized: tokio::sync::OnceCell<Result<(), String>>,
}

enum Pools {
    Sqlite { read: SqlitePool, write: SqlitePool },
    Postgres(PgPool),
}

impl Database {
    /// Run the `init` statements once; every later caller sees their outcome.
    async fn ready(&self) -> Result<(), String> {
        self.initialized
            .get_or_init(|| async {
                for statement in &self.init {
                    let sql = || sqlx::AssertSqlSafe(statement.clone());
                    let done = match &self.pools {
                        Pools::Sqlite { write, .. } => sqlx::query(sql()).execute(write).await.map(|_| ()),
                        Pools::Postgres(pool) => sqlx::query(sql()).execute(pool).await.map(|_| ()),
                    };
                    done.map_err(|e| format!("database init `{statement}` failed: {e}"))?;
                }
                Ok(())
            })
            .await
            .clone()
    }
}

/// The databases a definitions file names.
#[derive(Default)]
pub struct Databases {
    by_name: HashMap<String, Arc<Database>>,
}

impl Databases {
    /// Check the `databases` section and open lazy pools (nothing connects until a tool runs).
    /// Mistakes come back as (line, column, message).
    pub fn build(defs: &BTreeMap<String, Spanned<DatabaseDef>>, base: &Path) -> (Self, Vec<(u64, u64, String)>) {
        let mut by_name = HashMap::new();
        let mut problems = Vec::new();
        for (name, def) in defs {
            match open(&def.value, base) {
                Ok(db) => {
                    by_name.insert(name.clone(), Arc::new(db));
                }
                Err(e) => {
                    problems.push((def.referenced.line(), def.referenced.column(), format!("database `{name}`: {e}")))
                }
            }
        }
        (Self { by_name }, problems)
    }

    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

impl Database {
    fn new(pools: Pools, def: &DatabaseDef) -> Self {
        Self { pools, init: def.init.clone(), initialized: tokio::sync::OnceCell::new() }
    }
}

fn open(def: &DatabaseDef, base: &Path) -> Result<Database, String> {
    // Pools belong to the async runtime that will use them.
    tokio::runtime::Handle::try_current().map_err(|_| "databases can only be opened inside the server".to_owned())?;
    let url = expand_env(&def.url)?;
    let max = def.max_connections.unwrap_or(5).max(1);
    if url.starts_with("sqlite:") {
        let mut options = SqliteConnectOptions::from_str(&url).map_err(|e| format!("invalid SQLite URL: {e}"))?;
        // A relative file is in the registry's data_dir, else next to the definitions file.
        let file = options.get_filename().to_path_buf();
        if file.is_relative() && file.as_os_str() != ":memory:" {
            options = options.filename(base.join(file));
        }
        let read = SqlitePoolOptions::new().max_connections(max).connect_lazy_with(options.clone().read_only(true));
        let write = SqlitePoolOptions::new().max_connections(1).connect_lazy_with(options);
        Ok(Database::new(Pools::Sqlite { read, write }, def))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let options = PgConnectOptions::from_str(&url).map_err(|e| format!("invalid PostgreSQL URL: {e}"))?;
        Ok(Database::new(Pools::Postgres(PgPoolOptions::new().max_connections(max).connect_lazy_with(options)), def))
    } else {
        Err("url must start with sqlite: or postgres://".into())
    }
}

/// A query with `:name` placeholders rewritten for the driver, and the names in bind order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub sql: String,
    pub params: Vec<String>,
}

/// Rewrite `:name` placeholders to `?` (SQLite) or `$n` (PostgreSQL), leaving string literals,
/// quoted identifiers, comments and `::` casts alone.
pub fn prepare(query: &str, postgres: bool) -> Prepared {
    let chars: Vec<char> = query.chars().collect();
    let mut sql = String::with_capacity(query.len());
    let mut params = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' => {
                // A quoted literal or identifier, with doubled quotes as escapes.
                sql.push(c);
                i += 1;
                while i < chars.len() {
                    sql.push(chars[i]);
                    if chars[i] == c {
                        if chars.get(i + 1) == Some(&c) {
                            sql.push(c);
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    sql.push(chars[i]);
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    sql.push(chars[i]);
                    i += 1;
                }
                sql.push_str("*/");
                i += 2;
            }
            ':' if chars.get(i + 1) == Some(&':') => {
                sql.push_str("::");
                i += 2;
            }
            ':' if chars.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic() || *n == '_') => {
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                params.push(name);
                if postgres {
                    sql.push_str(&format!("${}", params.len()));
                } else {
                    sql.push('?');
                }
                i = end;
            }
            _ => {
                sql.push(c);
                i += 1;
            }
        }
    }
    Prepared { sql, params }
}

/// Check an `sql` section against the names it may bind.
fn query(
    def: &SqlDef,
    databases: &Databases,
    allowed: &std::collections::BTreeSet<String>,
) -> Result<Query, Vec<String>> {
    let Some(db) = databases.by_name.get(&def.database).cloned() else {
        let known = databases.names();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(vec![format!(
            "sql.database `{}` is not declared under `databases` (declared: {known})",
            def.database
        )]);
    };
    if def.query.trim().is_empty() {
        return Err(vec!["sql.query is empty".into()]);
    }
    let prepared = prepare(&def.query, matches!(db.pools, Pools::Postgres(_)));
    let unknown: Vec<&str> = prepared.params.iter().filter(|p| !allowed.contains(*p)).map(String::as_str).collect();
    if !unknown.is_empty() {
        return Err(vec![format!("sql.query binds :{} which is not declared here", unknown.join(", :"))]);
    }
    Ok(Query {
        db,
        prepared,
        writes: def.writes,
        max_rows: def.max_rows.unwrap_or(DEFAULT_MAX_ROWS).max(1),
        timeout: def.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis),
    })
}

/// Check an `sql` tool and build its handler.
pub fn tool(def: &SqlDef, cx: &ToolContext<'_>) -> Result<ToolHandler, Vec<String>> {
    let query = Arc::new(query(def, cx.databases, cx.properties)?);
    Ok(Arc::new(move |args, _| {
        let query = query.clone();
        Box::pin(async move { query.run(&args).await })
    }))
}

/// Check an `sql` resource template and build its reader: the URI's variables are bound by
/// name; one row is served as a JSON object, several as an array, none as "not found".
pub fn resource_reader(
    def: &SqlDef,
    databases: &Databases,
    variables: &std::collections::BTreeSet<String>,
) -> Result<crate::catalog::TemplateReader, Vec<String>> {
    let query = Arc::new(query(def, databases, variables)?);
    Ok(Arc::new(move |uri, vars, _| {
        let query = query.clone();
        Box::pin(async move {
            let args = serde_json::to_value(&vars).unwrap_or(Value::Null);
            let (rows, _) = tokio::time::timeout(query.timeout, query.execute(&args))
                .await
                .map_err(|_| "the query did not finish in time".to_owned())?
                .map_err(|e| format!("the query failed: {e}"))?;
            let body = match rows.len() {
                0 => return Ok(Outcome::Complete(json!([]))),
                1 => rows.into_iter().next().unwrap_or(Value::Null),
                _ => Value::Array(rows),
            };
            Ok(Outcome::Complete(json!([{ "uri": uri, "mimeType": "application/json", "text": body.to_string() }])))
        })
    }))
}

struct Query {
    db: Arc<Database>,
    prepared: Prepared,
    writes: bool,
    max_rows: usize,
    timeout: Duration,
}

/// Bind one argument by its JSON type.
macro_rules! bind_value {
    ($q:expr, $v:expr) => {
        match $v {
            None | Some(Value::Null) => $q.bind(None::<String>),
            Some(Value::Bool(b)) => $q.bind(*b),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => $q.bind(i),
                None => $q.bind(n.as_f64()),
            },
            Some(Value::String(s)) => $q.bind(s.clone()),
            Some(other) => $q.bind(other.to_string()),
        }
    };
}

impl Query {
    /// The database kind, for traces (`db.system`).
    fn system(&self) -> &'static str {
        match self.db.pools {
            Pools::Sqlite { .. } => "sqlite",
            Pools::Postgres(_) => "postgresql",
        }
    }

    async fn run(&self, args: &Value) -> Result<Outcome, ToolError> {
        let span = tracing::info_span!("upstream.sql", otel.name = "SQL query", otel.kind = "client", db.system = %self.system());
        let started = std::time::Instant::now();
        let outcome =
            tracing::Instrument::instrument(tokio::time::timeout(self.timeout, self.execute(args)), span).await;
        let result = if matches!(outcome, Ok(Ok(_))) { "ok" } else { "error" };
        metrics::histogram!("registry_upstream_duration_seconds", "backend" => "sql", "outcome" => result)
            .record(started.elapsed().as_secs_f64());
        let (rows, truncated) = match outcome {
            Err(_) => return Ok(Outcome::Complete(text_result("The query did not finish in time.", true))),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "sql tool failed");
                return Ok(Outcome::Complete(text_result(format!("The query failed: {e}"), true)));
            }
            Ok(Ok(r)) => r,
        };
        let mut structured = json!({ "rows": rows });
        if truncated {
            structured["truncated"] = json!(true);
        }
        let mut text = table(&rows);
        if truncated {
            text.push_str(&format!("\n(only the first {} rows)", self.max_rows));
        }
        Ok(Outcome::Complete(json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": structured,
            "isError": false
        })))
    }

    /// The rows (at most `max_rows`) and whether there were more.
    async fn execute(&self, args: &Value) -> Result<(Vec<Value>, bool), sqlx::Error> {
        self.db.ready().await.map_err(sqlx::Error::Protocol)?;
        let limit = self.max_rows;
        match &self.db.pools {
            Pools::Sqlite { read, write } => {
                let pool = if self.writes { write } else { read };
                // The text is the operator's, from the definitions file; arguments are only ever bound.
                let mut q = sqlx::query(sqlx::AssertSqlSafe(self.prepared.sql.clone()));
                for name in &self.prepared.params {
                    q = bind_value!(q, args.get(name));
                }
                let mut stream = q.fetch(pool);
                let mut rows = Vec::new();
                while let Some(row) = stream.try_next().await? {
                    if rows.len() == limit {
                        return Ok((rows, true));
                    }
                    rows.push(sqlite_row(&row));
                }
                Ok((rows, false))
            }
            Pools::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                if !self.writes {
                    sqlx::query("SET TRANSACTION READ ONLY").execute(&mut *tx).await?;
                }
                let ms = self.timeout.as_millis().max(1);
                sqlx::query("SELECT set_config('statement_timeout', $1, true)")
                    .bind(ms.to_string())
                    .execute(&mut *tx)
                    .await?;
                // The text is the operator's, from the definitions file; arguments are only ever bound.
                let mut q = sqlx::query(sqlx::AssertSqlSafe(self.prepared.sql.clone()));
                for name in &self.prepared.params {
                    q = bind_value!(q, args.get(name));
                }
                let mut rows = Vec::new();
                let mut truncated = false;
                {
                    let mut stream = q.fetch(&mut *tx);
                    while let Some(row) = stream.try_next().await? {
                        if rows.len() == limit {
                            truncated = true;
                            break;
                        }
                        rows.push(pg_row(&row));
                    }
                }
                if self.writes {
                    tx.commit().await?
                } else {
                    tx.rollback().await?
                }
                Ok((rows, truncated))
            }
        }
    }
}

fn sqlite_row(row: &SqliteRow) -> Value {
    let mut obj = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let value = match row.try_get_raw(i) {
            Ok(raw) if raw.is_null() => Value::Null,
            Ok(raw) => match raw.type_info().name() {
                "INTEGER" | "BOOLEAN" => row.try_get::<i64, _>(i).map(Value::from).unwrap_or(Value::Null),
                "REAL" | "NUMERIC" => row.try_get::<f64, _>(i).map(mcp_proto::jsonrpc::number).unwrap_or(Value::Null),
                "BLOB" => {
                    row.try_get::<Vec<u8>, _>(i).map(|b| json!(format!("<{} bytes>", b.len()))).unwrap_or(Value::Null)
                }
                _ => row.try_get::<String, _>(i).map(Value::from).unwrap_or(Value::Null),
            },
            Err(_) => Value::Null,
        };
        obj.insert(column.name().to_owned(), value);
    }
    Value::Object(obj)
}

fn pg_row(row: &PgRow) -> Value {
    let mut obj = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let value = match row.try_get_raw(i) {
            Ok(raw) if raw.is_null() => Value::Null,
            Ok(raw) => match raw.type_info().name() {
                "INT2" => row.try_get::<i16, _>(i).map(Value::from).unwrap_or(Value::Null),
                "INT4" => row.try_get::<i32, _>(i).map(Value::from).unwrap_or(Value::Null),
                "INT8" => row.try_get::<i64, _>(i).map(Value::from).unwrap_or(Value::Null),
                "FLOAT4" => {
                    row.try_get::<f32, _>(i).map(|f| mcp_proto::jsonrpc::number(f64::from(f))).unwrap_or(Value::Null)
                }
                "FLOAT8" => row.try_get::<f64, _>(i).map(mcp_proto::jsonrpc::number).unwrap_or(Value::Null),
                "BOOL" => row.try_get::<bool, _>(i).map(Value::from).unwrap_or(Value::Null),
                "JSON" | "JSONB" => row.try_get::<Value, _>(i).unwrap_or(Value::Null),
                _ => row
                    .try_get::<String, _>(i)
                    .map(Value::from)
                    .unwrap_or_else(|_| json!(format!("<{}>", raw.type_info().name()))),
            },
            Err(_) => Value::Null,
        };
        obj.insert(column.name().to_owned(), value);
    }
    Value::Object(obj)
}

/// Rows as a plain-text table (`a | b` lines under a header).
fn table(rows: &[Value]) -> String {
    let Some(first) = rows.first().and_then(Value::as_object) else { return "(no rows)".into() };
    let columns: Vec<&String> = first.keys().collect();
    let cell = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut out = columns.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(" | ");
    for row in rows {
        out.push('\n');
        let cells: Vec<String> = columns.iter().map(|c| cell(row.get(c.as_str()).unwrap_or(&Value::Null))).collect();
        out.push_str(&cells.join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_parameters() {
        let p =
            prepare("SELECT * FROM t WHERE a = :a AND b = :b_2 AND c = ':not' AND d::text = :a -- :x\n/* :y */", true);
        assert_eq!(p.params, ["a", "b_2", "a"]);
        assert_eq!(p.sql, "SELECT * FROM t WHERE a = $1 AND b = $2 AND c = ':not' AND d::text = $3 -- :x\n/* :y */");
        let p = prepare("SELECT \"we\"\"ird:col\" FROM t WHERE name = :name", false);
        assert_eq!(
            (p.sql.as_str(), p.params.as_slice()),
            ("SELECT \"we\"\"ird:col\" FROM t WHERE name = ?", &["name".to_owned()][..])
        );
    }
}
