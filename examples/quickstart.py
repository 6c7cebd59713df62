"""pilotfish quickstart: a pilot on an emulated 4-node machine, 1,000 heterogeneous tasks,
then 10,000 Python function calls on persistent workers in the same pilot.

    python examples/quickstart.py
"""

import collections
import time

import pilotfish as pf


def square(x: int) -> int:
    return x * x


def main() -> int:
    with pf.Session() as session:
        pmgr = pf.PilotManager(session)
        # 4 nodes x (16 cores, 2 GPUs): larger than this machine, so it is emulated -- tasks are
        # placed as on the declared nodes and run here.
        pilot = pmgr.submit_pilots(pf.PilotDescription(
            resource="local", nodes=4, cores_per_node=16, gpus_per_node=2, runtime="30m"))
        tmgr = pf.TaskManager(session)
        tmgr.add_pilots(pilot)

        descs = [pf.TaskDescription(executable="/bin/echo", arguments=["hi", str(i)])
                 for i in range(900)]
        descs += [pf.TaskDescription(  # 4 ranks x 2 cores, spread over nodes as they fit
            executable="/bin/sh", arguments=["-c", 'echo "rank $PILOTFISH_RANK on $PILOTFISH_NODE"'],
            ranks=4, cores_per_rank=2, name=f"multi-{i}") for i in range(80)]
        descs += [pf.TaskDescription(  # GPU tasks see only their GPU
            executable="/bin/sh", arguments=["-c", "echo gpu=$CUDA_VISIBLE_DEVICES"],
            gpus_per_rank=1, cores_per_rank=4, name=f"gpu-{i}") for i in range(20)]
        tasks = tmgr.submit_tasks(descs)
        tmgr.wait_tasks()

        states = collections.Counter(t.state for t in tasks)
        print(f"session {session.path}")
        print(f"pilot {pilot.uid}: {len(pilot.nodes)} nodes {[n.name for n in pilot.nodes]}")
        print("states:", dict(states))
        t = tasks[0]
        print(f"{t.uid}: {t.state} exit={t.exit_code} stdout={t.stdout!r} slots={t.slots}")
        gpu = tasks[-1]
        print(f"{gpu.uid}: {gpu.stdout.strip()} on {gpu.slots[0].node} gpus={gpu.slots[0].gpus}")

        # Python functions: run on persistent workers the pilot starts by itself
        t0 = time.monotonic()
        calls = tmgr.submit_tasks([pf.TaskDescription(function=square, args=(i,))
                                   for i in range(10_000)])
        tmgr.wait_tasks([c.uid for c in calls])
        took = time.monotonic() - t0
        right = sum(c.state == pf.DONE and c.result == i * i for i, c in enumerate(calls))
        print(f"functions: {right}/{len(calls)} right, {len(calls) / took:,.0f} calls/s")
        return 0 if states[pf.DONE] == len(tasks) and right == len(calls) else 1


if __name__ == "__main__":
    raise SystemExit(main())
