//! Python binding of `crate::executor`.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::executor::{Executor, Exit, PassFd, SpawnSpec};

type PySpecFields = (
    i64,
    Vec<OsString>,
    Option<Vec<OsString>>,
    Option<PathBuf>,
    Option<PathBuf>,
    Option<PathBuf>,
);

/// A spec's pass_fd: None, a descriptor (the child's 3), or (descriptor, the child's number).
fn pass_fd(v: &Bound<'_, PyAny>) -> PyResult<Option<PassFd>> {
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(fd) = v.extract::<i32>() {
        return Ok(Some(PassFd::at3(fd)));
    }
    match v.extract::<(i32, i32)>() {
        Ok((fd, target)) => Ok(Some(PassFd { fd, target })),
        Err(_) => Err(PyValueError::new_err(format!(
            "pass_fd={}: None, a descriptor (the child's 3) or (descriptor, child's number)",
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))),
    }
}

fn bytes(s: OsString) -> Vec<u8> {
    s.into_vec()
}

fn exits<'py>(py: Python<'py>, exits: Vec<Exit>) -> PyResult<Bound<'py, PyList>> {
    let rows = exits.into_iter().map(|e| {
        (
            e.key,
            e.pid,
            e.exit_code,
            e.signal,
            e.t_exit,
            e.utime,
            e.stime,
            e.maxrss_kib,
        )
    });
    PyList::new(py, rows)
}

/// Spawns task processes (clone + exec, see executor/spawn.rs) and collects their exits (one
/// reaper thread per process). See docs/internals.md.
#[pyclass(frozen, module = "pilotfish._core", name = "Executor")]
pub struct PyExecutor {
    inner: Executor,
}

#[pymethods]
impl PyExecutor {
    /// base_env: "K=V" entries every child gets; None = this process's environment now.
    /// exit_log: a file every exit is appended to as it is reaped (24-byte records: key i64,
    /// exit code i32, signal i32, t_exit f64, little-endian), before reap() can return it.
    #[new]
    #[pyo3(signature = (base_env=None, exit_log=None))]
    fn new(
        base_env: Option<Vec<OsString>>,
        exit_log: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let base: Vec<Vec<u8>> = match base_env {
            Some(v) => v.into_iter().map(bytes).collect(),
            None => std::env::vars_os()
                .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
                .collect(),
        };
        let inner = Executor::new(base).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
            _ => PyOSError::new_err(e.to_string()),
        })?;
        if let Some(path) = exit_log {
            inner
                .set_exit_log(&path)
                .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
        }
        Ok(PyExecutor { inner })
    }

    /// Readable while exits are waiting; reap() resets it.
    #[getter]
    fn notify_fd(&self) -> i32 {
        self.inner.notify_fd()
    }

    /// Children spawned by this executor and not reaped yet.
    #[getter]
    fn running(&self) -> usize {
        self.inner.running()
    }

    /// specs: (key, argv, env|None, cwd|None, stdout|None, stderr|None[, outputs_empty[,
    /// pass_fd]]) each; outputs_empty: the output files are known to be empty or absent
    /// (opened without O_TRUNC); pass_fd: None, a descriptor of this process the child
    /// inherits as its descriptor 3, or (descriptor, the child's number >= 3) -- the child
    /// has no other descriptor above stdio; the caller keeps it open until this returns.
    /// Returns (pid, t_spawn) or (-errno, message) per spec.
    fn spawn_batch<'py>(
        &self,
        py: Python<'py>,
        specs: Vec<Bound<'py, PyTuple>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let specs: Vec<SpawnSpec> = specs
            .iter()
            .map(|spec| {
                // (6 fields, 7 with outputs_empty -- default False --, 8 with pass_fd)
                let n = spec.len();
                let ((key, argv, env, cwd, stdout, stderr), outputs_empty, pass): (
                    PySpecFields,
                    bool,
                    Option<PassFd>,
                ) = match n {
                    6 => (spec.extract()?, false, None),
                    7 | 8 => (
                        spec.get_slice(0, 6).extract()?,
                        spec.get_item(6)?.extract()?,
                        if n == 8 {
                            pass_fd(&spec.get_item(7)?)?
                        } else {
                            None
                        },
                    ),
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "spec of {n} fields: (key, argv, env, cwd, stdout, stderr[, \
                             outputs_empty[, pass_fd]])"
                        )))
                    }
                };
                Ok(SpawnSpec {
                    key,
                    argv: argv.into_iter().map(bytes).collect(),
                    env: env.map(|e| e.into_iter().map(bytes).collect()),
                    cwd: cwd.map(|p| bytes(p.into_os_string())),
                    stdout: stdout.map(|p| bytes(p.into_os_string())),
                    stderr: stderr.map(|p| bytes(p.into_os_string())),
                    outputs_empty,
                    pass_fd: pass,
                })
            })
            .collect::<PyResult<_>>()?;
        let inner = &self.inner;
        let results = py.detach(|| inner.spawn_batch(&specs));
        let items = results
            .into_iter()
            .map(|r| match r {
                Ok((pid, t)) => (pid, t).into_pyobject(py).map(Bound::into_any),
                Err((errno, msg)) => (errno, msg).into_pyobject(py).map(Bound::into_any),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Exits so far, never blocks: [(key, pid, exit_code, signal, t_exit, utime, stime,
    /// maxrss_kib)]. Drains notify_fd.
    fn reap<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        exits(py, self.inner.reap())
    }

    /// Like reap(), but first waits (GIL released) up to timeout_s seconds (None: no limit)
    /// for at least one exit.
    #[pyo3(signature = (timeout_s=None))]
    fn wait<'py>(&self, py: Python<'py>, timeout_s: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let timeout = timeout_s
            .map(|t| Duration::try_from_secs_f64(t.max(0.0)))
            .transpose()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let inner = &self.inner;
        exits(py, py.detach(|| inner.wait(timeout)))
    }

    /// killpg(pid, sig) for each pid; groups already gone are ignored.
    fn kill(&self, pids: Vec<i32>, sig: i32) -> PyResult<()> {
        self.inner.kill(&pids, sig).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
            _ => PyErr::from(e),
        })
    }
}

