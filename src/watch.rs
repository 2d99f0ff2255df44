//! Notices when a file changes, whichever way an editor writes it.
//!
//! Watches the file's directory (editors often replace a file by renaming a new one over it)
//! and reports the file's new content only when it really differs from the last one seen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// A running watch; dropping it stops watching.
pub struct FileWatch {
    _watcher: RecommendedWatcher,
    path: PathBuf,
    wake: mpsc::Receiver<()>,
    last: Option<Vec<u8>>,
}

impl FileWatch {
    /// Starts watching `path`, whose current content is `current`.
    pub fn new(path: &Path, current: Option<Vec<u8>>) -> notify::Result<Self> {
        let (tx, wake) = mpsc::channel(1);
        let name = path.file_name().map(|n| n.to_owned());
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let relevant = match &event {
                    Ok(e) => e.paths.iter().any(|p| p.file_name() == name.as_deref()),
                    Err(_) => true,
                };
                if relevant {
                    // A full channel already holds a wake-up: nothing is lost.
                    let _ = tx.try_send(());
                }
            })?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        Ok(Self {
            _watcher: watcher,
            path: path.to_owned(),
            wake,
            last: current,
        })
    }

    /// Waits until the file's content differs from the last content seen, and returns it
    /// (`Err` if it cannot be read, e.g. while an editor replaces it).
    pub async fn changed(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            self.wake.recv().await;
            // Let a write in several steps finish before reading.
            tokio::time::sleep(Duration::from_millis(100)).await;
            while self.wake.try_recv().is_ok() {}
            match tokio::fs::read(&self.path).await {
                Ok(content) if self.last.as_ref() == Some(&content) => continue,
                Ok(content) => {
                    self.last = Some(content.clone());
                    return Ok(content);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
