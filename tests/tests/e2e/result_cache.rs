//! The gateway answers modern `cacheScope: public` results again without asking mcp-service,
//! for their `ttlMs`, and never once the catalog has changed; answers that depend on the
//! caller are never shared. A read of contents the registry names is held past its `ttlMs`
//! and confirmed by name, and is never older than the file.

use base64::Engine as _;
use e2e::{MODERN, Proc};
use serde_json::{Value, json};
use sha2::Digest as _;

const V1: &str = "server: { name: cached, version: \"1.0.0\" }\ntools:\n  - { name: one, text: \"1\" }\n";
const V2: &str = "server: { name: cached, version: \"1.0.0\" }\ntools:\n  - { name: one, text: \"1\" }\n  - { name: two, text: \"2\" }\n";

fn names(result: &Value) -> Vec<String> {
    result["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// The value of counter `name{labels}` in the Prometheus text `text` (0 when absent).
fn counter(text: &str, name: &str, labels: &str) -> u64 {
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |v| v.trim().parse::<f64>().expect("number") as u64)
}

async fn hits(gateway: &Proc) -> u64 {
    outcomes(gateway).await[0]
}

/// The result cache's hits, misses and confirmations so far.
async fn outcomes(gateway: &Proc) -> [u64; 3] {
    let text = e2e::metrics(&gateway.url()).await;
    ["hit", "miss", "confirmed"].map(|o| counter(&text, "gateway_result_cache_total", &format!("outcome=\"{o}\"")))
}

fn list_headers() -> [(&'static str, &'static str); 2] {
    [("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")]
}

#[tokio::test]
async fn public_results_are_answered_again_until_the_catalog_changes() {
    let served = e2e::Served::definitions(V1, &[]).await;
    let (gw, c) = (&served.gateway, &served.client);

    let first = c.post(&e2e::modern_request(1, "tools/list", json!({})), &list_headers()).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!((first.result()["cacheScope"].as_str(), names(first.result())), (Some("public"), vec!["one".into()]));
    assert_eq!(hits(gw).await, 0);

    // The same question with another id: the same result, this id, without a hop.
    let mut again = e2e::modern_request(1, "tools/list", json!({}));
    again["id"] = json!("second");
    let second = c.post(&again, &list_headers()).await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(second.json["id"], "second");
    assert_eq!(second.result(), first.result());
    assert_eq!(second.content_type(), "application/json");
    assert_eq!(hits(gw).await, 1);

    // Another question (a different cursor, a legacy request) is not that answer.
    let other = c.post(&e2e::modern_request(3, "tools/list", json!({"cursor": "bogus"})), &list_headers()).await;
    assert_eq!(other.error_code(), Some(-32602), "{}", other.text);
    let legacy = c.legacy("2025-06-18", 4, "tools/list", json!({})).await;
    assert_eq!(names(legacy.result()), vec!["one".to_owned()]);
    assert!(legacy.result().get("cacheScope").is_none());
    assert_eq!(hits(gw).await, 1);

    // A new catalog: once a client hears of it, nothing older is answered.
    let listen = e2e::modern_request(5, "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let mut stream =
        c.stream(&listen, &[("mcp-protocol-version", MODERN), ("mcp-method", "subscriptions/listen")]).await;
    stream.next().await; // acknowledged
    std::fs::write(served.path(), V2).expect("write");
    assert_eq!(stream.next().await["method"], "notifications/tools/list_changed");
    let after = c.post(&e2e::modern_request(6, "tools/list", json!({})), &list_headers()).await;
    assert_eq!(names(after.result()), ["one", "two"]);
    // And that new answer is reused in turn.
    let reused = c.post(&e2e::modern_request(7, "tools/list", json!({})), &list_headers()).await;
    assert_eq!(names(reused.result()), ["one", "two"]);
    assert_eq!(hits(gw).await, 2);

    // Errors are never kept.
    let bad = e2e::modern_request(8, "resources/read", json!({"uri": "nothing://here"}));
    let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", "nothing://here")];
    for _ in 0..2 {
        assert!(c.post(&bad, &headers).await.error_code().is_some());
    }
    assert_eq!(hits(gw).await, 2);
}

fn sha256(token: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()))
}

