"""The agent: runs inside the allocation, one per pilot (`python -m pilotfish.agent CONFIG`).

resources (discovery) -> scheduler (policy over the Rust placer) -> executor (launch methods
over the Rust spawner/reaper) -> state updates and events back to the client, in batches.
"""
