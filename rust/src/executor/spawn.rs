//! Process creation: clone(CLONE_VM | CLONE_VFORK) onto a stack the spawner reuses, then the
//! child's few syscalls and execve.
//!
//! This is what glibc's posix_spawn does (no page-table copy, so spawning stays cheap however
//! large the agent's heap gets; exec errors come back as return values), without two costs it
//! pays on every call: a fresh child stack mmap'd, mprotect'd and munmap'd -- the munmap is a
//! TLB shootdown across the agent's threads -- and a sigaction for each of the 64 signals in
//! every child. Here the stack lives as long as a spawn worker, and the child resets only the
//! signals that are not SIG_DFL in this process (a handful). Measured in C on this kind of
//! machine (bench/spawn_floor/spawn_clone.c): 76 -> 55 us of spawner CPU per process,
//! children 692 -> 673 us.
//!
//! The child runs on the parent's memory until execve: it makes raw syscalls only (libc
//! wrappers can be replaced by LD_PRELOAD libraries -- I/O profilers such as Darshan take
//! locks and allocate in theirs), allocates nothing, and reports a failure through the shared
//! `ChildArgs` before it exits.
//!
//! The child closes every descriptor above stdio before it opens its outputs, but one: a
//! spawn may pass one of the parent's descriptors on as a given number (`PassFd`: an MPI
//! rank's PMI connection).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::ptr;

/// Bytes of a child stack: the child only makes a few libc calls (glibc's own spawn uses 32
/// KiB plus the argv size for the same steps).
const STACK_BYTES: usize = 64 * 1024;

/// A child stack with a guard page below it, reused for every process one worker spawns.
pub struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    pub fn new() -> io::Result<Stack> {
        // SAFETY: sysconf is always safe to call.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = STACK_BYTES + page;
        // SAFETY: an anonymous private mapping; checked below.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of our own mapping becomes the guard (stacks grow down).
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    fn top(&self) -> *mut c_void {
        // 16-byte aligned: the mapping is page aligned and len a multiple of the page.
        // SAFETY: one past the end of our mapping, as clone expects.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: our mapping; no child runs on it any more (CLONE_VFORK waited for each).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The signals a child must set back to SIG_DFL: every one that is not SIG_DFL in this
/// process, and glibc's internal ones (32 up to SIGRTMIN, which its sigaction hides). A
/// handler would run the agent's code on the agent's memory in a child that shares it; an
/// ignored signal (Python ignores SIGPIPE) must not reach the task. Taken once per batch:
/// Python changes dispositions only from its main thread, which waits for the batch (native
/// code in another thread that installed a handler meanwhile would leave it set in children
/// until their exec, a window of microseconds).
pub struct SignalReset {
    signals: Vec<c_int>,
}

impl SignalReset {
    pub fn now() -> SignalReset {
        let rtmin = libc::SIGRTMIN();
        let mut signals: Vec<c_int> = (32..rtmin).collect();
        for sig in (1..32).chain(rtmin..libc::SIGRTMAX() + 1) {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: a query (no new action).
            if unsafe { libc::sigaction(sig, ptr::null(), old.as_mut_ptr()) } != 0 {
                continue;
            }
            // SAFETY: filled by the successful call.
            if unsafe { old.assume_init() }.sa_sigaction != libc::SIG_DFL {
                signals.push(sig);
            }
        }
        SignalReset { signals }
    }
}

/// What the child does between clone and exec: chdir, then stdin from /dev/null and stdout/
/// stderr to files (relative to the new cwd) or /dev/null.
pub struct ChildActions {
    cwd: Option<CString>,
    stdout: Option<CString>,
    stderr: Option<CString>,
    /// stderr is the same file as stdout: one descriptor, so writes to both append in order.
    share: bool,
    /// O_TRUNC on the output files; off for files the caller knows are empty (the agent's
    /// reused spool files), where truncating costs a journal update per open.
    truncate: bool,
}

impl ChildActions {
    pub fn new(
        cwd: Option<CString>,
        stdout: Option<CString>,
        stderr: Option<CString>,
        truncate: bool,
    ) -> ChildActions {
        let share = stdout == stderr;
        ChildActions {
            cwd,
            stdout,
            stderr,
            share,
            truncate,
        }
    }
}

/// One descriptor of the parent that the child inherits as `target` (>= 3; the task's stdio
/// is set up after it): an MPI rank's end of its PMI socketpair (`PMI_FD`, agent/pmi.py).
/// The caller keeps `fd` open until the spawn returns, and closes its copy afterwards if the
/// child's end must see EOF when the other side goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassFd {
    pub fd: c_int,
    pub target: c_int,
}

impl PassFd {
    /// `fd` as the child's descriptor 3, the first after stdio.
    pub fn at3(fd: c_int) -> PassFd {
        PassFd { fd, target: 3 }
    }
}

/// Shared between the parent and the child (CLONE_VM): the child writes `errno` before it
/// exits when a step fails; the parent reads it after clone returns (CLONE_VFORK: by then
/// the child has exec'd or exited).
struct ChildArgs<'a> {
    path: &'a CStr,
    argv: *const *const c_char,
    envp: *const *const c_char,
    actions: &'a ChildActions,
    pass_fd: Option<PassFd>,
    reset: &'a [c_int],
    errno: c_int,
}

