//! The process-wide reaper: one thread that waits for every child of the process.
//!
//! There is one reaper per process, not per Executor: wait4(-1) cannot be shared, and two
//! reapers would steal each other's children. Each Executor owns a `Sink` that receives the
//! exits of the children it spawned; the registry maps pid -> (sink, key). Exits of children
//! no Executor spawned go to every live Executor, with key -1.
//!
//! Ordering rule: spawning happens outside the registry lock, in parallel. While a batch is
//! under way (`begin_spawning`), the reaper keeps the exit of a pid it does not know as an
//! orphan, for its spawner to claim as it adds the pid (`add_or_claim`): a child that ends
//! before it is added is never lost. A child that failed to exec is reaped by its spawner,
//! under the lock, unless the reaper already holds it as an orphan (`forget_orphan`).

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

/// Bytes of one exit-log record: key i64, exit code i32, signal i32, t_exit f64 (little-endian).
pub const EXIT_RECORD: usize = 24;
/// Signal-field marks of the spawn-side records (see `Sink::log_spawn_record`).
pub const SPAWN_MARK: i32 = -1;
pub const INTENT_MARK: i32 = -2;
use std::time::{Duration, Instant};

use super::{now, Exit};

/// Where one Executor's exits are collected.
pub struct Sink {
    exits: Mutex<Vec<Exit>>,
    ready: Condvar,
    /// eventfd, readable exactly while `exits` is non-empty (both change under its lock).
    efd: OwnedFd,
    /// Children spawned through this sink and not reaped yet.
    pub running: AtomicUsize,
    /// Where exits are written the moment they are reaped, before anyone is told: a process
    /// killed right after still leaves the outcome of what it ran (see `set_exit_log`).
    exit_log: OnceLock<OwnedFd>,
}

