"""Example graphs the command line runs (`agentlog demo`) and the docs build on."""
