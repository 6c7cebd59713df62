//! Thin RAII wrappers over posix_spawn(3) and its attribute/file-action objects.
//!
//! glibc's posix_spawn uses clone(CLONE_VFORK): no page-table copy, so spawning stays cheap
//! however large the agent's heap gets, and exec errors come back as return values.

use std::ffi::{c_char, CStr};
use std::io;
use std::mem::MaybeUninit;
use std::ptr;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Spawn attributes shared by every task.
pub struct Attr(libc::posix_spawnattr_t);

impl Attr {
    /// Own process group (so that killpg reaches the whole task), empty signal mask and default
    /// dispositions for every signal: Python ignores SIGPIPE, children must not inherit that.
    pub fn for_task() -> io::Result<Attr> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: init writes a valid object; the calls below only configure it.
        unsafe {
            check(libc::posix_spawnattr_init(raw.as_mut_ptr()))?;
            let mut attr = Attr(raw.assume_init());
            let mut none = MaybeUninit::uninit();
            libc::sigemptyset(none.as_mut_ptr());
            let mut all = MaybeUninit::uninit();
            libc::sigfillset(all.as_mut_ptr());
            check(libc::posix_spawnattr_setsigmask(&mut attr.0, none.as_ptr()))?;
            check(libc::posix_spawnattr_setsigdefault(
                &mut attr.0,
                all.as_ptr(),
            ))?;
            check(libc::posix_spawnattr_setpgroup(&mut attr.0, 0))?;
            let flags = libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut attr.0,
                flags as libc::c_short,
            ))?;
            Ok(attr)
        }
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialized in for_task.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// What the child does between fork and exec. glibc copies the paths it is given.
pub struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    pub fn new() -> io::Result<FileActions> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: init writes a valid, empty action list.
        unsafe {
            check(libc::posix_spawn_file_actions_init(raw.as_mut_ptr()))?;
            Ok(FileActions(raw.assume_init()))
        }
    }

    pub fn open(&mut self, fd: i32, path: &CStr, flags: i32, mode: libc::mode_t) -> io::Result<()> {
        // SAFETY: valid object and NUL-terminated path.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, path.as_ptr(), flags, mode)
        })
    }

    pub fn dup2(&mut self, from: i32, to: i32) -> io::Result<()> {
        // SAFETY: valid object.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }

    pub fn chdir(&mut self, dir: &CStr) -> io::Result<()> {
        // SAFETY: valid object and NUL-terminated path (glibc >= 2.29).
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, dir.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in new.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// Starts `path` with NULL-terminated `argv` and `envp`; returns the pid or the errno.
pub fn spawn(
    path: &CStr,
    argv: &[*const c_char],
    envp: &[*const c_char],
    actions: &FileActions,
    attr: &Attr,
) -> Result<libc::pid_t, i32> {
    debug_assert!(argv.last() == Some(&ptr::null()) && envp.last() == Some(&ptr::null()));
    let mut pid = 0;
    // SAFETY: every pointer refers to a NUL-terminated string that outlives the call, and both
    // arrays end with NULL; posix_spawn does not write through argv/envp despite their type.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr() as *const *mut c_char,
            envp.as_ptr() as *const *mut c_char,
        )
    };
    if rc == 0 {
        Ok(pid)
    } else {
        Err(rc)
    }
}
