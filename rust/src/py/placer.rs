//! Python binding of `crate::placer`.

use pyo3::exceptions::{PyAssertionError, PyIndexError, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::{untrack_atomic_tuple, GcPause};
use crate::placer::{slots, Encoded, Error, Placements, Placer, Request};

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        match e {
            Error::UnknownKeys(ref keys) if keys.len() == 1 => PyKeyError::new_err(keys[0]),
            Error::UnknownKeys(keys) => PyKeyError::new_err(keys),
            other => PyValueError::new_err(other.to_string()),
        }
    }
}

/// Python objects reused in every result: results are built from shared ints and tuples
/// instead of allocating new ones for each rank.
struct Cache {
    nodes: Vec<Py<PyAny>>,
    cores: Vec<Py<PyAny>>,
    gpus: Vec<Py<PyAny>>,
    /// (c,) for every core id c, and (g,) for every GPU id g: the common single-id tuples.
    one_core: Vec<Py<PyTuple>>,
    one_gpu: Vec<Py<PyTuple>>,
    empty: Py<PyTuple>,
}

impl Cache {
    fn new(py: Python<'_>, n_nodes: usize, max_cores: u32, max_gpus: u32) -> PyResult<Cache> {
        let ints = |n: usize| -> PyResult<Vec<Py<PyAny>>> {
            (0..n)
                .map(|i| Ok(i.into_pyobject(py)?.into_any().unbind()))
                .collect()
        };
        let singles = |ints: &[Py<PyAny>]| -> PyResult<Vec<Py<PyTuple>>> {
            ints.iter()
                .map(|i| Ok(PyTuple::new(py, [i.bind(py)])?.unbind()))
                .collect()
        };
        let cores = ints(max_cores as usize)?;
        let gpus = ints(max_gpus as usize)?;
        Ok(Cache {
            nodes: ints(n_nodes)?,
            one_core: singles(&cores)?,
            one_gpu: singles(&gpus)?,
            cores,
            gpus,
            empty: PyTuple::empty(py).unbind(),
        })
    }

    fn ids<'py>(
        &self,
        py: Python<'py>,
        ids: &[u32],
        ints: &[Py<PyAny>],
        singles: &[Py<PyTuple>],
    ) -> PyResult<Bound<'py, PyTuple>> {
        match ids {
            [] => Ok(self.empty.bind(py).clone()),
            [one] => Ok(singles[*one as usize].bind(py).clone()),
            many => {
                let t = PyTuple::new(py, many.iter().map(|&i| ints[i as usize].bind(py)))?;
                untrack_atomic_tuple(&t);
                Ok(t)
            }
        }
    }

    /// [(node, (cores...), (gpus...)) per rank]
    fn allocation<'py>(&self, py: Python<'py>, enc: &Encoded) -> PyResult<Bound<'py, PyAny>> {
        let ranks = slots(enc)
            .map(|s| {
                let node = self.nodes[s.node as usize].bind(py).clone();
                let cores = self
                    .ids(py, s.cores, &self.cores, &self.one_core)?
                    .into_any();
                let gpus = self.ids(py, s.gpus, &self.gpus, &self.one_gpu)?.into_any();
                let rank = PyTuple::new(py, [node, cores, gpus])?;
                untrack_atomic_tuple(&rank);
                Ok(rank)
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, ranks)?.into_any())
    }
}

fn to_u32(v: i64, what: &str) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| PyValueError::new_err(format!("{what} out of range: {v}")))
}

fn to_u64(v: i64, what: &str) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| PyValueError::new_err(format!("{what} out of range: {v}")))
}

/// First-fit placement of multi-rank requests on nodes × (cores, GPUs, memory MiB).
#[pyclass(module = "pilotfish._core", name = "Placer")]
pub struct PyPlacer {
    inner: Placer,
    /// Reused buffers: a batch allocates nothing on the Rust side once they have grown.
    reqs: Vec<Request>,
    out: Placements,
    cache: Cache,
}

#[pymethods]
impl PyPlacer {
    /// Per-node capacities; gpus and mem default to 0 (mem 0 = not tracked).
    #[new]
    #[pyo3(signature = (cores, gpus=None, mem=None))]
    fn new(
        py: Python<'_>,
        cores: Vec<i64>,
        gpus: Option<Vec<i64>>,
        mem: Option<Vec<i64>>,
    ) -> PyResult<Self> {
        let n = cores.len();
        let cores: Vec<u32> = cores
            .into_iter()
            .map(|c| to_u32(c, "cores"))
            .collect::<PyResult<_>>()?;
        let gpus: Vec<u32> = match gpus {
            Some(g) => g
                .into_iter()
                .map(|g| to_u32(g, "gpus"))
                .collect::<PyResult<_>>()?,
            None => vec![0; n],
        };
        let mem: Vec<u64> = match mem {
            Some(m) => m
                .into_iter()
                .map(|m| to_u64(m, "mem"))
                .collect::<PyResult<_>>()?,
            None => vec![0; n],
        };
        let inner = Placer::new(&cores, &gpus, &mem)?;
        let cache = Cache::new(py, n, inner.max_cores(), inner.max_gpus())?;
        Ok(PyPlacer {
            inner,
            reqs: Vec::new(),
            out: Placements::default(),
            cache,
        })
    }

    #[getter]
    fn n_nodes(&self) -> usize {
        self.inner.n_nodes()
    }

