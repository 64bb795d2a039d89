//! The operator's definitions file, served end to end, and reloaded while the server runs.

use std::time::Duration;

use e2e::{Client, Proc};
use serde_json::{Value, json};

fn names(result: &Value, key: &str, field: &str) -> Vec<String> {
    result[key].as_array().expect("list").iter().filter_map(|t| t[field].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn the_example_catalog_is_served() {
    let gw = Proc::start(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--definitions", &e2e::example("catalog.yaml")],
        "gateway",
    )
    .await;
    let c = Client::new(&format!("{}/mcp", gw.url()));
    let r = c.modern(1, "tools/call", json!({"name":"greet","arguments":{"name":"Ada","language":"fr"}})).await;
    assert_eq!(r.result()["content"][0]["text"], "Bonjour, Ada!");
    let r = c
        .modern(
            2,
            "tools/call",
            json!({"name":"format_address","arguments":{"street":"1 Main St","city":"Springfield","country":"us"}}),
        )
        .await;
    assert_eq!(r.result()["content"][0]["text"], "1 Main St\nSpringfield\nUS");
    let r = c.modern(3, "tools/call", json!({"name":"greet","arguments":{"name":"Ada","language":"de"}})).await;
    assert_eq!(r.result()["isError"], true, "the enum is enforced: {}", r.text);
    let r = c.modern(4, "resources/read", json!({"uri":"docs://handbook"})).await;
    assert!(r.result()["contents"][0]["text"].as_str().is_some_and(|t| t.starts_with("# Team handbook")));
    assert_eq!(r.result()["contents"][0]["mimeType"], "text/markdown");
    let r = c.modern(5, "resources/read", json!({"uri":"docs://files/guides/onboarding.md"})).await;
    assert!(r.result()["contents"][0]["text"].as_str().is_some_and(|t| t.starts_with("# Onboarding")));
    for escape in ["docs://files/../catalog.yaml", "docs://files/guides/../../catalog.yaml"] {
        let r = c.modern(6, "resources/read", json!({"uri": escape})).await;
        assert_eq!(r.error_code(), Some(-32602), "{escape}: {}", r.text);
    }
    let r = c
        .modern(
            7,
            "completion/complete",
            json!({"ref":{"type":"ref/resource","uri":"docs://files/{+path}"},"argument":{"name":"path","value":"gu"}}),
        )
        .await;
    assert_eq!(r.result()["completion"]["values"], json!(["guides/onboarding.md"]));
    let r = c
        .modern(8, "prompts/get", json!({"name":"release_notes","arguments":{"version":"2.0","audience":"operators"}}))
        .await;
    let messages = r.result()["messages"].as_array().expect("messages").clone();
    assert_eq!(messages[0]["content"]["type"], "resource");
    assert_eq!(
        messages[1]["content"]["text"],
        "Write release notes for version 2.0 for operators, following the handbook above."
    );
    let r = c.modern(9, "prompts/get", json!({"name":"release_notes","arguments":{}})).await;
    assert_eq!(r.error_code(), Some(-32602), "a required argument is missing");
    // The SQLite database the example creates on first use.
    let r = c.modern(10, "tools/call", json!({"name":"top_customers","arguments":{"limit":2}})).await;
    let rows = r.result()["structuredContent"]["rows"].clone();
    assert_eq!(rows[0]["name"], "Ada Lovelace", "{}", r.text);
    assert_eq!(rows.as_array().map(Vec::len), Some(2));
    let r = c.modern(11, "resources/read", json!({"uri":"crm://customers/3"})).await;
    let record: Value = serde_json::from_str(r.result()["contents"][0]["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(record, json!({"id":3,"name":"Alan Turing","city":"Manchester","total":2700}));
    let r = c.modern(12, "resources/read", json!({"uri":"crm://customers/99"})).await;
    assert_eq!(r.error_code(), Some(-32602), "no such customer: {}", r.text);
}

const V1: &str = "server: { name: live }\ntools:\n  - { name: one, text: first }\nresources:\n  - { uri: 'notes://today', name: today, file: today.txt }\n";
const V2: &str = "server: { name: live }\ntools:\n  - { name: one, text: first }\n  - { name: two, text: second }\nresources:\n  - { uri: 'notes://today', name: today, file: today.txt }\n";

#[tokio::test]
async fn edits_reload_the_catalog_and_tell_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("today.txt"), "nothing yet").expect("write");
    let served = e2e::Served::in_dir(dir, V1, &[]).await;
    let (gw, c, defs) = (&served.gateway, &served.client, served.path());
    // A legacy session with a GET stream and a resource subscription; a modern listen stream.
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}});
    let r = c.post(&init, &[]).await;
    let sid = r.headers.get("mcp-session-id").expect("session").to_str().expect("ascii").to_owned();
    let h = [("mcp-session-id", sid.as_str())];
    let mut legacy = c.get_stream(&h).await;
    c.post(&json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"notes://today"}}), &h).await;
    let listen = e2e::modern_request(2, "subscriptions/listen", json!({"notifications":{"toolsListChanged":true}}));
    let mut modern =
        c.stream(&listen, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "subscriptions/listen")]).await;
    modern.next().await; // acknowledged

    // A valid edit: the new tool is served and both streams hear of it.
    std::fs::write(&defs, V2).expect("write");
    assert_eq!(legacy.next().await["method"], "notifications/tools/list_changed");
    assert_eq!(modern.next().await["method"], "notifications/tools/list_changed");
    let r = c.modern(3, "tools/list", json!({})).await;
    assert_eq!(names(r.result(), "tools", "name"), ["one", "two"]);

    // An edit to a resource's file is an update for its subscriber.
    std::fs::write(served.dir.path().join("today.txt"), "shipped the reload").expect("write");
    let note = legacy.next().await;
    assert_eq!(
        (note["method"].as_str(), note["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some("notes://today"))
    );
    let r = c.modern(4, "resources/read", json!({"uri":"notes://today"})).await;
    assert_eq!(r.result()["contents"][0]["text"], "shipped the reload");

    // A broken edit keeps the previous catalog and logs the mistake with its line.
    std::fs::write(&defs, "server: { name: live }\ntools:\n  - { name: one, txt: oops }\n").expect("write");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = c.modern(5, "tools/list", json!({})).await;
    assert_eq!(names(r.result(), "tools", "name"), ["one", "two"], "the old catalog stays");
    let logs = gw.log_text();
    assert!(
        logs.contains("previous catalog stays") && logs.contains("unknown field `txt`") && logs.contains("line 3"),
        "{logs}"
    );
    assert!(legacy.next_within(Duration::from_millis(200)).await.is_none(), "nothing changed for clients");
}

/// A Kubernetes ConfigMap volume updates by swapping a `..data` symlink; the file path stays a
/// symlink through it.
#[tokio::test]
async fn a_configmap_style_symlink_swap_reloads() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let write_version = |name: &str, text: &str| {
        std::fs::create_dir(root.join(name)).expect("mkdir");
        std::fs::write(root.join(name).join("defs.yaml"), text).expect("write");
    };
    write_version("..v1", "server: { name: cm }\ntools:\n  - { name: one, text: first }\n");
    symlink("..v1", root.join("..data")).expect("symlink");
    symlink("..data/defs.yaml", root.join("defs.yaml")).expect("symlink");
    let path = root.join("defs.yaml");
    let gw = Proc::start(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--definitions", path.to_str().expect("path")],
        "gateway",
    )
    .await;
    let c = Client::new(&format!("{}/mcp", gw.url()));
    let listen = e2e::modern_request(1, "subscriptions/listen", json!({"notifications":{"toolsListChanged":true}}));
    let mut stream =
        c.stream(&listen, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "subscriptions/listen")]).await;
    stream.next().await;

    // The swap: a new directory, a new symlink renamed over `..data` atomically.
    write_version(
        "..v2",
        "server: { name: cm }\ntools:\n  - { name: one, text: first }\n  - { name: two, text: second }\n",
    );
    symlink("..v2", root.join("..data_tmp")).expect("symlink");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("rename");
    std::fs::remove_dir_all(root.join("..v1")).expect("cleanup");

    assert_eq!(stream.next().await["method"], "notifications/tools/list_changed");
    let r = c.modern(2, "tools/list", json!({})).await;
    assert_eq!(names(r.result(), "tools", "name"), ["one", "two"]);
}
