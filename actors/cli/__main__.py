"""`python -m agentlog.actors.cli`: the command line."""

from agentlog.actors.cli import main

main()
