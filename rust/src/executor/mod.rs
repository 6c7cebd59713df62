//! Spawning and reaping task processes with no file descriptor per running task.
//!
//! Children open their own stdio between clone and exec (see `spawn`), so the agent holds one
//! fd in total (the notify eventfd) however many tasks run; a spec may hand its child one
//! descriptor of ours (`PassFd`: an MPI rank's PMI connection), no other. Exits are
//! collected by the process-wide reaper thread (see `reaper`).

mod env;
pub mod output;
mod reaper;
mod spawn;

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use env::BaseEnv;
use reaper::Sink;
pub use spawn::PassFd;
use spawn::{ChildActions, SignalReset, Stack};

/// One process to start. Strings are raw bytes; a NUL inside one fails that spec (EINVAL).
#[derive(Clone, Debug, Default)]
pub struct SpawnSpec {
    pub key: i64,
    pub argv: Vec<Vec<u8>>,
    /// Extra `K=V` entries on top of the executor's base environment (they win).
    pub env: Option<Vec<Vec<u8>>>,
    pub cwd: Option<Vec<u8>>,
    /// None: /dev/null. Relative paths are relative to `cwd`.
    pub stdout: Option<Vec<u8>>,
    pub stderr: Option<Vec<u8>>,
    /// The output files are known to be empty or absent: opened without O_TRUNC.
    pub outputs_empty: bool,
    /// One of this process's descriptors the child inherits, as `target` (see `PassFd`);
    /// None: the child has no descriptor above stdio.
    pub pass_fd: Option<PassFd>,
}

/// Outcome of one spec: (pid, CLOCK_REALTIME seconds) or (errno, message).
pub type Spawned = Result<(i32, f64), (i32, String)>;

/// One reaped child.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    /// The spec's key; -1 for a child this process did not spawn through an Executor.
    pub key: i64,
    pub pid: i32,
    /// Exit status, or -1 if killed by a signal (or lost).
    pub exit_code: i32,
    /// The terminating signal, 0 if none.
    pub signal: i32,
    pub t_exit: f64,
    pub utime: f64,
    pub stime: f64,
    pub maxrss_kib: i64,
}

impl Exit {
    fn from_wait(key: i64, pid: i32, status: i32, ru: &libc::rusage) -> Exit {
        let (exit_code, signal) = if libc::WIFSIGNALED(status) {
            (-1, libc::WTERMSIG(status))
        } else {
            (libc::WEXITSTATUS(status), 0)
        };
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
        Exit {
            key,
            pid,
            exit_code,
            signal,
            t_exit: now(),
            utime: secs(ru.ru_utime),
            stime: secs(ru.ru_stime),
            maxrss_kib: ru.ru_maxrss,
        }
    }

    /// A child that was reaped by someone else: status unknown.
    fn lost(key: i64, pid: i32, t: f64) -> Exit {
        Exit {
            key,
            pid,
            exit_code: -1,
            signal: 0,
            t_exit: t,
            utime: 0.0,
            stime: 0.0,
            maxrss_kib: 0,
        }
    }
}

/// CLOCK_REALTIME in seconds, as Python's time.time().
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub struct Executor {
    base: BaseEnv,
    sink: Arc<Sink>,
}

impl Executor {
    /// `base_env`: `K=V` entries every child gets. Starts the reaper thread if needed.
    pub fn new(base_env: Vec<Vec<u8>>) -> io::Result<Executor> {
        let base = BaseEnv::new(base_env)?;
        let sink = Arc::new(Sink::new()?);
        reaper::registry().lock().register(&sink);
        Ok(Executor { base, sink })
    }

