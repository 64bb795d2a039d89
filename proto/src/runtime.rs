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

/// Exit code for configuration errors (EX_USAGE), as linkerd and sysexits use.
pub const EXIT_CONFIG: i32 = 64;
