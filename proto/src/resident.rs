//! Start-up code handed back once a service is serving.
//!
//! Most of a service's resident memory is its own program file: the kernel maps a file's pages
//! in around each one a process touches (fault-around, 64 KiB), and start-up (configuration,
//! definitions parsing, schema and template checks, clap, TLS and SQL set-up) touches code
//! spread over the whole text. Those pages stay mapped for the life of the process although
//! start-up never runs again. [`release_startup_code`] hands the program's read-only pages back:
//! it asks the kernel to reclaim them (`MADV_PAGEOUT`), then unmaps from this process what is
//! left of the ones that are clean copies of the file (`MADV_DONTNEED`): pages another process
//! maps too, such as a second replica of the same image on the node, which the kernel does not
//! reclaim. The code a service goes on running comes back from the file (or the page cache) at
//! its next use, so what stays resident is the code it serves with.
//! Under the benchmark's list and call load, registry-service went from 18.5–19.1 to 8.3–8.9
//! MiB and oauth-service from 14.6–15.1 to 4.7–5.2 (docs/performance.md).
//!
//! Only clean copies of the file are handed back: nothing the process wrote (its heap, stacks
//! and writable data) is touched, and a read-only mapping holding pages the process wrote
//! before it became read-only (relocated constants, `RELRO`: `Anonymous` above 0 in
//! `/proc/self/smaps`) is only offered for reclaim, which leaves such pages as they are.

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

/// Hand back the pages of this program's file mapped read-only (its code and constants):
/// reclaimed where only this process maps them, unmapped from it where the mapping holds clean
/// copies of the file alone; returns how many bytes of mappings were advised. Kernels before
/// 5.4 do not know `MADV_PAGEOUT`: the mappings that are not clean are then kept (an error).
#[allow(unsafe_code)]
pub fn release_startup_code() -> std::io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut advised = 0;
    // The first advice refused; the other mappings are handed back all the same.
    let mut refused = None;
    for mapping in read_only_mappings_of(&smaps, &exe) {
        // SAFETY: the range is, by the kernel's own list, a mapping of this program's file
        // without write permission. Paging it out drops clean copies of the file's pages, which
        // the kernel reads back from the file when they are next used; the memory's contents
        // as the program sees them do not change, and no Rust reference can be invalidated.
        let paged_out =
            unsafe { rustix::mm::madvise(mapping.start as *mut c_void, mapping.len, rustix::mm::Advice::LinuxPageOut) };
        if mapping.clean {
            // SAFETY: as above, and the mapping holds no page this process wrote (none
            // anonymous): dropping it from this process's page tables makes its next use read
            // the file's page again, which is what it held. This also works on a kernel
            // without `MADV_PAGEOUT`.
            unsafe {
                rustix::mm::madvise(mapping.start as *mut c_void, mapping.len, rustix::mm::Advice::LinuxDontNeed)?
            };
        } else if let Err(e) = paged_out {
            refused.get_or_insert(e);
        }
        advised += mapping.len;
    }
    match refused {
        Some(e) => Err(e.into()),
        None => Ok(advised),
    }
}

/// A read-only mapping of the program's file.
#[derive(Debug, PartialEq)]
struct Mapping {
    start: usize,
    len: usize,
    /// No page of it is anonymous (written by the process, as relocations are): every page is
    /// the file's.
    clean: bool,
}

/// Each mapping of `exe` without write permission in a `/proc/PID/smaps` text (a line `start-end
/// perms offset dev inode path` per mapping, then its `Key: value` lines).
fn read_only_mappings_of(smaps: &str, exe: &Path) -> Vec<Mapping> {
    let mut chosen: Vec<Mapping> = Vec::new();
    // Whether the mapping whose lines are being read is the last one chosen.
    let mut in_chosen = false;
    for line in smaps.lines() {
        if let Some(anonymous) = line.strip_prefix("Anonymous:") {
            if in_chosen && let Some(last) = chosen.last_mut() {
                last.clean = kib(anonymous) == Some(0);
            }
        } else if let Some(header) = MappingLine::parse(line) {
            // A mapping's first line: chosen or not, the lines after it are its own.
            in_chosen = !header.perms.contains('w') && Path::new(header.path) == exe && header.end > header.start;
            if in_chosen {
                // Clean only once its `Anonymous` line says so.
                chosen.push(Mapping { start: header.start, len: header.end - header.start, clean: false });
            }
        }
    }
    chosen
}

/// The first line of a mapping in `/proc/PID/smaps`: `start-end perms offset dev inode path`.
struct MappingLine<'a> {
    start: usize,
    end: usize,
    perms: &'a str,
    path: &'a str,
}

impl<'a> MappingLine<'a> {
    /// `None` for any other line (`Key: value`).
    fn parse(line: &'a str) -> Option<Self> {
        let mut fields = line.splitn(6, ' ');
        let (range, perms) = (fields.next()?, fields.next()?);
        let (start, end) = range.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        let path = fields.nth(3).map(str::trim_start).unwrap_or_default();
        Some(MappingLine { start, end, perms, path })
    }
}