/// `gateway --standalone` serving `defs`, with two API tokens: the administrator's (scopes
/// `mcp` and `admin`) and an ordinary user's (`mcp`).
async fn signed_in_gateway(dir: &std::path::Path, defs: &std::path::Path) -> Proc {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "auth = \"token\"\n\
             [[api_tokens]]\nname = \"admin\"\nsha256 = \"{}\"\nscopes = [\"mcp\", \"admin\"]\n\
             [[api_tokens]]\nname = \"user\"\nsha256 = \"{}\"\nscopes = [\"mcp\"]\n",
            sha256("token-of-the-administrator"),
            sha256("token-of-an-ordinary-user")
        ),
    )
    .expect("write");
    let args = [
        "--standalone",
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().expect("utf-8"),
        "--definitions",
        defs.to_str().expect("utf-8"),
    ];
    Proc::start("gateway", &args, "gateway").await
}

/// `method` with `params` as request `id`, signed in with API token `token`.
async fn as_caller(client: &e2e::Client, token: &str, id: i64, method: &str, params: Value) -> e2e::Reply {
    client.modern_with(id, method, params, &[("authorization", &format!("Bearer {token}"))]).await
}

#[tokio::test]
async fn a_read_anyone_may_make_is_confirmed_across_callers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    write_aged(&file, "for everyone", std::time::Duration::from_secs(60));
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, read_definitions(&file)).expect("write");
    let gw = signed_in_gateway(dir.path(), &defs).await;
    let client = e2e::Client::new(&format!("{}/mcp", gw.url()));
    for (token, id) in [("token-of-the-administrator", 1), ("token-of-an-ordinary-user", 2), ("wrong", 3)] {
        let reply = as_caller(&client, token, id, "resources/read", json!({"uri": DOC})).await;
        if token == "wrong" {
            // The held result is not asked for before the caller is known.
            assert_eq!(reply.status, 401, "{}", reply.text);
            continue;
        }
        assert_eq!(reply.json["id"], id);
        assert_eq!(reply.result()["cacheScope"], "public");
        assert_eq!(reply.result()["contents"][0]["text"], "for everyone");
    }
    assert_eq!(outcomes(&gw).await, [0, 1, 1]);
}

#[tokio::test]
async fn answers_that_depend_on_the_caller_are_never_shared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    let doc = dir.path().join("doc.txt");
    write_aged(&doc, "for administrators", std::time::Duration::from_secs(60));
    std::fs::write(
        &defs,
        format!(
            "server: {{ name: scoped }}\ntools:\n  - {{ name: hello, text: hi }}\n  - {{ name: purge, text: gone, scopes: [admin] }}\n\
             resources:\n  - {{ uri: \"{DOC}\", name: doc, file: {}, scopes: [admin] }}\n",
            serde_json::to_string(doc.to_str().expect("utf-8")).expect("json")
        ),
    )
    .expect("write");
    let gw = signed_in_gateway(dir.path(), &defs).await;
    let client = e2e::Client::new(&format!("{}/mcp", gw.url()));
    let list = |token| as_caller(&client, token, 1, "tools/list", json!({}));
    for _ in 0..2 {
        let admin = list("token-of-the-administrator").await;
        assert_eq!(names(admin.result()), ["hello", "purge"]);
        assert_eq!(admin.result()["cacheScope"], "private");
        let user = list("token-of-an-ordinary-user").await;
        assert_eq!(names(user.result()), ["hello"]);
        assert_eq!(user.result()["cacheScope"], "private");
    }
    assert_eq!(hits(&gw).await, 0);

    // A read only some callers may make is never held: each is read whole, and refused to
    // a caller without the scope although another one just read it.
    let read = |token| as_caller(&client, token, 2, "resources/read", json!({"uri": DOC}));
    for _ in 0..2 {
        let admin = read("token-of-the-administrator").await;
        assert_eq!(admin.result()["contents"][0]["text"], "for administrators");
        assert_eq!(admin.result()["cacheScope"], "private");
        let user = read("token-of-an-ordinary-user").await;
        assert!(user.json.get("result").is_none(), "{}", user.text);
    }
    assert_eq!(outcomes(&gw).await[2], 0, "nothing confirmed");
}

