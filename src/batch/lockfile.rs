//! A lock file on shared storage (NFS): one instance at a time may run a job, across app
//! servers that share a directory and nothing else.
//!
//! `flock` is not the tool here: on NFS its state is held by the client and the server in ways
//! that do not survive a crashed client well, and attribute caching can show a stale view. What
//! every NFS client does atomically against the server is **exclusive create** (`O_CREAT |
//! O_EXCL`, NFSv3 and later) and **rename**. So:
//!
//! - **acquire**: create `haita-batch-{job}.lock` with `O_EXCL`, write who holds it (host, pid,
//!   the process's start time, a random token, start and expiry), fsync. If it exists, it is
//!   held — unless it is *stale*: its expiry has passed, or it names a process on this host that
//!   no longer exists.
//! - **take over a stale lock**: rename it to a name only we use, then read what we renamed.
//!   Two processes that found the same stale file both try the rename, and only one of them
//!   moves *that* file. The other either fails (nothing left to move) or — if the winner has
//!   already created a fresh lock — moves the winner's fresh file: it sees a token it did not
//!   expect, and puts the file back (`hard_link`, which, like `O_EXCL`, fails rather than
//!   overwrite). Only after the stale file is verifiably ours is it deleted and the lock created
//!   anew, with `O_EXCL` again: a third process arriving meanwhile simply wins or loses that
//!   create.
//! - **renew** (the heartbeat): check the file still carries our token and our own clock says it
//!   has not expired, then replace it with a renewed one by `rename` (atomic: the path is never
//!   empty). A holder that finds another token, none, or its own expiry passed has lost the lock
//!   and must stop writing.
//! - **release**: rename aside, check the token, delete; someone else's lock is put back.
//!
//! What remains is narrow: a mistaken move being put back while a third process creates the lock
//! in that instant, or a holder renewing in the very microseconds its lock expires. Either way
//! the displaced holder learns it at its next check. Where even that matters, the database guard
//! (`BATCH_LOCK=db`, a named lock held by the run's own session) has no such window.
//!
//! The expiry is judged by the reader's clock. Hosts that share a directory are expected to run
//! NTP; the lifetime (minutes) dwarfs any sane drift, and the heartbeat renews it every third.
//!
//! The directory must be this account's own and writable by nobody else ([`check_dir`]): anyone
//! who can create files there could plant the lock file, or a symlink in its place, and block
//! the job or redirect its writes. Lock files are opened with `O_NOFOLLOW`, so a symlink planted
//! all the same is refused, never followed.
//!
//! [`TimestampedLock`] is the variant this replaces, kept to show why: its file name holds the
//! current second, so two processes starting in different seconds create different files and
//! both "hold the lock".

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What a lock file says about its holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// The process's start time (clock ticks since boot, `/proc/{pid}/stat`): a pid reused by a
    /// later process is not the holder.
    pub process_start: u64,
    pub token: String,
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    pub expires_ms: u64,
}

impl Holder {
    /// This process, holding for `ttl` from now.
    fn me(ttl: Duration) -> Self {
        let now = now_ms();
        Self {
            host: host_name(),
            pid: std::process::id(),
            process_start: process_start(std::process::id()).unwrap_or(0),
            token: crate::idempotency::IdempotencyKey::fresh(),
            started_ms: now,
            expires_ms: now + millis(ttl),
        }
    }

    /// Whether nobody holds the lock any more: expired, or its process on this host is gone.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        self.expires_ms <= now_ms
            || (self.host == host_name() && !process_alive(self.pid, self.process_start))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The holder's file no longer carries its token: it expired and was taken over.
    #[error("the lock {0} was taken over")]
    Lost(PathBuf),
    /// The directory is not safe for locks ([`check_dir`]).
    #[error(
        "{path}: refused as a lock directory: {reason}. Other accounts could plant or replace its \
         lock files; use a directory of this account's own that nobody else may write to \
         (chmod go-w)"
    )]
    UnsafeDir { path: PathBuf, reason: String },
}

