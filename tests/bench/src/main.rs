//! # bench: the platform against its references, side by side in one run
//!
//! Starts each server under test on 127.0.0.1 port 0 — the platform in one process
//! (`standalone`) and as separate processes wired over gRPC (`microservices`), a bare hyper
//! process answering a canned `tools/list` (`bare-hyper`) and the official Rust SDK serving
//! the same tools (`rmcp`) — all pinned to CPU 0 and loaded one at a time, measurement after
//! measurement, while the built-in load generator runs on CPU 1. Every answer is checked; the
//! report gives req/s, latency percentiles, server CPU per request and peak RSS per process,
//! with the platform's ratios to both references.
//!
//! ```text
//! cargo build --release --workspace --bins && cargo run --release -p bench -- --out target/bench
//! cargo run -p bench -- --smoke --bin-dir target/debug      # seconds; correctness only
//! ```
//!
//! # Layout
//!
//! - `catalog`: the tools and the 1 MiB resource, as a definitions file;
//! - `servers`, `procs`: starting the servers, reading `/proc`; `refs`: the two references;
//! - `mcp`: the requests of both eras and the checks of their answers; `workload`: the
//!   requests of each scenario (every page of a list);
//! - `client`, `load`: the load generator; `measure`: the run; `report`: md, JSON, SVG.

mod catalog;
mod client;
mod load;
mod mcp;
mod measure;
mod procs;
mod refs;
mod report;
mod servers;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

use crate::mcp::{Era, Op};
use crate::measure::Plan;
use crate::servers::Kind;

#[derive(Debug, clap::Parser)]
#[command(name = "bench", about = "Benchmarks the MCP platform against a bare hyper server and the rmcp SDK")]
struct Cli {
    #[command(subcommand)]
    serve: Option<Serve>,
    /// A few seconds: every server and scenario once at 1 and 4 connections with the 5-tool
    /// catalog; exits non-zero on any wrong answer. No timing assertions.
    #[arg(long)]
    smoke: bool,
    /// Where the platform's binaries are (not built by this command).
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// Where to write report.md, report.json and chart.svg [default: target/bench, or
    /// target/bench-smoke with --smoke].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Seconds of warm-up load per scenario (not measured).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds one request may take before it counts as an error (a hang).
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Concurrency levels (connections).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64, 256])]
    concurrency: Vec<usize>,
    /// Catalog sizes (tools); the references serve only the 5-tool catalog.
    #[arg(long, value_delimiter = ',', default_values_t = vec![5, 1000, 10000])]
    catalog: Vec<usize>,
    /// Which servers [default: all].
    #[arg(long, value_delimiter = ',', value_enum)]
    servers: Vec<Kind>,
    /// Which operations [default: all]: each is measured in every era it has.
    #[arg(long, value_delimiter = ',', value_enum)]
    ops: Vec<Op>,
    /// Which eras [default: both]: `modern` (2026-07-28) and `legacy` (2025-06-18).
    #[arg(long, value_delimiter = ',', value_enum)]
    eras: Vec<Era>,
    /// Do not pin servers and load generator to separate CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Take every measurement this many times, each round starting one server later; the
    /// tables give the median round (for ratios steadier than one run's, such as the cost of
    /// signing in).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// The references, run by the benchmark as child processes.