/// Write `text` to `path`, its modification `age` ago (a file older than two seconds is named by
/// the registry).
fn write_aged(path: &std::path::Path, text: &str, age: std::time::Duration) {
    std::fs::write(path, text).expect("write");
    let file = std::fs::File::options().write(true).open(path).expect("open");
    file.set_modified(std::time::SystemTime::now() - age).expect("set mtime");
}

const DOC: &str = "file:///doc";

fn read_definitions(file: &std::path::Path) -> String {
    format!(
        "server: {{ name: reads, version: \"1.0.0\" }}\nresources:\n  - uri: \"{DOC}\"\n    name: doc\n    mime_type: text/plain\n    file: {}\n",
        serde_json::to_string(file.to_str().expect("utf-8")).expect("json")
    )
}

/// Read `DOC` as request `id`, and the text it got (the reply checked whole).
async fn read_doc(client: &e2e::Client, id: Value) -> String {
    let mut request = e2e::modern_request(1, "resources/read", json!({"uri": DOC}));
    request["id"] = id.clone();
    let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", DOC)];
    let reply = client.post(&request, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["id"], id);
    assert_eq!(reply.content_type(), "application/json");
    let length = reply.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    assert_eq!(length, Some(reply.text.len()), "a reply of known length");
    let result = reply.result();
    assert_eq!((result["cacheScope"].as_str(), result["ttlMs"].as_u64()), (Some("public"), Some(0)));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["contents"][0]["uri"], DOC);
    result["contents"][0]["text"].as_str().expect("text").to_owned()
}

/// The gateway at `gateway` serves `file` as `DOC`.
async fn reads_are_confirmed_and_never_stale(gateway: &Proc, file: &std::path::Path) {
    let client = e2e::Client::new(&format!("{}/mcp", gateway.url()));
    let [_, misses, _] = outcomes(gateway).await;
    // Large enough to be sent from the held bytes rather than copied.
    let first = "first version\n".repeat(8 * 1024);
    assert_eq!(read_doc(&client, json!(1)).await, first);
    assert_eq!(outcomes(gateway).await, [0, misses + 1, 0]);

    // Asked again: mcp-service and the registry confirm the held result without sending it;
    // the answer carries this request's id.
    assert_eq!(read_doc(&client, json!("second")).await, first);
    assert_eq!(read_doc(&client, json!(3)).await, first);
    assert_eq!(outcomes(gateway).await, [0, misses + 1, 2]);

    // The file changed (the same length, another modification time): the new text at once.
    let second = "other version\n".repeat(8 * 1024);
    write_aged(file, &second, std::time::Duration::from_secs(30));
    assert_eq!(read_doc(&client, json!(4)).await, second);
    assert_eq!(outcomes(gateway).await, [0, misses + 2, 2]);
    assert_eq!(read_doc(&client, json!(5)).await, second);
    assert_eq!(outcomes(gateway).await, [0, misses + 2, 3]);

    // Changed just now: not named (it may change again within its clock tick), read each time.
    write_aged(file, "third", std::time::Duration::ZERO);
    assert_eq!(read_doc(&client, json!(6)).await, "third");
    write_aged(file, "fourth", std::time::Duration::ZERO);
    assert_eq!(read_doc(&client, json!(7)).await, "fourth");
    assert_eq!(outcomes(gateway).await, [0, misses + 4, 3]);

    // Legacy reads are named apart (their result has none of the modern fields) and confirmed
    // the same way, each within its session: an ended session's read is refused although the
    // result is held.
    let fifth = "fifth version\n".repeat(8 * 1024);
    write_aged(file, &fifth, std::time::Duration::from_secs(20));
    let session = legacy_session(&client, "2025-06-18").await;
    for (id, outcome) in [(8, [0, misses + 5, 3]), (9, [0, misses + 5, 4])] {
        let reply = legacy_read(&client, &session, id).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.json["id"], id);
        assert_eq!(reply.result()["contents"][0]["text"], fifth.as_str());
        assert!(reply.result().get("cacheScope").is_none() && reply.result().get("resultType").is_none());
        assert_eq!(outcomes(gateway).await, outcome);
    }
    let ended = e2e::http().delete(&client.url).header("mcp-session-id", &session).send().await.expect("DELETE");
    assert_eq!(ended.status(), 204);
    let refused = legacy_read(&client, &session, 10).await;
    assert_eq!(refused.status, 404, "{}", refused.text);
    assert!(refused.json.get("result").is_none());
    // The modern result was not the legacy one: it is read anew.
    assert_eq!(read_doc(&client, json!(11)).await, fifth);
    assert_eq!(outcomes(gateway).await, [0, misses + 7, 4]);
}

