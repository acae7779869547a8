"""Evaluation of HLO computations on numpy values, by table dispatch on the opcode.

Values are numpy arrays in logical (row-major) order with the element type's numpy dtype,
Python tuples for tuple shapes, and ``TOKEN`` for tokens. Nested computations (reducers,
comparators, combiners) are evaluated by the same machinery on whole arrays: every
elementwise handler broadcasts, so a scalar computation applied to arrays is vectorised.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..hlo.errors import HloError, HloUnsupportedError
from ..hlo.ir import HloComputation, HloModule
from ..hlo.calls.te_attention import check_private_flows
from ..hlo.unbounded import refuse_unbounded_dimensions
from .numerics import dtype_of
from .registry import OPS, TOKEN

# Importing the families fills the table.
from . import elementwise, shape_ops, reduction, gather_scatter, dot_conv, sort_ops, control_flow  # noqa: F401,E402
from . import conv_calls, fmha_calls, gemm_calls, te_attention  # noqa: F401,E402  (library calls register)
from . import async_ops, collectives  # noqa: F401,E402
from .async_ops import sugar_handler  # noqa: E402
from .participants import Participant, run_participants, single_participant  # noqa: E402
from ..hlo.collective_groups import World, world_of  # noqa: E402
from . import batch_norm, fft, triangular_solve  # noqa: F401,E402


class Evaluator:
    """Evaluates computations of one module. ``seed`` enables rng ops (otherwise an error).
    ``participant``: who runs it (SPMD: ``participants.py``; default the only one);
    ``rng_states``: the ``rng-get-and-update-state`` counters, kept by the caller across runs.
    ``watch``: when set, ``watch(inst, operand_values)`` is called before each instruction is
    evaluated (``hlo-run --isolate`` captures one instruction's operands with it)."""

    watch: Callable[[Any, list], None] | None = None

    def __init__(self, module: HloModule | None = None, *, seed: int | None = None,
                 participant: Participant | None = None, rng_states: dict | None = None):
        self.module = module
        self.seed = seed
        self.rng = np.random.default_rng(seed) if seed is not None else None
        self.participant = participant or single_participant()
        self.rng_states = rng_states if rng_states is not None else {}
        self._dead_after: dict[int, list[list[int]]] = {}

    def _values_dead_after(self, comp: HloComputation) -> list[list[int]]:
        """For each instruction position, the ids of the values nothing reads after it (the
        ROOT's is kept): dropped as soon as they are, so a computation holds only its live
        values, not every intermediate (a 16k-op fusion of 1280x1280 arrays does not fit; a
        chain of ten elementwise ops on a big array would hold ten of them)."""
        key = id(comp)
        if key not in self._dead_after:
            last: dict[int, int] = {}
            for k, inst in enumerate(comp.instructions):
                last.setdefault(id(inst), k)
                for op in inst.operands:
                    last[id(op)] = k
            last.pop(id(comp.root), None)
            dead: list[list[int]] = [[] for _ in comp.instructions]
            for value, k in last.items():
                dead[k].append(value)
            self._dead_after[key] = dead
        return self._dead_after[key]

    def evaluate(self, comp: HloComputation, args: Sequence[Any]) -> Any:
        params = comp.parameters
        if len(args) != len(params):
            raise HloError(f"computation {comp.name} takes {len(params)} arguments, got {len(args)}")
        env: dict[int, Any] = {}
        for p, a in zip(params, args):
            env[id(p)] = a
        dead_after = self._values_dead_after(comp)
        for k, inst in enumerate(comp.instructions):
            if k:
                for value in dead_after[k - 1]:
                    env.pop(value, None)
            if inst.opcode == "parameter":
                continue
            fn = OPS.get(inst.opcode) or sugar_handler(inst.opcode)
            if fn is None:
                raise HloUnsupportedError(f"the interpreter does not implement opcode '{inst.opcode}'",
                                          inst.location)
            operands = [env[id(o)] for o in inst.operands]
            if self.watch is not None:
                self.watch(inst, operands)
            try:
                env[id(inst)] = fn(self, inst, operands)
            except HloError:
                raise
            except (ValueError, IndexError, TypeError, KeyError, NotImplementedError) as e:
                raise HloUnsupportedError(f"evaluating {inst.opcode} '{inst.name}': {e}", inst.location) from e
        return env[id(comp.root)]

    def call(self, comp: HloComputation, *args: Any) -> Any:
        """Apply ``comp`` to (possibly array-valued, broadcasting) arguments."""
        return self.evaluate(comp, list(args))


def coerce_argument(value: Any, shape) -> Any:
    """An input value as the interpreter holds it: the parameter's numpy dtype (raw ``|V2``
    bytes re-viewed), its dimensions; tuple parameters as nested tuples."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            raise HloError(f"expected a tuple of {len(shape.tuple_shapes)} values for {shape}")
        return tuple(coerce_argument(v, s) for v, s in zip(value, shape.tuple_shapes))
    if shape.is_token:
        return TOKEN
    dt = dtype_of(shape.element_type)
    arr = np.asarray(value)
    if arr.dtype != dt:
        if arr.dtype.kind == "V" or (arr.dtype.itemsize == dt.itemsize and dt.kind not in "biufc"):
            if arr.dtype.itemsize != dt.itemsize:
                raise HloError(f"argument of {arr.dtype} cannot be viewed as {shape.element_type}")
            arr = arr.view(dt)
        else:
            arr = arr.astype(dt)
    if tuple(arr.shape) != tuple(shape.dimensions):
        if arr.size == shape.element_count():
            raise HloError(f"argument has shape {list(arr.shape)}, parameter is {shape}")
        raise HloError(f"argument has shape {list(arr.shape)}, parameter is {shape}")
    return arr


def evaluate_module(module: HloModule, args: list, *, seed: int | None = None,
                    rng_states: dict | None = None) -> Any:
    """Evaluate the entry computation of ``module`` on ``args`` (logical numpy arrays in entry
    parameter order, tuple parameters as nested tuples). Returns an array or nested tuple.
    A module whose header names several participants is refused here: ``evaluate_spmd``."""
    world = world_of(module)
    if world.size > 1:
        raise HloUnsupportedError(f"module {module.name} runs on {world.size} participants (replica_count x "
                                  "num_partitions); evaluate it with evaluate_spmd (hlo-run runs every participant)")
    return evaluate_spmd(module, args, world, seed=seed, rng_states=[rng_states] if rng_states is not None else None)[0]


def evaluate_spmd(module: HloModule, args: Sequence[Any] | Callable[[int], Sequence[Any]], world: World | None = None,
                  *, seed: int | None = None, rng_states: list[dict] | None = None) -> list[Any]:
    """Run ``module`` on every participant of ``world`` (default: its header's R x P), each in
    its own thread (``participants.py``); ``args`` are shared, or ``args(k)`` gives participant
    k's (flattened id, replica-major). Returns each participant's result, by flattened id.
    ``rng_states``: one dict per participant, kept by the caller across runs."""
    refuse_unbounded_dimensions(module, "evaluate")
    check_private_flows(module)           # TE attention's private leaves: only its backward reads them
    world = world or world_of(module)
    params = module.entry.parameters
    states = rng_states if rng_states is not None else [{} for _ in range(world.size)]

    def run(p: Participant) -> Any:
        mine = args(p.me) if callable(args) else args
        if len(mine) != len(params):
            raise HloError(f"module {module.name} takes {len(params)} arguments, got {len(mine)}")
        coerced = [coerce_argument(a, q.shape) for a, q in zip(mine, params)]
        ev = Evaluator(module, seed=None if seed is None else seed + p.me, participant=p, rng_states=states[p.me])
        with np.errstate(all="ignore"):
            return _materialise(ev.evaluate(module.entry, coerced))
    return run_participants(world, run)


def _materialise(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_materialise(x) for x in v)
    if isinstance(v, np.ndarray):
        return np.asarray(v, order="C")
    if v is TOKEN:
        return v
    return np.asarray(v)