/// A smaps value in kB (`   120 kB`).
fn kib(value: &str) -> Option<u64> {
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_programs_read_only_mappings_are_chosen() {
        let smaps = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 1234                       /srv/bin/my service
Size:               1024 kB
Rss:                 512 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
55d0a0100000-55d0a0900000 r-xp 00100000 08:01 1234                       /srv/bin/my service
Size:               8192 kB
Anonymous:             0 kB
55d0a0900000-55d0a0a00000 r--p 00900000 08:01 1234                       /srv/bin/my service
Size:               1024 kB
Anonymous:           120 kB
55d0a0a00000-55d0a0a10000 rw-p 00a00000 08:01 1234                       /srv/bin/my service
Anonymous:            64 kB
55d0a0a10000-55d0a0b00000 rw-p 00000000 00:00 0                          [heap]
Anonymous:           960 kB
7f0000000000-7f0000100000 r-xp 00000000 08:01 99                         /usr/lib/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 08:01 1234                       /srv/bin/my service (deleted)
Anonymous:             0 kB
7fff00000000-7fff00021000 rw-p 00000000 00:00 0                          [stack]
Anonymous:           132 kB
";
        let chosen = read_only_mappings_of(smaps, Path::new("/srv/bin/my service"));
        let mapping = |start, len, clean| Mapping { start, len, clean };
        assert_eq!(
            chosen,
            vec![
                mapping(0x55d0a0000000, 0x100000, true),
                mapping(0x55d0a0100000, 0x800000, true),
                // Relocated constants: offered for reclaim, never unmapped.
                mapping(0x55d0a0900000, 0x100000, false),
            ]
        );
        // A mapping whose `Anonymous` line is missing or unreadable counts as written.
        let unread = "55d0a0100000-55d0a0900000 r-xp 00100000 08:01 1234 /srv/bin/my service\nAnonymous: many\n";
        assert_eq!(
            read_only_mappings_of(unread, Path::new("/srv/bin/my service")),
            vec![mapping(0x55d0a0100000, 0x800000, false)]
        );
    }

    /// The clean read-only mappings of this test program, every page of them read once so that
    /// this process maps them all.
    #[allow(unsafe_code)]
    fn map_the_program_whole() -> Vec<Mapping> {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let clean: Vec<Mapping> = read_only_mappings_of(&smaps, &exe).into_iter().filter(|m| m.clean).collect();
        for mapping in &clean {
            for page in (mapping.start..mapping.start + mapping.len).step_by(4096) {
                // SAFETY: a readable mapping of the program's file, as the kernel lists it; a
                // byte read changes nothing.
                unsafe { std::ptr::read_volatile(page as *const u8) };
            }
        }
        clean
    }

    /// Run by the test below as a process of its own: map the program whole, say so, and hold
    /// it until the input closes.
    #[test]
    #[ignore = "a helper process of `the_program_is_handed_back_even_where_another_process_maps_it`"]
    fn hold_the_program_mapped() {
        use std::io::{Read as _, Write as _};
        map_the_program_whole();
        println!("holding");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }

    /// The program's pages are handed back although another process (a second replica of the
    /// same image) maps them too, which `MADV_PAGEOUT` alone leaves resident; the process runs
    /// on, its code coming back as it runs.
    #[test]
    fn the_program_is_handed_back_even_where_another_process_maps_it() {
        use std::io::BufRead as _;
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let mut other = std::process::Command::new(&exe)
            .args(["resident::tests::hold_the_program_mapped", "--exact", "--ignored", "--nocapture"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the other process starts");
        let said = std::io::BufReader::new(other.stdout.take().expect("its output"));
        assert!(said.lines().map_while(Result::ok).any(|line| line == "holding"), "the other process maps the program");
        let clean = map_the_program_whole();
        let starts: Vec<usize> = clean.iter().map(|m| m.start).collect();
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let before = resident_kib(&smaps, &starts);
        let mapped: usize = read_only_mappings_of(&smaps, &exe).iter().map(|m| m.len).sum();
        let released = release_startup_code();
        let after = resident_kib(&std::fs::read_to_string("/proc/self/smaps").expect("smaps"), &starts);
        drop(other.stdin.take());
        let _ = other.wait();
        match released {
            Ok(bytes) => assert_eq!(bytes, mapped),
            // Kernels without MADV_PAGEOUT refuse it for the mappings that are not clean.
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}"),
        }
        // What runs from the release on comes back (a few pages, and those the kernel maps in
        // around each).
        assert!(before > 4096, "the program is mapped whole: {before} KiB");
        assert!(after < before / 2, "resident {before} KiB before, {after} KiB after");
    }

    /// The `Rss` of the mappings starting at `starts`, in KiB.
    fn resident_kib(smaps: &str, starts: &[usize]) -> u64 {
        let mut counted = false;
        let mut total = 0;
        for line in smaps.lines() {
            if let Some(rss) = line.strip_prefix("Rss:") {
                if counted {
                    total += kib(rss).expect("an Rss in kB");
                }
            } else if let Some(header) = MappingLine::parse(line) {
                counted = starts.contains(&header.start);
            }
        }
        total
    }
}
