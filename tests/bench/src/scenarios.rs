//! What is measured: each server × scenario × concurrency (× catalog size for lists).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::load::{self, Outcome, Probe};
use crate::procs::{self, Server};

pub struct Plan {
    pub duration: Duration,
    pub concurrency: Vec<usize>,
    pub catalogs: Vec<usize>,
    pub bin_dir: PathBuf,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub server: String,
    pub scenario: String,
    pub catalog: usize,
    pub concurrency: usize,
    pub outcome: Outcome,
    pub req_per_sec: f64,
    pub cpu_us_per_req: f64,
    pub peak_rss_kib: Vec<u64>,
}

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

fn meta() -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {} })
}

fn headers(modern: Option<(&str, Option<&str>)>) -> Vec<(String, String)> {
    let mut h = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), "application/json, text/event-stream".to_owned()),
    ];
    match modern {
        Some((method, name)) => {
            h.push(("mcp-protocol-version".into(), MODERN.into()));
            h.push(("mcp-method".into(), method.into()));
            if let Some(n) = name {
                h.push(("mcp-name".into(), n.into()));
            }
        }
        None => h.push(("mcp-protocol-version".into(), LEGACY.into())),
    }
    h
}

/// The scenarios, with which servers can run them.
fn probes(catalog: usize) -> Vec<(&'static str, Probe, &'static [&'static str])> {
    let all: &'static [&'static str] = &["standalone", "microservices", "bare-hyper", "rmcp"];
    let sdk_and_us: &'static [&'static str] = &["standalone", "microservices", "rmcp"];
    let us: &'static [&'static str] = &["standalone", "microservices"];
    let body = |v: Value| Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
    let mut list = vec![
        (
            "tools/list (2026-07-28)",
            Probe {
                headers: headers(Some(("tools/list", None))),
                body: body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}})),
                expect: "\"tool_0\"".into(),
                min_len: 0,
            },
            all,
        ),
        (
            "tools/list (2025-11-25)",
            Probe {
                headers: headers(None),
                body: body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})),
                expect: "\"tool_0\"".into(),
                min_len: 0,
            },
            all,
        ),
    ];
    if catalog == 5 {
        list.extend([
            (
                "tools/call text (2026-07-28)",
                Probe {
                    headers: headers(Some(("tools/call", Some("tool_0")))),
                    body: body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "tool_0", "arguments": {"message": "bench-echo"}, "_meta": meta()}})),
                    expect: "bench-echo".into(),
                    min_len: 0,
                },
                sdk_and_us,
            ),
            (
                "server/discover",
                Probe {
                    headers: headers(Some(("server/discover", None))),
                    body: body(
                        json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": meta()}}),
                    ),
                    expect: "supportedVersions".into(),
                    min_len: 0,
                },
                us,
            ),
            (
                "resources/read 1 MiB (2026-07-28)",
                Probe {
                    headers: headers(Some(("resources/read", Some("bench://big")))),
                    body: body(json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                        "params": {"uri": "bench://big", "_meta": meta()}})),
                    expect: "bench://big".into(),
                    min_len: 1 << 20,
                },
                us,
            ),
        ]);
    }
    list
}

/// A definitions file with `n` echo tools and a 1 MiB resource.
fn definitions(dir: &std::path::Path, n: usize) -> anyhow::Result<PathBuf> {
    std::fs::write(dir.join("big.txt"), "x".repeat(1 << 20))?;
    let mut yaml = String::from(
        "server: { name: bench, version: \"1.0.0\" }\nresources:\n  - uri: bench://big\n    name: big\n    file: big.txt\ntools:\n",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: tool_{i}\n    description: Echoes its message back (tool {i} of the benchmark catalog)\n    input_schema: {{ type: object, properties: {{ message: {{ type: string }} }}, required: [message] }}\n    text: \"{{{{ message }}}}\"\n"
        ));
    }
    let path = dir.join(format!("defs-{n}.yaml"));
    std::fs::write(&path, yaml)?;
    Ok(path)
}

