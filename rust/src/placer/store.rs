//! Variable-length u32 records in chunked arenas, recycled by exact length.
//!
//! Each placed key owns one small record (its `Encoded` allocation). Boxing each one cost more
//! than the placement itself (malloc, and free-list consolidation on release); here a record
//! is a slice of a fixed-capacity chunk (chunks never reallocate, so growing the store copies
//! nothing), and a released slot is reused by the next record of the same length. Allocation
//! shapes repeat (a workload has few distinct shapes), so the store stays bounded by the peak
//! number of live records of each length.

/// u32s per chunk; a longer record gets a chunk of its own.
const CHUNK: usize = 1 << 16;

/// Where a record lives; its length is stored in front of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    chunk: u32,
    off: u32,
}

#[derive(Default)]
pub struct Store {
    chunks: Vec<Vec<u32>>,
    /// The chunk new records are appended to.
    current: usize,
    /// free[len]: released slots for records of that length.
    free: Vec<Vec<Handle>>,
}

impl Store {
    pub fn put(&mut self, rec: &[u32]) -> Handle {
        let len = rec.len();
        if let Some(h) = self.free.get_mut(len).and_then(Vec::pop) {
            let at = h.off as usize + 1;
            self.chunks[h.chunk as usize][at..at + len].copy_from_slice(rec);
            return h;
        }
        let need = len + 1;
        let fits = self
            .chunks
            .get(self.current)
            .is_some_and(|c| c.capacity() - c.len() >= need);
        if !fits {
            self.chunks.push(Vec::with_capacity(need.max(CHUNK)));
            // An oversized record fills its chunk; keep appending to a regular one if possible.
            if need <= CHUNK {
                self.current = self.chunks.len() - 1;
            }
        }
        let chunk = if need <= CHUNK {
            self.current
        } else {
            self.chunks.len() - 1
        };
        let c = &mut self.chunks[chunk];
        let off = c.len();
        c.push(len as u32);
        c.extend_from_slice(rec);
        Handle {
            chunk: chunk as u32,
            off: off as u32,
        }
    }

    pub fn get(&self, h: Handle) -> &[u32] {
        let c = &self.chunks[h.chunk as usize];
        let len = c[h.off as usize] as usize;
        &c[h.off as usize + 1..h.off as usize + 1 + len]
    }

    /// Releases a slot; `h` must come from `put` and not be released yet.
    pub fn remove(&mut self, h: Handle) {
        let len = self.get(h).len();
        if self.free.len() <= len {
            self.free.resize_with(len + 1, Vec::new);
        }
        self.free[len].push(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_growth_and_reuse() {
        let mut s = Store::default();
        let recs: Vec<Vec<u32>> = (0..50_000u32)
            .map(|i| (0..i % 7 + 1).map(|j| i + j).collect())
            .collect();
        let hs: Vec<Handle> = recs.iter().map(|r| s.put(r)).collect();
        let big: Vec<u32> = (0..(CHUNK as u32 + 10)).collect();
        let hb = s.put(&big);
        let small = s.put(&[1, 2]);
        assert_eq!(s.get(hb), &big[..]);
        assert_eq!(s.get(small), &[1, 2]);
        for (h, r) in hs.iter().zip(&recs) {
            assert_eq!(s.get(*h), &r[..]);
        }
        s.remove(hs[3]);
        let again = s.put(&[9, 9, 9, 9]); // same length as recs[3]
        assert_eq!(again, hs[3]);
        assert_eq!(s.get(again), &[9, 9, 9, 9]);
    }
}