/// A legacy session's id, negotiated at `version`.
async fn legacy_session(client: &e2e::Client, version: &str) -> String {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":version,"capabilities":{},"clientInfo":{"name":"reader","version":"1"}}});
    let reply = client.post(&init, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.result()["protocolVersion"], version);
    reply.headers.get("mcp-session-id").expect("a session id").to_str().expect("ASCII").to_owned()
}

async fn legacy_read(client: &e2e::Client, session: &str, id: i64) -> e2e::Reply {
    let body = json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri": DOC}});
    client.post(&body, &[("mcp-session-id", session), ("mcp-protocol-version", "2025-06-18")]).await
}

#[tokio::test]
async fn named_reads_are_confirmed_across_the_services_and_never_stale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    write_aged(&file, &"first version\n".repeat(8 * 1024), std::time::Duration::from_secs(60));
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, read_definitions(&file)).expect("write");
    let stack = e2e::Stack::microservices_with(&["--definitions", defs.to_str().expect("utf-8")]).await;
    reads_are_confirmed_and_never_stale(stack.gateway(), &file).await;
}

#[tokio::test]
async fn named_reads_are_confirmed_in_one_process_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    write_aged(&file, &"first version\n".repeat(8 * 1024), std::time::Duration::from_secs(60));
    let defs = read_definitions(&file);
    let served = e2e::Served::in_dir(dir, &defs, &[]).await;
    reads_are_confirmed_and_never_stale(&served.gateway, &file).await;
}

/// Until the gateway at `gateway` follows mcp-service's catalog (a list is answered from its
/// cache): before that it keeps nothing.
async fn until_results_are_kept(gateway: &Proc, client: &e2e::Client) {
    for id in 0..100 {
        client.post(&e2e::modern_request(id, "tools/list", json!({})), &list_headers()).await;
        if hits(gateway).await > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the gateway never kept a result");
}

#[tokio::test]
async fn reads_arriving_together_carry_the_contents_across_the_services_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    let text = "read together\n".repeat(32 * 1024);
    write_aged(&file, &text, std::time::Duration::from_secs(60));
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, read_definitions(&file)).expect("write");
    let stack = e2e::Stack::microservices_with(&["--definitions", defs.to_str().expect("utf-8")]).await;
    let gateway = stack.gateway();
    let client = e2e::Client::new(&format!("{}/mcp", gateway.url()));
    until_results_are_kept(gateway, &client).await;

    // Twelve modern reads at once, nothing held: one carries the contents, the others wait
    // for it and are confirmed by name (each still checked by mcp-service and the registry).
    let [hits, misses, confirmed] = outcomes(gateway).await;
    let reads = futures_util::future::join_all((0..12).map(|id| read_doc(&client, json!(id)))).await;
    assert!(reads.iter().all(|r| *r == text), "every read has the whole text");
    assert_eq!(outcomes(gateway).await, [hits, misses + 1, confirmed + 11]);

    // Legacy reads are named apart: eight at once in one session, one carries the contents.
    let session = legacy_session(&client, "2025-06-18").await;
    let reads = futures_util::future::join_all((0..8).map(|id| legacy_read(&client, &session, id))).await;
    for (id, reply) in reads.iter().enumerate() {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.json["id"], id);
        assert_eq!(reply.result()["contents"][0]["text"], text.as_str());
    }
    assert_eq!(outcomes(gateway).await, [hits, misses + 2, confirmed + 18]);
}