/// Refuses a lock directory that another account could write to: one not owned by this process's
/// user, or writable by its group or by others (a sticky `/tmp` included: others may still create
/// the lock's name there first).
pub fn check_dir(dir: &Path) -> Result<(), LockFileError> {
    let meta = fs::metadata(dir).map_err(io(dir))?;
    let unsafe_dir = |reason: String| Err(LockFileError::UnsafeDir { path: dir.to_path_buf(), reason });
    if !meta.is_dir() {
        return unsafe_dir("it is not a directory".into());
    }
    if let Some(me) = effective_uid()
        && meta.uid() != me
    {
        return unsafe_dir(format!("it belongs to uid {}, not to this process's uid {me}", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "others" } else { "its group" };
        return unsafe_dir(format!("it is writable by {who} (mode {mode:04o})"));
    }
    Ok(())
}

/// Creates `dir` (and its parents) if missing, the last one private to this account (0700),
/// then checks it with [`check_dir`].
pub fn ensure_private_dir(dir: &Path) -> Result<(), LockFileError> {
    if !dir.exists() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io(dir))?;
    }
    check_dir(dir)
}

/// This process's effective uid: the owner of `/proc/self` (Linux), read without an unsafe
/// call; `None` without `/proc`, where only the mode is checked.
fn effective_uid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Open options that refuse a symlink in the file's place (`O_NOFOLLOW`: `ELOOP`).
pub fn no_follow() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.custom_flags(libc::O_NOFOLLOW);
    options
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LockFileError + '_ {
    move |source| LockFileError::Io { path: path.to_path_buf(), source }
}

/// A held lock file. Released (best effort) when dropped; [`LockFile::release`] says how it went.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    holder: Holder,
    ttl: Duration,
    released: bool,
}

/// Why [`LockFile::acquire`] did not get the lock.
#[derive(Debug, PartialEq, Eq)]
pub enum Busy {
    /// Held, and alive, by this holder.
    HeldBy(Holder),
    /// Stale, but another process took it over first.
    LostTheTakeover,
}

impl LockFile {
    /// The lock file of `job` in `dir`.
    pub fn path(dir: &Path, job: &str) -> PathBuf {
        dir.join(format!("haita-batch-{job}.lock"))
    }

