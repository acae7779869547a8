"""runtime layer (see docs/DESIGN.md §1)."""