#[tokio::test]
async fn a_read_ttl_lets_the_gateway_answer_alone_until_it_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    write_aged(&file, "first", std::time::Duration::from_secs(60));
    let defs = read_definitions(&file);
    let served = e2e::Served::in_dir(dir, &defs, &[("MCP_SERVICE_READ_TTL_MS", "1500")]).await;
    let (gw, client) = (&served.gateway, &served.client);
    let read = |id: i64| async move {
        let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", DOC)];
        let reply = client.post(&e2e::modern_request(id, "resources/read", json!({"uri": DOC})), &headers).await;
        assert_eq!(reply.result()["ttlMs"], 1500, "{}", reply.text);
        reply.result()["contents"][0]["text"].as_str().expect("text").to_owned()
    };
    let [hits, misses, confirmed] = outcomes(gw).await;
    assert_eq!(read(1).await, "first");
    // Within its ttlMs the result is answered without asking, even once the file changed
    // (that is what the ttlMs told clients too).
    assert_eq!(read(2).await, "first");
    assert_eq!(outcomes(gw).await, [hits + 1, misses + 1, confirmed]);
    write_aged(&file, "newer", std::time::Duration::from_secs(30));
    assert_eq!(read(3).await, "first");
    // Past it: asked again, and the new contents come.
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    assert_eq!(read(4).await, "newer");
    assert_eq!(outcomes(gw).await, [hits + 2, misses + 2, confirmed]);
    // Past it once more with the file unchanged: confirmed, then answered alone again.
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    assert_eq!(read(5).await, "newer");
    assert_eq!(read(6).await, "newer");
    assert_eq!(outcomes(gw).await, [hits + 3, misses + 2, confirmed + 1]);
}

#[tokio::test]
async fn a_file_rewritten_with_its_old_length_and_time_is_not_confirmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("doc.txt");
    write_aged(&file, "version one", std::time::Duration::from_secs(60));
    let modified = std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime");
    let defs = read_definitions(&file);
    let served = e2e::Served::in_dir(dir, &defs, &[]).await;
    let client = &served.client;
    assert_eq!(read_doc(client, json!(1)).await, "version one");
    assert_eq!(read_doc(client, json!(2)).await, "version one");
    assert_eq!(outcomes(&served.gateway).await[2], 1, "confirmed");
    // As `cp -p` or `rsync -t` would leave it: other contents, the same length and time.
    std::fs::write(&file, "version two").expect("write");
    std::fs::File::options().write(true).open(&file).and_then(|f| f.set_modified(modified)).expect("set mtime");
    // The registry's watcher sees the contents change; within a few seconds reads say so.
    let mut text = String::new();
    for i in 0..50 {
        text = read_doc(client, json!(3 + i)).await;
        if text == "version two" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(text, "version two");
}

const TITLED: &str =
    "server: { name: cached, version: \"1.0.0\" }\ntools:\n  - { name: one, title: One, text: \"1\" }\n";

/// `tools/list` as request `id` in legacy session `session` of revision `version`.
async fn session_list(client: &e2e::Client, session: &str, version: &str, id: i64) -> e2e::Reply {
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/list"});
    client.post(&body, &[("mcp-session-id", session), ("mcp-protocol-version", version)]).await
}

