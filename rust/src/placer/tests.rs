//! Randomized comparison against a naive model of the same first-fit rules.

use super::*;
use std::collections::HashMap;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

type Alloc = (u32, Vec<(u32, Vec<u32>, Vec<u32>)>); // (mem per rank, ranks)

/// Linear scans over plain vectors: obviously right, slow.
struct Model {
    cap_mem: Vec<Option<u64>>,
    cap: Vec<(u32, u32)>,
    cores: Vec<Vec<bool>>, // true = free
    gpus: Vec<Vec<bool>>,
    mem: Vec<u64>,
    reserved_by: Vec<Option<i64>>,
    reservations: HashMap<i64, Vec<u32>>,
    held: HashMap<i64, Alloc>,
}

impl Model {
    fn new(cores: &[u32], gpus: &[u32], mem: &[u64]) -> Self {
        Model {
            cap_mem: mem.iter().map(|&m| (m > 0).then_some(m)).collect(),
            cap: cores.iter().zip(gpus).map(|(&c, &g)| (c, g)).collect(),
            cores: cores.iter().map(|&c| vec![true; c as usize]).collect(),
            gpus: gpus.iter().map(|&g| vec![true; g as usize]).collect(),
            mem: mem.to_vec(),
            reserved_by: vec![None; cores.len()],
            reservations: HashMap::new(),
            held: HashMap::new(),
        }
    }

    fn free(&self, node: usize) -> (u32, u32, u64) {
        let c = self.cores[node].iter().filter(|&&f| f).count() as u32;
        let g = self.gpus[node].iter().filter(|&&f| f).count() as u32;
        let m = if self.cap_mem[node].is_some() {
            self.mem[node]
        } else {
            u64::MAX
        };
        (c, g, m)
    }

    fn take(&mut self, node: usize, n: u32, r: &Request, alloc: &mut Alloc) {
        for _ in 0..n {
            let take_ids = |v: &mut Vec<bool>, k: u32| {
                let ids: Vec<u32> = (0..v.len())
                    .filter(|&i| v[i])
                    .take(k as usize)
                    .map(|i| i as u32)
                    .collect();
                assert_eq!(ids.len(), k as usize);
                ids.iter().for_each(|&i| v[i as usize] = false);
                ids
            };
            let cs = take_ids(&mut self.cores[node], r.cores);
            let gs = take_ids(&mut self.gpus[node], r.gpus);
            if self.cap_mem[node].is_some() {
                self.mem[node] -= r.mem as u64;
            }
            alloc.1.push((node as u32, cs, gs));
        }
    }

    fn give_back(&mut self, alloc: &Alloc) {
        for (node, cs, gs) in &alloc.1 {
            let node = *node as usize;
            cs.iter().for_each(|&c| self.cores[node][c as usize] = true);
            gs.iter().for_each(|&g| self.gpus[node][g as usize] = true);
            if self.cap_mem[node].is_some() {
                self.mem[node] += alloc.0 as u64;
            }
        }
    }

    fn place(&mut self, r: &Request) -> Option<Alloc> {
        let mut alloc = (r.mem, Vec::new());
        if let Some(h) = r.hint {
            let h = h as usize;
            let usable = self.reserved_by[h].is_none_or(|k| k == r.key);
            if usable && fit_count(self.free(h), r) >= r.ranks {
                self.take(h, r.ranks, r, &mut alloc);
                return Some(alloc);
            }
            return None;
        }
        let mut order: Vec<usize> = self
            .reservations
            .get(&r.key)
            .map(|v| v.iter().map(|&n| n as usize).collect())
            .unwrap_or_default();
        order.extend((0..self.cap.len()).filter(|&n| self.reserved_by[n].is_none()));
        let mut remaining = r.ranks;
        for node in order {
            let n = fit_count(self.free(node), r).min(remaining);
            if n > 0 {
                self.take(node, n, r, &mut alloc);
                remaining -= n;
            }
            if remaining == 0 {
                return Some(alloc);
            }
        }
        self.give_back(&alloc);
        None
    }

    fn reserve(&mut self, r: &Request) -> Option<Vec<u32>> {
        let mut cands = Vec::new();
        for node in 0..self.cap.len() {
            if self.reserved_by[node].is_some_and(|k| k != r.key) {
                continue;
            }
            let cap = (
                self.cap[node].0,
                self.cap[node].1,
                self.cap_mem[node].unwrap_or(u64::MAX),
            );
            let empty = fit_count(cap, r);
            if empty > 0 {
                let now = fit_count(self.free(node), r).min(r.ranks);
                cands.push((now, self.free(node).0, node as u32, empty));
            }
        }
        cands.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut need = r.ranks as u64;
        let mut chosen = Vec::new();
        for (_, _, node, empty) in cands {
            if need == 0 {
                break;
            }
            chosen.push(node);
            need = need.saturating_sub(empty as u64);
        }
        if need > 0 {
            return None;
        }
        chosen.sort();
        if let Some(old) = self.reservations.remove(&r.key) {
            old.iter()
                .for_each(|&n| self.reserved_by[n as usize] = None);
        }
        chosen
            .iter()
            .for_each(|&n| self.reserved_by[n as usize] = Some(r.key));
        self.reservations.insert(r.key, chosen.clone());
        Some(chosen)
    }
}

