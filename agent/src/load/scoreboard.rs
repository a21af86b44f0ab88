//! Apache's scoreboard read straight from shared memory (`apache_scoreboard`),
//! as SRLB's agent read it: `BusyWorkers` exactly as mod_status counts it,
//! without a status request (which needs a free worker, so a saturated server
//! answers it late, and counts itself).
//!
//! Where it lives. Apache 2.4 with `ScoreBoardFile PATH` calls
//! `apr_shm_create(size, PATH)` (server/scoreboard.c). Debian's APR 1.7 is
//! built with `APR_USE_SHMEM_MMAP_SHM` (libapr-1 imports `shm_open`, not
//! `shmget`): the segment is the POSIX object `/ShM.<h1>H<h2>`
//! (`/dev/shm/...`), `h1` being `apr_hashfunc_default` (times 33) of PATH and
//! `h2` Sedgewick's RS hash of it (shmem/unix/shm.c, `make_shm_open_safe_name`);
//! no file is made at PATH. An APR built with `APR_USE_SHMEM_MMAP_TMP` maps
//! PATH itself, same content; one with SysV `shmget` leaves an 8-byte file at
//! PATH, not supported here.
//!
//! Layout (x86_64, httpd 2.4 include/scoreboard.h, APR's 8-byte alignment of
//! each part): an 8-byte header holding the mapping's size (APR), then
//! `global_score` (56: server_limit, thread_limit, ...), `process_score`
//! x server_limit (40: pid at 0, quiescing at 8; 36 before 2.4.63's
//! `wait_io`, aligned to 40 all the same), `worker_score` x server_limit x
//! thread_limit (336 with threads and times(): status byte at 20).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

use super::Scoreboard;

pub const HEADER: usize = 8;
pub const GLOBAL: usize = 56;
pub const PROCESS: usize = 40;
pub const WORKER: usize = 336;
const WORKER_STATUS: usize = 20;
const PROCESS_QUIESCING: usize = 8;
/// Apache's own hard limits (MAX_SERVER_LIMIT of prefork, MAX_THREAD_LIMIT of worker/event).
const MAX_SERVER_LIMIT: u64 = 200_000;
const MAX_THREAD_LIMIT: u64 = 100_000;
// status values (scoreboard.h)
const SERVER_DEAD: u8 = 0;
const SERVER_STARTING: u8 = 1;
const SERVER_READY: u8 = 2;
const SERVER_GRACEFUL: u8 = 9;
const SERVER_IDLE_KILL: u8 = 10;
const SERVER_NUM_STATUS: u8 = 11;

/// The size Apache 2.4's scoreboard for these limits takes, APR's header included.
pub fn image_size(server_limit: u64, thread_limit: u64) -> u64 {
    (HEADER + GLOBAL) as u64 + server_limit * PROCESS as u64 + server_limit * thread_limit * WORKER as u64
}

/// APR's POSIX shared memory name for a named segment at `file` (Debian's APR).
pub fn shm_name(file: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let (mut h1, mut h2, mut a) = (0u32, 0u32, 63689u32);
    for &c in file.as_os_str().as_bytes() {
        h1 = h1.wrapping_mul(33).wrapping_add(u32::from(c));
        h2 = h2.wrapping_mul(a).wrapping_add(u32::from(c));
        a = a.wrapping_mul(378_551);
    }
    format!("/ShM.{h1:x}H{h2:x}")
}

/// A read-only mapping, read with volatile loads: Apache writes it as we read.
struct Map {
    ptr: *const u8,
    len: usize,
    file: File,
}

// The mapping is only read, each byte with a volatile load.
unsafe impl Send for Map {}
unsafe impl Sync for Map {}

impl Map {
    fn open(path: &Path) -> std::io::Result<Map> {
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Ok(Map { ptr: std::ptr::null(), len, file });
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only shared mapping of an open file; unmapped on drop.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr: ptr as *const u8, len, file })
    }

    fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        assert!(off + N <= self.len, "scoreboard read past its end");
        // SAFETY: in bounds (checked), [u8; N] has alignment 1.
        unsafe { std::ptr::read_volatile(self.ptr.add(off) as *const [u8; N]) }
    }
    fn u8(&self, off: usize) -> u8 {
        self.bytes::<1>(off)[0]
    }
    fn i32(&self, off: usize) -> i32 {
        i32::from_ne_bytes(self.bytes(off))
    }
    fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.bytes(off))
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: mapped in `open` with this length, not used after.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        }
    }
}

/// An open scoreboard, its layout checked.
pub struct Board {
    map: Map,
    /// What was mapped: the /dev/shm object, or the ScoreBoardFile itself.
    pub source: PathBuf,
    pub server_limit: u32,
    pub thread_limit: u32,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Board({}, server_limit {}, thread_limit {})", self.source.display(), self.server_limit, self.thread_limit)
    }
}

