//! A hash map keyed by the caller's integer keys.
//!
//! Keys are task indices: mostly dense and increasing. SipHash (the std default) and any
//! well-mixing hash scatter consecutive keys over the whole table, so with millions of held
//! keys every lookup is a cache miss. This hash keeps the low bits (hashbrown's bucket index)
//! close to the key itself, so consecutive keys land in neighbouring buckets, while the top 7
//! bits (hashbrown's per-slot tag) are well mixed so that probing stays selective. The high
//! halves are folded into the low bits so that strided keys (k << 32 | i, multiples of 2^n)
//! still spread. Keys come from the agent, not an adversary, so no DoS resistance is needed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only i64 keys are hashed (write_i64); this fallback just has to be consistent.
        let folded = bytes
            .iter()
            .fold(self.0, |h, &b| h.rotate_left(8) ^ b as u64);
        self.write_u64(folded);
    }

    fn write_i64(&mut self, k: i64) {
        self.write_u64(k as u64);
    }

    fn write_u64(&mut self, k: u64) {
        const TAG_BITS: u64 = 0xFE00_0000_0000_0000;
        let low = k ^ (k >> 16) ^ (k >> 32) ^ (k >> 48);
        let tag = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TAG_BITS;
        self.0 = (low & !TAG_BITS) | tag;
    }
}

pub struct KeyMap<V>(HashMap<i64, V, BuildHasherDefault<KeyHasher>>);

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap(HashMap::default())
    }
}

impl<V> KeyMap<V> {
    pub fn get(&self, key: i64) -> Option<&V> {
        self.0.get(&key)
    }
    pub fn contains_key(&self, key: i64) -> bool {
        self.0.contains_key(&key)
    }
    pub fn insert(&mut self, key: i64, v: V) -> Option<V> {
        self.0.insert(key, v)
    }
    /// Inserts unless the key is present (one probe); false if it was.
    pub fn insert_new(&mut self, key: i64, v: impl FnOnce() -> V) -> bool {
        match self.0.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(v());
                true
            }
        }
    }
    pub fn remove(&mut self, key: i64) -> Option<V> {
        self.0.remove(&key)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (i64, &V)> {
        self.0.iter().map(|(&k, v)| (k, v))
    }
}
