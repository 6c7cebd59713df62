//! Placement of multi-rank requests onto nodes with cores, GPUs and memory.
//!
//! Mechanism only: the caller decides the order of requests; the placer answers first-fit
//! (lowest node index, lowest free core/GPU ids) and never oversubscribes.

mod check;
mod index;
mod keymap;
mod store;
#[cfg(test)]
mod tests;

use index::{Index, UNAVAILABLE};
use keymap::KeyMap;
use store::{Handle, Store};

/// The most GPUs a node may have: GPU ids live in one u64 bitset per node.
pub const MAX_GPUS_PER_NODE: u32 = 64;

/// Largest encoded allocation (u32s) of one request: far beyond any real machine.
const MAX_ENCODED: u64 = 1 << 28;

/// One placement request: `ranks` ranks, each needing `cores` cores, `gpus` GPUs and `mem` MiB
/// on a single node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub key: i64,
    pub ranks: u32,
    pub cores: u32,
    pub gpus: u32,
    pub mem: u32,
    /// All ranks must go to this node.
    pub hint: Option<u32>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// A node capacity or request field is out of range.
    Invalid(String),
    /// The key already holds resources (or appears twice in a batch).
    DuplicateKey(i64),
    /// release/unreserve of a key that holds nothing.
    UnknownKeys(Vec<i64>),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Invalid(msg) => f.write_str(msg),
            Error::DuplicateKey(k) => write!(f, "key {k} already holds resources"),
            Error::UnknownKeys(ks) => write!(f, "unknown keys: {ks:?}"),
        }
    }
}

/// Resources of one allocation, flat so that it is stored as one record and read back without
/// per-rank allocations: `[mem_per_rank, (node, n_cores, n_gpus, core ids.., gpu ids..) per
/// rank]`.
/// Read it with [`slots`].
pub type Encoded = [u32];

/// One rank's share of an allocation.
#[derive(Debug, PartialEq, Eq)]
pub struct Slot<'a> {
    pub node: u32,
    pub cores: &'a [u32],
    pub gpus: &'a [u32],
}

/// The ranks of an encoded allocation.
pub fn slots(enc: &Encoded) -> impl Iterator<Item = Slot<'_>> {
    let mut rest = &enc[1..];
    std::iter::from_fn(move || {
        let (&node, &nc, &ng) = (rest.first()?, rest.get(1)?, rest.get(2)?);
        let (nc, ng) = (nc as usize, ng as usize);
        let slot = Slot {
            node,
            cores: &rest[3..3 + nc],
            gpus: &rest[3 + nc..3 + nc + ng],
        };
        rest = &rest[3 + nc + ng..];
        Some(slot)
    })
}

/// Output of `place_batch`, reused across calls to avoid reallocating.
#[derive(Default)]
pub struct Placements {
    /// Per request: the range of `enc` holding its allocation, or None (not placed).
    pub spans: Vec<Option<(u32, u32)>>,
    pub enc: Vec<u32>,
}

impl Placements {
    pub fn get(&self, i: usize) -> Option<&Encoded> {
        self.spans[i].map(|(a, b)| &self.enc[a as usize..b as usize])
    }
}

pub struct Placer {
    cap_cores: Vec<u32>,
    cap_gpus: Vec<u32>,
    /// None: memory not tracked on that node.
    cap_mem: Vec<Option<u64>>,
    free_cores: Vec<u32>,
    free_gpus: Vec<u32>,
    /// u64::MAX on nodes that do not track memory, so comparisons need no special case.
    free_mem: Vec<u64>,
    /// Free-core bitsets, `words` u64 per node; bit set = core free.
    core_bits: Vec<u64>,
    words: usize,
    gpu_bits: Vec<u64>,
    reserved_by: Vec<Option<i64>>,
    reservations: KeyMap<Vec<u32>>,
    /// What each key holds, as a record in `store`.
    held: KeyMap<Handle>,
    store: Store,
    /// Scratch copy of a record being released (the store cannot be borrowed meanwhile).
    scratch: Vec<u32>,
    index: Index,
    /// Fast path for 1-core requests: every available node below `cursor` has no free core.
    cursor: usize,
    total_cores: u64,
    total_gpus: u64,
}