/// Until `gateway` answers a live legacy session's list without a hop (gateway-edge: once it
/// follows every mcp-service replica's session ends).
async fn until_session_lists_are_kept(gateway: &Proc, client: &e2e::Client) {
    let session = legacy_session(client, "2025-06-18").await;
    for id in 0..100 {
        let before = hits(gateway).await;
        assert_eq!(session_list(client, &session, "2025-06-18", id).await.status, 200);
        if hits(gateway).await > before {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the gateway never answered a session's list again");
}

/// How a gateway knows that a session is live: standalone asks mcp-service in its process;
/// gateway-edge learns each session from mcp-service's answer to its first list.
#[derive(PartialEq)]
enum Knows {
    InProcess,
    Learns,
}

/// Legacy sessions' lists: each revision's own page, answered again without a hop, never for
/// an ended session, a forged one or from an older catalog.
async fn legacy_lists(gateway: &Proc, defs: &std::path::Path, knows: Knows) {
    let client = e2e::Client::new(&format!("{}/mcp", gateway.url()));
    until_results_are_kept(gateway, &client).await;
    until_session_lists_are_kept(gateway, &client).await;
    let newer = legacy_session(&client, "2025-06-18").await;
    let older = legacy_session(&client, "2024-11-05").await;
    let [hits, misses, confirmed] = outcomes(gateway).await;

    let first = session_list(&client, &newer, "2025-06-18", 1).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.result()["tools"][0]["title"], "One", "2025-06-18 lists titles");
    let second = session_list(&client, &newer, "2025-06-18", 2).await;
    assert_eq!((second.status, &second.json["id"]), (200, &json!(2)), "{}", second.text);
    assert_eq!(second.result(), first.result());
    assert_eq!(second.content_type(), "application/json");
    // Another session of that revision is given the same page (gateway-edge asks mcp-service
    // once whether it is live).
    let other = legacy_session(&client, "2025-06-18").await;
    assert_eq!(session_list(&client, &other, "2025-06-18", 3).await.result(), first.result());
    // A session of an older revision has a page of its own, without the newer fields.
    for id in [4, 5] {
        let old = session_list(&client, &older, "2024-11-05", id).await;
        assert_eq!(old.status, 200, "{}", old.text);
        assert_eq!(old.result()["tools"][0]["name"], "one");
        assert!(old.result()["tools"][0].get("title").is_none(), "{}", old.text);
    }
    // The 2025-06-18 page was kept while waiting: standalone answers every list but the first
    // of 2024-11-05 without a hop; gateway-edge also asks mcp-service about each new session.
    let counted = match knows {
        Knows::InProcess => [hits + 4, misses + 1, confirmed],
        Knows::Learns => [hits + 2, misses + 3, confirmed],
    };
    assert_eq!(outcomes(gateway).await, counted);

    // An ended session's list is refused, though its page is held.
    let ended = e2e::http().delete(&client.url).header("mcp-session-id", &newer).send().await.expect("DELETE");
    assert_eq!(ended.status(), 204);
    let refused = session_list(&client, &newer, "2025-06-18", 6).await;
    assert_eq!(refused.status, 404, "{}", refused.text);
    assert!(refused.json.get("result").is_none());
    // So is a forged one (the payload changed under its seal).
    let forged = format!("{}{}", if other.starts_with('A') { 'B' } else { 'A' }, &other[1..]);
    assert_eq!(session_list(&client, &forged, "2025-06-18", 7).await.status, 404);
    assert_eq!(outcomes(gateway).await, counted);

    // A new catalog: once the gateway follows it, a session's list is the new one.
    let headers = [("mcp-session-id", other.as_str()), ("mcp-protocol-version", "2025-06-18")];
    let mut stream = client.get_stream(&headers).await;
    assert_eq!(stream.status, 200);
    std::fs::write(defs, format!("{TITLED}  - {{ name: two, text: \"2\" }}\n")).expect("write");
    assert_eq!(stream.next().await["method"], "notifications/tools/list_changed");
    let mut after = session_list(&client, &other, "2025-06-18", 8).await;
    for id in 9..100 {
        if names(after.result()).len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        after = session_list(&client, &other, "2025-06-18", id).await;
    }
    assert_eq!(names(after.result()), ["one", "two"]);
    let again = session_list(&client, &other, "2025-06-18", 100).await;
    assert_eq!(again.result(), after.result());
}

#[tokio::test]
async fn lists_of_live_legacy_sessions_are_answered_again_in_one_process() {
    let served = e2e::Served::definitions(TITLED, &[]).await;
    legacy_lists(&served.gateway, &served.path(), Knows::InProcess).await;
}

#[tokio::test]
async fn lists_of_live_legacy_sessions_are_answered_again_by_gateway_edge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, TITLED).expect("write");
    let stack = e2e::Stack::microservices_with(&["--definitions", defs.to_str().expect("utf-8")]).await;
    legacy_lists(stack.gateway(), &defs, Knows::Learns).await;
    // The operator sees that the one replica is followed.
    let text = e2e::metrics(&stack.gateway().url()).await;
    for state in ["listed", "followed"] {
        let series = format!("gateway_session_ends_replicas{{state=\"{state}\"}} 1");
        assert!(text.lines().any(|l| l == series), "{series} in:\n{text}");
    }
}

