//! Notices when a file changes, whichever way an editor writes it.
//!
//! Watches the file's directory (editors often replace a file by renaming a new one over it)
//! and reports the file's new content only when it really differs from the last one seen, and
//! only once it has stopped changing: editors and `cp` write a file in several steps (truncate,
//! then write, maybe in chunks), and a file read in between is a different, wrong file that
//! may well parse (an empty config is "every default"; half a fleet file is "half the bots
//! went offline").

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How long a file must stay unchanged (no write, same content) before it is taken.
pub const SETTLE: Duration = Duration::from_secs(1);

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
                // Our own reads are access events: they must not count as writes.
                let relevant = match &event {
                    Ok(e) => {
                        !matches!(e.kind, notify::EventKind::Access(_))
                            && e.paths.iter().any(|p| p.file_name() == name.as_deref())
                    }
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

    /// Waits until the file's content differs from the last content seen and has stayed the
    /// same for [`SETTLE`], and returns it (`Err` if it cannot be read).
    pub async fn changed(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if self.wake.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
            let content = self.settled().await?;
            match content {
                Some(content) if self.last.as_ref() != Some(&content) => {
                    self.last = Some(content.clone());
                    return Ok(content);
                }
                // Unchanged after all, or gone (an editor's rename in progress).
                _ => continue,
            }
        }
    }

    /// Reads the file until two reads [`SETTLE`] apart, with no write in between, agree.
    async fn settled(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut seen = read(&self.path).await?;
        loop {
            match tokio::time::timeout(SETTLE, self.wake.recv()).await {
                // Written again: start over from the new content.
                Ok(Some(())) => {
                    while self.wake.try_recv().is_ok() {}
                    seen = read(&self.path).await?;
                }
                Ok(None) => return Ok(seen),
                Err(_quiet) => {
                    let now = read(&self.path).await?;
                    if now == seen {
                        return Ok(now);
                    }
                    seen = now;
                }
            }
        }
    }
}

/// The file's content, `None` while it does not exist.
async fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match tokio::fs::read(path).await {
        Ok(content) => Ok(Some(content)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written in two halves 0.5 s apart is taken whole, once.
    #[tokio::test]
    async fn a_file_written_in_steps_is_read_once_complete() {
        let dir = std::env::temp_dir().join(format!("aa-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fleet.yaml");
        std::fs::write(&path, "old").unwrap();
        let mut watch = FileWatch::new(&path, Some(b"old".to_vec())).unwrap();
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut f = tokio::fs::File::create(&path).await.unwrap(); // truncated: empty
                tokio::time::sleep(Duration::from_millis(300)).await;
                f.write_all(b"first half, ").await.unwrap();
                f.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
                f.write_all(b"second half").await.unwrap();
                f.flush().await.unwrap();
            })
        };
        let started = std::time::Instant::now();
        let content = watch.changed().await.unwrap();
        assert_eq!(content, b"first half, second half");
        assert!(started.elapsed() >= Duration::from_millis(800) + SETTLE);
        writer.await.unwrap();
        // Nothing further: the same content is not reported again.
        let again = tokio::time::timeout(SETTLE * 2, watch.changed()).await;
        assert!(again.is_err(), "{again:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
