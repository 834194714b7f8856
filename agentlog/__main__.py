"""`python -m agentlog`: the command line."""

from agentlog.actors.cli import main

if __name__ == "__main__":
    main()
