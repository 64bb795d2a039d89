//! # bench: the platform against its references, side by side in one run
//!
//! Starts the servers under test — the platform in one process (`standalone`) and as separate
//! processes (`microservices`), a bare hyper process answering a canned `tools/list`
//! (`bare-hyper`, the physical limit) and the official Rust SDK (`rmcp`) serving the same five
//! tools — drives each with the same requests from a built-in load generator, checks every
//! answer, and reports req/s, latency percentiles, CPU per request and peak RSS, with ratios.
//!
//! ```text
//! cargo build --release --workspace --bins
//! cargo run --release -p bench -- --out target/bench            # the full run
//! cargo run -p bench -- --smoke --bin-dir target/debug          # seconds; correctness only
//! ```

mod load;
mod procs;
mod refs;
mod report;
mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;

#[derive(Debug, clap::Parser)]
#[command(name = "bench", about = "Benchmarks the MCP platform against a bare hyper server and rmcp")]
struct Cli {
    #[command(subcommand)]
    serve: Option<Serve>,
    /// A few seconds, every server and scenario once at low concurrency; fails on any wrong answer.
    #[arg(long)]
    smoke: bool,
    /// Where the platform's binaries are.
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// Where to write report.md, report.json and throughput.svg.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Concurrency levels (connections).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64, 256])]
    concurrency: Vec<usize>,
    /// Catalog sizes for the list scenarios.
    #[arg(long, value_delimiter = ',', default_values_t = vec![5, 1000, 10000])]
    catalog: Vec<usize>,
}

#[derive(Debug, clap::Subcommand)]
enum Serve {
    /// Run the bare hyper reference (prints `listening ADDR`).
    ServeHyper,
    /// Run the rmcp reference (prints `listening ADDR`).
    ServeRmcp,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let any: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
    match cli.serve {
        Some(Serve::ServeHyper) => return refs::bare_hyper(any).await,
        Some(Serve::ServeRmcp) => return refs::rmcp_server(any).await,
        None => {}
    }
    let plan = if cli.smoke {
        scenarios::Plan {
            duration: Duration::from_millis(300),
            concurrency: vec![1, 4],
            catalogs: vec![5],
            bin_dir: cli.bin_dir,
        }
    } else {
        scenarios::Plan {
            duration: Duration::from_secs_f64(cli.duration),
            concurrency: cli.concurrency,
            catalogs: cli.catalog,
            bin_dir: cli.bin_dir,
        }
    };
    let results = scenarios::run(&plan).await?;
    let failed: Vec<&scenarios::Row> =
        results.iter().filter(|r| r.outcome.errors > 0 || r.outcome.requests == 0).collect();
    std::fs::create_dir_all(&cli.out)?;
    let md = report::markdown(&results, &plan);
    std::fs::write(cli.out.join("report.md"), &md)?;
    std::fs::write(cli.out.join("report.json"), serde_json::to_vec_pretty(&results)?)?;
    std::fs::write(cli.out.join("throughput.svg"), report::svg(&results))?;
    println!("{md}");
    println!("report written to {}", cli.out.display());
    if !failed.is_empty() {
        for r in failed {
            eprintln!(
                "FAIL {} {} c={} catalog={}: {} errors of {} ({})",
                r.server,
                r.scenario,
                r.concurrency,
                r.catalog,
                r.outcome.errors,
                r.outcome.requests + r.outcome.errors,
                r.outcome.first_error.as_deref().unwrap_or("no answers")
            );
        }
        anyhow::bail!("some answers were wrong");
    }
    Ok(())
}