impl Placer {
    /// Per-node capacities; `mem` in MiB, 0 = not tracked.
    pub fn new(cores: &[u32], gpus: &[u32], mem: &[u64]) -> Result<Self, Error> {
        let n = cores.len();
        if gpus.len() != n || mem.len() != n {
            return Err(Error::Invalid(
                "cores, gpus and mem must have the same length".into(),
            ));
        }
        if n > u32::MAX as usize / 2 {
            return Err(Error::Invalid("too many nodes".into()));
        }
        if let Some(g) = gpus.iter().find(|&&g| g > MAX_GPUS_PER_NODE) {
            return Err(Error::Invalid(format!(
                "{g} GPUs on a node; at most {MAX_GPUS_PER_NODE} supported"
            )));
        }
        if cores.iter().any(|&c| c > i32::MAX as u32) {
            return Err(Error::Invalid("too many cores on a node".into()));
        }
        let max_cores = cores.iter().copied().max().unwrap_or(0) as usize;
        let max_gpus = gpus.iter().copied().max().unwrap_or(0) as usize;
        let words = max_cores.div_ceil(64).max(1);
        let track_mem = mem.iter().any(|&m| m > 0);

        let mut core_bits = vec![0u64; n * words];
        for (node, &c) in cores.iter().enumerate() {
            fill_bits(&mut core_bits[node * words..(node + 1) * words], c as usize);
        }
        let gpu_bits = gpus.iter().map(|&g| low_bits(g as usize)).collect();
        let cap_mem: Vec<Option<u64>> = mem
            .iter()
            .map(|&m| if m > 0 { Some(m) } else { None })
            .collect();

        let mut placer = Placer {
            cap_cores: cores.to_vec(),
            cap_gpus: gpus.to_vec(),
            free_mem: cap_mem.iter().map(|m| m.unwrap_or(u64::MAX)).collect(),
            cap_mem,
            free_cores: cores.to_vec(),
            free_gpus: gpus.to_vec(),
            core_bits,
            words,
            gpu_bits,
            reserved_by: vec![None; n],
            reservations: KeyMap::default(),
            held: KeyMap::default(),
            store: Store::default(),
            scratch: Vec::new(),
            index: Index::new(n, max_gpus, track_mem),
            cursor: 0,
            total_cores: cores.iter().map(|&c| c as u64).sum(),
            total_gpus: gpus.iter().map(|&g| g as u64).sum(),
        };
        for node in 0..n {
            placer.refresh(node);
        }
        Ok(placer)
    }

    pub fn n_nodes(&self) -> usize {
        self.cap_cores.len()
    }

    pub fn max_cores(&self) -> u32 {
        self.cap_cores.iter().copied().max().unwrap_or(0)
    }

    pub fn max_gpus(&self) -> u32 {
        self.cap_gpus.iter().copied().max().unwrap_or(0)
    }

    /// (free cores, free GPUs, free MiB; 0 when memory is not tracked).
    pub fn free(&self, node: usize) -> Option<(u32, u32, u64)> {
        let mem = if self.cap_mem.get(node)?.is_some() {
            self.free_mem[node]
        } else {
            0
        };
        Some((self.free_cores[node], self.free_gpus[node], mem))
    }

    /// Per GPU count g: the most free cores on one node (not reserved) with >= g free GPUs.
    pub fn max_free(&mut self) -> Vec<i32> {
        self.index.max_free()
    }

    /// Free cores and GPUs over all nodes, reserved ones included.
    pub fn total_free(&self) -> (u64, u64) {
        (self.total_cores, self.total_gpus)
    }

    /// The resources `key` holds.
    pub fn held(&self, key: i64) -> Option<&Encoded> {
        self.held.get(key).map(|&h| self.store.get(h))
    }

    pub fn n_held(&self) -> usize {
        self.held.len()
    }

    /// The nodes reserved for `key`.
    pub fn reservation(&self, key: i64) -> Option<&[u32]> {
        self.reservations.get(key).map(|v| v.as_slice())
    }

