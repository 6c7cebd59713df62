//! Child environments (base + per-task overlay) and the PATH search for argv[0].

use std::collections::HashSet;
use std::ffi::{c_char, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;

/// Used when the child's environment has no PATH, as execvp does.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

fn key(entry: &[u8]) -> &[u8] {
    entry.split(|&b| b == b'=').next().unwrap_or(entry)
}

fn value_of<'a>(entries: impl Iterator<Item = &'a CString>, name: &[u8]) -> Option<&'a [u8]> {
    entries
        .map(|e| e.as_bytes())
        .find(|e| key(e) == name)
        .map(|e| &e[name.len() + 1..])
}

fn to_entries(entries: impl IntoIterator<Item = Vec<u8>>) -> Result<Vec<CString>, String> {
    entries
        .into_iter()
        .map(|e| {
            if !e.contains(&b'=') {
                return Err(format!(
                    "env entry {:?} has no '='",
                    String::from_utf8_lossy(&e)
                ));
            }
            CString::new(e).map_err(|_| "env entry contains a NUL byte".to_string())
        })
        .collect()
}

/// The environment every child starts from, converted once.
pub struct BaseEnv {
    vars: Vec<CString>,
}

impl BaseEnv {
    pub fn new(entries: Vec<Vec<u8>>) -> io::Result<BaseEnv> {
        let vars =
            to_entries(entries).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(BaseEnv { vars })
    }

    /// NULL-terminated pointers to the base entries.
    pub fn pointers(&self) -> Vec<*const c_char> {
        self.vars
            .iter()
            .map(|v| v.as_ptr())
            .chain([ptr::null()])
            .collect()
    }

    /// The base entries whose keys the overlay does not set, then the overlay's.
    pub fn overlaid(&self, extra: &Overlay) -> Vec<*const c_char> {
        let small = extra.vars.len() <= 8; // a linear scan beats hashing for a few keys
        let keys: HashSet<&[u8]> = if small {
            HashSet::new()
        } else {
            extra.vars.iter().map(|v| key(v.as_bytes())).collect()
        };
        let overridden = |k: &[u8]| {
            if small {
                extra.vars.iter().any(|v| key(v.as_bytes()) == k)
            } else {
                keys.contains(k)
            }
        };
        self.vars
            .iter()
            .filter(|v| !overridden(key(v.as_bytes())))
            .chain(&extra.vars)
            .map(|v| v.as_ptr())
            .chain([ptr::null()])
            .collect()
    }

    pub fn path(&self) -> &[u8] {
        value_of(self.vars.iter(), b"PATH").unwrap_or(DEFAULT_PATH)
    }
}

/// A task's extra `K=V` entries; for a key given twice the last one wins.
pub struct Overlay {
    vars: Vec<CString>,
}

impl Overlay {
    pub fn new(entries: &[Vec<u8>]) -> Result<Overlay, String> {
        let mut seen = HashSet::new();
        let mut vars = to_entries(entries.iter().rev().cloned())?;
        vars.retain(|v| seen.insert(key(v.as_bytes()).to_vec()));
        vars.reverse();
        Ok(Overlay { vars })
    }

    /// PATH, when the overlay sets it.
    pub fn path(&self) -> Option<&[u8]> {
        value_of(self.vars.iter(), b"PATH")
    }
}

/// execvp's search: the first regular, executable `dir/name` in `path`; ENOENT if none, or
/// EACCES if a candidate existed but was not executable.
pub fn search_path(name: &[u8], path: &[u8]) -> Result<CString, i32> {
    let mut errno = libc::ENOENT;
    for dir in path.split(|&b| b == b':') {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let mut full = Vec::with_capacity(dir.len() + 1 + name.len());
        full.extend_from_slice(dir);
        full.push(b'/');
        full.extend_from_slice(name);
        let Ok(meta) = std::fs::metadata(std::ffi::OsStr::from_bytes(&full)) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let Ok(c) = CString::new(full) else { continue };
        // SAFETY: c is NUL-terminated.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
            return Ok(c);
        }
        errno = libc::EACCES;
    }
    Err(errno)
}