    /// Write every exit of this executor's children to `path` (appended, 0600) as it is
    /// reaped, before it can be collected: records of `reaper::EXIT_RECORD` bytes.
    pub fn set_exit_log(&self, path: &std::path::Path) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;

        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        if !self.sink.set_exit_log(file.into()) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exit log already set",
            ));
        }
        Ok(())
    }

    /// Readable while exits are waiting to be collected.
    pub fn notify_fd(&self) -> i32 {
        self.sink.notify_fd()
    }

    /// Children spawned by this executor and not reaped yet.
    pub fn running(&self) -> usize {
        self.sink.running.load(Ordering::Relaxed)
    }

    /// Exits collected so far; never blocks.
    pub fn reap(&self) -> Vec<Exit> {
        self.sink.take()
    }

    /// Waits up to `timeout` (None: forever) until at least one exit is available.
    pub fn wait(&self, timeout: Option<Duration>) -> Vec<Exit> {
        self.sink.wait(timeout)
    }

    /// killpg(pid, sig) for each pid; groups that are already gone are ignored.
    pub fn kill(&self, pids: &[i32], sig: i32) -> io::Result<()> {
        if let Some(&bad) = pids.iter().find(|&&p| p <= 1) {
            // killpg(0) would signal the agent's own group.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid pid {bad}"),
            ));
        }
        for &pid in pids {
            // SAFETY: plain syscall.
            if unsafe { libc::killpg(pid, sig) } == -1 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::ESRCH) {
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Starts every spec; one result per spec, in order. Failures are results, not errors.
    pub fn spawn_batch(&self, specs: &[SpawnSpec]) -> Vec<Spawned> {
        let reset = SignalReset::now();
        let default_actions = ChildActions::new(None, None, None, true);
        let base_envp = self.base.pointers();
        let spawning = Spawning::begin();
        let job = SpawnJob {
            exec: self,
            specs,
            next: AtomicUsize::new(0),
            base_envp: &base_envp,
            default_actions: &default_actions,
            reset: &reset,
            stack_error: Mutex::new(None),
        };
        let n = specs.len();
        // A spawn blocks its caller until the child has exec'd: several callers keep
        // several cores busy creating processes (the floor's "2 in flight"). Each takes the
        // next spec when it is free (not a fixed share: spawn times vary, and a worker done
        // early would leave its core idle at the end of every batch), and prepares it itself.
        // (split_run(w, w): one call per worker, not ranges of specs.)
        let workers = workers_for(n, PARALLEL_MIN / 2);
        let done = split_run(workers, workers, |_| job.run());
        drop(spawning);
        let mut out: Vec<Option<Spawned>> = vec![None; n];
        for (i, r) in done {
            out[i] = Some(r);
        }
        // Specs no worker took: every worker failed to map its child stack.
        let stack_error = job
            .stack_error
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(|| (-libc::ENOMEM, "no child stack".into()));
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(stack_error.clone())))
            .collect()
    }

    /// Converts a spec into what a spawn takes, resolving argv[0] through PATH.
    fn prepare<'a>(
        &self,
        spec: &'a SpawnSpec,
        lookups: &mut HashMap<&'a [u8], Result<CString, i32>>,
    ) -> Result<Prepared, (i32, String)> {
        let invalid = |what: &str| (-libc::EINVAL, format!("{what} contains a NUL byte"));
        let argv: Vec<CString> = spec
            .argv
            .iter()
            .map(|a| CString::new(a.as_slice()))
            .collect::<Result<_, _>>()
            .map_err(|_| invalid("argv"))?;
        let Some(arg0) = spec.argv.first() else {
            return Err((-libc::EINVAL, "empty argv".into()));
        };
        let extra = match &spec.env {
            Some(v) if !v.is_empty() => Some(env::Overlay::new(v).map_err(|e| (-libc::EINVAL, e))?),
            _ => None,
        };
        let path = if arg0.contains(&b'/') {
            argv[0].clone()
        } else {
            let found = match extra.as_ref().and_then(|x| x.path()) {
                Some(dirs) => env::search_path(arg0, dirs),
                // Same PATH for the whole batch: look each name up once.
                None => lookups
                    .entry(arg0.as_slice())
                    .or_insert_with(|| env::search_path(arg0, self.base.path()))
                    .clone(),
            };
            found.map_err(|errno| (-errno, error_message(spec, errno)))?
        };
        let actions = if spec.cwd.is_some() || spec.stdout.is_some() || spec.stderr.is_some() {
            let c = |v: &Option<Vec<u8>>, what| {
                v.as_ref()
                    .map(|b| CString::new(b.as_slice()))
                    .transpose()
                    .map_err(|_| invalid(what))
            };
            let (cwd, out, err) = (
                c(&spec.cwd, "cwd")?,
                c(&spec.stdout, "stdout")?,
                c(&spec.stderr, "stderr")?,
            );
            Some(ChildActions::new(cwd, out, err, !spec.outputs_empty))
        } else {
            None
        };
        if let Some(p) = spec.pass_fd {
            if p.fd < 0 {
                return Err((
                    -libc::EINVAL,
                    format!("pass_fd: fd {} is not a descriptor", p.fd),
                ));
            }
            if p.target < 3 {
                return Err((
                    -libc::EINVAL,
                    format!(
                        "pass_fd: target {} is stdio (the task's /dev/null or outputs): \
                         3 or more",
                        p.target
                    ),
                ));
            }
        }
        let envp = extra.as_ref().map(|x| self.base.overlaid(x));
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        Ok(Prepared {
            path,
            _argv: argv,
            _overlay: extra,
            argv: argv_ptrs,
            envp,
            actions,
        })
    }

    /// The exits of this executor's children are dropped after this.
    fn unregister(&self) {
        reaper::registry().lock().unregister(&self.sink);
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// Batches at least this large are spawned by several threads.
const PARALLEL_MIN: usize = 8;

/// How many threads share `n` items when each should get at least `per_thread`: up to the
/// cores, at most 4, at least 1.
pub fn workers_for(n: usize, per_thread: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.clamp(1, 4).min(n / per_thread).max(1)
}

/// `f` over 0..n cut into `workers` contiguous ranges: the first on this thread, the others on
/// scoped threads; the results in range order. A range whose thread the system refuses
/// (process limits) runs here too, after the first.
pub fn split_run<R: Send>(
    n: usize,
    workers: usize,
    f: impl Fn(std::ops::Range<usize>) -> Vec<R> + Sync,
) -> Vec<R> {
    if workers <= 1 {
        return f(0..n);
    }
    let chunk = n.div_ceil(workers);
    let f = &f;
    std::thread::scope(|s| {
        let others: Vec<_> = (1..workers)
            .map(|w| {
                let range = w * chunk..n.min((w + 1) * chunk);
                let r = range.clone();
                (
                    range,
                    std::thread::Builder::new().spawn_scoped(s, move || f(r)),
                )
            })
            .collect();
        let mut out = f(0..chunk.min(n));
        for (range, h) in others {
            match h {
                Ok(h) => out.extend(h.join().expect("worker thread panicked")),
                Err(_) => out.extend(f(range)),
            }
        }
        out
    })
}

/// A spawn batch under way, for the reaper (see `reaper::State::begin_spawning`); ended on
/// drop, so that even a panicking worker cannot leave the reaper holding foreign exits.
struct Spawning;

impl Spawning {
    fn begin() -> Spawning {
        reaper::registry().lock().begin_spawning();
        Spawning
    }
}

impl Drop for Spawning {
    fn drop(&mut self) {
        let foreign = reaper::registry().lock().end_spawning();
        reaper::deliver(foreign);
    }
}

/// What every spawn worker of one batch shares: the specs, and the index of the next one.
struct SpawnJob<'a> {
    exec: &'a Executor,
    specs: &'a [SpawnSpec],
    next: AtomicUsize,
    base_envp: &'a [*const c_char],
    default_actions: &'a ChildActions,
    reset: &'a SignalReset,
    /// Why a worker could not map its child stack (the first such error).
    stack_error: Mutex<Option<(i32, String)>>,
}