/// registry-service serving `TITLED`, `engines` mcp-service replicas sharing a state secret,
/// and `gateways` gateway-edges in front of all of them: the processes (kept alive), the
/// definitions' directory and a client per gateway.
async fn replicated(engines: usize, gateways: usize) -> (Vec<Proc>, tempfile::TempDir, Vec<e2e::Client>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, TITLED).expect("write");
    let defs = defs.to_str().expect("utf-8").to_owned();
    let registry =
        Proc::start("registry-service", &["--listen", "127.0.0.1:0", "--definitions", &defs], "registry-service").await;
    let secret = [e2e::SHARED_STATE_SECRET];
    let mut engine_urls = Vec::new();
    let mut procs = vec![registry];
    for _ in 0..engines {
        let args = ["--listen", "127.0.0.1:0", "--registry", &procs[0].url()];
        let engine = Proc::start_with_env("mcp-service-remote", &args, &secret, "mcp-service").await;
        engine_urls.push(engine.url());
        procs.push(engine);
    }
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let target = engine_urls.join(",");
    let mut clients = Vec::new();
    for _ in 0..gateways {
        let args = ["--listen", "127.0.0.1:0", "--mcp-service", &target, "--oauth-service", &oauth.url()];
        let gateway = Proc::start("gateway-edge", &args, "gateway").await;
        let client = e2e::Client::new(&format!("{}/mcp", gateway.url()));
        until_session_lists_are_kept(&gateway, &client).await;
        clients.push(client);
        procs.push(gateway);
    }
    procs.push(oauth);
    (procs, dir, clients)
}

/// Every gateway answers a session's lists without a hop, and a session ended through one is
/// refused at once by every other: each mcp-service replica answers a `DELETE` only once each
/// gateway following it has applied the end.
#[tokio::test]
async fn a_session_ended_through_one_gateway_is_refused_at_once_by_every_other() {
    let (procs, _dir, clients) = replicated(2, 2).await;
    let second_gateway = &procs[4];
    for n in 0..6 {
        let session = legacy_session(&clients[n % 2], "2025-06-18").await;
        for client in &clients {
            assert_eq!(session_list(client, &session, "2025-06-18", 1).await.status, 200);
        }
        let before = hits(second_gateway).await;
        let listed = session_list(&clients[1], &session, "2025-06-18", 2).await;
        assert_eq!(listed.result()["tools"][0]["name"], "one", "{}", listed.text);
        assert_eq!(hits(second_gateway).await, before + 1, "session {n}: answered without a hop");
        let through = &clients[(n + 1) % 2];
        let ended = e2e::http().delete(&through.url).header("mcp-session-id", &session).send().await.expect("DELETE");
        assert_eq!(ended.status(), 204);
        for client in &clients {
            let refused = session_list(client, &session, "2025-06-18", 3).await;
            assert_eq!(refused.status, 404, "session {n}: {}", refused.text);
        }
    }
}

/// A gateway that stops reading (here: stopped) holds a `DELETE` back by a lease at most, and
/// once it goes on and follows again it does not answer the ended session's lists.
#[tokio::test]
async fn a_stalled_gateway_holds_an_end_back_by_a_lease_at_most() {
    let (procs, _dir, clients) = replicated(1, 2).await;
    let stalled = &procs[3];
    let session = legacy_session(&clients[0], "2025-06-18").await;
    assert_eq!(session_list(&clients[1], &session, "2025-06-18", 1).await.status, 200);
    let before = hits(stalled).await;
    assert_eq!(session_list(&clients[1], &session, "2025-06-18", 2).await.status, 200);
    assert_eq!(hits(stalled).await, before + 1, "the stalled gateway answered the session's list itself");
    let pid = stalled.child.id().expect("running").to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill").args([name, &pid]).status().expect("kill");
        assert!(status.success());
    };
    signal("-STOP");
    let started = std::time::Instant::now();
    let ended = e2e::http().delete(&clients[0].url).header("mcp-session-id", &session).send().await;
    let waited = started.elapsed();
    signal("-CONT");
    assert_eq!(ended.expect("DELETE answered").status(), 204);
    assert!(waited >= std::time::Duration::from_secs(2), "the stalled gateway's lease was waited out: {waited:?}");
    // Once it follows again (another session's list is answered without a hop), the ended
    // session's list is still refused.
    until_session_lists_are_kept(stalled, &clients[1]).await;
    for client in &clients {
        let refused = session_list(client, &session, "2025-06-18", 3).await;
        assert_eq!(refused.status, 404, "{}", refused.text);
    }
}
