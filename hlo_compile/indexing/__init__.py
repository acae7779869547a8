"""indexing layer (see docs/DESIGN.md §1, §5, §6): affine expressions, IndexingMap,
the simplifier, per-op and fusion maps, layout maps and the ``--emit=indexing`` report."""
from .affine import Expr, const, dim, rt, sym
from .fusion import instruction_input_to_output, instruction_output_to_input
from .indexing_map import IndexingMap, RTSource, compose
from .layout_maps import linear_index_map, physical_index_map
from .parser import parse_expr, parse_indexing_map
from .report import indexing_report_json, indexing_report_text
from .simplifier import simplify

__all__ = [
    "Expr", "IndexingMap", "RTSource", "compose", "const", "dim", "indexing_report_json", "indexing_report_text",
    "instruction_input_to_output", "instruction_output_to_input", "linear_index_map", "parse_expr",
    "parse_indexing_map", "physical_index_map", "rt", "simplify", "sym",
]