// SAFETY: `base_envp` points into the executor's base environment, which outlives the scoped
// workers and is only read (a child reads it too, while its spawner waits); the rest is
// shared read-only or atomic.
unsafe impl Sync for SpawnJob<'_> {}

impl SpawnJob<'_> {
    /// Takes specs until none is left: (index, result) of each it took. A worker without a
    /// stack takes none (the others do its share).
    fn run(&self) -> Vec<(usize, Spawned)> {
        if self.next.load(Ordering::Relaxed) >= self.specs.len() {
            return Vec::new(); // (a refused thread's share, run inline after the rest)
        }
        let stack = match Stack::new() {
            Ok(s) => s,
            Err(e) => {
                let mut first = self.stack_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert((
                    -e.raw_os_error().unwrap_or(libc::ENOMEM),
                    format!("no child stack: {e}"),
                ));
                return Vec::new();
            }
        };
        let reg = reaper::registry();
        let sink = &self.exec.sink;
        let mut lookups = HashMap::new();
        let mut out = Vec::new();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(spec) = self.specs.get(i) else {
                return out;
            };
            let p = match self.exec.prepare(spec, &mut lookups) {
                Ok(p) => p,
                Err(e) => {
                    out.push((i, Err(e)));
                    continue;
                }
            };
            let envp = p.envp.as_deref().unwrap_or(self.base_envp);
            let actions = p.actions.as_ref().unwrap_or(self.default_actions);
            sink.log_spawn_record(spec.key, 0, reaper::INTENT_MARK, 0.0);
            match spawn::spawn(
                &p.path,
                &p.argv,
                envp,
                actions,
                spec.pass_fd,
                self.reset,
                &stack,
            ) {
                Ok(pid) => {
                    let t = now();
                    // before any exit record of it
                    sink.log_spawn_record(spec.key, pid, reaper::SPAWN_MARK, t);
                    if let Some(exit) = reg.add_child(pid, sink, spec.key) {
                        sink.deliver(vec![exit]); // it ended before we added it
                    }
                    out.push((i, Ok((pid, t))));
                }
                Err((errno, child)) => {
                    if let Some(pid) = child {
                        // Ours to reap -- unless the reaper was first and holds its exit for
                        // a claim (then no waitpid: the pid may be a sibling's new child).
                        let mut st = reg.lock();
                        if !st.forget_orphan(pid) {
                            spawn::reap_failed(pid);
                        }
                    }
                    out.push((i, Err((-errno, error_message(spec, errno)))))
                }
            }
        }
    }
}

/// A spec ready for a spawn. The pointer vectors point into `_argv`, `_overlay` and the
/// base environment (moving a CString does not move its bytes).
struct Prepared {
    path: CString,
    _argv: Vec<CString>,
    _overlay: Option<env::Overlay>,
    argv: Vec<*const c_char>,
    envp: Option<Vec<*const c_char>>,
    actions: Option<ChildActions>,
}

fn error_message(spec: &SpawnSpec, errno: i32) -> String {
    let arg0 = spec
        .argv
        .first()
        .map(|a| String::from_utf8_lossy(a))
        .unwrap_or_default();
    let reason = io::Error::from_raw_os_error(errno);
    let mut msg = match &spec.cwd {
        Some(cwd) => format!("{arg0} (cwd {}): {reason}", String::from_utf8_lossy(cwd)),
        None => format!("{arg0}: {reason}"),
    };
    if let (Some(p), libc::EBADF) = (spec.pass_fd, errno) {
        // (the one descriptor a spawn names: not open here, or the target above the limit)
        msg.push_str(&format!(" (pass_fd {} -> {})", p.fd, p.target));
    }
    msg
}

#[cfg(test)]
mod tests;
