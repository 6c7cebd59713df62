"""Hostile workload files (issue 32, round 3): each is refused with a clear error (exit 2, the
file, the place, the value shortened and the limit) in well under the timeout, never a crash,
a traceback or the machine's memory.

The CLI runs for real as a subprocess, under a 20 s timeout and a 2 GiB address-space limit
(RLIMIT_AS) so that a regression fails the test instead of exhausting the machine. The same
attacks go through `validate`, `run` and `simulate`: all three load a workload with
pilotfish.workload.load_workload. The YAML limits are also checked in-process with both
loaders (libyaml's parser and PyYAML's pure-Python one), since either may be the one in use.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest

from pilotfish import workload as wmod

TIMEOUT_S = 20  # generous: each of these takes well under a second here
MEM_LIMIT = 2 << 30  # RLIMIT_AS of the CLI: a regression dies of it instead of the machine

# a small pilot and a task every command accepts (simulate needs a duration)
HEAD = "pilot: {nodes: 1, cores_per_node: 2}\ntasks:\n"
TASK = "executable: /bin/true, duration: 1"

# prints the CLI's peak RSS on its way out (atexit also runs on click's sys.exit)
# the peak of this process's own memory: VmHWM (ru_maxrss would count what the forking
# parent -- pytest, hundreds of MB late in the suite -- had before the exec)
_MEASURED = """\
import atexit, sys
def _hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
atexit.register(lambda: sys.stderr.write("\\nMAXRSS_KB %d\\n" % _hwm()))
sys.argv[0] = "pilotfish"
from pilotfish.cli import main
main()
"""


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEM_LIMIT, MEM_LIMIT))


def _cli(*args, cwd, measure=False):
    """(returncode, stdout, stderr, seconds) of the real CLI; fails the test on a timeout."""
    cmd = [sys.executable, "-c", _MEASURED] if measure else [sys.executable, "-m", "pilotfish.cli"]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=cwd,
                           timeout=TIMEOUT_S, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pilotfish {' '.join(a[:40] for a in args)}: running after {TIMEOUT_S} s")
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def _refused(tmp_path, text, *words, command="validate"):
    """Write `text` as a workload, run `command` on it; assert exit 2, one short message
    naming the file and holding `words`; return that message."""
    wl = tmp_path / "w.yaml"
    if isinstance(text, bytes):
        wl.write_bytes(text)
    else:
        wl.write_text(text)
    args = {"validate": ["validate"],
            "run": ["run", "-q", "--sessions", str(tmp_path / "runs")],
            "simulate": ["simulate", "--sessions", str(tmp_path / "sims")]}[command]
    rc, out, err, _ = _cli(*args, str(wl), cwd=tmp_path)
    assert rc == 2, f"exit {rc}\n{out[-2000:]}\n{err[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert "w.yaml" in err, err[-2000:]
    assert len(err) < 2000, f"a {len(err)}-character error: {err[:300]}..."
    for w in words:
        assert w in err, f"{w!r} not in: {err}"
    return err


# -- YAML: aliases, nesting ------------------------------------------------------------------

def _alias_bomb(field: str, levels: int = 10, width: int = 9) -> str:
    """The billion laughs: `levels` anchors, each a list of `width` aliases of the one
    before: under 1 kB of text, width**levels strings once expanded."""
    lines = ["  - executable: /bin/true", "    duration: 1", f"    {field}:",
             "      a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return HEAD + "\n".join(lines) + "\n"


def test_alias_bomb_under_metadata(tmp_path):
    """Was: validate grew to 6 GB and died of SIGSEGV inside msgpack's encoder."""
    text = _alias_bomb("metadata")
    assert len(text) < 1000
    _refused(tmp_path, text, "tasks[0].metadata.a", "alias", f"{wmod.MAX_NODES}")


def test_alias_bomb_under_tags(tmp_path):
    """Was: CPU time exponential in the depth (7 levels: 7 s, 10: over 90 s)."""
    _refused(tmp_path, _alias_bomb("tags"), "tasks[0].tags.a", "alias")


