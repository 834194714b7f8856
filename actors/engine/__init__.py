"""The graph engine: the builder, the compiled graph, the run loop and its commits."""
