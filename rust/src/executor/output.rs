//! Reading a task's captured output from its spool file (see agent/executor.py): capped,
//! nothing read when it is empty, and whether the file may be reused -- a write lease is
//! granted only while no other descriptor has it open (a process the task left behind may
//! still hold it). A reusable file that had output is truncated here, so the next task's
//! child opens it without O_TRUNC (a truncate costs a journal update even on an empty file).

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

const TRUNCATED_HEAD: &[u8] = b"[...truncated...]\n";
const TRUNCATED_TAIL: &[u8] = b"\n[...truncated...]";

/// (the output -- its first `cap` bytes, or with `keep_tail` its last; None when there is no
/// such file or it cannot be read -- and whether the file may be reused: nothing else has it
/// open and it is empty again, or it does not exist).
pub fn read_capped(path: &Path, cap: u64, keep_tail: bool) -> (Option<Vec<u8>>, bool) {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (None, true),
        // Not writable (a task made it read-only) or no descriptor left: read what it holds,
        // but never hand it out again.
        Err(_) => {
            let data = std::fs::File::open(path)
                .ok()
                .and_then(|f| read_from(&f, cap, keep_tail));
            return (data.map(|(d, _)| d), false);
        }
    };
    let fd = f.as_raw_fd();
    // SAFETY: plain fcntl calls on a descriptor we own. The lease is taken before the read, so
    // the size read is final (nothing else can have the file open while it is held), and let
    // go at once, not left to close(): a copy of the descriptor in a child being spawned by
    // another thread would keep it, and an open of the file would then break it (SIGIO).
    let leased = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK as libc::c_int) } == 0;
    let read = read_from(&f, cap, keep_tail);
    let mut free = false;
    if leased {
        // Emptied under the lease: the next task's child opens it without O_TRUNC.
        free = match &read {
            Some((_, 0)) => true,
            Some(_) => f.set_len(0).is_ok(),
            None => false,
        };
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK as libc::c_int) };
    }
    match read {
        Some((data, _)) => (Some(data), free),
        None => (None, false),
    }
}

/// The first (or with `keep_tail` the last) `cap` bytes of an open file, marked when cut,
/// and the file's size.
fn read_from(f: &std::fs::File, cap: u64, keep_tail: bool) -> Option<(Vec<u8>, u64)> {
    let size = f.metadata().ok()?.len();
    let mut data = Vec::new();
    if size > 0 {
        let (off, len) = match (size <= cap, keep_tail) {
            (true, _) => (0, size),
            (false, true) => (size - cap, cap),
            (false, false) => (0, cap),
        };
        let mut buf = vec![0u8; len as usize];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], off + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        buf.truncate(got);
        if size > cap && keep_tail {
            data.extend_from_slice(TRUNCATED_HEAD);
            data.extend_from_slice(&buf);
        } else if size > cap {
            data = buf;
            data.extend_from_slice(TRUNCATED_TAIL);
        } else {
            data = buf;
        }
    }
    Some((data, size))
}
