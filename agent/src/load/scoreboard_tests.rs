use super::*;

const BUSY_READ: u8 = 3;
const BUSY_WRITE: u8 = 4;
const CLOSING: u8 = 8;

/// A scoreboard image as Apache 2.4 on x86_64 lays it out, APR header included:
/// `procs[i]` = (pid, quiescing), `status[i * t + j]` = worker j of process i.
fn image(s: usize, t: usize, procs: &[(i32, bool)], status: &[u8]) -> Vec<u8> {
    let len = image_size(s as u64, t as u64) as usize;
    let mut b = vec![0u8; len];
    b[..8].copy_from_slice(&(len as u64).to_ne_bytes());
    b[8..12].copy_from_slice(&(s as i32).to_ne_bytes());
    b[12..16].copy_from_slice(&(t as i32).to_ne_bytes());
    for (i, &(pid, quiescing)) in procs.iter().enumerate() {
        let p = HEADER + GLOBAL + i * PROCESS;
        b[p..p + 4].copy_from_slice(&pid.to_ne_bytes());
        b[p + 8] = u8::from(quiescing);
    }
    for (k, &st) in status.iter().enumerate() {
        b[HEADER + GLOBAL + s * PROCESS + k * WORKER + 20] = st;
    }
    b
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str, bytes: &[u8]) -> Tmp {
        let p = std::env::temp_dir().join(format!("huntlb-scoreboard-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn sizes_are_apache_2_4s_on_x86_64() {
    // 8 prefork workers: the 3072-byte /dev/shm/ShM.* objects of this machine's replicas
    assert_eq!(image_size(8, 1), 3072);
    assert_eq!(image_size(6, 1), 8 + 56 + 6 * 40 + 6 * 336);
}

#[test]
fn the_shm_name_is_aprs() {
    // seen on this machine: a replica's Apache with this ScoreBoardFile made this object
    assert_eq!(shm_name(Path::new("/tmp/huntlb-wiki-m4hzr4te/replica-127.187.2.2/run/scoreboard")), "/ShM.acfe7cc7H22689bf1");
}

#[test]
fn counts_busy_workers_as_mod_status_does() {
    // prefork: one worker per process; every status once, and a quiescing and a dead process
    let status = [SERVER_READY, BUSY_READ, BUSY_WRITE, 5, 6, 7, CLOSING, SERVER_GRACEFUL, SERVER_IDLE_KILL, SERVER_STARTING, BUSY_WRITE, BUSY_WRITE, SERVER_DEAD];
    let mut procs: Vec<(i32, bool)> = (0..status.len()).map(|i| (1000 + i as i32, false)).collect();
    procs[10].1 = true; // quiescing: not counted
    procs[11].0 = 0; // no process: not counted
    let f = Tmp::new("prefork", &image(status.len(), 1, &procs, &status));
    let b = Board::open(&f.0).unwrap();
    assert_eq!((b.server_limit, b.thread_limit, b.slots()), (13, 1, 13));
    assert_eq!(b.source, f.0, "no /dev/shm object for this path: the file itself is mapped");
    assert_eq!(b.busy().unwrap(), 6, "R W K L D C are busy");
}

#[test]
fn counts_threads_of_each_process() {
    let status = [BUSY_WRITE, SERVER_READY, BUSY_WRITE, BUSY_READ, CLOSING, CLOSING];
    let f = Tmp::new("threads", &image(3, 2, &[(10, false), (11, false), (0, false)], &status));
    let b = Board::open(&f.0).unwrap();
    assert_eq!(b.slots(), 6);
    assert_eq!(b.busy().unwrap(), 3);
}

#[test]
fn follows_apache_writing_the_image() {
    let f = Tmp::new("live", &image(4, 1, &[(1, false), (2, false), (3, false), (4, false)], &[SERVER_READY; 4]));
    let b = Board::open(&f.0).unwrap();
    assert_eq!(b.busy().unwrap(), 0);
    // a write through another handle, as Apache's children write theirs
    use std::os::unix::fs::FileExt;
    let w = std::fs::OpenOptions::new().write(true).open(&f.0).unwrap();
    for k in 0..4 {
        w.write_all_at(&[BUSY_WRITE], (HEADER + GLOBAL + 4 * PROCESS + k * WORKER + 20) as u64).unwrap();
        assert_eq!(b.busy().unwrap(), k as u32 + 1);
    }
}

#[test]
fn a_truncated_file_is_refused_naming_it() {
    let full = image(8, 1, &[(1, false); 8], &[SERVER_READY; 8]);
    let f = Tmp::new("truncated", &full[..2000]);
    let e = Board::open(&f.0).unwrap_err();
    assert!(e.contains(&f.0.display().to_string()) && e.contains("header says 3072 bytes but it holds 2000"), "{e}");
    let f = Tmp::new("tiny", &full[..8]);
    let e = Board::open(&f.0).unwrap_err();
    assert!(e.contains("truncated: 8 bytes"), "{e}");
}

#[test]
fn a_wrong_size_is_refused_naming_it() {
    // what an Apache whose process_score is 36 bytes unaligned would write: a
    // consistent header, but not the size the limits need here
    let mut b = image(8, 1, &[(1, false); 8], &[SERVER_READY; 8]);
    b.truncate(3072 - 8 * 4);
    let len = b.len() as u64;
    b[..8].copy_from_slice(&len.to_ne_bytes());
    let f = Tmp::new("wrongsize", &b);
    let e = Board::open(&f.0).unwrap_err();
    assert!(e.contains(&f.0.display().to_string()) && e.contains("3040 bytes") && e.contains("takes 3072") && e.contains("another Apache version"), "{e}");
    // limits that are not Apache's
    let mut b = image(8, 1, &[(1, false); 8], &[SERVER_READY; 8]);
    b[8..12].copy_from_slice(&0i32.to_ne_bytes());
    let e = Board::open(&Tmp::new("zero", &b).0).unwrap_err();
    assert!(e.contains("server_limit 0"), "{e}");
    // a status no Apache 2.4 writes: the worker_score is laid out otherwise
    let e = Board::open(&Tmp::new("status", &image(2, 1, &[(1, false); 2], &[SERVER_READY, 42])).0).unwrap_err();
    assert!(e.contains("worker 1 has status 42"), "{e}");
}

#[test]
fn a_missing_scoreboard_is_named() {
    let p = std::env::temp_dir().join("huntlb-no-such-scoreboard");
    let e = Board::open(&p).unwrap_err();
    assert!(e.contains("/tmp/huntlb-no-such-scoreboard") && e.contains("/dev/shm/ShM.") && e.contains("not found"), "{e}");
}

#[test]
fn a_removed_scoreboard_fails_the_read() {
    let f = Tmp::new("removed", &image(2, 1, &[(1, false); 2], &[BUSY_WRITE, SERVER_READY]));
    let b = Board::open(&f.0).unwrap();
    assert_eq!(b.busy().unwrap(), 1);
    std::fs::remove_file(&f.0).unwrap();
    assert!(b.busy().unwrap_err().contains("was removed"));
}

/// The cost of one poll on a live scoreboard:
/// `HUNTLB_SCOREBOARD=/path/to/ScoreBoardFile cargo test -p huntlb-agent -- --ignored --nocapture read_cost`
#[test]
#[ignore]
fn read_cost() {
    let file = std::env::var("HUNTLB_SCOREBOARD").expect("HUNTLB_SCOREBOARD: a running Apache's ScoreBoardFile");
    let b = Board::open(Path::new(&file)).unwrap();
    let n = 100_000;
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        sum += u64::from(b.busy().unwrap());
    }
    let per = t.elapsed() / n;
    let t = std::time::Instant::now();
    for _ in 0..1000 {
        drop(Board::open(Path::new(&file)).unwrap());
    }
    println!("{b:?}: a poll {per:?}, an open {:?} (mean busy {:.2})", t.elapsed() / 1000, sum as f64 / f64::from(n));
}