    /// Takes the lock of `job` in `dir` for `ttl` (renew it with [`LockFile::renew`]), taking
    /// over a stale one. `Ok(Err(Busy))` when someone else holds it.
    pub fn acquire(dir: &Path, job: &str, ttl: Duration) -> Result<Result<Self, Busy>, LockFileError> {
        check_dir(dir)?;
        let path = Self::path(dir, job);
        let holder = Holder::me(ttl);
        if create_exclusive(&path, &holder)? {
            return Ok(Ok(Self { path, holder, ttl, released: false }));
        }
        let Some(found) = read_holder(&path)? else {
            // Gone between our create and our read (released), or being written right now:
            // either way not ours this time; the caller tries again later.
            return Ok(Err(Busy::LostTheTakeover));
        };
        if !found.is_stale(now_ms()) {
            return Ok(Err(Busy::HeldBy(found)));
        }
        // Stale: move it to a name only we use, and check that what we moved is what we judged.
        let aside = aside_path(&path, &holder.token);
        if !take_aside(&path, &aside, &found.token)? {
            return Ok(Err(Busy::LostTheTakeover));
        }
        fs::remove_file(&aside).map_err(io(&aside))?;
        log::warn!(
            "{}: took over a stale lock of {} (pid {}, expired {} ms ago)",
            path.display(),
            found.host,
            found.pid,
            now_ms().saturating_sub(found.expires_ms)
        );
        if create_exclusive(&path, &holder)? {
            Ok(Ok(Self { path, holder, ttl, released: false }))
        } else {
            Ok(Err(Busy::LostTheTakeover))
        }
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// The heartbeat: pushes the expiry `ttl` past now, if the file is still ours. An error
    /// [`LockFileError::Lost`] means it may have been taken over: the holder must stop at once.
    ///
    /// The renewed file replaces the old one by `rename` (atomic: the lock's path is never
    /// empty, so no contender can slip in while we renew — an earlier version moved the file
    /// aside first, and the test of twenty paired starts caught a contender taking that gap).
    /// Replacing is safe because only a *stale* lock is ever taken over, and a holder whose own
    /// clock says its lock has expired does not renew: it has lost, whatever the file says.
    pub fn renew(&mut self) -> Result<(), LockFileError> {
        let lost = || LockFileError::Lost(self.path.clone());
        if now_ms() >= self.holder.expires_ms {
            return Err(lost());
        }
        match read_holder(&self.path)? {
            Some(current) if current.token == self.holder.token => {}
            _ => return Err(lost()),
        }
        let renewed = Holder { expires_ms: now_ms() + millis(self.ttl), ..self.holder.clone() };
        let fresh = aside_path(&self.path, &format!("{}.new", self.holder.token));
        let _ = fs::remove_file(&fresh);
        write_synced(&fresh, &renewed, true)?;
        if let Err(e) = fs::rename(&fresh, &self.path) {
            let _ = fs::remove_file(&fresh);
            return Err(io(&self.path)(e));
        }
        self.holder = renewed;
        Ok(())
    }

    /// Ends the lock, if it is still ours; someone else's lock (ours expired and was taken
    /// over) is left alone, and that is reported as [`LockFileError::Lost`].
    pub fn release(mut self) -> Result<(), LockFileError> {
        self.released = true;
        release(&self.path, &self.holder.token)
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if !self.released
            && let Err(e) = release(&self.path, &self.holder.token)
        {
            log::warn!("releasing {}: {e}", self.path.display());
        }
    }
}

fn release(path: &Path, token: &str) -> Result<(), LockFileError> {
    let aside = aside_path(path, &format!("{token}.release"));
    if take_aside(path, &aside, token)? {
        fs::remove_file(&aside).map_err(io(&aside))
    } else {
        Err(LockFileError::Lost(path.to_path_buf()))
    }
}

/// Renames the lock at `path` to `aside` if it carries `token`: `true` when it did and the
/// file now at `aside` is ours. A file with another token was moved by mistake (someone else
/// holds the lock now) and is put back, never over a file that appeared in between.
fn take_aside(path: &Path, aside: &Path, token: &str) -> Result<bool, LockFileError> {
    match fs::rename(path, aside) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(path)(e)),
    }
    if read_holder(aside)?.is_some_and(|h| h.token == token) {
        return Ok(true);
    }
    if let Err(e) = fs::hard_link(aside, path) {
        log::error!("{}: could not put back a lock file moved by mistake: {e}", path.display());
    }
    let _ = fs::remove_file(aside);
    Ok(false)
}

/// `{path}.{suffix}`: a name in the same directory (a rename never crosses file systems) that
/// only the process owning `suffix` uses.
fn aside_path(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{suffix}"));
    PathBuf::from(name)
}