#[derive(Debug, clap::Subcommand)]
enum Serve {
    #[command(hide = true)]
    ServeBareHyper,
    #[command(hide = true)]
    ServeRmcp {
        #[arg(long)]
        resource: PathBuf,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Some(serve) = cli.serve {
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(async {
            match serve {
                Serve::ServeBareHyper => refs::bare_hyper::run().await,
                Serve::ServeRmcp { resource } => refs::sdk::run(resource).await,
            }
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let plan = plan(&cli)?;
    let out =
        cli.out.clone().unwrap_or_else(|| PathBuf::from(if cli.smoke { "target/bench-smoke" } else { "target/bench" }));
    // The load generator on one core, one runtime thread (pinned before any thread starts).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if plan.pinned {
        builder.worker_threads(1);
    }
    let runtime = builder.enable_all().build()?;
    let mut env = report::Environment::now();
    if !plan.pinned {
        eprintln!("note: not pinned (taskset missing, --no-pin or one core): servers and load share the CPUs");
    }
    // Interrupted, the run is dropped: every server it started is killed with it.
    let results = runtime.block_on(async {
        tokio::select! {
            results = measure::run(&plan) => results,
            signal = interrupted() => anyhow::bail!("{signal}: stopped, and every server with it"),
        }
    })?;
    env.load_average_after = report::load_average();
    let md = report::write(&out, &env, &plan, &results)?;
    println!("{md}");
    eprintln!("report written to {}", out.join("report.md").display());
    if results.failed() {
        eprintln!("bench: some answers were wrong or a server failed (see the Errors section)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The first SIGINT or SIGTERM, named.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

/// Every server, but the Python and TypeScript SDKs only in full runs and when installed
/// (the smoke run of the test command checks our servers and the Rust references).
fn default_servers(smoke: bool) -> Vec<Kind> {
    let python = !smoke && servers::python_sdk().is_file();
    if !smoke && !python {
        eprintln!("note: no Python SDK environment (tests/clients/run.sh installs one): python-sdk skipped");
    }
    let typescript = !smoke
        && servers::typescript_sdk().join("node_modules/@modelcontextprotocol/server").is_dir()
        && std::process::Command::new(servers::node()).arg("--version").output().is_ok_and(|o| o.status.success());
    if !smoke && !typescript {
        eprintln!("note: no TypeScript SDK (Node and `npm ci` in tests/bench/ts-sdk): typescript-sdk skipped");
    }
    Kind::ALL
        .into_iter()
        .filter(|k| (*k != Kind::PythonSdk || python) && (*k != Kind::TypescriptSdk || typescript))
        .collect()
}

fn plan(cli: &Cli) -> anyhow::Result<Plan> {
    let secs = |what: &str, v: f64| {
        anyhow::ensure!(v.is_finite() && v >= 0.0, "--{what} must be a number of seconds");
        Ok(Duration::from_secs_f64(v))
    };
    let (duration, warmup, concurrency, catalogs) = if cli.smoke {
        (Duration::from_millis(50), Duration::ZERO, vec![1, 4], vec![catalog::REFERENCE_TOOLS])
    } else {
        (secs("duration", cli.duration)?, secs("warmup", cli.warmup)?, cli.concurrency.clone(), cli.catalog.clone())
    };
    anyhow::ensure!(concurrency.iter().all(|&c| (1..=4096).contains(&c)), "--concurrency levels must be 1 to 4096");
    anyhow::ensure!(catalogs.iter().all(|&n| n >= 1), "--catalog sizes must be at least 1");
    anyhow::ensure!((1..=100).contains(&cli.rounds), "--rounds must be 1 to 100");
    let timeout = secs("timeout", cli.timeout)?;
    anyhow::ensure!(!timeout.is_zero(), "--timeout must be positive");
    let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let pinned = !cli.no_pin && two_cores && procs::have_taskset() && procs::pin_self(1);
    Ok(Plan {
        smoke: cli.smoke,
        servers: if cli.servers.is_empty() { default_servers(cli.smoke) } else { cli.servers.clone() },
        ops: if cli.ops.is_empty() { Op::ALL.to_vec() } else { cli.ops.clone() },
        eras: if cli.eras.is_empty() { Era::ALL.to_vec() } else { cli.eras.clone() },
        catalogs,
        concurrency,
        duration,
        warmup,
        timeout,
        bin_dir: cli.bin_dir.clone(),
        pinned,
        rounds: if cli.smoke { 1 } else { cli.rounds },
    })
}
