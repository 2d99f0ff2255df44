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

use tokio::sync::mpsc;

/// How long a file must stay unchanged (no write, same content) before it is taken.
pub const SETTLE: Duration = Duration::from_secs(1);

/// A running watch; dropping it stops watching.
pub struct FileWatch {
    _watcher: Watcher,
    path: PathBuf,
    wake: mpsc::Receiver<()>,
    last: Option<Vec<u8>>,
}

impl FileWatch {
    /// Starts watching `path`, whose current content is `current`.
    pub fn new(path: &Path, current: Option<Vec<u8>>) -> std::io::Result<Self> {
        let (tx, wake) = mpsc::channel(1);
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        Ok(Self {
            _watcher: Watcher::start(&dir, name, tx)?,
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

/// Linux: inotify on the directory, asked only for the events that end a change of a file:
/// written and closed, created, moved in or out, deleted, attributes changed. Not for every
/// write and every open, which notify's watch asks for: with the SQLite database beside the
/// config file, that woke the watch for every page of every commit (and a bot-offline commit
/// took twice as long). A writer that keeps the file open is seen when it closes it, which
/// is when the file is whole anyway.
#[cfg(target_os = "linux")]
struct Watcher(tokio::task::JoinHandle<()>);

#[cfg(target_os = "linux")]
impl Watcher {
    fn start(dir: &Path, name: std::ffi::OsString, tx: mpsc::Sender<()>) -> std::io::Result<Self> {
        use futures_util::StreamExt as _;
        use inotify::{EventMask, Inotify, WatchMask};
        let inotify = Inotify::init()?;
        inotify.watches().add(
            dir,
            WatchMask::CLOSE_WRITE
                | WatchMask::CREATE
                | WatchMask::MOVED_TO
                | WatchMask::MOVED_FROM
                | WatchMask::DELETE
                | WatchMask::ATTRIB,
        )?;
        let mut events = inotify.into_event_stream([0u8; 4096])?;
        let dir = dir.to_owned();
        Ok(Self(tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    // The watch cannot be read any more (it would fail again at once): one
                    // last look at the file, then edits need a restart.
                    Err(e) => {
                        tracing::error!(
                            "{}: file watch failed: {e}; edits need a restart",
                            dir.display()
                        );
                        let _ = tx.try_send(());
                        return;
                    }
                };
                // Events were lost, or this file changed. A full channel already holds a
                // wake-up: nothing is lost.
                let relevant = event.mask.contains(EventMask::Q_OVERFLOW)
                    || event.name.as_ref() == Some(&name);
                if relevant && tx.try_send(()).is_err() && tx.is_closed() {
                    return;
                }
            }
        })))
    }
}

#[cfg(target_os = "linux")]
impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Elsewhere: notify's watch of the directory, every event but access events (our own reads
/// of the file are some).
#[cfg(not(target_os = "linux"))]
struct Watcher(notify::RecommendedWatcher);

#[cfg(not(target_os = "linux"))]
impl Watcher {
    fn start(dir: &Path, name: std::ffi::OsString, tx: mpsc::Sender<()>) -> std::io::Result<Self> {
        use notify::Watcher as _;
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let relevant = match &event {
                    Ok(e) => {
                        !matches!(e.kind, notify::EventKind::Access(_))
                            && e.paths.iter().any(|p| p.file_name() == Some(&*name))
                    }
                    Err(_) => true,
                };
                if relevant {
                    let _ = tx.try_send(());
                }
            })
            .map_err(std::io::Error::other)?;
        watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(std::io::Error::other)?;
        Ok(Self(watcher))
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

    /// Writes to other files of the directory (a database beside the config) never wake the
    /// watch; a new file renamed over the watched one (as editors save) does.
    #[tokio::test]
    async fn a_file_replaced_by_rename_is_seen_and_its_neighbours_are_not() {
        let dir = std::env::temp_dir().join(format!("aa-watch-rename-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yaml");
        std::fs::write(&path, "old").unwrap();
        let mut watch = FileWatch::new(&path, Some(b"old".to_vec())).unwrap();
        {
            use std::io::Write;
            let mut neighbour = std::fs::File::create(dir.join("state.db-wal")).unwrap();
            for _ in 0..1000 {
                neighbour.write_all(&[0u8; 4096]).unwrap();
            }
            std::fs::write(dir.join("other.yaml"), "x").unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(watch.wake.try_recv().is_err(), "woken by another file");
        std::fs::write(dir.join(".config.yaml.swp"), "new").unwrap();
        std::fs::rename(dir.join(".config.yaml.swp"), &path).unwrap();
        let content = tokio::time::timeout(SETTLE * 3, watch.changed()).await;
        assert_eq!(content.unwrap().unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
