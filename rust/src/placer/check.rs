//! Invariant checks over the whole placer state, for tests (Rust and Python `_check`).

use super::{fill_bits, low_bits, slots, Placer};

impl Placer {
    /// Checks every internal invariant; used by tests.
    pub fn check(&mut self) -> Result<(), String> {
        let n = self.n_nodes();
        let mut used_cores = vec![0u64; n * self.words];
        let mut used_gpus = vec![0u64; n];
        let mut used_mem = vec![0u64; n];
        for (key, &h) in self.held.iter() {
            let enc = self.store.get(h);
            for s in slots(enc) {
                let node = s.node as usize;
                if node >= n {
                    return Err(format!("key {key}: node {node} out of range"));
                }
                for &c in s.cores {
                    let (w, b) = (node * self.words + c as usize / 64, c % 64);
                    if c >= self.cap_cores[node] || used_cores[w] & (1 << b) != 0 {
                        return Err(format!(
                            "key {key}: core {c} on node {node} invalid or shared"
                        ));
                    }
                    used_cores[w] |= 1 << b;
                }
                for &g in s.gpus {
                    if g >= self.cap_gpus[node] || used_gpus[node] & (1 << g) != 0 {
                        return Err(format!(
                            "key {key}: gpu {g} on node {node} invalid or shared"
                        ));
                    }
                    used_gpus[node] |= 1 << g;
                }
                used_mem[node] += enc[0] as u64;
            }
        }
        let (mut tc, mut tg) = (0u64, 0u64);
        for node in 0..n {
            let words = &self.core_bits[node * self.words..(node + 1) * self.words];
            let mut all = vec![0u64; self.words];
            fill_bits(&mut all, self.cap_cores[node] as usize);
            for (w, &bits) in words.iter().enumerate() {
                if bits & used_cores[node * self.words + w] != 0
                    || bits | used_cores[node * self.words + w] != all[w]
                {
                    return Err(format!(
                        "node {node}: core bitset disagrees with allocations"
                    ));
                }
            }
            let free_c: u32 = words.iter().map(|w| w.count_ones()).sum();
            if free_c != self.free_cores[node] {
                return Err(format!(
                    "node {node}: free core count {} != bits {free_c}",
                    self.free_cores[node]
                ));
            }
            if self.gpu_bits[node] & used_gpus[node] != 0
                || self.gpu_bits[node] | used_gpus[node] != low_bits(self.cap_gpus[node] as usize)
                || self.gpu_bits[node].count_ones() != self.free_gpus[node]
            {
                return Err(format!(
                    "node {node}: gpu bitset disagrees with allocations"
                ));
            }
            if let Some(cap) = self.cap_mem[node] {
                if used_mem[node] > cap || self.free_mem[node] != cap - used_mem[node] {
                    return Err(format!("node {node}: memory accounting wrong"));
                }
            }
            if self.reserved_by[node].is_none() && node < self.cursor && self.free_cores[node] > 0 {
                return Err(format!(
                    "cursor {} past node {node} with free cores",
                    self.cursor
                ));
            }
            tc += self.free_cores[node] as u64;
            tg += self.free_gpus[node] as u64;
        }
        if (tc, tg) != (self.total_cores, self.total_gpus) {
            return Err("total free counters wrong".into());
        }
        for (key, nodes) in self.reservations.iter() {
            if nodes
                .iter()
                .any(|&nd| self.reserved_by[nd as usize] != Some(key))
            {
                return Err(format!("reservation of {key} inconsistent"));
            }
        }
        Ok(())
    }
}
