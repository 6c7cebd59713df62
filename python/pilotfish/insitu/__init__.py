"""pilotfish.insitu: Colza's elastic in situ staging areas on pilotfish service groups.

    area = pilotfish.insitu.StagingArea(tmgr, servers=2)        # the user program
    area.create_pipeline("statistics", {"bins": 16})
    h = area.pipeline("statistics")
    h.activate(it); h.stage(block_id, array, meta); stats = h.execute(it); h.deactivate(it)

In a task of the pilot (a simulation, possibly MPI): pilotfish.insitu.connect(area.name) and
the same calls (pipeline(name, comm=MPI.COMM_WORLD): every rank stages its blocks).
"""

from ._client import PipelineHandle, StagingArea, connect, hash_placement
from ._pipeline import InsituError, Pipeline, lookup, pipeline

__all__ = [
    "StagingArea",
    "connect",
    "PipelineHandle",
    "Pipeline",
    "pipeline",
    "lookup",
    "InsituError",
    "hash_placement",
]
