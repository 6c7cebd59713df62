"""`python -m pilotfish.cli`: the `pilotfish` command."""

from . import main

main()
