//! Start-up code handed back once a service is serving.
//!
//! Most of a service's resident memory is its own program file: the kernel maps a file's pages
//! in around each one a process touches (fault-around, 64 KiB), and start-up (configuration,
//! definitions parsing, schema and template checks, clap, TLS and SQL set-up) touches code
//! spread over the whole text. Those pages stay mapped for the life of the process although
//! start-up never runs again. [`release_startup_code`] asks the kernel to reclaim the
//! program's read-only pages (`MADV_PAGEOUT`); the code a service goes on running comes back
//! from the file at its next use, so what stays resident is the code it serves with.
//! Under the benchmark's list and call load, registry-service went from 18.5–19.1 to 8.3–8.9
//! MiB and oauth-service from 14.6–15.1 to 4.7–5.2 (docs/performance.md).
//!
//! Only clean copies of the file are reclaimed: nothing the process wrote (its heap, stacks and
//! writable data) is touched, and pages another process also maps are left alone by the kernel.

use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static WANTED: AtomicBool = AtomicBool::new(false);

/// Have the telemetry upkeep thread call [`release_startup_code`] once, two seconds after the
/// telemetry started; `telemetry::init` asks for it. By then a service is listening and has
/// loaded what it serves; code that still runs later simply comes back.
pub(crate) fn release_after_start() {
    WANTED.store(true, Ordering::Relaxed);
}

/// Called by the upkeep thread on its second tick.
pub(crate) fn on_upkeep_tick(tick: u64) {
    if tick == 2 && WANTED.load(Ordering::Relaxed) {
        match release_startup_code() {
            Ok(bytes) => tracing::debug!(mapped_kib = bytes / 1024, "start-up code handed back"),
            Err(e) => tracing::debug!(error = %e, "start-up code kept"),
        }
    }
}

/// Ask the kernel to reclaim the pages of this program's file mapped read-only (its code and
/// constants); returns how many bytes of mappings were advised. Kernels before 5.4 do not know
/// the advice (an error; nothing changes).
#[allow(unsafe_code)]
pub fn release_startup_code() -> std::io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut advised = 0;
    for (start, len) in read_only_mappings_of(&maps, &exe) {
        // SAFETY: the range is, by the kernel's own list, a mapping of this program's file
        // without write permission. Paging it out drops clean copies of the file's pages, which
        // the kernel reads back from the file when they are next used; the memory's contents
        // as the program sees them do not change, and no Rust reference can be invalidated.
        unsafe { rustix::mm::madvise(start as *mut c_void, len, rustix::mm::Advice::LinuxPageOut)? };
        advised += len;
    }
    Ok(advised)
}

/// `(start, length)` of each mapping of `exe` without write permission in a `/proc/PID/maps`
/// text (`start-end perms offset dev inode path`).
fn read_only_mappings_of(maps: &str, exe: &Path) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?.trim_start();
            if perms.contains('w') || Path::new(path) != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end - start))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_programs_read_only_mappings_are_chosen() {
        let maps = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 1234                       /srv/bin/my service
55d0a0100000-55d0a0900000 r-xp 00100000 08:01 1234                       /srv/bin/my service
55d0a0900000-55d0a0a00000 r--p 00900000 08:01 1234                       /srv/bin/my service
55d0a0a00000-55d0a0a10000 rw-p 00a00000 08:01 1234                       /srv/bin/my service
55d0a0a10000-55d0a0b00000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000100000 r-xp 00000000 08:01 99                         /usr/lib/libc.so.6
7f0000200000-7f0000300000 r-xp 00000000 08:01 1234                       /srv/bin/my service (deleted)
7fff00000000-7fff00021000 rw-p 00000000 00:00 0                          [stack]
";
        let chosen = read_only_mappings_of(maps, Path::new("/srv/bin/my service"));
        assert_eq!(chosen, vec![(0x55d0a0000000, 0x100000), (0x55d0a0100000, 0x800000), (0x55d0a0900000, 0x100000)]);
    }

    #[test]
    fn this_process_advises_its_whole_program_and_runs_on() {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let mapped: usize = read_only_mappings_of(&maps, &exe).iter().map(|(_, len)| len).sum();
        assert!(mapped > 0, "the test binary's own code is mapped");
        // How much memory that hands back is measured by `bench`, not here: pages that other
        // processes of this test binary map at the same time are left alone by the kernel.
        match release_startup_code() {
            Ok(bytes) => assert_eq!(bytes, mapped),
            // Kernels without MADV_PAGEOUT refuse the advice.
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}"),
        }
    }
}
