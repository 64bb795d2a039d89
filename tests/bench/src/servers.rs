//! The servers under test: how each starts, what it can answer, and its processes' CPU time
//! and peak memory.

use std::net::SocketAddr;
use std::path::Path;

use crate::catalog::{self, Files};
use crate::mcp::{Era, Op};
use crate::procs::{self, Proc};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// hyper answering a canned `tools/list` (reference).
    BareHyper,
    /// The official Rust SDK (reference).
    Rmcp,
    /// `gateway --standalone`: the platform in one process.
    Standalone,
    /// registry-service, mcp-service, oauth-service and gateway as separate processes.
    Microservices,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::BareHyper, Kind::Rmcp, Kind::Standalone, Kind::Microservices];

    pub fn name(self) -> &'static str {
        match self {
            Kind::BareHyper => "bare-hyper",
            Kind::Rmcp => "rmcp",
            Kind::Standalone => "standalone",
            Kind::Microservices => "microservices",
        }
    }

    /// Whether this server can run `op` in `era` with a catalog of `tools` tools. The
    /// references serve the smallest catalog only; bare hyper only stands in for `tools/list`.
    pub fn supports(self, op: Op, era: Era, tools: usize) -> bool {
        if !op.eras().contains(&era) {
            return false;
        }
        match self {
            Kind::BareHyper => op == Op::List && tools == catalog::REFERENCE_TOOLS,
            Kind::Rmcp => tools == catalog::REFERENCE_TOOLS,
            Kind::Standalone | Kind::Microservices => tools == catalog::REFERENCE_TOOLS || op == Op::List,
        }
    }

    /// Whether the legacy era starts with an `initialize` handshake (bare hyper has none).
    pub fn handshakes(self) -> bool {
        self != Kind::BareHyper
    }
}

/// A running server under test: its processes and the HTTP address to load.
pub struct Server {
    pub kind: Kind,
    pub procs: Vec<Proc>,
    pub addr: SocketAddr,
}

/// How to start servers.
pub struct Launch<'a> {
    pub bin_dir: &'a Path,
    pub files: &'a Files,
    /// The CPU to pin the servers to, when `taskset` is there.
    pub pin: Option<usize>,
}

impl Launch<'_> {
    pub async fn start(&self, kind: Kind, tools: usize) -> anyhow::Result<Server> {
        let defs = self.files.definitions(tools)?.to_string_lossy().into_owned();
        let bin = |name: &str| self.bin_dir.join(name);
        let own = std::env::current_exe()?;
        let any = "127.0.0.1:0".to_owned();
        let s = |v: &[&str]| v.iter().map(|a| (*a).to_owned()).collect::<Vec<String>>();
        let mut procs = Vec::new();
        let addr = match kind {
            Kind::BareHyper => self.one(&mut procs, &own, s(&["serve-bare-hyper"]), "bare-hyper").await?,
            Kind::Rmcp => {
                let resource = self.files.resource.to_string_lossy().into_owned();
                self.one(&mut procs, &own, s(&["serve-rmcp", "--resource", &resource]), "rmcp").await?
            }
            Kind::Standalone => {
                let args = s(&["--standalone", "--listen", &any, "--definitions", &defs]);
                self.one(&mut procs, &bin("gateway"), args, "gateway").await?
            }
            Kind::Microservices => {
                let args = s(&["--listen", &any, "--definitions", &defs]);
                let registry = self.one(&mut procs, &bin("registry-service"), args, "registry-service").await?;
                let args = s(&["--listen", &any, "--registry", &format!("http://{registry}")]);
                let mcp = self.one(&mut procs, &bin("mcp-service"), args, "mcp-service").await?;
                // The gateway needs an authorisation server even with authentication off.
                let args = s(&["--listen", &any, "--issuer", "http://127.0.0.1:8080"]);
                let oauth = self.one(&mut procs, &bin("oauth-service"), args, "oauth-service").await?;
                let args = s(&[
                    "--listen",
                    &any,
                    "--mcp-service",
                    &format!("http://{mcp}"),
                    "--oauth-service",
                    &format!("http://{oauth}"),
                ]);
                self.one(&mut procs, &bin("gateway"), args, "gateway").await?
            }
        };
        Ok(Server { kind, procs, addr })
    }

    async fn one(
        &self,
        procs: &mut Vec<Proc>,
        program: &Path,
        args: Vec<String>,
        service: &str,
    ) -> anyhow::Result<SocketAddr> {
        let (proc, addr) = Proc::start(program, &args, service, self.pin).await?;
        procs.push(proc);
        Ok(addr)
    }
}

impl Server {
    /// CPU ticks used so far by all the server's processes.
    pub fn cpu_ticks(&self) -> u64 {
        self.procs.iter().filter_map(|p| procs::cpu_ticks(p.pid)).sum()
    }

    /// Start a new peak-memory window in every process; `false` if not permitted.
    pub fn reset_peaks(&self) -> bool {
        self.procs.iter().all(|p| procs::reset_peak_rss(p.pid))
    }

    /// Peak resident memory of each process, in KiB.
    pub fn peaks(&self) -> Vec<(String, u64)> {
        self.procs.iter().map(|p| (p.name.clone(), procs::peak_rss_kib(p.pid).unwrap_or(0))).collect()
    }

    /// WARN/ERROR log lines of all processes so far.
    pub fn warnings(&self) -> u64 {
        self.procs.iter().map(Proc::warnings).sum()
    }

    /// The last few WARN/ERROR lines of each process since the last call.
    pub fn take_warnings(&self) -> Vec<String> {
        self.procs.iter().flat_map(|p| p.take_warnings().into_iter().map(|l| format!("{}: {l}", p.name))).collect()
    }

    /// `Err` naming the first process that exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        self.procs.iter_mut().try_for_each(Proc::check_alive)
    }

    pub async fn stop(self) {
        for p in self.procs.into_iter().rev() {
            p.stop().await;
        }
    }
}