def test_merge_key_bomb(tmp_path):
    """`<<: [*m, *m, ...]` nested: a PyYAML without the fix of yaml/pyyaml#937 (issue #897)
    copies every merged pair, 9**levels of them, though the dict keeps 9 keys; pyproject allows
    any pyyaml>=6. The installed 6.0.4 deduplicates them, so this passed before the fix here:
    the aliases are counted expanded whatever PyYAML does with them."""
    keys = ", ".join(f"k{j}: 1" for j in range(9))
    lines = [f"      m0: &m0 {{{keys}}}"]
    for i in range(1, 10):
        lines.append(f"      m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    text = HEAD + "  - executable: /bin/true\n    metadata:\n" + "\n".join(lines) + "\n"
    _refused(tmp_path, text, "tasks[0].metadata.m", "alias")


def test_recursive_alias(tmp_path):
    _refused(tmp_path, HEAD + "  - {executable: /bin/true, metadata: &a [1, *a]}\n",
             "tasks[0].metadata[1]", "recursive")


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting(tmp_path, opening, closing):
    """Was: RecursionError traceback, exit 1 (100,000 levels). (libyaml's scanner refuses
    flow collections over 1000 levels deep itself, before our composer sees level 65.)"""
    n = 100_000
    text = HEAD + f"  - {{{TASK}, metadata: " + opening * n + "1" + closing * n + "}\n"
    _refused(tmp_path, text, "nest", "line 3")
    # block style: no look-ahead limit of the scanner; ours
    lines = [f"  - executable: /bin/true", "    metadata:"]
    lines += [" " * (6 + 2 * k) + f"k{k}:" for k in range(100)]
    _refused(tmp_path, HEAD + "\n".join(lines) + " 1\n", "nested deeper than",
             str(wmod.MAX_DEPTH), "tasks[0].metadata.k0.k1.k2")


def test_deep_alias(tmp_path):
    """Aliases stack depth too: 40 levels aliased inside 40 more make 80."""
    inner = "[" * 40 + "1" + "]" * 40
    text = (HEAD + f"  - {{{TASK}, metadata: {{a: &d {inner}, "
            f"b: {'[' * 40}*d{']' * 40}}}}}\n")
    _refused(tmp_path, text, "nested deeper than", "tasks[0].metadata.b")


def test_aliases_and_merge_keys_still_work(tmp_path):
    """What anchors are for in a workload file: a base group reused by others."""
    wl = tmp_path / "w.yaml"
    wl.write_text(HEAD + "  - &base {name: a, executable: /bin/echo, cores_per_rank: 2,"
                  " arguments: [x], count: 3}\n"
                  "  - {<<: *base, name: b, count: 4}\n"
                  "  - {<<: *base, name: c, arguments: [y, '{i}']}\n")
    rc, out, err, _ = _cli("validate", str(wl), cwd=tmp_path)
    assert rc == 0, err
    assert "a: 3 x 1 ranks x (2 cores" in out and "b: 4 x 1 ranks x (2 cores" in out
    assert "c: 3 x" in out and "10 tasks: OK" in out


# -- sizes: file, strings ---------------------------------------------------------------------

def test_huge_string(tmp_path):
    """Was: never finished (a 200 MB string; 20 MB took over 30 s here)."""
    text = HEAD + "  - {executable: /bin/echo, arguments: ['" + "x" * 20_000_000 + "']}\n"
    _refused(tmp_path, text, "larger than", f"{wmod.MAX_FILE_BYTES}")


def test_device_as_workload(tmp_path):
    """An endless file: read no further than the limit."""
    rc, _, err, _ = _cli("validate", "/dev/zero", cwd=tmp_path)
    assert rc == 2 and "/dev/zero" in err and "larger than" in err, err[-2000:]


def test_long_argument(tmp_path):
    """A string longer than any program can be given (Linux's MAX_ARG_STRLEN)."""
    text = HEAD + f"  - {{{TASK}, arguments: [a, '" + "y" * 200_000 + "']}\n"
    _refused(tmp_path, text, "tasks[0].arguments[1]", str(wmod.MAX_SCALAR), "yyy")


def test_long_argument_once_expanded(tmp_path):
    """`{i}` grows an argument by the digits of the largest index (9999: one more)."""
    arg = "z" * (wmod.MAX_SCALAR - 3) + "{i}"
    text = HEAD + f"  - {{{TASK}, count: 10000, arguments: ['{arg}']}}\n"
    _refused(tmp_path, text, "tasks[0]", "arguments", str(wmod.MAX_SCALAR), "{i}")


def test_long_key_and_tag_shortened(tmp_path):
    """Text the YAML parser quotes in its own errors (a tag, an alias name) is cut too."""
    _refused(tmp_path, HEAD + f"  - {{{TASK}, metadata: !{'t' * 100_000} 1}}\n", "tag")
    _refused(tmp_path, HEAD + f"  - {{{TASK}, metadata: *{'u' * 100_000}}}\n", "alias")


def test_integer_of_many_digits(tmp_path):
    """Python refuses to convert over 4300 digits: was a message without the file's name."""
    _refused(tmp_path, HEAD + f"  - {{{TASK}, count: {'9' * 5000}}}\n", "digits")


def test_top_level_keys_of_mixed_types(tmp_path):
    """Was: TypeError traceback (sorting 1 and 'a' to name them)."""
    _refused(tmp_path, "{1: 2, a: 3, pilot: {}, tasks: [{executable: /bin/true}]}\n",
             "unknown top-level keys")


# -- task counts: all groups together, and count x size ---------------------------------------

def test_tasks_of_all_groups_together(tmp_path):
    """Was: 20 groups x 10 M tasks passed ("200000000 tasks: OK"; the limit was per group)."""
    groups = "".join(f"  - {{name: g{i}, {TASK}, count: 100000}}\n" for i in range(20))
    _refused(tmp_path, HEAD + groups, "2000000 tasks", str(wmod.MAX_TASKS), "all groups")
    groups = "".join(f"  - {{name: g{i}, {TASK}, count: 10000000}}\n" for i in range(20))
    _refused(tmp_path, HEAD + groups, "tasks[0] (g0).count = 10000000", str(wmod.MAX_TASKS))


def test_huge_templated_count_refused_at_once(tmp_path):
    """Was: 87 s and 3.9 GB to validate count: 10000000 with {i}."""
    text = HEAD + f"  - {{{TASK}, count: 10000000, arguments: ['{{i}}']}}\n"
    _refused(tmp_path, text, "count = 10000000", str(wmod.MAX_TASKS))


def test_validate_counts_without_building_every_task(tmp_path):
    """1,000,000 tasks with {i} (the limit, over two groups) validate without building a
    million descriptions: was ~9 s and ~400 MB here."""
    wl = tmp_path / "w.yaml"
    wl.write_text(HEAD + f"  - {{{TASK}, count: 600000, arguments: ['{{i}}']}}\n"
                  f"  - {{{TASK}, count: 400000, arguments: ['a{{i}}b']}}\n")
    rc, out, err, secs = _cli("validate", str(wl), cwd=tmp_path, measure=True)
    assert rc == 0, err
    assert "1000000 tasks: OK" in out
    rss_mb = int(err.rsplit("MAXRSS_KB", 1)[1]) / 1024
    assert rss_mb < 200, f"validate peaked at {rss_mb:.0f} MB"
    print(f"1,000,000 templated tasks validated in {secs:.2f} s, peak RSS {rss_mb:.0f} MB")


def test_count_times_size(tmp_path):
    """A small file whose tasks are large: 1000 tasks each carrying 10 MB of metadata (one
    100 kB string aliased 100 times) would be 10 GB to encode at submit."""
    text = (HEAD + f"  - {{{TASK}, count: 1000, metadata: {{s: &s '{'m' * 100_000}', "
            "l: [" + ", ".join(["*s"] * 100) + "]}}\n")
    _refused(tmp_path, text, "tasks[0]", "1000 tasks", "bytes", str(wmod.MAX_TOTAL_BYTES))


def test_run_and_simulate_load_the_same_way(tmp_path):
    """The three commands share the loader: the same refusals, before any session starts."""
    for text, word in ((_alias_bomb("metadata"), "alias"),
                       (HEAD + f"  - {{{TASK}, metadata: " + "[" * 1000 + "]" * 1000 + "}\n",
                        "nest"),
                       (HEAD + "".join(f"  - {{{TASK}, count: 600000}}\n" for _ in range(2)),
                        "1200000 tasks")):
        for command in ("run", "simulate"):
            _refused(tmp_path, text, word, command=command)
            assert not (tmp_path / "runs").exists() and not (tmp_path / "sims").exists()


# -- launch models (pilotfish simulate, PilotDescription(launch_model=...)) --------------------

def test_long_launch_model_string_shortened(tmp_path):
    """Was: a 100 kB launch_model string gave a 100 kB error message."""
    text = f"pilot: {{launch_model: {'x' * 100_000}}}\ntasks:\n  - {{{TASK}}}\n"
    _refused(tmp_path, text, "launch_model", "cannot read", command="simulate")
    wl = tmp_path / "ok.yaml"
    wl.write_text(HEAD + f"  - {{{TASK}}}\n")
    rc, _, err, _ = _cli("simulate", "--sessions", str(tmp_path / "s"),
                         "--launch-model", "x" * 100_000, str(wl), cwd=tmp_path)
    assert rc == 2 and len(err) < 2000 and "launch" in err, err[:500]


def test_launch_model_of_an_endless_file(tmp_path):
    """Was: MemoryError traceback (json.load read /dev/zero to the end), even for validate."""
    text = f"pilot: {{resource: simulated, launch_model: /dev/zero}}\ntasks:\n  - {{{TASK}}}\n"
    _refused(tmp_path, text, "/dev/zero", "larger than")
    wl = tmp_path / "ok.yaml"
    wl.write_text(HEAD + f"  - {{{TASK}}}\n")
    rc, _, err, _ = _cli("simulate", "--sessions", str(tmp_path / "s"),
                         "--launch-model", "/dev/zero", str(wl), cwd=tmp_path)
    assert rc == 2 and "larger than" in err, err[-2000:]


def test_launch_model_names_shortened():
    import pilotfish as pf

    for model in ({"p" * 100_000: {}}, {"prrte": {"c" * 100_000: 1}},
                  {"prrte": {"latency_s": -10 ** 5000}}):
        with pytest.raises(pf.DescriptionError) as e:
            pf.PilotDescription(resource="simulated", launch_model=model)
        assert len(str(e.value)) < 1000, str(e.value)[:300]


def test_launch_model_file_read(tmp_path):
    from pilotfish._launch_costs import read_launch_model

    good = tmp_path / "m.json"
    good.write_text(json.dumps({"prrte": {"latency_s": 0.1}}))
    assert read_launch_model(str(good)) == {"prrte": {"latency_s": 0.1}}
    bad = tmp_path / "bad.json"
    bad.write_text("{" * 10)
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        read_launch_model(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        read_launch_model("q" * 100_000)


# -- the YAML loader itself, with libyaml's parser and with the pure-Python one ---------------

LOADERS = [wmod._PyLoader] + ([wmod._CLoader] if wmod._CLoader is not None else [])


@pytest.fixture(params=LOADERS, ids=lambda c: c.__name__)
def loader(request, monkeypatch):
    monkeypatch.setattr(wmod, "_Loader", request.param)
    return request.param


def _load(tmp_path, text):
    wl = tmp_path / "w.yaml"
    wl.write_text(text)
    return wmod.load_workload(str(wl))


def test_loader_limits(tmp_path, loader):
    t0 = time.monotonic()
    for text, words in (
            (_alias_bomb("metadata"), ["alias", str(wmod.MAX_NODES)]),
            (HEAD + f"  - {{{TASK}, metadata: " + "[" * 10_000 + "]" * 10_000 + "}\n",
             ["nest", "line 3"]),
            (HEAD + f"  - {{{TASK}, metadata: " + "[" * 65 + "]" * 65 + "}\n",
             ["nested deeper than 64", "tasks[0].metadata[0][0]", "line 3"]),
            (HEAD + f"  - {{{TASK}, metadata: &a [*a]}}\n", ["recursive"]),
            (HEAD + f"  - {{{TASK}, metadata: '" + "q" * (wmod.MAX_SCALAR + 1) + "'}\n",
             ["longer than", "tasks[0].metadata"])):
        with pytest.raises(wmod.WorkloadError) as e:
            _load(tmp_path, text)
        for w in words:
            assert w in str(e.value), str(e.value)
        assert len(str(e.value)) < 1000
    assert time.monotonic() - t0 < TIMEOUT_S


def test_loader_depth_boundary(tmp_path, loader):
    """MAX_DEPTH collections deep (the document's own levels included) load; one more not."""
    head_levels = 3  # the document, `tasks`, the group
    n = wmod.MAX_DEPTH - head_levels - 1  # metadata's own list levels
    ok = _load(tmp_path, HEAD + f"  - {{{TASK}, metadata: {{m: " + "[" * n + "1" + "]" * n + "}}\n")
    meta = ok.groups[0].template.metadata["m"]
    for _ in range(n):
        meta = meta[0]
    assert meta == 1
    with pytest.raises(wmod.WorkloadError, match="nested deeper than"):
        _load(tmp_path, HEAD + f"  - {{{TASK}, metadata: {{m: " + "[" * (n + 1) + "1"
              + "]" * (n + 1) + "}}\n")


def test_loader_same_data_as_pyyaml(tmp_path, loader):
    import yaml

    text = (HEAD + "  - &b {name: x, executable: /bin/echo, arguments: [1, 2.5, '{i}'], count: 2,"
            " metadata: {when: 2001-01-01, list: [a, b, {c: [null, true]}], n: 0x1f}}\n"
            "  - {<<: *b, name: y}\n")
    data = yaml.load(text, Loader=loader)
    assert data == yaml.safe_load(text)
    w = _load(tmp_path, text)
    assert [g.count for g in w.groups] == [2, 2] and w.task_count == 4
    descs = w.descriptions()
    assert [d.arguments for d in descs] == [["1", "2.5", "0"], ["1", "2.5", "1"]] * 2
    assert descs[0].metadata == descs[3].metadata == yaml.safe_load(text)["tasks"][0]["metadata"]
