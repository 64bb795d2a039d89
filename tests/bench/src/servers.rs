//! The servers under test: how each starts, what it can answer, and its processes' CPU time
//! and peak memory.

use std::net::SocketAddr;
use std::path::Path;

use hyper::header::HeaderValue;

use crate::catalog::{self, Files};
use crate::client::Target;
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
    /// The same with sign-in on: every request carries a JWT access token (client
    /// credentials) that the gateway checks against the authorisation server's keys.
    MicroservicesJwt,
    /// The official Python SDK (reference; when its virtual environment is there).
    PythonSdk,
    /// The official TypeScript SDK (reference; when Node and `tests/bench/ts-sdk`'s packages
    /// are there).
    TypescriptSdk,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::BareHyper,
        Kind::Rmcp,
        Kind::Standalone,
        Kind::Microservices,
        Kind::MicroservicesJwt,
        Kind::PythonSdk,
        Kind::TypescriptSdk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::BareHyper => "bare-hyper",
            Kind::Rmcp => "rmcp",
            Kind::Standalone => "standalone",
            Kind::Microservices => "microservices",
            Kind::MicroservicesJwt => "microservices-jwt",
            Kind::PythonSdk => "python-sdk",
            Kind::TypescriptSdk => "typescript-sdk",
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
            Kind::Rmcp | Kind::PythonSdk | Kind::TypescriptSdk => tools == catalog::REFERENCE_TOOLS,
            Kind::Standalone | Kind::Microservices => tools == catalog::REFERENCE_TOOLS || op == Op::List,
            Kind::MicroservicesJwt => tools == catalog::REFERENCE_TOOLS,
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
    pub target: Target,
}

/// The public URL of the signed-in deployment: the token issuer and, with `/mcp`, the audience.
const PUBLIC_URL: &str = "http://mcp.bench.test";
/// The confidential client the benchmark signs in as.
const CLIENT_ID: &str = "bench";

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
        let mut authorization = None;
        let addr = match kind {
            Kind::BareHyper => self.one(&mut procs, &own, s(&["serve-bare-hyper"]), "bare-hyper").await?,
            Kind::Rmcp => {
                let resource = self.files.resource.to_string_lossy().into_owned();
                self.one(&mut procs, &own, s(&["serve-rmcp", "--resource", &resource]), "rmcp").await?
            }
            Kind::PythonSdk => {
                let script = self.files.write("python_sdk.py", include_str!("refs/python_sdk.py"))?;
                let resource = self.files.resource.to_string_lossy().into_owned();
                let args = s(&[&script.to_string_lossy(), "--resource", &resource]);
                self.one(&mut procs, &python_sdk(), args, "python-sdk").await?
            }
            Kind::TypescriptSdk => {
                let script = typescript_sdk().join("server.mjs");
                let resource = self.files.resource.to_string_lossy().into_owned();
                let args = s(&[&script.to_string_lossy(), "--resource", &resource]);
                self.one(&mut procs, &node(), args, "typescript-sdk").await?
            }
            Kind::Standalone => {
                let args = s(&["--standalone", "--listen", &any, "--definitions", &defs]);
                self.one(&mut procs, &bin("gateway"), args, "gateway").await?
            }
            Kind::Microservices | Kind::MicroservicesJwt => {
                let signed_in = kind == Kind::MicroservicesJwt;
                let args = s(&["--listen", &any, "--definitions", &defs]);
                let registry = self.one(&mut procs, &bin("registry-service"), args, "registry-service").await?;
                let args = s(&["--listen", &any, "--registry", &format!("http://{registry}")]);
                // The binaries the separate deployment runs: nothing embedded.
                let mcp = self.one(&mut procs, &bin("mcp-service-remote"), args, "mcp-service").await?;
                // The gateway needs an authorisation server even with authentication off.
                let mut args = s(&["--listen", &any, "--issuer", PUBLIC_URL]);
                let secret = format!("bench-secret-{}", std::process::id());
                if signed_in {
                    let hash = hash_secret(&bin("oauth-service"), &secret).await?;
                    let config = format!(
                        "[[clients]]\nclient_id = \"{CLIENT_ID}\"\nsecret_sha256 = \"{hash}\"\n\
                         grant_types = [\"client_credentials\"]\n"
                    );
                    let path = self.files.write("oauth.toml", &config)?;
                    args.extend(s(&["--config", &path.to_string_lossy()]));
                }
                let oauth = self.one(&mut procs, &bin("oauth-service"), args, "oauth-service").await?;
                if signed_in {
                    authorization = Some(access_token(oauth, &secret).await?);
                }
                let mut args = s(&[
                    "--listen",
                    &any,
                    "--mcp-service",
                    &format!("http://{mcp}"),
                    "--oauth-service",
                    &format!("http://{oauth}"),
                ]);
                if signed_in {
                    args.extend(s(&["--auth", "oauth", "--public-url", PUBLIC_URL]));
                }
                self.one(&mut procs, &bin("gateway-edge"), args, "gateway").await?
            }
        };
        Ok(Server { kind, procs, target: Target { addr, authorization } })
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

