//! Spawn/reap tests. They share the process-wide reaper, so each test only looks at the
//! exits of its own executor.

use super::*;
use std::ffi::CStr;
use std::time::Instant;

fn exec() -> Executor {
    Executor::new(vec![b"PATH=/usr/bin:/bin".to_vec(), b"BASE=1".to_vec()]).unwrap()
}

fn spec(key: i64, argv: &[&str]) -> SpawnSpec {
    SpawnSpec {
        key,
        argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

/// Waits for `n` exits of `ex`.
fn collect(ex: &Executor, n: usize) -> Vec<Exit> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut all = Vec::new();
    while all.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} exits", all.len());
        all.extend(ex.wait(Some(Duration::from_millis(200))));
    }
    all
}

#[test]
fn spawns_and_reaps_many() {
    let ex = exec();
    let specs: Vec<SpawnSpec> = (0..500).map(|k| spec(k, &["true"])).collect();
    let out = ex.spawn_batch(&specs);
    assert!(
        out.iter().all(|r| r.is_ok()),
        "{:?}",
        out.iter().find(|r| r.is_err())
    );
    let mut exits = collect(&ex, 500);
    exits.sort_by_key(|e| e.key);
    assert!(exits
        .iter()
        .enumerate()
        .all(|(i, e)| e.key == i as i64 && e.exit_code == 0));
    assert_eq!(ex.running(), 0);
}

#[test]
fn reports_errors_per_spec() {
    let ex = exec();
    let out = ex.spawn_batch(&[
        spec(1, &["no-such-program-xyz"]),
        spec(2, &["/no/such/file"]),
        spec(3, &[]),
        SpawnSpec {
            cwd: Some(b"/no/such/dir".to_vec()),
            ..spec(4, &["true"])
        },
        spec(5, &["sh", "-c", "exit 3"]),
    ]);
    assert_eq!(out[0].as_ref().unwrap_err().0, -libc::ENOENT);
    assert_eq!(out[1].as_ref().unwrap_err().0, -libc::ENOENT);
    assert_eq!(out[2].as_ref().unwrap_err().0, -libc::EINVAL);
    assert_eq!(out[3].as_ref().unwrap_err().0, -libc::ENOENT);
    let pid = out[4].as_ref().unwrap().0;
    let exits = collect(&ex, 1);
    assert_eq!(
        (exits[0].key, exits[0].pid, exits[0].exit_code),
        (5, pid, 3)
    );
    // The failed spawns must not show up as exits of unknown children.
    std::thread::sleep(Duration::from_millis(100));
    assert!(ex.reap().is_empty());
}

#[test]
fn env_overlay_and_path_from_overlay() {
    assert_eq!(
        env::search_path(b"sh", b"/nonexistent:/bin")
            .unwrap()
            .as_bytes(),
        b"/bin/sh"
    );
    assert_eq!(env::search_path(b"sh", b"/nonexistent"), Err(libc::ENOENT));
    let base = BaseEnv::new(vec![b"A=1".to_vec(), b"B=2".to_vec()]).unwrap();
    let ov = env::Overlay::new(&[b"B=3".to_vec(), b"C=4".to_vec(), b"C=5".to_vec()]).unwrap();
    let ptrs = base.overlaid(&ov);
    let got: Vec<&[u8]> = ptrs[..ptrs.len() - 1]
        .iter()
        // SAFETY: pointers into live CStrings of base and ov.
        .map(|&p| unsafe { CStr::from_ptr(p) }.to_bytes())
        .collect();
    assert_eq!(got, vec![&b"A=1"[..], b"B=3", b"C=5"]);
}

/// Spawn+reap latency with one task in flight (run with --ignored --nocapture, release).
#[test]
#[ignore]
fn bench_one_in_flight() {
    let ex = exec();
    let n = 1000;
    let (mut spawning, mut waiting) = (Duration::ZERO, Duration::ZERO);
    let t = Instant::now();
    for k in 0..n {
        let a = Instant::now();
        assert!(ex.spawn_batch(&[spec(k, &["/bin/true"])])[0].is_ok());
        let b = Instant::now();
        while ex.wait(Some(Duration::from_secs(5))).is_empty() {}
        (spawning, waiting) = (spawning + (b - a), waiting + b.elapsed());
    }
    eprintln!(
        "rust one-in-flight: {:.0} tasks/s, spawn {:?}, wait {:?}",
        n as f64 / t.elapsed().as_secs_f64(),
        spawning / n as u32,
        waiting / n as u32
    );
}

#[test]
fn batch_results_stay_in_spec_order_across_workers() {
    // Enough specs for several spawn workers, failures mixed in: result i is spec i's.
    let ex = exec();
    let specs: Vec<SpawnSpec> = (0..64)
        .map(|k| {
            if k % 5 == 0 {
                spec(k, &["/no/such/program"])
            } else {
                spec(k, &["sh", "-c", &format!("exit {}", k % 7)])
            }
        })
        .collect();
    let out = ex.spawn_batch(&specs);
    assert_eq!(out.len(), 64);
    let mut pid_of = HashMap::new();
    for (k, r) in out.iter().enumerate() {
        if k % 5 == 0 {
            assert_eq!(r.as_ref().unwrap_err().0, -libc::ENOENT, "spec {k}");
        } else {
            pid_of.insert(r.as_ref().unwrap().0, k as i64);
        }
    }
    let exits = collect(&ex, pid_of.len());
    for e in exits {
        let k = pid_of[&e.pid];
        assert_eq!((e.key, e.exit_code), (k, (k % 7) as i32));
    }
}
