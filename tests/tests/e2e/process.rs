//! Process behaviour: port 0, configuration from flags, files and environment, bad
//! configuration refused with exit code 64, SIGTERM drains and exits 0.

use e2e::{Proc, Stack, bin};
use std::time::Duration;

/// Every process of `stack`, the gateway first, exits 0 on SIGTERM and logs its stop.
async fn every_process_stops_cleanly(stack: Stack) {
    for proc in stack.procs.into_iter().rev() {
        let name = proc.name.clone();
        let logs = proc.logs.clone();
        let status = proc.terminate().await;
        assert!(status.success(), "{name} exited with {status}; logs:\n{}", logs.lock().expect("logs").join("\n"));
        assert!(logs.lock().expect("logs").iter().any(|l| l.contains("stopped")), "{name} logged its stop");
    }
}

#[tokio::test]
async fn every_service_exits_zero_on_sigterm() {
    every_process_stops_cleanly(Stack::microservices().await).await;
    let standalone = Stack::standalone().await;
    let gw = standalone.procs.into_iter().next().expect("gateway");
    assert!(gw.terminate().await.success());
}

#[tokio::test]
async fn every_service_on_one_thread_exits_zero_on_sigterm() {
    let stack = Stack::microservices_on_one_thread().await;
    for proc in &stack.procs {
        let logs = proc.logs.lock().expect("logs").join("\n");
        assert!(logs.contains(r#""runtime":"current_thread""#), "{} runs on one thread:\n{logs}", proc.name);
    }
    every_process_stops_cleanly(stack).await;
}

/// The scheduling policies of a running process's threads (field 41 of each
/// `/proc/PID/task/TID/stat`; 0 is `SCHED_OTHER`, 3 `SCHED_BATCH`), sorted, without repeats.
fn sched_policies(pid: u32) -> Vec<u32> {
    let mut policies: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's threads")
        .map(|task| {
            let stat = std::fs::read_to_string(task.expect("a thread").path().join("stat")).expect("stat");
            // Fields after the command name, which is in parentheses and may hold spaces: field 3 on.
            let after_name = &stat[stat.rfind(')').expect("command name") + 2..];
            after_name.split(' ').nth(41 - 3).expect("policy field").parse().expect("a number")
        })
        .collect();
    policies.sort_unstable();
    policies.dedup();
    policies
}

/// Whether this test runs where the services' policy is theirs to choose: under the normal
/// policy (not under `chrt`), without `MCP_SCHED_POLICY` set around it.
fn scheduling_is_ours() -> bool {
    let ours = std::env::var_os("MCP_SCHED_POLICY").is_none() && sched_policies(std::process::id()) == [0];
    if !ours {
        eprintln!("skipped: the tests run under another scheduling policy or with MCP_SCHED_POLICY set");
    }
    ours
}

#[tokio::test]
async fn the_services_run_under_sched_batch_unless_told_otherwise() {
    if !scheduling_is_ours() {
        return;
    }
    let stack = Stack::microservices().await;
    for proc in &stack.procs {
        let pid = proc.child.id().expect("running");
        assert_eq!(sched_policies(pid), [3], "every thread of {} runs under SCHED_BATCH", proc.name);
        let logs = proc.log_text();
        assert!(logs.contains(r#""scheduling":"batch""#), "{} logs its policy:\n{logs}", proc.name);
    }
    drop(stack);
    let stack = Stack::microservices_in(&[], &[("MCP_SCHED_POLICY", "Normal")]).await;
    for proc in &stack.procs {
        assert_eq!(sched_policies(proc.child.id().expect("running")), [0], "{} keeps the normal policy", proc.name);
        assert!(proc.log_text().contains(r#""scheduling":"normal""#), "{}", proc.name);
    }
    // The embedded deployment's one process is not among the services that take turns, nor is
    // `mcp-service --stdio` serving its one client (checked once it has answered).
    let standalone = Stack::standalone().await;
    assert_eq!(sched_policies(standalone.gateway().child.id().expect("running")), [0]);
    assert!(standalone.gateway().log_text().contains(r#""scheduling":"normal""#));
    let mut stdio = e2e::StdioClient::start(&[]).await;
    let ping = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    stdio.send(&ping).await;
    let answer = stdio.recv().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(sched_policies(stdio.child.id().expect("running")), [0], "mcp-service --stdio");
}

#[tokio::test]
async fn configuration_from_file_and_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("registry.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\n").expect("write config");
    let p =
        Proc::start("registry-service", &["--config", file.to_str().expect("utf-8 path")], "registry-service").await;
    assert_eq!(p.addr().ip().to_string(), "127.0.0.1");
    drop(p);

    // Environment variables, and a flag overriding them.
    let mut cmd = tokio::process::Command::new(bin("oauth-service"));
    cmd.env("OAUTH_LISTEN", "127.0.0.1:0")
        .env("OAUTH_ISSUER", "https://issuer.example.com")
        .env("LOG_FORMAT", "json")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.contains("listening") {
                return l;
            }
        }
        panic!("no listening line");
    })
    .await
    .expect("listening in time");
    assert!(line.contains("https://issuer.example.com"), "{line}");
}

#[tokio::test]
async fn bad_configuration_is_refused_with_exit_64() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("gateway", &["--listen", "127.0.0.1:0"], "mcp_service"),
        ("gateway-edge", &["--listen", "127.0.0.1:0"], "mcp_service"),
        ("gateway-edge", &["--standalone", "--listen", "127.0.0.1:0"], "`gateway --standalone`"),
        ("mcp-service-remote", &["--listen", "127.0.0.1:0"], "`mcp-service` runs one in process"),
        ("mcp-service-remote", &["--stdio"], "registry: required"),
        ("oauth-service", &["--listen", "127.0.0.1:0", "--issuer", "ftp://x.example.com"], "issuer"),
        ("registry-service", &["--config", "/nonexistent/registry.toml"], "registry.toml"),
    ];
    for (name, args, mentions) in cases {
        let out = std::process::Command::new(bin(name)).args(*args).output().expect("run");
        assert_eq!(out.status.code(), Some(64), "{name} {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(mentions), "{name}: {err}");
    }
    // A body limit above what the services pass between them.
    let out = std::process::Command::new(bin("gateway"))
        .args(["--standalone", "--listen", "127.0.0.1:0"])
        .env("GATEWAY_MAX_BODY_BYTES", "1000000000")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_body_bytes: at most"));
    // A scheduling policy that is not one of the two, in every service (checked before the
    // command line: with the policy left unread, `--help` would exit 0).
    for name in ["gateway-edge", "mcp-service", "mcp-service-remote", "oauth-service", "registry-service"] {
        let out = std::process::Command::new(bin(name))
            .arg("--help")
            .env("MCP_SCHED_POLICY", "realtime")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(64), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{name}: invalid configuration: MCP_SCHED_POLICY: expected `batch` or `normal`")),
            "{name}: {err}"
        );
    }
    // Unknown keys in a file are named.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mcp.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nregistri = \"http://x\"\n").expect("write");
    let out = std::process::Command::new(bin("mcp-service"))
        .args(["--config", file.to_str().expect("path")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("registri"));
}

/// `gateway-edge` and `mcp-service-remote` leave the embedded components out: none of their
/// code is linked in (in the release build their code is a third and three fifths of
/// `gateway`'s and `mcp-service`'s), and their help does not offer what needs them.
#[test]
fn the_separate_deployments_binaries_leave_the_embedded_components_out() {
    let size = |name: &str| std::fs::metadata(bin(name)).expect("built binary").len();
    for (full, slim, hidden) in
        [("gateway", "gateway-edge", "--standalone"), ("mcp-service", "mcp-service-remote", "--definitions")]
    {
        let (full_size, slim_size) = (size(full), size(slim));
        assert!(slim_size * 5 < full_size * 4, "{slim} is {slim_size} bytes, {full} {full_size}");
        let help = std::process::Command::new(bin(slim)).arg("--help").output().expect("run");
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(help.contains(&format!("Usage: {slim}")) && !help.contains(hidden), "{help}");
    }
}

#[tokio::test]
async fn gateway_reports_unready_when_mcp_service_is_gone() {
    let stack = Stack::microservices().await;
    let http = e2e::http();
    let ready = |url: String| {
        let http = http.clone();
        async move { http.get(url).send().await.expect("GET").status().as_u16() }
    };
    assert_eq!(ready(format!("{}/readyz", stack.base)).await, 200);
    let mut procs = stack.procs;
    let gateway = procs.pop().expect("gateway");
    let _oauth = procs.pop();
    let mcp = procs.pop().expect("mcp-service");
    assert!(mcp.terminate().await.success());
    assert_eq!(ready(format!("{}/readyz", gateway.url())).await, 503);
    // The MCP endpoint answers with a JSON-RPC error rather than hanging or crashing.
    let c = e2e::Client::new(&format!("{}/mcp", gateway.url()));
    let r = c.post(&serde_json::json!({"jsonrpc":"2.0","id":9,"method":"ping"}), &[]).await;
    assert_eq!((r.status, r.error_code()), (502, Some(-32603)));
    assert_eq!(r.json["id"], 9);
    assert_eq!(ready(format!("{}/healthz", gateway.url())).await, 200);
}

#[tokio::test]
async fn broken_definitions_stop_the_start_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("defs.yaml");
    std::fs::write(&file, "server: { name: acme }\nbuiltin: [demo]\n").expect("write");
    let path = file.to_str().expect("utf-8 path");
    let out = std::process::Command::new(bin("registry-service"))
        .args(["--validate-only", "--definitions", path])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("defs.yaml") && err.contains("line 2") && err.contains("unknown field `builtin`"), "{err}");
    // The same file refuses a standalone start, naming it.
    let out = std::process::Command::new(bin("gateway"))
        .args(["--standalone", "--listen", "127.0.0.1:0", "--definitions", path])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("defs.yaml"));
    // A good file validates.
    let out = std::process::Command::new(bin("registry-service"))
        .args(["--validate-only", "--definitions", &e2e::example("conformance.yaml")])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
}
