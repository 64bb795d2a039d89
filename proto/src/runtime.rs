//! Process plumbing every binary shares: configuration loading, shutdown signals (logging,
//! traces and metrics are in [`crate::telemetry`]).

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format as _, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// Load a typed configuration: defaults, then the TOML file, then `{PREFIX}*` environment
/// variables, then command-line flags (only those given). Errors name the key and its source.
pub fn load_config<T, C>(file: Option<&Path>, env_prefix: &str, cli: &C) -> Result<T, Box<figment::Error>>
where
    T: DeserializeOwned + Serialize + Default,
    C: Serialize,
{
    let mut fig = Figment::from(Serialized::defaults(T::default()));
    if let Some(file) = file {
        fig = fig.merge(Toml::file_exact(file));
    }
    fig.merge(Env::prefixed(env_prefix).split("__")).merge(Serialized::defaults(cli)).extract().map_err(Box::new)
}

/// A token cancelled on SIGTERM or SIGINT (Ctrl-C).
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown requested");
        t.cancel();
    });
    token
}

/// Run `server` — a future that stops taking new work once `shutdown` is cancelled and then
/// finishes what it has — to completion, but for at most `grace` after `shutdown`: its output,
/// or `None` when the drain deadline passed first (what was still open is then dropped).
pub async fn drain<F: std::future::Future>(
    server: F,
    shutdown: &CancellationToken,
    grace: std::time::Duration,
) -> Option<F::Output> {
    tokio::select! {
        outcome = server => Some(outcome),
        _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = grace.as_secs_f64(), "drain deadline passed; closing open requests");
            None
        }
    }
}

/// Exit code for configuration errors (EX_USAGE), as linkerd and sysexits use.
pub const EXIT_CONFIG: i32 = 64;
