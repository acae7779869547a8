"""runtime layer (see ../shared/DESIGN.md §1)."""
