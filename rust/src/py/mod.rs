//! The PyO3 layer: argument conversion, GIL release and result objects. No logic here.

mod executor;
mod placer;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<placer::PyPlacer>()?;
    m.add_class::<executor::PyExecutor>()?;
    m.add_function(wrap_pyfunction!(executor::read_outputs, m)?)?;
    m.add("MAX_GPUS_PER_NODE", crate::placer::MAX_GPUS_PER_NODE)?;
    Ok(())
}

/// Suspends CPython's cyclic GC while a large result is built, restoring the previous state
/// on drop. Every ~700 new containers trigger a collection; building 10,000 placements would
/// run ~30 of them, promote the half-built result through the generations and end in full
/// collections of the whole heap (a third of the batch time, measured). Paused, the result
/// is examined once, by the first collection after it is complete.
pub(crate) struct GcPause(bool);

impl GcPause {
    pub(crate) fn new(_py: Python<'_>) -> GcPause {
        // SAFETY: plain C-API calls; holding `Python` proves we hold the GIL.
        GcPause(unsafe { pyo3::ffi::PyGC_Disable() } != 0)
    }
}

impl Drop for GcPause {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: as above; GcPause is neither Send nor outlives the GIL scope it was made in.
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
    }
}

/// Stops the cyclic GC from tracking a tuple that holds only ints and such tuples. Those can
/// never be part of a reference cycle, and CPython untracks them itself (_PyTuple_MaybeUntrack)
/// -- but only while traversing them in their first collection. Untracked at creation, the
/// millions of slot tuples an agent keeps cost the collector nothing.
pub(crate) fn untrack_atomic_tuple(t: &Bound<'_, pyo3::types::PyTuple>) {
    // SAFETY: t is a live tuple and we hold the GIL; untracking an object that is not tracked
    // is a no-op. Callers only pass tuples whose items are ints or tuples of ints.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(t.as_ptr().cast()) };
}