impl Sink {
    pub fn new() -> io::Result<Sink> {
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Sink {
            exits: Mutex::new(Vec::new()),
            ready: Condvar::new(),
            // SAFETY: fd was just created and nothing else owns it.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            running: AtomicUsize::new(0),
            exit_log: OnceLock::new(),
        })
    }

    /// Append every keyed exit to `fd` (opened O_APPEND) from now on; only the first call counts.
    pub fn set_exit_log(&self, fd: OwnedFd) -> bool {
        self.exit_log.set(fd).is_ok()
    }

    fn log_exits(&self, batch: &[Exit]) {
        if self.exit_log.get().is_none() {
            return;
        }
        let mut buf = Vec::with_capacity(batch.len() * EXIT_RECORD);
        for e in batch.iter().filter(|e| e.key >= 0) {
            buf.extend_from_slice(&e.key.to_le_bytes());
            buf.extend_from_slice(&e.exit_code.to_le_bytes());
            buf.extend_from_slice(&e.signal.to_le_bytes());
            buf.extend_from_slice(&e.t_exit.to_le_bytes());
        }
        self.append_log(&buf);
    }

    /// Spawn-side records of the exit log (signal field < 0, never a real signal):
    /// `INTENT_MARK` just before the spawn (code 0), `SPAWN_MARK` the moment the child
    /// exists (code = pid). If this process is killed, whoever inherits the children (the
    /// agent's keeper) knows whose each one is -- even one that is already a zombie, whose
    /// environment can no longer be read -- and which keys may have a child it cannot name.
    pub(super) fn log_spawn_record(&self, key: i64, code: i32, mark: i32, t: f64) {
        if self.exit_log.get().is_none() || key < 0 {
            return;
        }
        let mut buf = [0u8; EXIT_RECORD];
        buf[0..8].copy_from_slice(&key.to_le_bytes());
        buf[8..12].copy_from_slice(&code.to_le_bytes());
        buf[12..16].copy_from_slice(&mark.to_le_bytes());
        buf[16..24].copy_from_slice(&t.to_le_bytes());
        self.append_log(&buf);
    }

    fn append_log(&self, buf: &[u8]) {
        let Some(fd) = self.exit_log.get() else {
            return;
        };
        let mut off = 0;
        while off < buf.len() {
            // SAFETY: writes initialized bytes of a live buffer to an fd we own.
            let n =
                unsafe { libc::write(fd.as_raw_fd(), buf[off..].as_ptr().cast(), buf.len() - off) };
            if n <= 0 {
                if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break; // a full disk must not stop reaping: the journal is best effort here
            }
            off += n as usize;
        }
    }

    pub fn notify_fd(&self) -> i32 {
        self.efd.as_raw_fd()
    }

    pub(super) fn deliver(&self, batch: Vec<Exit>) {
        self.log_exits(&batch);
        let mut exits = lock(&self.exits);
        let was_empty = exits.is_empty();
        exits.extend(batch);
        if was_empty && !exits.is_empty() {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd. It cannot block: the
            // counter is reset by every take().
            unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        self.ready.notify_all();
    }

    /// Exits collected so far (non-blocking); resets the notify fd.
    pub fn take(&self) -> Vec<Exit> {
        let mut exits = lock(&self.exits);
        self.drain_fd();
        std::mem::take(&mut *exits)
    }

    /// Like `take`, but first waits up to `timeout` (None: forever) for at least one exit.
    pub fn wait(&self, timeout: Option<Duration>) -> Vec<Exit> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut exits = lock(&self.exits);
        while exits.is_empty() {
            match deadline {
                None => exits = self.ready.wait(exits).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    exits = self
                        .ready
                        .wait_timeout(exits, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        self.drain_fd();
        std::mem::take(&mut *exits)
    }

    fn drain_fd(&self) {
        let mut buf = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN (nothing pending) is fine.
        unsafe { libc::read(self.efd.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) };
    }
}

pub struct State {
    pids: HashMap<libc::pid_t, (Arc<Sink>, i64)>,
    /// Live executors; each of them is told about exits of pids none of them spawned.
    sinks: Vec<Weak<Sink>>,
    /// Spawn batches under way: a pid the reaper does not know may be theirs, not yet added.
    spawning: usize,
    /// Exits of unknown pids held while spawning > 0, for a spawner to claim.
    orphans: HashMap<libc::pid_t, Exit>,
}

impl State {
    /// Records a child just spawned (spawning happens outside the lock, in parallel); if the
    /// reaper already collected its exit, returns that exit instead.
    pub fn add_or_claim(&mut self, pid: libc::pid_t, sink: &Arc<Sink>, key: i64) -> Option<Exit> {
        if let Some(mut exit) = self.orphans.remove(&pid) {
            exit.key = key;
            return Some(exit);
        }
        self.add(pid, sink, key);
        None
    }

    /// Drops the held exit of `pid` (a child that failed to exec, reaped here first); false
    /// if there is none.
    pub fn forget_orphan(&mut self, pid: libc::pid_t) -> bool {
        self.orphans.remove(&pid).is_some()
    }

    pub fn begin_spawning(&mut self) {
        self.spawning += 1;
    }

    /// Ends a spawn batch; when none is left, exits nobody claimed go out as foreign.
    pub fn end_spawning(&mut self) -> Vec<(Arc<Sink>, Exit)> {
        self.spawning -= 1;
        if self.spawning > 0 || self.orphans.is_empty() {
            return Vec::new();
        }
        let orphans: Vec<(libc::pid_t, Exit)> = self.orphans.drain().collect();
        let mut out = Vec::new();
        for (pid, exit) in orphans {
            for (sink, key) in self.owners(pid) {
                out.push((
                    sink,
                    Exit {
                        key,
                        ..exit.clone()
                    },
                ));
            }
        }
        out
    }

    /// Records a child just spawned (see add_or_claim).
    pub fn add(&mut self, pid: libc::pid_t, sink: &Arc<Sink>, key: i64) {
        sink.running.fetch_add(1, Ordering::Relaxed);
        self.pids.insert(pid, (Arc::clone(sink), key));
    }

    pub fn register(&mut self, sink: &Arc<Sink>) {
        self.sinks.push(Arc::downgrade(sink));
    }

    pub fn unregister(&mut self, sink: &Arc<Sink>) {
        let target = Arc::downgrade(sink);
        self.sinks
            .retain(|w| w.strong_count() > 0 && !w.ptr_eq(&target));
    }

    /// Who gets the exit of `pid`: its spawner with its key, or (key -1) every live executor.
    fn owners(&mut self, pid: libc::pid_t) -> Vec<(Arc<Sink>, i64)> {
        if let Some((sink, key)) = self.pids.remove(&pid) {
            sink.running.fetch_sub(1, Ordering::Relaxed);
            return vec![(sink, key)];
        }
        self.sinks
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| (s, -1))
            .collect()
    }
}

pub struct Registry {
    state: Mutex<State>,
    /// Signalled when the first child is added; the reaper sleeps on it while it owns none.
    has_children: Condvar,
}

impl Registry {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Records a child just spawned (see `State::add_or_claim`: its exit, if the reaper was
    /// first) and wakes the reaper if it owned no child -- it sleeps only then, and a notify
    /// per spawn would be a futex call per task.
    pub fn add_child(&self, pid: libc::pid_t, sink: &Arc<Sink>, key: i64) -> Option<Exit> {
        let mut st = self.lock();
        let idle = st.pids.is_empty();
        let claimed = st.add_or_claim(pid, sink, key);
        drop(st);
        if idle && claimed.is_none() {
            self.has_children.notify_one();
        }
        claimed
    }
}

/// The registry, starting the reaper thread on first use.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        start_reaper();
        Registry {
            state: Mutex::new(State {
                pids: HashMap::new(),
                sinks: Vec::new(),
                spawning: 0,
                orphans: HashMap::new(),
            }),
            has_children: Condvar::new(),
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not stop reaping: the data stays consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn start_reaper() {
    // The thread inherits a fully blocked signal mask, so process-directed signals (SIGINT,
    // SIGCHLD...) are handled by Python's threads and never interrupt the reaper.
    // SAFETY: sigset values are initialized by sigfillset/pthread_sigmask before use.
    unsafe {
        let mut all = MaybeUninit::uninit();
        let mut old = MaybeUninit::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        std::thread::Builder::new()
            .name("pilotfish-reaper".into())
            .spawn(|| reap_forever(registry()))
            .expect("cannot start the reaper thread");
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
    }
}

fn reap_forever(reg: &Registry) -> ! {
    loop {
        // Sleep while no executor has children: then wait4(-1) would only steal the children
        // of other code in the process (e.g. subprocess in tests of other layers).
        {
            let mut st = reg.lock();
            while st.pids.is_empty() {
                st = reg.has_children.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        // Block until some child has exited, without reaping it yet (see the module comment).
        let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: info is a valid out-parameter.
        let rc = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        let err = (rc == -1).then(io::Error::last_os_error);

        let mut st = reg.lock();
        let mut batch: Vec<(Arc<Sink>, Exit)> = Vec::new();
        loop {
            let mut status = 0;
            let mut ru = MaybeUninit::<libc::rusage>::zeroed();
            // SAFETY: valid out-parameters.
            let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, ru.as_mut_ptr()) };
            if pid <= 0 {
                break;
            }
            // SAFETY: wait4 filled it.
            let ru = unsafe { ru.assume_init() };
            let exit = Exit::from_wait(-1, pid, status, &ru);
            if st.spawning > 0 && !st.pids.contains_key(&pid) {
                // Probably a child whose spawner has not added it yet: keep it to be claimed.
                st.orphans.insert(pid, exit);
                continue;
            }
            for (sink, key) in st.owners(pid) {
                batch.push((
                    sink,
                    Exit {
                        key,
                        ..exit.clone()
                    },
                ));
            }
        }
        if err.as_ref().and_then(io::Error::raw_os_error) == Some(libc::ECHILD) {
            // Our children vanished without us (someone else waited for them, or SIGCHLD is
            // ignored): report them with unknown status rather than waiting forever.
            let t = now();
            for (pid, (sink, key)) in st.pids.drain() {
                sink.running.fetch_sub(1, Ordering::Relaxed);
                batch.push((sink, Exit::lost(key, pid, t)));
            }
        }
        drop(st);
        deliver(batch);
    }
}

/// Hands exits to their sinks, one wake-up per sink.
pub(super) fn deliver(batch: Vec<(Arc<Sink>, Exit)>) {
    let mut groups: Vec<(Arc<Sink>, Vec<Exit>)> = Vec::new();
    for (sink, exit) in batch {
        match groups.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &sink)) {
            Some((_, v)) => v.push(exit),
            None => groups.push((sink, vec![exit])),
        }
    }
    for (sink, exits) in groups {
        sink.deliver(exits);
    }
}