fn decode(enc: &Encoded) -> Alloc {
    (
        enc[0],
        slots(enc)
            .map(|s| (s.node, s.cores.to_vec(), s.gpus.to_vec()))
            .collect(),
    )
}

fn random_request(rng: &mut Rng, key: i64, n_nodes: usize, max_c: u32, max_g: u32) -> Request {
    let shape = rng.below(4);
    let (cores, gpus) = match shape {
        0 => (1, 0), // the fast path
        1 => (1 + rng.below(max_c.max(1) as u64 / 3 + 1) as u32, 0),
        2 => (
            rng.below(max_c as u64 / 2 + 2) as u32,
            rng.below(max_g as u64 + 2) as u32,
        ),
        _ => (rng.below(max_c as u64 + 2) as u32, 0),
    };
    Request {
        key,
        ranks: if rng.chance(70) {
            1
        } else {
            1 + rng.below(6) as u32
        },
        cores,
        gpus,
        mem: if rng.chance(30) {
            rng.below(3000) as u32
        } else {
            0
        },
        hint: rng.chance(10).then(|| rng.below(n_nodes as u64) as u32),
    }
}

/// Returns (requests placed, requests refused, successful reservations).
fn run_random(seed: u64, steps: usize) -> (usize, usize, usize) {
    let mut stats = (0, 0, 0);
    let mut rng = Rng(seed);
    let n = 1 + rng.below(40) as usize;
    let cores: Vec<u32> = (0..n).map(|_| rng.below(140) as u32).collect();
    let gpus: Vec<u32> = (0..n).map(|_| rng.below(9) as u32).collect();
    let mem: Vec<u64> = (0..n)
        .map(|_| if rng.chance(50) { 0 } else { rng.below(20000) })
        .collect();
    let mut p = Placer::new(&cores, &gpus, &mem).unwrap();
    let mut m = Model::new(&cores, &gpus, &mem);
    let max_c = p.max_cores();
    let max_g = p.max_gpus();
    let mut next_key = 0i64;
    let mut out = Placements::default();

    for step in 0..steps {
        let op = rng.below(100);
        if op < 55 {
            let count = 1 + rng.below(30) as usize;
            let mut reqs: Vec<Request> = (0..count)
                .map(|i| random_request(&mut rng, next_key + i as i64, n, max_c, max_g))
                .collect();
            // Occasionally use keys that hold reservations.
            if rng.chance(20) {
                if let Some(&k) = m.reservations.keys().next() {
                    if !m.held.contains_key(&k) && !reqs.iter().any(|r| r.key == k) {
                        reqs[0].key = k;
                    }
                }
            }
            // Sometimes reuse a key that holds resources: the whole batch must be refused.
            let dup = rng.chance(3) && !m.held.is_empty();
            if dup {
                let k = *m.held.keys().next().unwrap();
                let i = rng.below(count as u64) as usize;
                reqs[i].key = k;
            }
            next_key += count as i64;
            let backfill = rng.chance(70);
            let res = p.place_batch(&reqs, backfill, &mut out);
            if dup {
                assert!(
                    matches!(res, Err(Error::DuplicateKey(_))),
                    "seed {seed} step {step} {res:?} {reqs:?}"
                );
            } else {
                res.unwrap();
                let mut stopped = false;
                for (i, r) in reqs.iter().enumerate() {
                    let want = if stopped { None } else { m.place(r) };
                    if want.is_none() && !backfill {
                        stopped = true;
                    }
                    let got = out.get(i).map(decode);
                    assert_eq!(got, want, "seed {seed} step {step} request {r:?}");
                    match want {
                        Some(a) => {
                            stats.0 += 1;
                            m.held.insert(r.key, a);
                        }
                        None => stats.1 += 1,
                    }
                }
            }
        } else if op < 85 {
            let mut keys: Vec<i64> = m.held.keys().copied().filter(|_| rng.chance(40)).collect();
            let unknown = rng.chance(5);
            if unknown {
                keys.push(-12345);
            }
            let res = p.release_batch(&keys);
            assert_eq!(res.is_err(), unknown);
            for k in keys {
                if let Some(a) = m.held.remove(&k) {
                    m.give_back(&a);
                }
            }
        } else if op < 93 {
            let mut r = random_request(&mut rng, 0, n, max_c, max_g);
            r.ranks = 1 + rng.below(5) as u32;
            r.key = if rng.chance(50) {
                next_key
            } else {
                rng.below(next_key as u64 + 1) as i64
            };
            let got = p.reserve(r.key, r.ranks, r.cores, r.gpus, r.mem).unwrap();
            stats.2 += got.is_some() as usize;
            assert_eq!(got, m.reserve(&r), "seed {seed} step {step} reserve {r:?}");
        } else if let Some(&k) = m.reservations.keys().next() {
            p.unreserve(k).unwrap();
            for node in m.reservations.remove(&k).unwrap() {
                m.reserved_by[node as usize] = None;
            }
            assert!(p.unreserve(k).is_err());
        }
        p.check()
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        assert!(p.index_consistent(), "seed {seed} step {step}: index");
        for node in 0..n {
            let (c, g, mm) = m.free(node);
            let mm = if m.cap_mem[node].is_some() { mm } else { 0 };
            assert_eq!(
                p.free(node),
                Some((c, g, mm)),
                "seed {seed} step {step} node {node}"
            );
        }
    }
    stats
}