    /// Tries `reqs` in order. backfill: a request that does not fit is skipped and later ones
    /// are still tried; otherwise the batch stops at the first that does not fit. On error
    /// (invalid request, duplicate key) nothing of this batch stays placed.
    pub fn place_batch(
        &mut self,
        reqs: &[Request],
        backfill: bool,
        out: &mut Placements,
    ) -> Result<(), Error> {
        out.spans.clear();
        out.enc.clear();
        for r in reqs {
            self.validate(r)?;
        }
        for (i, r) in reqs.iter().enumerate() {
            let start = out.enc.len();
            if self.place_one(r, &mut out.enc) {
                let span = (start as u32, out.enc.len() as u32);
                let (store, rec) = (&mut self.store, &out.enc[start..]);
                if !self.held.insert_new(r.key, || store.put(rec)) {
                    // The key appeared twice in this batch: undo the batch (the earlier
                    // allocation included) so that an error leaves no partial effect.
                    self.give_back(&out.enc[start..]);
                    out.spans.push(None);
                    self.undo_batch(reqs, out);
                    return Err(Error::DuplicateKey(r.key));
                }
                out.spans.push(Some(span));
            } else {
                out.spans.push(None);
                if !backfill {
                    out.spans.resize(reqs.len(), None);
                    break;
                }
            }
            debug_assert_eq!(out.spans.len(), i + 1);
        }
        Ok(())
    }

    fn undo_batch(&mut self, reqs: &[Request], out: &mut Placements) {
        for (r, span) in reqs.iter().zip(&out.spans) {
            if span.is_some() {
                self.release(r.key);
            }
        }
        out.spans.clear();
        out.enc.clear();
    }

    fn validate(&self, r: &Request) -> Result<(), Error> {
        if r.ranks == 0 {
            return Err(Error::Invalid(format!("key {}: ranks must be >= 1", r.key)));
        }
        // Bounds the encoded size (e.g. a billion ranks that need nothing would fit anywhere).
        if r.ranks as u64 * (3 + r.cores as u64 + r.gpus as u64) > MAX_ENCODED {
            return Err(Error::Invalid(format!("key {}: too many ranks", r.key)));
        }
        if self.held.contains_key(r.key) {
            return Err(Error::DuplicateKey(r.key));
        }
        if let Some(h) = r.hint {
            if h as usize >= self.n_nodes() {
                return Err(Error::Invalid(format!(
                    "key {}: node_hint {h} out of range",
                    r.key
                )));
            }
        }
        Ok(())
    }

    /// Places one request, appending its encoding to `enc`; all or nothing.
    fn place_one(&mut self, r: &Request, enc: &mut Vec<u32>) -> bool {
        let start = enc.len();
        enc.push(r.mem);
        let has_reservation =
            !self.reservations.is_empty() && self.reservations.contains_key(r.key);

        if r.ranks == 1 && r.cores == 1 && r.gpus == 0 && r.hint.is_none() && !has_reservation {
            if let Some(node) = self.cursor_node(r.mem as u64) {
                self.take(node, 1, r, enc);
                return true;
            }
            // The cursor node lacks memory: fall through to the general search.
        }

        let mut remaining = r.ranks;
        if let Some(h) = r.hint {
            let h = h as usize;
            if self.usable_by(h, r.key) && self.fit(h, r) >= r.ranks {
                self.take(h, r.ranks, r, enc);
                return true;
            }
            enc.truncate(start);
            return false;
        }
        if has_reservation {
            let nodes = self.reservations.get(r.key).cloned().unwrap_or_default();
            for node in nodes {
                let n = self.fit(node as usize, r).min(remaining);
                if n > 0 {
                    self.take(node as usize, n, r, enc);
                    remaining -= n;
                    if remaining == 0 {
                        return true;
                    }
                }
            }
        }
        while remaining > 0 {
            // Resources only shrink while placing one request, so the lowest fitting node is
            // always past the ones already used: no need to exclude them.
            match self.index.first(r.cores, r.gpus, r.mem as u64) {
                Some(node) => {
                    let n = self.fit(node, r).min(remaining);
                    debug_assert!(n > 0);
                    self.take(node, n, r, enc);
                    remaining -= n;
                }
                None => {
                    self.give_back(&enc[start..]);
                    enc.truncate(start);
                    return false;
                }
            }
        }
        true
    }

