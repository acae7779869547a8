"""indexing layer (see ../shared/DESIGN.md §1)."""