#[test]
fn random_against_model() {
    let mut total = (0, 0, 0);
    for seed in 0..300 {
        let s = run_random(seed, 200);
        total = (total.0 + s.0, total.1 + s.1, total.2 + s.2);
    }
    // The sequences must exercise both outcomes and reservations, not just trivial cases.
    assert!(
        total.0 > 50_000 && total.1 > 50_000 && total.2 > 1_000,
        "{total:?}"
    );
}

#[test]
fn packs_ranks_and_rolls_back() {
    let mut p = Placer::new(&[4, 4], &[1, 1], &[0, 0]).unwrap();
    let mut out = Placements::default();
    let r = |key, ranks, cores, gpus| Request {
        key,
        ranks,
        cores,
        gpus,
        mem: 0,
        hint: None,
    };
    p.place_batch(&[r(1, 3, 2, 0)], true, &mut out).unwrap();
    let got: Vec<_> = slots(out.get(0).unwrap()).collect();
    assert_eq!(
        got[0],
        Slot {
            node: 0,
            cores: &[0, 1],
            gpus: &[]
        }
    );
    assert_eq!(
        got[1],
        Slot {
            node: 0,
            cores: &[2, 3],
            gpus: &[]
        }
    );
    assert_eq!(
        got[2],
        Slot {
            node: 1,
            cores: &[0, 1],
            gpus: &[]
        }
    );
    // 2 ranks x 1 GPU: only node 1's GPU is usable with a core -> atomic failure.
    p.place_batch(&[r(2, 2, 1, 1)], true, &mut out).unwrap();
    assert!(out.get(0).is_none());
    assert_eq!(p.free(1), Some((2, 1, 0)));
    p.check().unwrap();
    p.release_batch(&[1]).unwrap();
    assert_eq!(p.total_free(), (8, 2));
    assert_eq!(p.release_batch(&[1]), Err(Error::UnknownKeys(vec![1])));
}

#[test]
fn reservation_hides_nodes() {
    let mut p = Placer::new(&[8, 8, 8], &[0, 0, 0], &[0, 0, 0]).unwrap();
    let mut out = Placements::default();
    let one = |key| Request {
        key,
        ranks: 1,
        cores: 1,
        gpus: 0,
        mem: 0,
        hint: None,
    };
    p.place_batch(&[one(1)], true, &mut out).unwrap(); // node 0 busy
    let nodes = p.reserve(99, 2, 8, 0, 0).unwrap().unwrap();
    assert_eq!(nodes, vec![1, 2]); // the two empty nodes
    p.place_batch(&[one(2)], true, &mut out).unwrap();
    assert_eq!(slots(out.get(0).unwrap()).next().unwrap().node, 0);
    let big = Request {
        key: 99,
        ranks: 2,
        cores: 8,
        gpus: 0,
        mem: 0,
        hint: None,
    };
    p.place_batch(&[big], true, &mut out).unwrap();
    let got: Vec<u32> = slots(out.get(0).unwrap()).map(|s| s.node).collect();
    assert_eq!(got, vec![1, 2]);
    p.unreserve(99).unwrap();
    p.check().unwrap();
}

#[test]
fn duplicate_in_batch_undoes_batch() {
    let mut p = Placer::new(&[8], &[0], &[0]).unwrap();
    let mut out = Placements::default();
    let one = |key| Request {
        key,
        ranks: 1,
        cores: 2,
        gpus: 0,
        mem: 0,
        hint: None,
    };
    let res = p.place_batch(&[one(1), one(2), one(1)], true, &mut out);
    assert_eq!(res, Err(Error::DuplicateKey(1)));
    assert_eq!(p.total_free(), (8, 0));
    assert_eq!(p.n_held(), 0);
    p.check().unwrap();
}

/// Throughput of the pure-Rust part (run with --ignored --nocapture in release mode).
#[test]
#[ignore]
fn bench_uniform_1core() {
    let n = 10_000;
    let mut p = Placer::new(&vec![168; n], &vec![0; n], &vec![0; n]).unwrap();
    let mut out = Placements::default();
    let t = std::time::Instant::now();
    for b in 0..168 {
        let reqs: Vec<Request> = (0..10_000)
            .map(|i| Request {
                key: b * 10_000 + i,
                ranks: 1,
                cores: 1,
                gpus: 0,
                mem: 0,
                hint: None,
            })
            .collect();
        p.place_batch(&reqs, true, &mut out).unwrap();
    }
    let dt = t.elapsed().as_secs_f64();
    eprintln!("rust-only: {:.0} placements/s", 1_680_000.0 / dt);
}
