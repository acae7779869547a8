"""Models of a kernel without running it: the cost model, the coalescing analysis and the
thread -> data indexing maps."""
