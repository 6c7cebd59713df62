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

/// A socketpair: (ours, theirs), both close-on-exec, as Python and Rust make descriptors.
fn socketpair() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: plain syscall filling two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "{}", io::Error::last_os_error());
    // SAFETY: two fresh descriptors that nothing else owns.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

/// Reads what the peer writes until EOF (every holder of the other end closed it).
fn read_to_eof(fd: std::os::fd::OwnedFd) -> String {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::from(fd).read_to_string(&mut s).unwrap();
    s
}

/// A private scratch directory of this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("pilotfish-core-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d
}

#[test]
fn passes_one_descriptor_as_3_and_no_other() {
    // A child writes over descriptor 3 and exits: our end reads what it wrote, and EOF comes
    // once it has exited -- no other process holds its end (the parent's copy is closed
    // below, the batch's other children never get it). `ls /proc/self/fd` shows 0-3 and its
    // own directory (4) with the option, 0-2 and its directory (3) without.
    use std::os::fd::AsRawFd;
    let ex = exec();
    let dir = scratch("passfd");
    let out_of = |name: &str| Some(dir.join(name).into_os_string().into_encoded_bytes());
    let (ours, theirs) = socketpair();
    let (ours2, theirs2) = socketpair();
    let (_ours3, theirs3) = socketpair();
    let fd2 = theirs2.as_raw_fd();
    let specs = vec![
        SpawnSpec {
            pass_fd: Some(PassFd::at3(theirs.as_raw_fd())),
            ..spec(1, &["sh", "-c", "echo hello >&3"])
        },
        // one whose descriptor already is the target: only its close-on-exec flag goes
        SpawnSpec {
            pass_fd: Some(PassFd {
                fd: fd2,
                target: fd2,
            }),
            ..spec(2, &["sh", "-c", &format!("echo moved >&{fd2}")])
        },
        SpawnSpec {
            pass_fd: Some(PassFd::at3(theirs3.as_raw_fd())),
            stdout: out_of("with"),
            ..spec(3, &["ls", "/proc/self/fd"])
        },
        SpawnSpec {
            stdout: out_of("without"),
            ..spec(4, &["ls", "/proc/self/fd"])
        },
    ];
    let out = ex.spawn_batch(&specs);
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    drop((theirs, theirs2, theirs3));
    assert_eq!(read_to_eof(ours), "hello\n");
    assert_eq!(read_to_eof(ours2), "moved\n");
    let exits = collect(&ex, 4);
    assert!(exits.iter().all(|e| e.exit_code == 0), "{exits:?}");
    let fds = |name: &str| {
        let mut v: Vec<i32> = std::fs::read_to_string(dir.join(name))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(fds("with"), [0, 1, 2, 3, 4]);
    assert_eq!(fds("without"), [0, 1, 2, 3]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_pass_fd_fails_its_spec_alone() {
    let ex = exec();
    let bad = |key, fd, target| SpawnSpec {
        pass_fd: Some(PassFd { fd, target }),
        ..spec(key, &["true"])
    };
    // (descriptor 1 exists: a target among stdio is refused before any spawn)
    let out = ex.spawn_batch(&[
        bad(1, -1, 3),
        bad(2, 1, 2),
        bad(3, 1_000_000, 3),
        spec(4, &["true"]),
    ]);
    let err = |i: usize| out[i].as_ref().unwrap_err().clone();
    assert_eq!(err(0).0, -libc::EINVAL);
    assert!(
        err(0).1.contains("pass_fd") && err(0).1.contains("-1"),
        "{:?}",
        err(0)
    );
    assert_eq!(err(1).0, -libc::EINVAL);
    assert!(err(1).1.contains("target 2"), "{:?}", err(1));
    // not open here: the child's dup3 fails, reported as the spawn's error
    assert_eq!(err(2).0, -libc::EBADF);
    assert!(err(2).1.contains("pass_fd 1000000"), "{:?}", err(2));
    assert!(out[3].is_ok());
    assert_eq!(collect(&ex, 1)[0].key, 4);
}
