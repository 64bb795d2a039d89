//! The CPU scheduling policy of the services that run as processes of their own
//! ([`crate::runtime::serve`]): Linux's `SCHED_BATCH` unless `MCP_SCHED_POLICY=normal`.
//!
//! Under the normal policy a woken thread may take the CPU from the one running at once
//! (wake-up preemption). A call through the microservices wakes mcp-service when the gateway
//! writes the call to it and the gateway when mcp-service writes the answer, so where the two
//! share a core each write handed the core over and the services took turns a few calls at a
//! time. Under `SCHED_BATCH` a woken service waits until the running one has nothing left to
//! do or has had its time slice (sched(7): "a deterministic scheduling policy without
//! interactivity causing extra preemptions (between the workload's tasks)"), so each turn
//! carries every call that is ready. Measured on one core at 64 connections: a call 3–9 %
//! cheaper and its p99 13–22 % lower (docs/performance.md). A service alone on an idle CPU
//! is woken as before; the cost is that, on a CPU busy with other work, a service's wake-up
//! waits for the running task's slice instead of taking its place.

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
    /// The policy `MCP_SCHED_POLICY`'s value names: `batch` (also when unset or empty) or
    /// `normal`, in any case. `Err` names the variable and what it takes.
    pub fn from_value(value: Option<&str>) -> Result<Policy, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Policy::Batch),
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
        && current() == Some(libc::SCHED_OTHER)
        && let Err(e) = set_batch()
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
            Some(6) => "deadline",
            _ => "unknown",
        }
    }
    #[cfg(not(target_os = "linux"))]
    "unknown"
}

#[cfg(target_os = "linux")]
fn current() -> Option<libc::c_int> {
    // SAFETY: no pointer is passed; pid 0 is the calling thread.
    #[allow(unsafe_code)]
    let policy = unsafe { libc::sched_getscheduler(0) };
    // A policy may carry SCHED_RESET_ON_FORK.
    (policy >= 0).then_some(policy & !libc::SCHED_RESET_ON_FORK)
}

#[cfg(target_os = "linux")]
fn set_batch() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` that outlives the call; pid 0 is the calling
    // thread.
    #[allow(unsafe_code)]
    let done = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if done == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_takes_batch_or_normal() {
        assert_eq!(Policy::from_value(None), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(Some(" ")), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(Some("BATCH")), Ok(Policy::Batch));
        assert_eq!(Policy::from_value(Some("normal\n")), Ok(Policy::Normal));
        let err = Policy::from_value(Some("fifo")).expect_err("refused");
        assert!(err.contains("MCP_SCHED_POLICY") && err.contains("\"fifo\"") && err.contains("`normal`"), "{err}");
    }

    /// Each case on a thread of its own: the policy is the thread's, and its threads inherit it.
    #[cfg(target_os = "linux")]
    #[test]
    fn batch_replaces_the_normal_policy_and_is_inherited() {
        let on_thread = |work: fn() -> (&'static str, &'static str)| std::thread::spawn(work).join().expect("thread");
        let (own, child) = on_thread(|| {
            apply(Policy::Batch);
            (current_name(), std::thread::spawn(current_name).join().expect("child"))
        });
        assert_eq!((own, child), ("batch", "batch"));
        assert_eq!(on_thread(|| (current_name(), "")).0, "normal", "other threads keep theirs");
        let (before, after) = on_thread(|| {
            apply(Policy::Normal);
            let before = current_name();
            // A thread may lower itself to SCHED_IDLE without privileges.
            let param = libc::sched_param { sched_priority: 0 };
            #[allow(unsafe_code)]
            let lowered = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
            assert_eq!(lowered, 0, "{}", std::io::Error::last_os_error());
            apply(Policy::Batch);
            (before, current_name())
        });
        assert_eq!(before, "normal", "`normal` leaves the policy alone");
        assert_eq!(after, "idle", "a policy other than the normal one is kept");
        assert_eq!(refused(), None);
    }
}