    /// The lowest available node with a free core and `mem` free memory, if the cursor can
    /// find it without a general search.
    fn cursor_node(&mut self, mem: u64) -> Option<usize> {
        let n = self.n_nodes();
        if self.cursor >= n
            || self.reserved_by[self.cursor].is_some()
            || self.free_cores[self.cursor] == 0
        {
            self.cursor = self.index.first(1, 0, 0).unwrap_or(n);
        }
        (self.cursor < n && self.free_mem[self.cursor] >= mem).then_some(self.cursor)
    }

    fn usable_by(&self, node: usize, key: i64) -> bool {
        self.reserved_by[node].is_none_or(|k| k == key)
    }

    /// How many ranks of `r` fit on `node` now (ignoring reservations).
    fn fit(&self, node: usize, r: &Request) -> u32 {
        fit_count(
            (
                self.free_cores[node],
                self.free_gpus[node],
                self.free_mem[node],
            ),
            r,
        )
    }

    /// Takes `count` ranks of `r` on `node` (they must fit), lowest free ids first.
    fn take(&mut self, node: usize, count: u32, r: &Request, enc: &mut Vec<u32>) {
        let words = &mut self.core_bits[node * self.words..(node + 1) * self.words];
        let gpu_bits = &mut self.gpu_bits[node];
        let mut w = 0;
        for _ in 0..count {
            enc.extend_from_slice(&[node as u32, r.cores, r.gpus]);
            for _ in 0..r.cores {
                while words[w] == 0 {
                    w += 1;
                }
                enc.push(w as u32 * 64 + words[w].trailing_zeros());
                words[w] &= words[w] - 1; // clear the lowest set bit
            }
            for _ in 0..r.gpus {
                enc.push(gpu_bits.trailing_zeros());
                *gpu_bits &= *gpu_bits - 1;
            }
        }
        self.free_cores[node] -= count * r.cores;
        self.free_gpus[node] -= count * r.gpus;
        if self.cap_mem[node].is_some() {
            self.free_mem[node] -= count as u64 * r.mem as u64;
        }
        self.total_cores -= (count * r.cores) as u64;
        self.total_gpus -= (count * r.gpus) as u64;
        self.refresh(node);
    }

    /// Returns the resources of an encoded allocation to the nodes.
    fn give_back(&mut self, enc: &Encoded) {
        let mem = enc[0] as u64;
        for s in slots(enc) {
            let node = s.node as usize;
            let words = &mut self.core_bits[node * self.words..(node + 1) * self.words];
            for &c in s.cores {
                words[c as usize / 64] |= 1 << (c % 64);
            }
            for &g in s.gpus {
                self.gpu_bits[node] |= 1 << g;
            }
            self.free_cores[node] += s.cores.len() as u32;
            self.free_gpus[node] += s.gpus.len() as u32;
            if self.cap_mem[node].is_some() {
                self.free_mem[node] += mem;
            }
            self.total_cores += s.cores.len() as u64;
            self.total_gpus += s.gpus.len() as u64;
            self.cursor = self.cursor.min(node);
            self.refresh(node);
        }
    }