const DEV_NULL: &CStr = c"/dev/null";

fn errno() -> c_int {
    // SAFETY: the calling thread's errno (in a vfork child: its parent thread's, which waits).
    unsafe { *libc::__errno_location() }
}

/// A raw syscall's result: Ok(value) or Err(errno).
fn sys(r: libc::c_long) -> Result<libc::c_long, c_int> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// The kernel's struct sigaction (handler, flags, restorer, mask on x86-64 and arm64); all
/// zeros is SIG_DFL with no flags and an empty mask on every layout.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Opens `path` onto descriptor `target`.
///
/// SAFETY: to be called in the child only (it replaces the child's descriptors).
unsafe fn open_onto(target: c_int, path: &CStr, flags: c_int) -> Result<(), c_int> {
    let fd = sys(libc::syscall(
        libc::SYS_openat,
        libc::AT_FDCWD,
        path.as_ptr(),
        flags,
        0o644 as libc::c_uint,
    ))? as c_int;
    if fd != target {
        sys(libc::syscall(libc::SYS_dup3, fd, target, 0))?;
        libc::syscall(libc::SYS_close, fd);
    }
    Ok(())
}

/// The child's steps; returns the errno of the one that failed (execve returns only then).
///
/// SAFETY: runs in the vfork child, before exec: raw syscalls only, no allocation, no locks,
/// no panics.
unsafe fn child_steps(a: &ChildArgs) -> c_int {
    let dfl = KernelSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for &sig in a.reset {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &dfl as *const KernelSigaction,
            ptr::null_mut::<KernelSigaction>(),
            8usize,
        );
    }
    let act = a.actions;
    let file_flags = libc::O_WRONLY | libc::O_CREAT | if act.truncate { libc::O_TRUNC } else { 0 };
    let steps = || -> Result<(), c_int> {
        // Own process group: killpg reaches the whole task.
        sys(libc::syscall(libc::SYS_setpgid, 0, 0))?;
        if let Some(dir) = &act.cwd {
            sys(libc::syscall(libc::SYS_chdir, dir.as_ptr()))?;
        }
        // Nothing of the parent's but what we set up below: the task inherits no descriptor
        // (close-on-exec does that too), and a parent whose table is full -- a flood of
        // connections at the agent's ports -- cannot make the task's opens fail (EMFILE).
        // A passed descriptor is put in place first (it may be one of the parent's 0-2,
        // which the opens below replace), without close-on-exec, and the rest closed
        // around it.
        match a.pass_fd {
            None => {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            }
            Some(PassFd { fd, target }) => {
                if fd == target {
                    // dup3 onto itself is EINVAL; FD_CLOEXEC is the only descriptor flag
                    sys(libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFD, 0))?;
                } else {
                    sys(libc::syscall(libc::SYS_dup3, fd, target, 0))?;
                }
                if target > 3 {
                    libc::syscall(libc::SYS_close_range, 3u32, target as u32 - 1, 0u32);
                }
                libc::syscall(libc::SYS_close_range, target as u32 + 1, u32::MAX, 0u32);
            }
        }
        open_onto(0, DEV_NULL, libc::O_RDONLY)?;
        match &act.stdout {
            Some(p) => open_onto(1, p, file_flags)?,
            None => open_onto(1, DEV_NULL, libc::O_WRONLY)?,
        }
        if act.share {
            sys(libc::syscall(libc::SYS_dup3, 1, 2, 0))?;
        } else {
            match &act.stderr {
                Some(p) => open_onto(2, p, file_flags)?,
                None => open_onto(2, DEV_NULL, libc::O_WRONLY)?,
            }
        }
        Ok(())
    };
    if let Err(e) = steps() {
        return e;
    }
    // Nothing blocked in the task (the parent blocked everything around clone).
    let none: u64 = 0;
    libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK,
        &none as *const u64,
        ptr::null_mut::<u64>(),
        8usize,
    );
    libc::syscall(libc::SYS_execve, a.path.as_ptr(), a.argv, a.envp);
    errno()
}

extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive until clone returns (CLONE_VFORK).
    unsafe {
        let a = &mut *(arg as *mut ChildArgs);
        let e = child_steps(a);
        ptr::write_volatile(&mut a.errno, if e == 0 { libc::EIO } else { e });
        libc::syscall(libc::SYS_exit_group, 127);
        127
    }
}

/// How a spawn failed: the errno of the step, and the pid of the child that failed to exec
/// (it exists and must be reaped: see `reap_failed`), if one was created.
pub type SpawnError = (i32, Option<libc::pid_t>);

/// Starts `path` with NULL-terminated `argv` and `envp` on `stack`, with `pass_fd` (if any)
/// inherited; returns the pid. `pass_fd.target` must be at least 3 (checked by the caller).
pub fn spawn(
    path: &CStr,
    argv: &[*const c_char],
    envp: &[*const c_char],
    actions: &ChildActions,
    pass_fd: Option<PassFd>,
    reset: &SignalReset,
    stack: &Stack,
) -> Result<libc::pid_t, SpawnError> {
    debug_assert!(argv.last() == Some(&ptr::null()) && envp.last() == Some(&ptr::null()));
    debug_assert!(pass_fd.is_none_or(|p| p.fd >= 0 && p.target >= 3));
    let mut args = ChildArgs {
        path,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        actions,
        pass_fd,
        reset: &reset.signals,
        errno: 0,
    };
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: every pointer in `args` refers to NUL-terminated strings and NULL-terminated
    // arrays that outlive the call; the stack is ours and unused by anyone else meanwhile;
    // the child only runs child_main (see there). All signals are blocked around clone (raw
    // syscall: glibc's internal ones too), so no handler runs in the child before it resets
    // them; the parent's mask is restored right after.
    let (pid, clone_errno) = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all as *const u64,
            &mut old as *mut u64,
            8usize,
        );
        let pid = libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut args as *mut ChildArgs).cast(),
        );
        let e = errno();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old as *const u64,
            ptr::null_mut::<u64>(),
            8usize,
        );
        (pid, e)
    };
    if pid < 0 {
        return Err((clone_errno, None));
    }
    // SAFETY: the child has exec'd or exited (CLONE_VFORK); nobody writes args any more.
    let failed = unsafe { ptr::read_volatile(&args.errno) };
    if failed != 0 {
        return Err((failed, Some(pid)));
    }
    Ok(pid)
}

/// Reaps a child that failed to exec (it has exited, or is about to).
pub fn reap_failed(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: plain syscall on our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
}
