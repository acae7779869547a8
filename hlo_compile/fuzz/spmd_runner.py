"""One SPMD module (a header with ``replica_count`` x ``num_partitions`` > 1) on its R x P
participants: the interpreter's ``evaluate_spmd`` against the host's SPMD run (what
``hlo-run --platform=host`` does for such a module: one executable, every participant in its
own thread, ``runtime.spmd_run``), participant by participant.

Each participant k gets its own inputs (``make_inputs(..., participant=k)``, saved as hlo-run's
``p{k}.arg{i}``), so a value taken from the wrong peer shows. Both implementations fold an
all-reduce's (and reduce-scatter's) ranks in group order, 0..n-1, one ``to_apply`` at a time
(interpreter: ``interpreter/collectives.py``; host: ``runtime/collective_steps.py``), each step
rounded to the element type: the same operations in the same order, so collectives keep the
exactness of their operands (``exactness.py``) and are compared bit for bit. Inexact leaves
that differ beyond the tolerance get the rounding envelope (``envelope.py``) of their own
participant, from the interpreter's SPMD run of the module widened to f64.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..hlo.collective_groups import World, world_of
from ..hlo.ir import HloModule
from .inputs import make_inputs


def spmd_world(module: HloModule) -> World | None:
    """The module's world when it runs on more than one participant, else None."""
    w = world_of(module)
    return w if w.size > 1 else None


def spmd_inputs(module: HloModule, seed: int, world: World) -> list[list]:
    """Participant k's arguments, for every k (each its own values)."""
    return [make_inputs(module, seed, participant=k) for k in range(world.size)]


def _flat(values) -> list[list[np.ndarray]]:
    from ..runtime.literals import flatten
    return [flatten(v) for v in values]


def run_reference_spmd(module: HloModule, args: Sequence[Sequence], seed: int, world: World) -> list[list[np.ndarray]]:
    """Each participant's result leaves from the interpreter."""
    from ..interpreter.evaluator import evaluate_spmd
    return _flat(evaluate_spmd(module, lambda k: args[k], world, seed=seed))


def run_host_spmd(exe, args: Sequence[Sequence], world: World) -> list[list[np.ndarray]]:
    """Each participant's result leaves from ``exe``, the host executable of the module
    (compiled once, as ``spmd_run.compile_spmd`` does for the host), run on every participant
    (buffers guarded)."""
    from ..runtime.spmd_run import run_participants
    from .guard import guarded
    with guarded():
        return _flat(run_participants(exe, world, args))


def compare_participants(expected: Sequence[Sequence[np.ndarray]], actual: Sequence[Sequence[np.ndarray]],
                         infos: Sequence) -> dict[tuple[int, int], str]:
    """{(participant, leaf): report} of the leaves that differ ((k, -1): the counts differ)."""
    from .compare import compare_all
    out = {}
    for k, (e, a) in enumerate(zip(expected, actual)):
        for i, rep in compare_all(e, a, infos).items():
            out[(k, i)] = f"participant {k}: {rep}"
    if len(expected) != len(actual):
        out[(-1, -1)] = f"{len(actual)} participants, expected {len(expected)}"
    return out


def wide_reference_spmd(text: str, args: Sequence[Sequence], seed: int, world: World):
    """The interpreter's SPMD leaves of ``text`` with every float type widened to f64, or None."""
    from ..hlo import parse_module
    from ..hlo.errors import HloError
    from .envelope import widen_args, widen_text
    try:
        narrow = parse_module(text, "<fuzz>")
        module = parse_module(widen_text(text), "<fuzz-f64>")
        wide = [widen_args(a, narrow) for a in args]
        return run_reference_spmd(module, wide, seed, world)
    except (HloError, ValueError, TypeError, IndexError, KeyError, ArithmeticError):
        return None


def all_within_envelope_spmd(text: str, args, seed: int, world: World, expected, actual,
                             failing: Sequence[tuple[int, int]], infos: Sequence) -> bool:
    """``envelope.all_within_envelope`` per participant."""
    from .envelope import within_envelope
    if not failing or any(i < 0 or infos[i] is None for _, i in failing):
        return False
    wide = wide_reference_spmd(text, args, seed, world)
    if wide is None or len(wide) != len(expected):
        return False
    return all(len(wide[k]) == len(expected[k]) and
               within_envelope(expected[k][i], actual[k][i], wide[k][i], infos[i]) for k, i in failing)
