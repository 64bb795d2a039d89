//! mimalloc, the global allocator of gateway, mcp-service and registry-service (declared in
//! each binary, not here: oauth-service keeps the system allocator).

/// Return to the system the memory mimalloc freed and has kept for at least its purge delay
/// (one second). mimalloc does this only when some thread of the process next allocates, so an
/// idle service kept everything a burst of work had freed (after 64 concurrent 1 MiB reads,
/// mcp-service stayed at 120–320 MiB). Called every second from the telemetry upkeep thread
/// ([`crate::telemetry::every_second`]); cheap when nothing is due.
#[allow(unsafe_code)]
pub fn return_freed_memory() {
    // SAFETY: `mi_collect` takes no arguments but a flag, touches only mimalloc's own state
    // (under its locks) and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
