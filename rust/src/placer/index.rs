//! Segment tree over the nodes answering "lowest node with >= k free cores and >= g free
//! GPUs (and >= m free memory)".
//!
//! Every tree position stores, for each g in 0..=max_gpus, the largest free-core count among the
//! leaves below it that have at least g free GPUs (-1: no such leaf). That makes the core+GPU
//! question exact at every level, so a query is one root-to-leaf descent. Memory is only a
//! pruning bound (max free memory below), since the node with the most cores and the node with
//! the most memory may differ; queries that ask for memory backtrack.
//!
//! Updates are lazy: `set` writes the leaf and remembers it; ancestors are recomputed by `flush`
//! just before the next query. Packing many small requests onto one node therefore costs one
//! path update per node instead of one per request.

/// Leaf value of a node that must not be found (reserved for someone else, or padding).
pub const UNAVAILABLE: i32 = -1;

pub struct Index {
    /// Number of leaves: a power of two >= the number of nodes.
    size: usize,
    /// Values per tree position: max_gpus + 1.
    stride: usize,
    /// `cores[pos * stride + g]`, positions 1.. (1 = root, leaves at size..2*size).
    cores: Vec<i32>,
    /// Max free memory below each position; empty when no node tracks memory.
    mem: Vec<u64>,
    /// Leaves written since the last flush, and a flag per leaf to keep that list unique.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
}

impl Index {
    pub fn new(n_nodes: usize, max_gpus: usize, track_mem: bool) -> Self {
        let size = n_nodes.max(1).next_power_of_two();
        let stride = max_gpus + 1;
        Index {
            size,
            stride,
            cores: vec![UNAVAILABLE; 2 * size * stride],
            mem: if track_mem {
                vec![0; 2 * size]
            } else {
                Vec::new()
            },
            dirty: Vec::new(),
            is_dirty: vec![false; size],
        }
    }

    /// Records a node's free resources (`cores` = UNAVAILABLE hides it). Takes effect for
    /// queries after the next `flush`.
    pub fn set(&mut self, node: usize, cores: i32, gpus: u32, mem: u64) {
        let base = (self.size + node) * self.stride;
        for (g, v) in self.cores[base..base + self.stride].iter_mut().enumerate() {
            *v = if cores >= 0 && g as u32 <= gpus {
                cores
            } else {
                UNAVAILABLE
            };
        }
        if !self.mem.is_empty() {
            self.mem[self.size + node] = if cores >= 0 { mem } else { 0 };
        }
        if !self.is_dirty[node] {
            self.is_dirty[node] = true;
            self.dirty.push(node as u32);
        }
    }

    /// Recomputes the ancestors of every leaf written since the last flush. A walk stops as
    /// soon as a position does not change: its ancestors already saw that value.
    pub fn flush(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &node in &dirty {
            self.is_dirty[node as usize] = false;
            let mut pos = (self.size + node as usize) / 2;
            while pos >= 1 && self.recompute(pos) {
                pos /= 2;
            }
        }
        dirty.clear();
        self.dirty = dirty; // keep the allocation
    }

    /// Sets `pos` from its children; returns whether anything changed.
    fn recompute(&mut self, pos: usize) -> bool {
        let s = self.stride;
        let (l, r, p) = (2 * pos * s, (2 * pos + 1) * s, pos * s);
        let mut changed = false;
        for g in 0..s {
            let v = self.cores[l + g].max(self.cores[r + g]);
            changed |= self.cores[p + g] != v;
            self.cores[p + g] = v;
        }
        if !self.mem.is_empty() {
            let v = self.mem[2 * pos].max(self.mem[2 * pos + 1]);
            changed |= self.mem[pos] != v;
            self.mem[pos] = v;
        }
        changed
    }

    /// Lowest node with >= `k` free cores, >= `g` free GPUs and >= `m` free memory.
    pub fn first(&mut self, k: u32, g: u32, m: u64) -> Option<usize> {
        if g as usize >= self.stride || k > i32::MAX as u32 {
            return None;
        }
        self.flush();
        let (k, g) = (k as i32, g as usize);
        if m == 0 || self.mem.is_empty() {
            // Exact values: descend without backtracking.
            let s = self.stride;
            if self.cores[s + g] < k {
                return None;
            }
            let mut pos = 1;
            while pos < self.size {
                pos = if self.cores[2 * pos * s + g] >= k {
                    2 * pos
                } else {
                    2 * pos + 1
                };
            }
            Some(pos - self.size)
        } else {
            self.first_with_mem(1, k, g, m)
        }
    }

    fn first_with_mem(&self, pos: usize, k: i32, g: usize, m: u64) -> Option<usize> {
        if self.cores[pos * self.stride + g] < k || self.mem[pos] < m {
            return None;
        }
        if pos >= self.size {
            return Some(pos - self.size); // leaf values are exact
        }
        self.first_with_mem(2 * pos, k, g, m)
            .or_else(|| self.first_with_mem(2 * pos + 1, k, g, m))
    }

    /// For each g in 0..=max_gpus: the most free cores on one findable node with at least g
    /// free GPUs (-1: none). The root's values: O(max_gpus) after the flush.
    pub fn max_free(&mut self) -> Vec<i32> {
        self.flush();
        let s = self.stride;
        self.cores[s..2 * s].to_vec()
    }

    /// Debug aid for tests: every internal position equals the combination of its children.
    #[cfg(test)]
    pub fn consistent(&mut self) -> bool {
        self.flush();
        (1..self.size).all(|pos| {
            let snapshot: Vec<i32> =
                self.cores[pos * self.stride..(pos + 1) * self.stride].to_vec();
            let m = self.mem.get(pos).copied();
            let changed = self.recompute(pos);
            let ok = !changed
                && snapshot == self.cores[pos * self.stride..(pos + 1) * self.stride]
                && m == self.mem.get(pos).copied();
            ok
        })
    }
}