/// Batches with at least this many tasks per reader thread are read by several threads.
const PARALLEL_READ_MIN: usize = 32;

/// Captured outputs of finished tasks, in one call (GIL released): for each (stdout path,
/// stderr path) -- either None -- (stdout, stderr, reusable). A text is None when there is no
/// path or the file cannot be opened, "" when it is empty; stdout keeps its first `cap`
/// bytes, stderr its last. reusable: no other descriptor has either file open, and both are
/// empty again (a file with output is truncated once read, when nothing else holds it).
#[pyfunction]
pub fn read_outputs<'py>(
    py: Python<'py>,
    pairs: Vec<(Option<PathBuf>, Option<PathBuf>)>,
    cap: u64,
) -> PyResult<Bound<'py, PyList>> {
    use crate::executor::output::read_capped;

    type Pair = (Option<PathBuf>, Option<PathBuf>);
    let read_all = |chunk: &[Pair]| {
        chunk
            .iter()
            .map(|(o, e)| {
                (
                    o.as_deref().map(|p| read_capped(p, cap, false)),
                    e.as_deref().map(|p| read_capped(p, cap, true)),
                )
            })
            .collect::<Vec<_>>()
    };
    let read = py.detach(|| {
        // A round's outputs are read while the agent's other work waits: a large batch is
        // read by several threads (it is syscalls only, ~4 us a file).
        let workers = crate::executor::workers_for(pairs.len(), PARALLEL_READ_MIN);
        crate::executor::split_run(pairs.len(), workers, |r| read_all(&pairs[r]))
    });
    let text = |r: &Option<(Option<Vec<u8>>, bool)>| -> (Option<String>, bool) {
        match r {
            Some((data, free)) => (
                data.as_ref()
                    .map(|d| String::from_utf8_lossy(d).into_owned()),
                *free,
            ),
            None => (None, true),
        }
    };
    let rows = read.iter().map(|(o, e)| {
        let ((out, f1), (err, f2)) = (text(o), text(e));
        (out, err, f1 && f2)
    });
    PyList::new(py, rows)
}
