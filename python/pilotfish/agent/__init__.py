"""The agent: runs inside the allocation, one per pilot (`python -m pilotfish.agent CONFIG`).

resources (discovery) -> scheduler (policy over the Rust placer) -> executor (launch methods
over the Rust spawner/reaper) -> state updates and events back to the client, in batches.

The public entry point (the only name other rooms use): `python -m pilotfish.agent CONFIG`,
started under its keeper (agent/keeper.py) by the command in pilotfish/_keeper_argv.py.
Nothing here is imported by the client: it starts the agent as a process.
"""
