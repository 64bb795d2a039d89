//! Live reload: the definitions file is watched (its directory, so that the symlink swap of a
//! Kubernetes ConfigMap update is seen too). A valid new version replaces the catalog
//! atomically; an invalid one is logged with its mistakes and the old catalog stays. Files that
//! resources are read from are watched as well: a change to one is announced as a resource
//! update.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, Content};
use crate::server::CatalogHandle;

/// Events closer together than this are taken as one change.
const SETTLE: Duration = Duration::from_millis(150);

/// A digest of the file, read in pieces (a large file is never held whole for it).
fn fingerprint(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut piece) {
            Ok(0) => return Some(hasher.finalize().to_vec()),
            Ok(n) => hasher.update(&piece[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Whether an event can mean a changed file. Opening, reading and closing a file unwritten are
/// not: the watcher's own reads of the files it fingerprints raised such events, so each check
/// caused the next (every watched file read and hashed several times a second while idle).
fn may_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The files resources are read from, by URI, with their current fingerprints.
fn resource_files(catalog: &Catalog) -> HashMap<String, (PathBuf, Option<Vec<u8>>)> {
    catalog
        .resources
        .iter()
        .filter_map(|r| match &r.content {
            Content::File(file) => Some((r.uri.clone(), (file.path.clone(), fingerprint(&file.path)))),
            _ => None,
        })
        .collect()
}

/// Watch `path` and keep `handle` current until `shutdown`.
pub fn spawn(
    path: PathBuf,
    data_dir: Option<PathBuf>,
    handle: CatalogHandle,
    shutdown: CancellationToken,
) -> notify::Result<()> {
    let (tx, mut rx) = mpsc::channel::<()>(64);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| may_change(&e.kind)) {
            // A full queue already means "something changed".
            let _ = tx.try_send(());
        }
    })?;
    let mut watched = BTreeSet::new();
    let mut watch_dir = move |watcher: &mut notify::RecommendedWatcher, file: &Path| {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        if watched.insert(dir.clone())
            && let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch");
        }
    };
    watch_dir(&mut watcher, &path);
    let mut files = resource_files(&handle.current());
    for (file, _) in files.values() {
        watch_dir(&mut watcher, file);
    }
    let mut last = fingerprint(&path);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                event = rx.recv() => if event.is_none() { return },
            }
            // Let a burst of events (an editor's save, a ConfigMap swap) settle.
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            let now = fingerprint(&path);
            if now != last {
                last = now;
                // A file written in place is empty between its truncation and the write (seen
                // when the writer is slow or descheduled): that is never the catalog meant.
                if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
                    metrics::counter!("registry_reloads_total", "outcome" => "failed").increment(1);
                    tracing::warn!(
                        path = %path.display(),
                        "definitions file is empty (being written?); the previous catalog stays"
                    );
                    continue;
                }
                match super::load_in(&path, data_dir.as_deref()) {
                    Ok(catalog) => {
                        files = resource_files(&catalog);
                        for (file, _) in files.values() {
                            watch_dir(&mut watcher, file);
                        }
                        handle.replace(catalog);
                        let version = handle.current().version;
                        metrics::gauge!("registry_catalog_version").set(version as f64);
                        metrics::counter!("registry_reloads_total", "outcome" => "ok").increment(1);
                        tracing::info!(path = %path.display(), version, "definitions reloaded");
                    }
                    Err(e) => {
                        metrics::counter!("registry_reloads_total", "outcome" => "failed").increment(1);
                        tracing::warn!(errors = %e, "definitions changed but are invalid; the previous catalog stays");
                    }
                }
                continue;
            }
            let catalog = handle.current();
            for (uri, (file, seen)) in files.iter_mut() {
                let current = fingerprint(file);
                if current != *seen {
                    *seen = current;
                    tracing::info!(%uri, "resource file changed");
                    // What was kept of it is not served again, whatever its length and time say.
                    if let Some(Content::File(source)) = catalog.resource(uri).map(|r| &r.content) {
                        source.forget();
                    }
                    handle.resource_updated(uri);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, EventKind, ModifyKind, RemoveKind, RenameMode,
    };

    use super::may_change;

    #[test]
    fn reads_are_not_changes() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Any),
        ] {
            assert!(!may_change(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
            EventKind::Other,
        ] {
            assert!(may_change(&kind), "{kind:?}");
        }
    }
}