/// Creates `path` with `O_EXCL` and writes `holder` into it; `false` when it exists.
fn create_exclusive(path: &Path, holder: &Holder) -> Result<bool, LockFileError> {
    match write_synced(path, holder, true) {
        Ok(()) => Ok(true),
        Err(LockFileError::Io { source, .. }) if source.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

fn write_synced(path: &Path, holder: &Holder, exclusive: bool) -> Result<(), LockFileError> {
    let mut options = no_follow();
    options.write(true);
    if exclusive {
        options.create_new(true);
    } else {
        options.create(true).truncate(true);
    }
    let mut file = options.open(path).map_err(io(path))?;
    let text = serde_json::to_vec(holder).map_err(|e| io(path)(std::io::Error::other(e)))?;
    file.write_all(&text).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

/// The holder written in `path`; `None` if the file is gone or not (yet) a whole record (its
/// creator is between `O_EXCL` and its write).
pub fn read_holder(path: &Path) -> Result<Option<Holder>, LockFileError> {
    let read = no_follow().read(true).open(path).and_then(|mut file| {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map(|_| bytes)
    });
    match read {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// The article's variant, kept as the counter-example: `{job}.{current second}.lock`, created
/// with `O_EXCL`. It never blocks a process that starts in another second, because that process
/// creates another file.
#[derive(Debug)]
pub struct TimestampedLock {
    path: PathBuf,
}

impl TimestampedLock {
    pub fn acquire(dir: &Path, job: &str) -> Result<Option<Self>, LockFileError> {
        let second = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let path = dir.join(format!("haita-batch-{job}.{second}.lock"));
        match no_follow().write(true).create_new(true).open(&path) {
            Ok(_) => Ok(Some(Self { path })),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }
}

impl Drop for TimestampedLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

/// Field 22 of `/proc/{pid}/stat`, after the command name (which may hold spaces and parens).
fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` still runs (on this host). Without
/// `/proc` (not Linux) a process is presumed alive, and only the expiry frees its lock.
fn process_alive(pid: u32, start: u64) -> bool {
    if !Path::new("/proc/self/stat").exists() {
        return true;
    }
    process_start(pid).is_some_and(|now| start == 0 || now == start)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir()
            .join(format!("haita-lockfile-{}", crate::idempotency::IdempotencyKey::fresh()));
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn a_held_lock_is_busy_for_everyone_else_until_released() {
        let dir = scratch();
        let held = LockFile::acquire(&dir, "job", TTL).expect("io").expect("free");
        let busy = LockFile::acquire(&dir, "job", TTL).expect("io");
        assert!(matches!(busy, Err(Busy::HeldBy(h)) if h.token == held.holder().token));
        assert!(LockFile::acquire(&dir, "other-job", TTL).expect("io").is_ok(), "per job");
        held.release().expect("release");
        assert!(LockFile::acquire(&dir, "job", TTL).expect("io").is_ok());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_expired_lock_is_taken_over_and_its_old_holder_learns_it() {
        let dir = scratch();
        let mut old = LockFile::acquire(&dir, "job", Duration::from_millis(1)).expect("io").expect("free");
        std::thread::sleep(Duration::from_millis(5));
        let new = LockFile::acquire(&dir, "job", TTL).expect("io").expect("stale, taken over");
        assert!(matches!(old.renew(), Err(LockFileError::Lost(_))), "the old holder must stop");
        assert!(matches!(LockFile::acquire(&dir, "job", TTL).expect("io"), Err(Busy::HeldBy(_))));
        drop(old); // its release must not end the new holder's lock
        assert_eq!(
            read_holder(&LockFile::path(&dir, "job")).expect("io").map(|h| h.token),
            Some(new.holder().token.clone())
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_whose_process_is_gone_is_stale_before_its_expiry() {
        let dir = scratch();
        let gone = Holder { pid: u32::MAX - 1, process_start: 1, ..Holder::me(TTL) };
        write_synced(&LockFile::path(&dir, "job"), &gone, true).expect("write");
        assert!(gone.is_stale(now_ms()));
        assert!(LockFile::acquire(&dir, "job", TTL).expect("io").is_ok());
        let alive = Holder::me(TTL);
        assert!(!alive.is_stale(now_ms()), "this process is alive");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn renewing_pushes_the_expiry_back() {
        let dir = scratch();
        let mut held = LockFile::acquire(&dir, "job", TTL).expect("io").expect("free");
        let before = held.holder().expires_ms;
        std::thread::sleep(Duration::from_millis(5));
        held.renew().expect("still ours");
        let on_disk = read_holder(&LockFile::path(&dir, "job")).expect("io").expect("file");
        assert!(on_disk.expires_ms > before && on_disk.token == held.holder().token);
        let _ = fs::remove_dir_all(&dir);
    }

    /// Eight threads find the same stale lock at once, a hundred times: each time exactly one
    /// holds it after its first check (renew), and the file is that one's. Taking it over is
    /// almost always one winner outright; in the narrow window the module describes (a mistaken
    /// move put back just as a third process creates the file) two may return from `acquire`,
    /// and the displaced one learns it at its first check, before any work (`batch::start`).
    /// (Threads of one process, but every step goes through the file system.)
    #[test]
    fn of_many_that_find_the_same_stale_lock_exactly_one_takes_it() {
        let dir = scratch();
        for round in 0..100 {
            let stale = Holder { expires_ms: 1, ..Holder::me(TTL) };
            let path = LockFile::path(&dir, "job");
            let _ = fs::remove_file(&path);
            write_synced(&path, &stale, true).expect("stale lock");
            let barrier = Arc::new(Barrier::new(8));
            let winners: Vec<LockFile> = (0..8)
                .map(|_| {
                    let (dir, barrier) = (dir.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        LockFile::acquire(&dir, "job", TTL).expect("io").ok()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .filter_map(|t| t.join().expect("thread"))
                .collect();
            assert!(!winners.is_empty(), "round {round}: somebody took the stale lock over");
            let holders: Vec<LockFile> =
                winners.into_iter().filter_map(|mut w| w.renew().ok().map(|()| w)).collect();
            assert_eq!(holders.len(), 1, "round {round}: one holder after the first check");
            let on_disk = read_holder(&path).expect("io").expect("a lock file");
            assert_eq!(on_disk.token, holders[0].holder().token, "round {round}: the file is the holder's");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// A directory others may write to is refused, with a sentence saying why: anyone who can
    /// create files there can plant the lock (or a symlink in its place) and block or redirect
    /// the job.
    #[test]
    fn a_lock_directory_others_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod");
        let refused = LockFile::acquire(&dir, "job", TTL).expect_err("refused").to_string();
        assert!(refused.contains("writable by") && refused.contains("0777"), "{refused}");
        assert!(!LockFile::path(&dir, "job").exists(), "no lock file was created");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(LockFile::acquire(&dir, "job", TTL).expect("io").is_ok(), "a private directory is fine");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A lock file replaced by a symlink is not followed: the read refuses it rather than
    /// reading (or the job trusting) whatever file it points to.
    #[test]
    fn a_lock_file_that_is_a_symlink_is_not_followed() {
        let dir = scratch();
        let elsewhere = dir.join("elsewhere.json");
        let planted = Holder { expires_ms: u64::MAX, ..Holder::me(TTL) };
        fs::write(&elsewhere, serde_json::to_vec(&planted).expect("json")).expect("write");
        std::os::unix::fs::symlink(&elsewhere, LockFile::path(&dir, "job")).expect("symlink");
        let refused = LockFile::acquire(&dir, "job", TTL);
        assert!(matches!(refused, Err(LockFileError::Io { .. })), "refused, not followed: {refused:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_timestamped_variant_lets_two_hold_it_a_second_apart() {
        let dir = scratch();
        let first = TimestampedLock::acquire(&dir, "job").expect("io");
        assert!(first.is_some());
        std::thread::sleep(Duration::from_millis(1100));
        let second = TimestampedLock::acquire(&dir, "job").expect("io");
        assert!(second.is_some(), "both hold the 'lock': the article's bug");
        // The real lock file refuses the second.
        let held = LockFile::acquire(&dir, "job", TTL).expect("io").expect("free");
        std::thread::sleep(Duration::from_millis(1100));
        assert!(LockFile::acquire(&dir, "job", TTL).expect("io").is_err());
        drop(held);
        let _ = fs::remove_dir_all(&dir);
    }
}