async fn start(name: &str, plan: &Plan, defs: &std::path::Path) -> anyhow::Result<Server> {
    let bin = |b: &str| plan.bin_dir.join(b);
    let d = defs.to_str().unwrap_or_default();
    let pin = Some("0");
    let (children, addr, path) = match name {
        "standalone" => {
            let (c, a) = procs::spawn(
                &bin("gateway"),
                &["--standalone", "--listen", "127.0.0.1:0", "--definitions", d],
                "gateway",
                pin,
            )
            .await?;
            (vec![c], a, "/mcp")
        }
        "microservices" => {
            let (reg, reg_addr) = procs::spawn(
                &bin("registry-service"),
                &["--listen", "127.0.0.1:0", "--definitions", d],
                "registry-service",
                pin,
            )
            .await?;
            let reg_url = format!("http://{reg_addr}");
            let (mcp, mcp_addr) = procs::spawn(
                &bin("mcp-service"),
                &["--listen", "127.0.0.1:0", "--registry", &reg_url],
                "mcp-service",
                pin,
            )
            .await?;
            let (oauth, oauth_addr) =
                procs::spawn(&bin("oauth-service"), &["--listen", "127.0.0.1:0"], "oauth-service", pin).await?;
            let (mcp_url, oauth_url) = (format!("http://{mcp_addr}"), format!("http://{oauth_addr}"));
            let (gw, gw_addr) = procs::spawn(
                &bin("gateway"),
                &["--listen", "127.0.0.1:0", "--mcp-service", &mcp_url, "--oauth-service", &oauth_url],
                "gateway",
                pin,
            )
            .await?;
            (vec![gw, mcp, reg, oauth], gw_addr, "/mcp")
        }
        "bare-hyper" | "rmcp" => {
            let me = std::env::current_exe()?;
            let sub = if name == "rmcp" { "serve-rmcp" } else { "serve-hyper" };
            let (c, a) = procs::spawn(&me, &[sub], name, pin).await?;
            (vec![c], a, if name == "rmcp" { "/" } else { "/mcp" })
        }
        other => anyhow::bail!("unknown server {other}"),
    };
    Ok(Server { children, addr, path: path.to_owned() })
}

/// Pin this process (the load generator) to the second core.
fn pin_self() {
    if procs::which("taskset") {
        let _ = std::process::Command::new("taskset")
            .args(["-cp", "1", &std::process::id().to_string()])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    pin_self();
    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();
    for &catalog in &plan.catalogs {
        let defs = definitions(dir.path(), catalog)?;
        for name in ["bare-hyper", "rmcp", "standalone", "microservices"] {
            let probes: Vec<_> = probes(catalog).into_iter().filter(|(_, _, who)| who.contains(&name)).collect();
            if probes.is_empty() || (catalog != 5 && matches!(name, "bare-hyper" | "rmcp")) {
                continue;
            }
            let server = start(name, plan, &defs).await?;
            for (scenario, probe, _) in &probes {
                // Warm up (connections, caches), then measure.
                let _ = load::run(server.addr, &server.path, probe.clone(), 2, Duration::from_millis(200)).await;
                for &c in &plan.concurrency {
                    let cpu0 = server.cpu_secs();
                    let outcome = load::run(server.addr, &server.path, probe.clone(), c, plan.duration).await;
                    let cpu = server.cpu_secs() - cpu0;
                    let done = outcome.requests.max(1) as f64;
                    eprintln!(
                        "{name:>13} {scenario:<34} catalog={catalog:<5} c={c:<3} {:>9.0} req/s  p99 {:>6} µs  errors {}",
                        outcome.requests as f64 / outcome.elapsed_secs,
                        outcome.p99_us,
                        outcome.errors
                    );
                    rows.push(Row {
                        server: name.to_owned(),
                        scenario: (*scenario).to_owned(),
                        catalog,
                        concurrency: c,
                        req_per_sec: outcome.requests as f64 / outcome.elapsed_secs,
                        cpu_us_per_req: cpu * 1e6 / done,
                        peak_rss_kib: server.peak_rss_kib(),
                        outcome,
                    });
                }
            }
            drop(server);
        }
    }
    Ok(rows)
}
