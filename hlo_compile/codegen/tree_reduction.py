"""Moved to ``hlo_compile.passes.tree_reduction``; this name stays until ``cli/pass_list.py``
imports it from there."""
from hlo_compile.passes.tree_reduction import rewrite_tree_reductions, split_factors

__all__ = ["rewrite_tree_reductions", "split_factors"]
