"""The runtime: actors, the graph engine and the command line.

The graph engine grows here; today this package holds the command line.
"""

__all__: list[str] = []
