//! `flock` on a lock file: exclusive while the file is open, freed by the kernel when the holder
//! closes it or its process dies — so, unlike a lease, it needs no expiry and cannot run out
//! under a holder that pauses.
//!
//! Its reach is one host's kernel. Processes on other hosts that share the directory over NFS
//! may or may not see each other's locks, depending on the NFS version and the client's mount
//! options; for jobs across hosts, `src/batch/lockfile.rs` builds on exclusive create instead.
//!
//! The files are never deleted while anyone may use them: a waiter that has opened the old file
//! would lock *it* while a newcomer creates and locks a new file of the same name, and both would
//! hold "the" lock. The race deletes its own after its last attempt.

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::poll;
use crate::batch::lockfile::{ensure_private_dir, no_follow};

/// A held `flock` (exclusive). Dropping it unlocks the file.
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Locks the file for `name` in `dir` (creating both if needed), asking again while another
    /// open file holds it, for at most `wait`. `Ok(None)`: the wait ran out.
    ///
    /// The directory must be this account's own and writable by nobody else (the default one is
    /// in the shared temporary directory, where another account could have made it first), and
    /// a symlink in the lock file's place is refused, not followed: the batch lock files' rules
    /// (`batch::lockfile::check_dir`).
    pub fn acquire(dir: &Path, name: &str, wait: Duration) -> io::Result<Option<Self>> {
        ensure_private_dir(dir).map_err(io::Error::other)?;
        let path = path_of(dir, name);
        // Each attempt opens the file for itself: flock locks belong to an open file, so two
        // threads sharing one `File` would share its lock.
        let file = no_follow().create(true).truncate(false).write(true).open(&path)?;
        let locked = poll(wait, || match file.try_lock() {
            Ok(()) => Ok(Some(())),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        })?;
        Ok(locked.map(|()| Self { file, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file would unlock it too; unlocking first says so.
        if let Err(e) = self.file.unlock() {
            log::warn!("unlocking {}: {e}; closing the file frees it", self.path.display());
        }
    }
}

/// The lock file of `name` in `dir`: the name with every character but letters, digits, `-` and
/// `.` written as `_`, so that any lock name makes one plain file name. Two names that differ
/// only there share a file: they lock each other out, never each other in.
pub fn path_of(dir: &Path, name: &str) -> PathBuf {
    let plain: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' })
        .collect();
    dir.join(format!("{plain}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock file planted as a symlink is not followed: opening it fails, and the file it
    /// points to is neither created nor opened for writing.
    #[test]
    fn a_lock_file_that_is_a_symlink_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("haita-flock-{}", super::super::token()));
        std::fs::create_dir_all(&dir).expect("dir");
        let target = dir.join("not-a-lock-file");
        std::os::unix::fs::symlink(&target, path_of(&dir, "day")).expect("symlink");
        let opened = FileLock::acquire(&dir, "day", Duration::from_millis(10));
        assert!(opened.is_err(), "the symlink must not be followed");
        assert!(!target.exists(), "nothing was created where the symlink points");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
