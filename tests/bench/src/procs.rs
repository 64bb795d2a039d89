//! The servers under test as processes: start them on port 0, read their address, and measure
//! their CPU time and peak memory from /proc.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

pub struct Server {
    pub children: Vec<Child>,
    /// The HTTP address to load.
    pub addr: SocketAddr,
    /// The MCP endpoint path.
    pub path: String,
}

/// Wrap in `taskset -c CPU` when available: servers on one core, the load on the other.
fn command(program: &Path, pin: Option<&str>) -> Command {
    match pin {
        Some(cpu) if which("taskset") => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu).arg(program);
            c
        }
        _ => Command::new(program),
    }
}

pub fn which(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists()))
}

/// Start `program args`; wait for its address: the JSON `listening` log line of `service`
/// (standalone logs one per component), or a `listening ADDR` line on stdout.
pub async fn spawn(
    program: &Path,
    args: &[&str],
    service: &str,
    pin: Option<&str>,
) -> anyhow::Result<(Child, SocketAddr)> {
    let mut cmd = command(program, pin);
    cmd.args(args)
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "warn,gateway=info,mcp_service=info,registry_service=info,oauth_service=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
    for reader in [Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(stderr)] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line).await;
            }
        });
    }
    let wait = async {
        while let Some(line) = rx.recv().await {
            if let Some(addr) = line.strip_prefix("listening ") {
                return addr.trim().parse().ok();
            }
            if line.contains("\"listening\"")
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["service"] == service
                && let Some(addr) = v["addr"].as_str()
            {
                return addr.parse().ok();
            }
        }
        None
    };
    let addr = tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .ok()
        .flatten()
        .ok_or_else(|| anyhow::anyhow!("{} did not report its address", program.display()))?;
    // Keep draining its output so it never blocks on a full pipe.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    Ok((child, addr))
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else { return 0.0 };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of a process, in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

impl Server {
    /// The real server processes (under `taskset` the child is the server itself: taskset execs).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    pub fn cpu_secs(&self) -> f64 {
        self.pids().into_iter().map(cpu_secs).sum()
    }

    pub fn peak_rss_kib(&self) -> Vec<u64> {
        self.pids().into_iter().map(peak_rss_kib).collect()
    }
}