    /// Frees what `keys` hold. Every known key is released; unknown ones are reported after.
    pub fn release_batch(&mut self, keys: &[i64]) -> Result<(), Error> {
        let unknown: Vec<i64> = keys.iter().copied().filter(|&k| !self.release(k)).collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(Error::UnknownKeys(unknown))
        }
    }

    /// Frees what `key` holds; false if it holds nothing.
    fn release(&mut self, key: i64) -> bool {
        let Some(h) = self.held.remove(key) else {
            return false;
        };
        let mut rec = std::mem::take(&mut self.scratch);
        rec.clear();
        rec.extend_from_slice(self.store.get(h));
        self.store.remove(h);
        self.give_back(&rec);
        self.scratch = rec;
        true
    }

    /// Reserves nodes that together could hold `ranks` ranks of the given shape once they are
    /// free, preferring nodes that have the most free resources now, and hides them from every
    /// other key. Replaces an earlier reservation of `key`. None (and no change) when the
    /// nodes not reserved by others cannot hold the request even when empty.
    pub fn reserve(
        &mut self,
        key: i64,
        ranks: u32,
        cores: u32,
        gpus: u32,
        mem: u32,
    ) -> Result<Option<Vec<u32>>, Error> {
        if ranks == 0 {
            return Err(Error::Invalid("ranks must be >= 1".into()));
        }
        let r = Request {
            key,
            ranks,
            cores,
            gpus,
            mem,
            hint: None,
        };
        // (ranks that fit now, free cores now, node, ranks that fit when empty)
        let mut cands: Vec<(u32, u32, u32, u32)> = (0..self.n_nodes())
            .filter(|&node| self.usable_by(node, key))
            .filter_map(|node| {
                let cap = (
                    self.cap_cores[node],
                    self.cap_gpus[node],
                    self.cap_mem[node].unwrap_or(u64::MAX),
                );
                let when_empty = fit_count(cap, &r);
                (when_empty > 0).then(|| {
                    (
                        self.fit(node, &r).min(ranks),
                        self.free_cores[node],
                        node as u32,
                        when_empty,
                    )
                })
            })
            .collect();
        cands.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut need = ranks;
        let mut chosen = Vec::new();
        for &(_, _, node, when_empty) in &cands {
            if need == 0 {
                break;
            }
            chosen.push(node);
            need = need.saturating_sub(when_empty);
        }
        if need > 0 {
            return Ok(None);
        }
        chosen.sort_unstable();
        if let Some(old) = self.reservations.remove(key) {
            self.unhide(&old);
        }
        for &node in &chosen {
            self.reserved_by[node as usize] = Some(key);
            self.refresh(node as usize);
        }
        self.reservations.insert(key, chosen.clone());
        Ok(Some(chosen))
    }

    /// Gives the nodes reserved for `key` back to everyone.
    pub fn unreserve(&mut self, key: i64) -> Result<(), Error> {
        let nodes = self
            .reservations
            .remove(key)
            .ok_or(Error::UnknownKeys(vec![key]))?;
        self.unhide(&nodes);
        Ok(())
    }

    fn unhide(&mut self, nodes: &[u32]) {
        for &node in nodes {
            self.reserved_by[node as usize] = None;
            self.cursor = self.cursor.min(node as usize);
            self.refresh(node as usize);
        }
    }

    /// Publishes a node's free resources to the index (hidden while reserved).
    fn refresh(&mut self, node: usize) {
        let cores = match self.reserved_by[node] {
            Some(_) => UNAVAILABLE,
            None => self.free_cores[node] as i32,
        };
        self.index
            .set(node, cores, self.free_gpus[node], self.free_mem[node]);
    }

    #[cfg(test)]
    fn index_consistent(&mut self) -> bool {
        self.index.consistent()
    }
}

/// Ranks of `r` that fit in (free cores, free GPUs, free memory); u32::MAX if `r` needs nothing.
fn fit_count((cores, gpus, mem): (u32, u32, u64), r: &Request) -> u32 {
    let by_cores = cores.checked_div(r.cores).unwrap_or(u32::MAX);
    let by_gpus = gpus.checked_div(r.gpus).unwrap_or(u32::MAX);
    let by_mem = mem
        .checked_div(r.mem as u64)
        .unwrap_or(u64::MAX)
        .min(u32::MAX as u64) as u32;
    by_cores.min(by_gpus).min(by_mem)
}

fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Sets the lowest `n` bits of a multi-word bitset.
fn fill_bits(words: &mut [u64], n: usize) {
    for (w, word) in words.iter_mut().enumerate() {
        *word = low_bits(n.saturating_sub(w * 64));
    }
}