impl Board {
    /// Open the scoreboard Apache keeps for `ScoreBoardFile file` and check
    /// its layout. The error names the file and what was looked for.
    pub fn open(file: &Path) -> Result<Board, String> {
        let shm = Path::new("/dev/shm").join(&shm_name(file)[1..]);
        let source = if shm.exists() { shm.clone() } else { file.to_path_buf() };
        let map = match Map::open(&source) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "Apache's scoreboard for ScoreBoardFile {} not found (neither {}, APR's shared memory for it, nor the file): is that Apache running, with that ScoreBoardFile?",
                    file.display(),
                    shm.display()
                ))
            }
            Err(e) => return Err(format!("scoreboard {} (ScoreBoardFile {}): {e}", source.display(), file.display())),
        };
        Board::check(map, source).map_err(|e| format!("scoreboard {} (ScoreBoardFile {}): {}", e.0.display(), file.display(), e.1))
    }

    fn check(map: Map, source: PathBuf) -> Result<Board, (PathBuf, String)> {
        let len = map.len as u64;
        let fail = |why: String| Err((source.clone(), why));
        if len < (HEADER + GLOBAL) as u64 {
            return fail(format!("truncated: {len} bytes, less than the {} of APR's size header and Apache's global_score (a SysV shmget build of APR leaves an 8-byte file: not supported)", HEADER + GLOBAL));
        }
        let header = map.u64(0);
        if header != len {
            return fail(format!("its APR header says {header} bytes but it holds {len}: not an APR shared memory segment, or truncated"));
        }
        let (s, t) = (map.i32(HEADER), map.i32(HEADER + 4));
        if s < 1 || s as u64 > MAX_SERVER_LIMIT || t < 1 || t as u64 > MAX_THREAD_LIMIT {
            return fail(format!("server_limit {s} and thread_limit {t} in its global_score are out of range: not Apache 2.4's scoreboard"));
        }
        let want = image_size(s as u64, t as u64);
        if want != len {
            return fail(format!(
                "{len} bytes, but Apache 2.4's x86_64 scoreboard for its server_limit {s} and thread_limit {t} takes {want} \
                 (header {HEADER}, global_score {GLOBAL}, process_score {PROCESS}, worker_score {WORKER}): another Apache version or build"
            ));
        }
        let board = Board { map, source, server_limit: s as u32, thread_limit: t as u32 };
        if let Some((i, st)) = (0..board.slots() as usize).map(|i| (i, board.status(i))).find(|&(_, st)| st >= SERVER_NUM_STATUS) {
            return Err((board.source.clone(), format!("worker {i} has status {st} (Apache's are 0 to 10): not Apache 2.4's worker_score layout")));
        }
        Ok(board)
    }

    /// Worker slots: server_limit x thread_limit.
    pub fn slots(&self) -> u32 {
        self.server_limit * self.thread_limit
    }

    fn workers_at(&self) -> usize {
        HEADER + GLOBAL + self.server_limit as usize * PROCESS
    }

    fn status(&self, slot: usize) -> u8 {
        self.map.u8(self.workers_at() + slot * WORKER + WORKER_STATUS)
    }

    /// BusyWorkers as mod_status counts it (modules/generators/mod_status.c):
    /// workers of live, not quiescing processes, not dead, starting, ready,
    /// gracefully finishing or being killed idle. Fails if Apache has removed
    /// the segment (stopped, or restarted and made a new one) or it changed.
    pub fn busy(&self) -> Result<u32, String> {
        let removed = self.map.file.metadata().map(|m| m.nlink() == 0).unwrap_or(true);
        if removed {
            return Err(format!("{} was removed (Apache stopped or restarted)", self.source.display()));
        }
        if (self.map.i32(HEADER), self.map.i32(HEADER + 4)) != (self.server_limit as i32, self.thread_limit as i32) {
            return Err(format!("{}: server_limit or thread_limit changed", self.source.display()));
        }
        let mut busy = 0;
        for i in 0..self.server_limit as usize {
            let p = HEADER + GLOBAL + i * PROCESS;
            if self.map.i32(p) == 0 || self.map.u8(p + PROCESS_QUIESCING) != 0 {
                continue;
            }
            for j in 0..self.thread_limit as usize {
                let st = self.status(i * self.thread_limit as usize + j);
                if !matches!(st, SERVER_DEAD | SERVER_STARTING | SERVER_READY | SERVER_GRACEFUL | SERVER_IDLE_KILL) {
                    busy += 1;
                }
            }
        }
        Ok(busy)
    }
}

/// Read the scoreboard every `every` forever (`board`: opened at start).
/// On failure keep the last count, count the poll as failed, and open the
/// scoreboard again by its name (Apache makes a new one when it starts);
/// a warning when reads start failing, a line when they work again.
pub async fn poll(counters: Arc<Scoreboard>, mut board: Option<Board>, file: PathBuf, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let mut got = board.as_ref().map_or_else(|| Err("not open".into()), Board::busy);
        if got.is_err() {
            board = None;
            got = Board::open(&file).and_then(|b| {
                let n = b.busy();
                info!(scoreboard = %b.source.display(), server_limit = b.server_limit, thread_limit = b.thread_limit, "Apache scoreboard opened");
                board = Some(b);
                n
            });
        }
        counters.polls.fetch_add(1, Ordering::Relaxed);
        match got {
            Ok(n) => {
                counters.busy.store(n, Ordering::Release);
                if std::mem::take(&mut failing) {
                    info!(file = %file.display(), busy = n, "Apache scoreboard read again");
                }
            }
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                if !std::mem::replace(&mut failing, true) {
                    warn!(error = %e, "Apache scoreboard unreadable: keeping the last count ({}) until it is back", counters.busy.load(Ordering::Acquire));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "scoreboard_tests.rs"]
mod tests;
