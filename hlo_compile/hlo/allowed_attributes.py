"""Which attributes each opcode accepts (XLA's parser rejects any other: "unexpected attribute")."""
from __future__ import annotations

# Accepted on every instruction.
COMMON = frozenset({"sharding", "frontend_attributes", "statistics", "parameter_replication",
                    "control-predecessors", "origin", "metadata", "backend_config", "result_accuracy"})

_COLLECTIVE = {"replica_groups", "has_dynamic_root", "channel_id", "constrain_layout", "use_global_device_ids", "dimensions",
               "mode", "to_apply", "split_dimension", "split_count", "source_target_pairs",
               "slice_sizes", "backend_config"}
_ASYNC = {"calls", "async_execution_thread", "async_group_id", "async_wrapped_computation",
          "output_to_operand_aliasing", "custom_call_target", "api_version", "is_cross_program_prefetch",
          "cross_program_prefetch_index"}
_GATHER = {"offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes",
           "indices_are_sorted", "operand_batching_dims", "start_indices_batching_dims"}
_SCATTER = {"update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim",
            "to_apply", "indices_are_sorted", "unique_indices", "input_batching_dims",
            "scatter_indices_batching_dims"}
_DOT = {"lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims",
        "operand_precision", "algorithm", "sparsity", "sparsity_config", "lhs_ragged_dims", "rhs_group_dims"}
_CONV = {"window", "dim_labels", "feature_group_count", "batch_group_count", "operand_precision",
         "algorithm", "convolution_dimension_numbers", "convolution_kind", "sparsity_config"}
_CUSTOM_CALL = {"custom_call_target", "window", "dim_labels", "feature_group_count", "batch_group_count",
                "operand_layout_constraints", "custom_call_has_side_effect", "to_apply", "called_computations",
                "output_to_operand_aliasing", "padding_type", "literal", "operand_precision", "schedule",
                "api_version", "sharding"}

OPCODE_ATTRIBUTES: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "broadcast": {"dimensions"}, "transpose": {"dimensions"}, "reverse": {"dimensions"},
    "concatenate": {"dimensions"}, "reduce": {"dimensions", "to_apply"}, "map": {"dimensions", "to_apply"},
    "get-dimension-size": {"dimensions"}, "set-dimension-size": {"dimensions"},
    "sort": {"dimensions", "is_stable", "to_apply"},
    "topk": {"k", "largest", "is_stable"},
    "slice": {"slice"}, "pad": {"padding"}, "iota": {"iota_dimension"},
    "dynamic-slice": {"dynamic_slice_sizes"},
    "reshape": {"inferred_dimension"},
    "get-tuple-element": {"index"},
    "compare": {"direction", "type"},
    "reduce-precision": {"exponent_bits", "mantissa_bits"},
    "rng": {"distribution"}, "rng-bit-generator": {"algorithm"},
    "rng-get-and-update-state": {"delta"},
    "batch-norm-training": {"epsilon", "feature_index"},
    "batch-norm-inference": {"epsilon", "feature_index"},
    "batch-norm-grad": {"epsilon", "feature_index"},
    "fft": {"fft_type", "fft_length"},
    "reduce-window": {"window", "to_apply"},
    "select-and-scatter": {"window", "select", "scatter", "padding"},
    "convolution": _CONV,
    "dot": _DOT, "scaled-dot": _DOT, "ragged-dot": _DOT,
    "gather": _GATHER, "scatter": _SCATTER,
    "fusion": {"kind", "calls", "output_to_operand_aliasing"},
    "call": {"to_apply", "is_composite", "composite.attributes", "composite.name", "composite.version"},
    "while": {"condition", "body"},
    "conditional": {"branch_computations", "true_computation", "false_computation"},
    "custom-call": _CUSTOM_CALL,
    "triangular-solve": {"left_side", "lower", "unit_diagonal", "transpose_a"},
    "cholesky": {"lower"},
    "infeed": {"infeed_config"}, "outfeed": {"outfeed_config", "outfeed_shape"},
    "send": {"channel_id", "is_host_transfer"}, "send-done": {"channel_id", "is_host_transfer"},
    "recv": {"channel_id", "is_host_transfer"}, "recv-done": {"channel_id", "is_host_transfer"},
    "copy-start": {"cross_program_prefetch_index"},
    "domain": {"domain"},
    "scan": {"dimensions", "num_carries", "to_apply", "is_reverse", "is_associative"},
    "async-start": _ASYNC, "async-update": _ASYNC, "async-done": _ASYNC,
    "all-reduce": _COLLECTIVE, "all-reduce-start": _COLLECTIVE, "all-gather": _COLLECTIVE,
    "all-gather-start": _COLLECTIVE, "all-to-all": _COLLECTIVE, "reduce-scatter": _COLLECTIVE,
    "collective-permute": _COLLECTIVE, "collective-permute-start": _COLLECTIVE,
    "collective-broadcast": _COLLECTIVE, "ragged-all-to-all": _COLLECTIVE,
    "all-reduce-done": _COLLECTIVE, "all-gather-done": _COLLECTIVE, "collective-permute-done": _COLLECTIVE,
    "dynamic-reshape": set(),
}.items()}

# Attributes that must be present.
REQUIRED_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "compare": ("direction",), "get-tuple-element": ("index",), "iota": ("iota_dimension",),
    "slice": ("slice",), "pad": ("padding",), "reduce": ("dimensions", "to_apply"),
    "transpose": ("dimensions",), "reduce-window": ("to_apply",),
    "dynamic-slice": ("dynamic_slice_sizes",), "topk": ("k",),
    "gather": ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes"),
    "scatter": ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                "index_vector_dim", "to_apply"),
    "fusion": ("kind", "calls"), "call": ("to_apply",), "while": ("condition", "body"),
    "map": ("to_apply",), "sort": ("dimensions",), "custom-call": ("custom_call_target",),
    "reduce-precision": ("exponent_bits", "mantissa_bits"), "select-and-scatter": ("select", "scatter"),
    "fft": ("fft_type", "fft_length"), "batch-norm-training": ("epsilon", "feature_index"),
    "batch-norm-inference": ("epsilon", "feature_index"), "batch-norm-grad": ("epsilon", "feature_index"),
    "rng": ("distribution",),
}


def allowed_attributes(opcode: str) -> frozenset[str] | None:
    """The opcode's own attributes plus the common ones; None when any attribute is accepted."""
    own = OPCODE_ATTRIBUTES.get(opcode)
    if own is None:
        if opcode.endswith(("-start", "-update", "-done")):
            return None  # async syntax sugar wraps another opcode's attributes
        return COMMON
    return own | COMMON
