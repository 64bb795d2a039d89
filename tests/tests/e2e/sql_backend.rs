//! Tools backed by SQL: a SQLite file and a throwaway PostgreSQL cluster, driven through the
//! real server.

use e2e::{Client, Postgres};
use serde_json::{Value, json};

fn definitions(url: &str) -> String {
    format!(
        r#"
server: {{ name: sql-tools }}
databases:
  crm: {{ url: "{url}" }}
tools:
  - name: setup
    sql: {{ database: crm, writes: true, query: "CREATE TABLE customers (name TEXT PRIMARY KEY, total INTEGER, note TEXT)" }}
  - name: add_customer
    input_schema: {{ type: object, properties: {{ name: {{ type: string }}, total: {{ type: integer }} }}, required: [name, total] }}
    sql: {{ database: crm, writes: true, query: "INSERT INTO customers (name, total) VALUES (:name, :total)" }}
  - name: top_customers
    input_schema: {{ type: object, properties: {{ limit: {{ type: integer }} }}, required: [limit] }}
    output_schema: {{ type: object }}
    sql: {{ database: crm, query: "SELECT name, total FROM customers ORDER BY total DESC LIMIT :limit" }}
  - name: find
    input_schema: {{ type: object, properties: {{ name: {{ type: string }} }}, required: [name] }}
    sql: {{ database: crm, query: "SELECT name, total FROM customers WHERE name = :name" }}
  - name: sneaky_delete
    sql: {{ database: crm, query: "DELETE FROM customers" }}
  - name: many
    sql: {{ database: crm, max_rows: 3, query: "SELECT name FROM customers ORDER BY name" }}
"#
    )
}

async fn call(c: &Client, name: &str, args: Value) -> Value {
    c.modern(1, "tools/call", json!({"name": name, "arguments": args})).await.result().clone()
}

/// The same walk on either database.
async fn walk(c: &Client) {
    assert_eq!(call(c, "setup", json!({})).await["isError"], false);
    for (name, total) in [("ada", 30), ("bob", 10), ("cy", 20), ("dee", 5)] {
        let r = call(c, "add_customer", json!({"name": name, "total": total})).await;
        assert_eq!(r["isError"], false, "{r}");
    }
    let r = call(c, "top_customers", json!({"limit": 2})).await;
    assert_eq!(r["structuredContent"]["rows"], json!([{"name":"ada","total":30},{"name":"cy","total":20}]));
    assert_eq!(r["content"][0]["text"], "name | total\nada | 30\ncy | 20");
    // An injection attempt is only ever a value.
    let r = call(c, "find", json!({"name": "x' OR '1'='1"})).await;
    assert_eq!(r["structuredContent"]["rows"], json!([]));
    let r = call(c, "find", json!({"name": "bob"})).await;
    assert_eq!(r["structuredContent"]["rows"], json!([{"name":"bob","total":10}]));
    // A tool that does not declare writes cannot write.
    let r = call(c, "sneaky_delete", json!({})).await;
    assert_eq!(r["isError"], true, "{r}");
    let r = call(c, "top_customers", json!({"limit": 10})).await;
    assert_eq!(r["structuredContent"]["rows"].as_array().map(Vec::len), Some(4), "nothing was deleted");
    // Row limits.
    let r = call(c, "many", json!({})).await;
    assert_eq!(r["structuredContent"]["rows"].as_array().map(Vec::len), Some(3));
    assert_eq!(r["structuredContent"]["truncated"], true);
    // A constraint violation is a tool error, not a crash.
    let r = call(c, "add_customer", json!({"name": "ada", "total": 1})).await;
    assert_eq!(r["isError"], true);
}

#[tokio::test]
async fn sqlite_tools() {
    let mut defs = definitions("sqlite://crm.db?mode=rwc");
    // 80 million characters in one value: too large to carry between the services.
    defs.push_str("  - name: huge\n    sql: { database: crm, query: \"SELECT hex(zeroblob(40000000)) AS x\" }\n");
    let served = e2e::Served::definitions(&defs, &[]).await;
    walk(&served.client).await;
    // Refused as the tool's error with its reason, and the server goes on serving.
    let r = call(&served.client, "huge", json!({})).await;
    assert_eq!(r["isError"], true, "{}", &r.to_string()[..r.to_string().len().min(300)]);
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("too large") && text.contains("63 MiB"), "{text}");
    let r = call(&served.client, "find", json!({"name": "bob"})).await;
    assert_eq!(r["structuredContent"]["rows"], json!([{"name":"bob","total":10}]));
}

#[tokio::test]
async fn postgres_tools() {
    let pg = Postgres::start();
    let mut defs = definitions(&pg.url);
    defs.push_str("  - name: slow\n    sql: { database: crm, timeout_ms: 300, query: \"SELECT pg_sleep(3)\" }\n");
    let served = e2e::Served::definitions(&defs, &[]).await;
    let c = &served.client;
    walk(c).await;
    let r = call(c, "slow", json!({})).await;
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("time") || text.contains("cancel"), "{text}");
}

#[tokio::test]
async fn sql_definitions_are_checked_at_start() {
    let (ok, err) = e2e::validate_definitions(
        "databases:\n  crm: { url: 'mysql://x' }\ntools:\n  - name: t\n    sql: { database: nope, query: 'SELECT :who' }\n  - name: u\n    input_schema: { type: object, properties: {} }\n    sql: { database: crm, query: 'SELECT :who' }\n",
    );
    assert!(!ok);
    for expected in ["defs.yaml:2:", "must start with sqlite: or postgres://", "defs.yaml:4:", "`nope` is not declared"]
    {
        assert!(err.contains(expected), "{expected}: {err}");
    }
}
