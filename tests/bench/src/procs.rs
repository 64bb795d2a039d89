//! Server processes: start one on port 0 (pinned to a CPU with `taskset` when there is one),
//! learn its address from its JSON `listening` log line (as the e2e harness does), keep
//! reading its log, and measure its CPU time and peak memory from `/proc`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// How long a process may take to report that it listens (a 10 000-tool catalog in a debug
/// build takes a few seconds).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many warning lines of each process are kept for the report.
const KEPT_WARNINGS: usize = 5;

/// One running server process. Killed when dropped.
pub struct Proc {
    pub name: String,
    pub pid: u32,
    child: Child,
    log: Arc<Log>,
}

/// What a process logged at WARN or ERROR.
#[derive(Default)]
struct Log {
    warnings: AtomicU64,
    last: Mutex<VecDeque<String>>,
}

/// `{"message":"listening","service":S,"addr":A}` → `(S, A)`.
pub fn listening(line: &str) -> Option<(String, SocketAddr)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("message")?.as_str()? != "listening" {
        return None;
    }
    let addr = v.get("addr")?.as_str()?.parse().ok()?;
    Some((v.get("service")?.as_str()?.to_owned(), addr))
}

/// The line a reference server prints when it listens, in the platform's format.
pub fn listening_line(service: &str, addr: SocketAddr) -> String {
    serde_json::json!({ "level": "INFO", "message": "listening", "service": service, "addr": addr.to_string() })
        .to_string()
}

pub fn have_taskset() -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("taskset").is_file()))
}

/// Pin this process (all its threads) to `cpu`; call before the runtime starts its threads.
pub fn pin_self(cpu: usize) -> bool {
    std::process::Command::new("taskset")
        .args(["-a", "-cp", &cpu.to_string(), &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Ask the kernel to forget the cached pages of `program` that no running process maps, so
/// that it starts as from a fresh deployment: its code read from disk as it runs. A binary
/// just written by the linker or copied sits in the page cache in large folios, and a process
/// then maps whole folios around the code it runs: measured, the same oauth-service had 0.5–1.5
/// MiB more resident depending on how its file had last been written.
fn drop_cached_pages(program: &Path) {
    if let Ok(file) = std::fs::File::open(program) {
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    }
}

impl Proc {
    /// Start `program args` and wait for the `listening` line of `service`. With `pin`, the
    /// program runs under `taskset -c CPU` (taskset execs it: the pid is the server's).
    pub async fn start(
        program: &Path,
        args: &[String],
        service: &str,
        pin: Option<usize>,
    ) -> anyhow::Result<(Proc, SocketAddr)> {
        anyhow::ensure!(
            program.is_file(),
            "{} is missing: build the binaries first (`cargo build --release --workspace --bins`)",
            program.display()
        );
        drop_cached_pages(program);
        let mut cmd = match pin {
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpu.to_string()).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .env("LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| anyhow::anyhow!("cannot start {}: {e}", program.display()))?;
        let pid = child.id().ok_or_else(|| anyhow::anyhow!("{} exited at once", program.display()))?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("no stderr"))?;
        let log = Arc::new(Log::default());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(read_log(stderr, service.to_owned(), log.clone(), tx));
        let addr = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.start_kill();
                let last =
                    log.last.lock().map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
                anyhow::bail!(
                    "{} did not report `listening` for {service}; its last warnings:\n{last}",
                    program.display()
                );
            }
        };
        let name = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok((Proc { name, pid, child, log }, addr))
    }

    /// `Err` with the exit status when the process is no longer running.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} (pid {}) exited: {status}", self.name, self.pid)),
            Err(e) => Err(format!("{} (pid {}): {e}", self.name, self.pid)),
        }
    }

    /// WARN and ERROR lines logged so far.
    pub fn warnings(&self) -> u64 {
        self.log.warnings.load(Ordering::Relaxed)
    }

    /// The last few WARN and ERROR lines, forgotten once taken.
    pub fn take_warnings(&self) -> Vec<String> {
        self.log.last.lock().map(|mut l| l.drain(..).collect()).unwrap_or_default()
    }

    /// Kill the process and wait for it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// Read a child's log to its end: report the address of `service`'s `listening` line on
/// `found`, count and keep WARN/ERROR lines. Never blocks the child on a full pipe.
async fn read_log(
    stderr: tokio::process::ChildStderr,
    service: String,
    log: Arc<Log>,
    found: tokio::sync::oneshot::Sender<SocketAddr>,
) {
    let mut found = Some(found);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if found.is_some()
            && let Some((svc, addr)) = listening(&line)
            && svc == service
            && let Some(tx) = found.take()
        {
            let _ = tx.send(addr);
        }
        if line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\"") || !line.starts_with('{') {
            log.warnings.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut last) = log.last.lock() {
                if last.len() == KEPT_WARNINGS {
                    last.pop_front();
                }
                last.push_back(line.chars().take(400).collect());
            }
        }
    }
}

/// Clock ticks per second of `/proc/PID/stat` times (`getconf CLK_TCK`, 100 on Linux).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU ticks of a process (all its threads), from `/proc/PID/stat`.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat: 11 and 12 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Busy CPU ticks of the whole machine, all cores (`/proc/stat`: user, nice, system, irq,
/// softirq, steal).
pub fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal …
    Some([0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum())
}

/// Peak resident memory of a process (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Reset the peak to the current resident memory (`echo 5 > /proc/PID/clear_refs`), so each
/// measurement reports its own peak. `false` when not permitted.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_listening_lines() {
        let line = r#"{"level":"INFO","message":"listening","service":"gateway","addr":"127.0.0.1:4000"}"#;
        assert_eq!(listening(line), Some(("gateway".into(), "127.0.0.1:4000".parse().expect("addr"))));
        assert_eq!(listening(r#"{"message":"catalog loaded"}"#), None);
        let ours = listening_line("rmcp", "127.0.0.1:9".parse().expect("addr"));
        assert_eq!(listening(&ours).map(|(s, _)| s), Some("rmcp".into()));
    }

    #[test]
    fn reads_own_proc_files() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_some());
        assert!(peak_rss_kib(me).is_some_and(|k| k > 0));
        assert!(machine_busy_ticks().is_some());
    }
}
