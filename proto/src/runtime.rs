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
///
/// Any key can also come from a file named by `{PREFIX}{KEY}_FILE` (the Docker and Kubernetes
/// convention for secrets, see [`file_values`]), at the precedence of the environment.
pub fn load_config<T, C>(file: Option<&Path>, env_prefix: &str, cli: &C) -> Result<T, Box<figment::Error>>
where
    T: DeserializeOwned + Serialize + Default,
    C: Serialize,
{
    let mut fig = Figment::from(Serialized::defaults(T::default()));
    if let Some(file) = file {
        fig = fig.merge(Toml::file_exact(file));
    }
    // `{PREFIX}{KEY}_FILE` names a file, not a key of its own.
    let env = Env::prefixed(env_prefix).filter(|k| !k.as_str().to_ascii_lowercase().ends_with(FILE_SUFFIX)).split("__");
    for (key, value) in file_values(env_prefix, std::env::vars_os())? {
        fig = fig.merge(Serialized::default(&key, value));
    }
    fig.merge(env).merge(Serialized::defaults(cli)).extract().map_err(Box::new)
}

const FILE_SUFFIX: &str = "_file";

/// The settings given as files: for every variable `{PREFIX}{KEY}_FILE=PATH` in `vars`, the key
/// (lower case, `__` as `.`, like the environment's) and the file's content without its trailing
/// line break: a string, or an array or table when the content is one in TOML syntax (e.g.
/// `api_tokens`). `Err` names the variables when `{PREFIX}{KEY}` is set as well, and the file
/// when it cannot be read; never the content.
pub fn file_values(
    prefix: &str,
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<(String, figment::value::Value)>, Box<figment::Error>> {
    use figment::value::Value;
    let vars: Vec<(String, std::ffi::OsString)> =
        vars.into_iter().filter_map(|(name, value)| Some((name.into_string().ok()?, value))).collect();
    let has_prefix = |name: &str| name.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    let mut found = Vec::new();
    for (name, path) in &vars {
        if !has_prefix(name) || !name.to_ascii_lowercase().ends_with(FILE_SUFFIX) {
            continue;
        }
        let plain = &name[..name.len() - FILE_SUFFIX.len()];
        if plain.len() <= prefix.len() {
            continue;
        }
        if vars.iter().any(|(other, _)| other.eq_ignore_ascii_case(plain)) {
            return Err(Box::new(format!("{plain} and {name} are both set: set one of them").into()));
        }
        let path = Path::new(path);
        let content = std::fs::read_to_string(path)
            .map_err(|e| Box::new(figment::Error::from(format!("{name}: cannot read {}: {e}", path.display()))))?;
        let content = content.strip_suffix('\n').map_or(content.as_str(), |c| c.strip_suffix('\r').unwrap_or(c));
        let value = match content.parse::<Value>() {
            Ok(v @ (Value::Array(..) | Value::Dict(..))) => v,
            _ => Value::from(content.to_owned()),
        };
        found.push((plain[prefix.len()..].to_ascii_lowercase().replace("__", "."), value));
    }
    Ok(found)
}

/// Check that this process can create files in `dir` (creating it when missing) by creating
/// and removing one: a read-only mount or root filesystem, or a path through a regular file,
/// is refused. `Err` names the directory (absolute) and the reason.
pub fn check_writable_dir(dir: &Path) -> Result<(), String> {
    let refused = |e: std::io::Error| {
        let shown = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!("the directory {} is not writable ({e})", shown.display())
    };
    std::fs::create_dir_all(dir).map_err(refused)?;
    let probe = dir.join(format!(".write-check-{}", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).map_err(refused)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Run a service's `main` to its end on a Tokio runtime sized to the CPUs the process may use:
/// `TOKIO_WORKER_THREADS` if set, else [`std::thread::available_parallelism`] (which counts the
/// CPU affinity and a cgroup's CPU quota, as a container's limit sets it). With one CPU the
/// runtime is single-threaded: a multi-threaded runtime with one worker hands each woken task
/// the next turn (its LIFO slot), so every stream that finished its answer woke the HTTP/2
/// connection's task at once and each answer left in a write of its own; on one thread the
/// answers ready together leave together, and no thread parks and wakes another. Measured on
/// one CPU: a `tools/call` through the microservices 91 → 68 µs of CPU (performance.md).
///
/// For the services that run as processes of their own. `gateway --standalone` keeps Tokio's
/// multi-threaded runtime: there a request's work answers the connection task that waits for
/// it in this process, and that task's next turn is what the LIFO slot gives (on one thread,
/// measured: calls and legacy lists 8–13 % dearer).
///
/// The process runs under `SCHED_BATCH` unless `MCP_SCHED_POLICY=normal`
/// ([`crate::scheduling`]); another value is refused as `binary`'s configuration error.
pub fn serve<F: std::future::Future>(binary: &str, main: F) -> F::Output {
    serve_with_policy(binary, crate::scheduling::Policy::Batch, main)
}

/// [`serve`], with the scheduling policy `default` when `MCP_SCHED_POLICY` is not set.
pub fn serve_with_policy<F: std::future::Future>(
    binary: &str,
    default: crate::scheduling::Policy,
    main: F,
) -> F::Output {
    use crate::scheduling::{Policy, VAR, apply};
    match Policy::from_value(std::env::var(VAR).ok().as_deref(), default) {
        Ok(policy) => apply(policy),
        Err(why) => refuse_config(binary, why),
    }
    let workers = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(std::num::NonZeroUsize::get))
        .unwrap_or(1);
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    let runtime = builder.enable_all().build().unwrap_or_else(|e| {
        eprintln!("cannot start the Tokio runtime: {e}");
        std::process::exit(1)
    });
    runtime.block_on(main)
}

/// A token cancelled on SIGTERM or SIGINT (Ctrl-C).
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    // The handlers are installed before this returns: a signal that comes as soon as the
    // service listens (on a single-threaded runtime, before any spawned task has run) must not
    // meet the default action, which ends the process at once.
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let (term, interrupt) = (signal(SignalKind::terminate()).ok(), signal(SignalKind::interrupt()).ok());
        if term.is_some() || interrupt.is_some() {
            // Whichever was installed (a handler that could not be is never heard).
            async fn heard(signal: Option<Signal>) {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::spawn(async move {
                tokio::select! {
                    () = heard(term) => {}
                    () = heard(interrupt) => {}
                }
                tracing::info!("shutdown requested");
                t.cancel();
            });
            return token;
        }
    }
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
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

/// Refuse to start: `{binary}: invalid configuration: {why}` on stderr, and exit with
/// [`EXIT_CONFIG`].
pub fn refuse_config(binary: &str, why: impl std::fmt::Display) -> ! {
    eprintln!("{binary}: invalid configuration: {why}");
    std::process::exit(EXIT_CONFIG);
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::value::Value;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    fn file(content: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), content).expect("write");
        f
    }

    #[derive(Debug, Default, Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Settings {
        service_token: Option<String>,
        password: Option<String>,
        tokens: Vec<String>,
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, Box<figment::Error>> {
        let mut fig = Figment::from(Serialized::defaults(Settings::default()));
        for (key, value) in file_values("APP_", vars(pairs))? {
            fig = fig.merge(Serialized::default(&key, value));
        }
        fig.extract().map_err(Box::new)
    }

    #[test]
    fn a_file_gives_the_value_without_its_trailing_newline() {
        let token = file("s3cret-token\n");
        let path = token.path().to_str().expect("utf-8 path");
        let got = load(&[("APP_SERVICE_TOKEN_FILE", path), ("OTHER_X_FILE", "/nonexistent")]).expect("loads");
        assert_eq!(got.service_token.as_deref(), Some("s3cret-token"));
        let crlf = file("pw\r\n");
        let got = load(&[("app_password_file", crlf.path().to_str().expect("utf-8"))]).expect("loads");
        assert_eq!(got.password.as_deref(), Some("pw"), "prefix and suffix in any case, CRLF trimmed");
    }

    #[test]
    fn numbers_stay_strings_and_arrays_are_parsed() {
        let pw = file("12345");
        let list = file("[\"a\", \"b\"]\n");
        let got = load(&[
            ("APP_PASSWORD_FILE", pw.path().to_str().expect("utf-8")),
            ("APP_TOKENS_FILE", list.path().to_str().expect("utf-8")),
        ])
        .expect("loads");
        assert_eq!(got.password.as_deref(), Some("12345"));
        assert_eq!(got.tokens, ["a", "b"]);
        let tables = file("[{ name = \"ci\", sha256 = \"abc\" }]\n");
        let values = file_values("APP_", vars(&[("APP_API_TOKENS_FILE", tables.path().to_str().expect("utf-8"))]))
            .expect("values");
        assert!(
            matches!(&values[..], [(k, Value::Array(_, items))] if k == "api_tokens" && matches!(items[..], [Value::Dict(..)])),
            "an array of tables, as GATEWAY_API_TOKENS takes: {values:?}"
        );
        let values =
            file_values("APP_", vars(&[("APP_PASSWORD_FILE", pw.path().to_str().expect("utf-8"))])).expect("values");
        assert!(matches!(&values[..], [(k, Value::String(..))] if k == "password"));
    }

    #[test]
    fn both_forms_at_once_is_an_error_naming_both() {
        let token = file("from-file");
        let err =
            load(&[("APP_SERVICE_TOKEN", "plain"), ("APP_SERVICE_TOKEN_FILE", token.path().to_str().expect("utf-8"))])
                .expect_err("refused")
                .to_string();
        assert!(err.contains("APP_SERVICE_TOKEN and APP_SERVICE_TOKEN_FILE"), "{err}");
        assert!(!err.contains("from-file") && !err.contains("plain"), "no secret in the message: {err}");
    }

    #[test]
    fn a_directory_below_a_file_is_not_writable() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(check_writable_dir(&dir.path().join("new/sub")).is_ok(), "created when missing");
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "").expect("write");
        let err = check_writable_dir(&file.join("data")).expect_err("refused");
        assert!(err.contains(&file.join("data").display().to_string()) && err.contains("not writable"), "{err}");
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("dir");
        let missing = dir.path().join("missing-token");
        let err =
            load(&[("APP_SERVICE_TOKEN_FILE", missing.to_str().expect("utf-8"))]).expect_err("refused").to_string();
        assert!(err.contains("APP_SERVICE_TOKEN_FILE") && err.contains(missing.to_str().expect("utf-8")), "{err}");
    }
}
