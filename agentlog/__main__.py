"""`python -m agentlog`: the command line."""

from agentlog.actors.cli import main

main()