    /// Number of keys holding resources.
    #[getter]
    fn n_held(&self) -> usize {
        self.inner.n_held()
    }

    /// (free_cores, free_gpus, free_mem); free_mem is 0 when the node does not track memory.
    fn free(&self, node: i64) -> PyResult<(u32, u32, u64)> {
        usize::try_from(node)
            .ok()
            .and_then(|n| self.inner.free(n))
            .ok_or_else(|| PyIndexError::new_err(format!("node {node} out of range")))
    }

    /// [most free cores on one unreserved node with >= g free GPUs, for g in 0..=max GPUs]
    /// (-1: no such node): a request with a rank of c cores and g GPUs cannot be placed now
    /// when max_free()[g] < c -- the scheduler skips it without trying.
    fn max_free(&mut self) -> Vec<i32> {
        self.inner.max_free()
    }

    /// (cores, gpus) free over all nodes, reserved ones included.
    fn total_free(&self) -> (u64, u64) {
        self.inner.total_free()
    }

    /// Places requests in order; see docs/internals.md. Returns a list with None (not placed)
    /// or [(node, (core ids), (gpu ids)) per rank] for each request.
    #[pyo3(signature = (keys, ranks, cores_per_rank, gpus_per_rank, mem_per_rank=None, node_hint=None, backfill=true))]
    #[allow(clippy::too_many_arguments)]
    fn place_batch<'py>(
        &mut self,
        py: Python<'py>,
        keys: Vec<i64>,
        ranks: Vec<i64>,
        cores_per_rank: Vec<i64>,
        gpus_per_rank: Vec<i64>,
        mem_per_rank: Option<Vec<i64>>,
        node_hint: Option<Vec<i64>>,
        backfill: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let n = keys.len();
        let same_len = |len: usize, what: &str| {
            if len == n {
                Ok(())
            } else {
                Err(PyValueError::new_err(format!(
                    "{what} has {len} items, keys {n}"
                )))
            }
        };
        same_len(ranks.len(), "ranks")?;
        same_len(cores_per_rank.len(), "cores_per_rank")?;
        same_len(gpus_per_rank.len(), "gpus_per_rank")?;
        if let Some(m) = &mem_per_rank {
            same_len(m.len(), "mem_per_rank")?;
        }
        if let Some(h) = &node_hint {
            same_len(h.len(), "node_hint")?;
        }
        self.reqs.clear();
        for i in 0..n {
            let hint = match node_hint.as_ref().map(|h| h[i]) {
                None | Some(-1) => None,
                Some(h) => Some(to_u32(h, "node_hint")?),
            };
            self.reqs.push(Request {
                key: keys[i],
                ranks: to_u32(ranks[i], "ranks")?,
                cores: to_u32(cores_per_rank[i], "cores_per_rank")?,
                gpus: to_u32(gpus_per_rank[i], "gpus_per_rank")?,
                mem: to_u32(mem_per_rank.as_ref().map_or(0, |m| m[i]), "mem_per_rank")?,
                hint,
            });
        }
        let (inner, reqs, out) = (&mut self.inner, &self.reqs, &mut self.out);
        py.detach(|| inner.place_batch(reqs, backfill, out))?;

        let _gc = GcPause::new(py);
        let none = py.None().into_bound(py);
        let items = (0..n)
            .map(|i| match self.out.get(i) {
                None => Ok(none.clone()),
                Some(enc) => self.cache.allocation(py, enc),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Frees what the keys hold. All known keys are released; then KeyError if any was unknown.
    fn release_batch(&mut self, py: Python<'_>, keys: Vec<i64>) -> PyResult<()> {
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.release_batch(&keys))?)
    }

    /// Reserves nodes that could hold the request once free and hides them from other keys.
    /// Returns the node indices, or None if impossible. Replaces an earlier reservation of key.
    #[pyo3(signature = (key, ranks, cores_per_rank, gpus_per_rank, mem_per_rank=0))]
    fn reserve(
        &mut self,
        key: i64,
        ranks: i64,
        cores_per_rank: i64,
        gpus_per_rank: i64,
        mem_per_rank: i64,
    ) -> PyResult<Option<Vec<u32>>> {
        Ok(self.inner.reserve(
            key,
            to_u32(ranks, "ranks")?,
            to_u32(cores_per_rank, "cores_per_rank")?,
            to_u32(gpus_per_rank, "gpus_per_rank")?,
            to_u32(mem_per_rank, "mem_per_rank")?,
        )?)
    }

    /// Returns the nodes reserved for key to everyone; KeyError if it has none.
    fn unreserve(&mut self, key: i64) -> PyResult<()> {
        Ok(self.inner.unreserve(key)?)
    }

    /// The nodes reserved for key, or None.
    fn reservation(&self, key: i64) -> Option<Vec<u32>> {
        self.inner.reservation(key).map(<[u32]>::to_vec)
    }

    /// What key holds, in place_batch's format, or None.
    fn held<'py>(&self, py: Python<'py>, key: i64) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .held(key)
            .map(|enc| self.cache.allocation(py, enc))
            .transpose()
    }

    /// Verifies every internal invariant (for tests); AssertionError if one is broken.
    fn _check(&mut self) -> PyResult<()> {
        self.inner.check().map_err(PyAssertionError::new_err)
    }
}
