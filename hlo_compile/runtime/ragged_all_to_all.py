"""ragged-all-to-all at run time: which rows go where, checked before anything moves.

XLA's semantics (``xla/backends/gpu/runtime/ragged_all_to_all_thunk.cc``): a group of n
members, metadata ``[n * k]`` (``hlo.collective_groups.ragged_updates_per_peer``); member i's
update u for member j is entry ``e = j * k + u`` of i's arrays: the rows
``input_i[input_offsets_i[e] : + send_sizes_i[e]]`` land in j's output at row
``output_offsets_i[e]`` (the receiver's coordinates, given by the sender), and j's
``recv_sizes_j[i * k + u]`` says how many it takes. The result is j's ``output`` operand with
those rows written; rows nobody writes keep their values (XLA computes it in place on operand 1).

``ragged_transfers`` reads every member's metadata (the host step has everyone's arrays; the
NCCL path gathers the metadata first) and checks every transfer of the group, so all members
refuse alike, before any data moves: a receiver's size that is not the sender's (XLA:GPU's
kernels ignore ``recv_sizes``, its NCCL fallback would receive a different count) and rows
beyond either buffer (XLA copies without checks) are refused with the values. Updates that
overlap in a receiver are written in (sender rank, update) order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..hlo import HloInstruction
from ..hlo.errors import HloUnsupportedError
from ..driver.runnable import where

INPUT_OFFSETS, SEND_SIZES, OUTPUT_OFFSETS, RECV_SIZES = range(4)


@dataclass(frozen=True)
class RaggedTransfer:
    """``rows`` rows of group rank ``sender``'s input from row ``src`` to group rank
    ``receiver``'s output at row ``dst`` (update ``update`` of that pair)."""

    sender: int
    receiver: int
    update: int
    src: int
    dst: int
    rows: int


def metadata_rows(operands: Sequence[np.ndarray]) -> np.ndarray:
    """A member's four metadata arrays as one ``int64[4, n * k]``."""
    return np.stack([np.asarray(x).reshape(-1).astype(np.int64) for x in operands])


def ragged_transfers(inst: HloInstruction, metadata: Sequence[np.ndarray], k: int, input_rows: int,
                     output_rows: int) -> list[RaggedTransfer]:
    """Every non-empty transfer of the group, in (sender, receiver, update) order;
    ``metadata[i]`` is group rank i's ``int64[4, n * k]``. Refuses, naming the values, a
    size the receiver does not expect and rows beyond the input or the output."""
    n = len(metadata)
    out = []
    for i in range(n):
        for j in range(n):
            for u in range(k):
                e = j * k + u
                src, rows, dst = (int(metadata[i][f, e]) for f in (INPUT_OFFSETS, SEND_SIZES, OUTPUT_OFFSETS))
                expect = int(metadata[j][RECV_SIZES, i * k + u])
                what = f"{where(inst)}: update {u} from group rank {i} to rank {j}"
                if rows != expect:
                    raise HloUnsupportedError(f"{what}: send_sizes gives {rows} rows but recv_sizes {expect}",
                                              inst.location)
                if rows < 0 or (rows and not (0 <= src and src + rows <= input_rows
                                              and 0 <= dst and dst + rows <= output_rows)):
                    raise HloUnsupportedError(
                        f"{what}: rows [{src}, {src + rows}) of an input of {input_rows} to rows [{dst}, "
                        f"{dst + rows}) of an output of {output_rows} are out of range", inst.location)
                if rows:
                    out.append(RaggedTransfer(i, j, u, src, dst, rows))
    return out


def ragged_result(output: np.ndarray, inputs: Sequence[np.ndarray], transfers: Sequence[RaggedTransfer],
                  me: int) -> np.ndarray:
    """Group rank ``me``'s result: its ``output`` operand with the transfers to it written
    (``inputs[i]``: rank i's input)."""
    out = np.array(output, copy=True)
    for t in transfers:
        if t.receiver == me:
            out[t.dst:t.dst + t.rows] = inputs[t.sender][t.src:t.src + t.rows]
    return out
