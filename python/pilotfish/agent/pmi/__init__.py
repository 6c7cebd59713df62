"""A PMI server: the process manager's side of the simple PMI wire protocol, for MPI tasks whose
ranks pilotfish starts itself (no `mpiexec`, `srun` or `prterun` per task).

An MPICH-family library (the `mpich` wheel, Debian's MPICH, Intel MPI, MVAPICH...) started
with `PMI_FD`, `PMI_RANK` and `PMI_SIZE` in its environment asks its process manager, over that
inherited descriptor, who it is (rank, size, the job's KVS name) and exchanges its address
("business card") with the other ranks through a key-value space (put; fence; get). This
package is that process manager for one node, and the agent's side of worlds across nodes:

- wire.py    the bytes: limits, PMI-1 lines and PMI-2 frames cut from a connection's input,
             answers formatted (parse.py takes a message apart into key=value pairs)
- engine.py  the protocol without I/O: bytes in, answers and callbacks out; the command
             tables (PMI1, PMI2: name -> handler)
- job.py     one job on a node (PmiJob): connections' state, the key-value space, fences, caps
- server.py  the engine on real descriptors (PmiServer): socketpairs, one epoll descriptor
- env.py     a rank's environment (another manager's variables out, the PMI variables in)
- mpich.py   MPICH specifics: process mapping, world ids, /dev/shm names, fresh KVS names
- fence.py   a world's fences across nodes, in bounded parts; node.py: the jobs of one
             spawner (NodePmi); worlds.py: the agent's side of its worlds (PmiWorlds)

Fences cost one message per node, not per rank: when every LOCAL rank of a job has entered a
fence (barrier_in / kvs-fence) the server calls `on_fence(job, epoch, new_keys)` once, with the
keys this node's ranks put since the last fence. The owner gathers every node's dict (the agent,
over its node link, in bounded parts: fence.py) and hands the union back -- whole,
`job.fence_done(epoch, merged)`, or part by part, `job.fence_part(epoch, keys, more)`, each
checked against the cap as it comes; the server then answers every local rank and serves gets
from the merged space. A job whose ranks all live here needs no owner for that: without
`on_fence` the server completes the fence itself.

The name a job's ranks are told (`job.name`: get_my_kvsname, job-getid, PMI_JOBID) is its KVS
name, or a fresh one where MPICH's shared memory of that name exists (mpich.py); the owner
knows the job by its kvsname either way.

Every input from a rank is bounded and checked: a PMI-1 line or PMI-2 frame over `max_line`
bytes, a malformed one, a key or value over the advertised maxima, a KVS over `max_kvs_bytes`
(the job's keys and values, all nodes' together) or a rank that does not read its answers
fails THAT job -- `on_error(job, rank, reason)` once, its connections closed -- and never raises
out of the server: the other jobs on the same loop go on. `abort` -> `on_abort(job, rank,
exitcode, message)`; a rank that closes its descriptor before `finalize` (it died, or exec'd
something that closed it) -> `on_lost(job, rank)`; the owner decides (usually: wait for its
exit status, kill the others, fail the task naming the rank).

    server = PmiServer(on_fence=..., on_abort=..., on_error=..., on_lost=...)
    job = server.add_job("pf.task.000001", size=4, local_ranks=[0, 1],
                         node_of_rank=[0, 0, 1, 1])
    # spawn rank r with job.rank_fds[r] inherited and rank_environment(os.environ, job, r);
    # through the Rust core: core_rank(job, r) -> (pass_fd, PMI variables), see env.py
    job.close_rank_fds()             # the parent's copies: EOF must reach us when a rank dies
    ... poll server.fileno() ...; server.poll()
    job.close()                      # once its ranks are reaped

(tests/agent/pmi_helpers.py's spawn_local / wait_local do exactly that with subprocess, for
tests and benches.) This module names the package's public surface; the agent's modules
import fence, node and worlds from their own modules.
"""

# the fresh names' randomness (mpich.pick_name draws from it; tests replace its token_hex)
import secrets

from .engine import Engine
from .env import (
    RANK_FD,
    STALE_ENV,
    STALE_PREFIXES,
    clean_environment,
    core_rank,
    rank_environment,
    stale,
)
from .job import PmiJob
from .mpich import SHM_DIR, mpich_world_id, process_mapping
from .parse import PmiProtocolError
from .server import PmiServer
from .wire import (
    ENTRY_COST,
    KEYLEN_MAX,
    KVSNAME_MAX,
    MAX_KVS_BYTES,
    MAX_LINE,
    MAX_OUT,
    VALLEN_MAX,
)
