//! The CPU scheduling policy of the services that run as processes of their own
//! ([`crate::runtime::serve`]): Linux's `SCHED_BATCH` unless `MCP_SCHED_POLICY=normal`
//! (`mcp-service --stdio`, serving one client alone, keeps the normal policy unless it says
//! `batch`).
//!
//! Under the normal policy a woken thread may take the CPU from the one running at once
//! (wake-up preemption). A call through the microservices wakes mcp-service when the gateway
//! writes the call to it and the gateway when mcp-service writes the answer, so where the two
//! share a core each write handed the core over and the services took turns a few calls at a
//! time. Under `SCHED_BATCH` a woken service waits until the running one has nothing left to
//! do or has had its time slice (sched(7): "a deterministic scheduling policy without
//! interactivity causing extra preemptions (between the workload's tasks)"), so each turn
//! carries every call that is ready (measured: docs/performance.md, What each optimisation
//! bought). A service alone on an idle CPU is woken as before; the cost is that, on a CPU busy
//! with other work, a service's wake-up waits for the running task's slice instead of taking
//! its place.

use std::sync::OnceLock;

/// The environment variable that chooses the policy.
pub const VAR: &str = "MCP_SCHED_POLICY";

/// What `MCP_SCHED_POLICY` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_BATCH` (the default), when the process was started under the normal policy.
    Batch,
    /// Leave the policy the process was started with.
    Normal,
}

impl Policy {
    /// The policy `MCP_SCHED_POLICY`'s value names: `batch` or `normal`, in any case, and
    /// `default` when it is unset or empty. `Err` names the variable and what it takes.
    pub fn from_value(value: Option<&str>, default: Policy) -> Result<Policy, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("batch") => Ok(Policy::Batch),
            Some(v) if v.eq_ignore_ascii_case("normal") => Ok(Policy::Normal),
            Some(v) => Err(format!("{VAR}: expected `batch` or `normal`, got {v:?}")),
        }
    }
}

/// Why `SCHED_BATCH` could not be set (a seccomp profile that refuses the call, for one), for
/// [`crate::telemetry::log_runtime`] to report once logging is up.
static REFUSED: OnceLock<String> = OnceLock::new();

/// Give the calling thread `policy`; threads it starts afterwards inherit it, so call this
/// before the runtime starts its threads. `Batch` replaces only the normal policy: a process
/// started under another one (by `chrt`, or a real-time priority from its operator) keeps it.
pub fn apply(policy: Policy) {
    #[cfg(target_os = "linux")]
    if policy == Policy::Batch
        && let Some(raw) = raw_policy()
        && raw & !libc::SCHED_RESET_ON_FORK == libc::SCHED_OTHER
        // Kept as it was given: unprivileged, the kernel refuses to clear it.
        && let Err(e) = set(libc::SCHED_BATCH | (raw & libc::SCHED_RESET_ON_FORK))
    {
        let _ = REFUSED.set(e.to_string());
    }
    #[cfg(not(target_os = "linux"))]
    let _ = policy;
}

/// Why [`apply`] could not set `SCHED_BATCH`, if it could not.
pub fn refused() -> Option<&'static str> {
    REFUSED.get().map(String::as_str)
}

/// The calling thread's policy as `chrt` names it: `normal` (`SCHED_OTHER`), `batch`, `idle`,
/// `fifo`, `rr` or `deadline`; `unknown` where it cannot be read.
pub fn current_name() -> &'static str {
    #[cfg(target_os = "linux")]
    {
        match current() {
            Some(libc::SCHED_OTHER) => "normal",
            Some(libc::SCHED_BATCH) => "batch",
            Some(libc::SCHED_IDLE) => "idle",
            Some(libc::SCHED_FIFO) => "fifo",
            Some(libc::SCHED_RR) => "rr",
            Some(libc::SCHED_DEADLINE) => "deadline",
            _ => "unknown",
        }
    }
    #[cfg(not(target_os = "linux"))]
    "unknown"
}

/// The calling thread's policy as the kernel gives it (with `SCHED_RESET_ON_FORK` when set).
#[cfg(target_os = "linux")]
fn raw_policy() -> Option<libc::c_int> {
    // SAFETY: no pointer is passed; pid 0 is the calling thread.
    #[allow(unsafe_code)]
    let policy = unsafe { libc::sched_getscheduler(0) };
    (policy >= 0).then_some(policy)
}

/// The calling thread's policy without `SCHED_RESET_ON_FORK`.
#[cfg(target_os = "linux")]
fn current() -> Option<libc::c_int> {
    raw_policy().map(|policy| policy & !libc::SCHED_RESET_ON_FORK)
}

/// Give the calling thread `policy` (one that takes priority 0).
#[cfg(target_os = "linux")]
fn set(policy: libc::c_int) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` that outlives the call; pid 0 is the calling
    // thread.
    #[allow(unsafe_code)]
    let done = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if done == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_takes_batch_or_normal() {
        assert_eq!(Policy::from_value(None, Policy::Batch), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(None, Policy::Normal), Ok(Policy::Normal));
        assert_eq!(Policy::from_value(Some(" "), Policy::Batch), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(Some("BATCH"), Policy::Normal), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(Some("normal\n"), Policy::Batch), Ok(Policy::Normal));
        let err = Policy::from_value(Some("fifo"), Policy::Batch).expect_err("refused");
        assert!(err.contains("MCP_SCHED_POLICY") && err.contains("\"fifo\"") && err.contains("`normal`"), "{err}");
    }

    /// Each case on a thread of its own: the policy is the thread's, and its threads inherit it.
    /// It needs a test runner under the normal policy that may change it (not so under `chrt`,
    /// or in a sandbox that allows only the normal policy): elsewhere it says so and checks
    /// nothing.
    #[cfg(target_os = "linux")]
    #[test]
    fn batch_replaces_the_normal_policy_and_is_inherited() {
        fn on_thread<T: Send + 'static>(work: fn() -> T) -> T {
            std::thread::spawn(work).join().expect("thread")
        }
        if !on_thread(|| current_name() == "normal" && set(libc::SCHED_BATCH).is_ok()) {
            eprintln!("skipped: this test runs under {} and cannot change it", current_name());
            return;
        }
        let (own, child) = on_thread(|| {
            apply(Policy::Batch);
            (current_name(), std::thread::spawn(current_name).join().expect("child"))
        });
        assert_eq!((own, child), ("batch", "batch"));
        assert_eq!(on_thread(current_name), "normal", "other threads keep theirs");
        let (before, after) = on_thread(|| {
            apply(Policy::Normal);
            let before = current_name();
            // A thread may lower itself to SCHED_IDLE without privileges.
            set(libc::SCHED_IDLE).expect("SCHED_IDLE");
            apply(Policy::Batch);
            (before, current_name())
        });
        assert_eq!(before, "normal", "`normal` leaves the policy alone");
        assert_eq!(after, "idle", "a policy other than the normal one is kept");
        let (kept, flag) = on_thread(|| {
            set(libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK).expect("reset-on-fork");
            apply(Policy::Batch);
            (current_name(), raw_policy().is_some_and(|p| p & libc::SCHED_RESET_ON_FORK != 0))
        });
        assert_eq!((kept, flag), ("batch", true), "the flag a process was given stays");
    }
}