/// The Python interpreter with the official SDK: `BENCH_PYTHON`, or the virtual environment
/// the SDK client tests install (`tests/clients/run.sh`).
pub fn python_sdk() -> std::path::PathBuf {
    std::env::var_os("BENCH_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/.venv/bin/python"),
        std::path::PathBuf::from,
    )
}

/// The TypeScript SDK reference's directory (its `server.mjs` and `package.json`; `npm ci`
/// there installs the pinned packages).
pub fn typescript_sdk() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ts-sdk")
}

/// Node: `BENCH_NODE`, or the first `node` on the PATH (`node` when there is none: starting
/// it then fails with that name).
pub fn node() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("BENCH_NODE") {
        return path.into();
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("node")).find(|p| p.is_file()))
        .unwrap_or_else(|| "node".into())
}

/// The stored form of a client secret, from `oauth-service hash-secret`.
async fn hash_secret(oauth_service: &Path, secret: &str) -> anyhow::Result<String> {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(oauth_service)
        .arg("hash-secret")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    stdin.write_all(secret.as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    anyhow::ensure!(out.status.success(), "oauth-service hash-secret failed: {}", out.status);
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `Bearer <JWT>` for the benchmark's client, by the client credentials grant.
async fn access_token(oauth: SocketAddr, secret: &str) -> anyhow::Result<HeaderValue> {
    use base64::Engine as _;
    use http_body_util::{BodyExt as _, Full};
    let stream = tokio::net::TcpStream::connect(oauth).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{secret}"));
    let form = format!("grant_type=client_credentials&scope=mcp&resource={PUBLIC_URL}/mcp");
    let req = hyper::Request::post("/oauth/token")
        .header(hyper::header::HOST, oauth.to_string())
        .header(hyper::header::AUTHORIZATION, format!("Basic {basic}"))
        .header(hyper::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Full::new(bytes::Bytes::from(form)))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    anyhow::ensure!(status.is_success(), "token request: {status} {}", String::from_utf8_lossy(&body));
    let json: serde_json::Value = serde_json::from_slice(&body)?;
    let token = json["access_token"].as_str().ok_or_else(|| anyhow::anyhow!("no access_token in {json}"))?;
    Ok(HeaderValue::from_str(&format!("Bearer {token}"))?)
}

impl Server {
    /// CPU ticks used so far by all the server's processes.
    pub fn cpu_ticks(&self) -> u64 {
        self.procs.iter().filter_map(|p| procs::cpu_ticks(p.pid)).sum()
    }

    /// CPU ticks used so far by each of the server's processes.
    pub fn cpu_ticks_by_process(&self) -> Vec<(String, u64)> {
        self.procs.iter().map(|p| (p.name.clone(), procs::cpu_ticks(p.pid).unwrap_or(0))).collect()
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
