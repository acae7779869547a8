"""Who takes part in a collective: XLA's replica groups, group modes and source-target pairs.

Participants are numbered by their *flattened id*, replica-major: ``replica * P + partition``
(R replicas, P partitions). ``replica_groups`` is written in one of three spellings (explicit
``{{0,1},{2,3}}``, iota ``[2,2]<=[4]`` with an optional ``T(perm)``, mesh
``mesh['x'=2,'y'=2] {'y'}`` with optional ``device_ids`` and sub-axes ``'x':(pre)size``) and its
ids mean replica ids, partition ids or flattened ids depending on the op's *group mode* (XLA's
``GetCollectiveOpGroupMode``):

- all-reduce, all-gather, reduce-scatter: no ``channel_id`` → cross-replica; a channel id and
  ``use_global_device_ids=true`` → flattened ids; a channel id without it →
  cross-replica-and-partition;
- all-to-all, collective-permute, collective-broadcast, ragged-all-to-all, send, recv: a
  channel id → cross-partition, else cross-replica.

ragged-all-to-all's metadata (``ragged_updates_per_peer``): four integer arrays of one shape
``[n * k]``, entry ``j * k + u`` for update u to (or from) group rank j (XLA:GPU reads it so:
``num_updates_per_replica = dimensions(0) / n``); XLA's verifier also admits rank 2, which
XLA:GPU's runtime still reads by ``dimensions(0)`` alone, so its meaning is not settled: refused.

``participant_groups`` expands every form into lists of flattened ids (XLA's
``GetParticipatingDevices``); what each participant then computes is the interpreter's and the
runtime's business. Used by both, so it holds no numerics.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .errors import HloUnsupportedError
from .ir import HloInstruction

CROSS_REPLICA = "cross_replica"
CROSS_PARTITION = "cross_partition"
CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
FLATTENED_ID = "flattened_id"

# ops whose channel id makes them cross-replica-and-partition / flattened (the others: cross-partition)
_GLOBAL_ID_OPS = ("all-reduce", "all-gather", "reduce-scatter")

_IOTA = re.compile(r"^\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?$")
_MESH = re.compile(r"^mesh\[(.*)\]\s*\{(.*)\}$")
_AXIS = re.compile(r"^'([^']*)'\s*=\s*(\d+)$")


@dataclass(frozen=True)
class World:
    """The participants a module runs on: R replicas x P partitions."""

    replicas: int = 1
    partitions: int = 1

    @property
    def size(self) -> int:
        return self.replicas * self.partitions

    def flat(self, replica: int, partition: int) -> int:
        return replica * self.partitions + partition

    def ids(self, flat: int) -> tuple[int, int]:
        """(replica, partition) of a flattened id."""
        return divmod(flat, self.partitions)


def world_of(module, replicas: int | None = None, partitions: int | None = None) -> World:
    """The module header's ``replica_count`` x ``num_partitions`` unless given."""
    def header(key: str) -> int:
        attr = module.attributes.get(key) if module is not None else None
        return int(attr.value) if attr is not None else 1
    return World(replicas or header("replica_count"), partitions or header("num_partitions"))


def base_opcode(opcode: str) -> str:
    """``all-reduce-start`` → ``all-reduce`` (and the async sugar), others unchanged."""
    for suffix in ("-start", "-update", "-done"):
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode


def group_mode(inst: HloInstruction) -> str:
    """XLA's CollectiveOpGroupMode of ``inst``."""
    has_channel = inst.attr("channel_id", None) is not None
    if base_opcode(inst.opcode) in _GLOBAL_ID_OPS:
        if not has_channel:
            if inst.attr("use_global_device_ids", False):
                raise _refuse(inst, "use_global_device_ids=true needs a channel_id")
            return CROSS_REPLICA
        return FLATTENED_ID if inst.attr("use_global_device_ids", False) else CROSS_REPLICA_AND_PARTITION
    return CROSS_PARTITION if has_channel else CROSS_REPLICA


def parse_replica_groups(raw: str, inst: HloInstruction | None = None) -> list[list[int]]:
    """The list of groups any spelling stands for (``{}``/absent: the empty list)."""
    text = (raw or "").strip()
    if text in ("", "{}"):
        return []
    iota = _IOTA.match(text)
    if iota:
        return _iota_groups(_ints(iota.group(1)), _ints(iota.group(2)),
                            _ints(iota.group(3)) if iota.group(3) else None, inst)
    mesh = _MESH.match(text)
    if mesh:
        return _mesh_groups(mesh.group(1), mesh.group(2), inst)
    if not text.startswith("{"):
        raise _refuse(inst, f"replica_groups '{raw}' is in a form we do not read")
    return [_ints(g) if g.strip() else [] for g in re.findall(r"\{([^{}]*)\}", text)]


def parse_pairs(raw: str) -> list[tuple[int, int]]:
    """``{{0,1},{1,2}}`` → [(0, 1), (1, 2)]."""
    pairs = [_ints(p) for p in re.findall(r"\{([^{}]*)\}", raw or "")]
    return [(p[0], p[1]) for p in pairs if len(p) == 2]


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def _iota_groups(tile: list[int], dims: list[int], perm: list[int] | None, inst) -> list[list[int]]:
    import numpy as np
    total = int(np.prod(dims))
    if len(tile) != 2 or tile[0] * tile[1] != total:
        raise _refuse(inst, f"iota replica groups {tile}<={dims}: the tile must be 2-D and cover every id")
    ids = np.arange(total).reshape(dims)
    if perm is not None:
        ids = ids.transpose(perm)
    return ids.reshape(tile).tolist()


def _mesh_groups(axes_text: str, listed_text: str, inst) -> list[list[int]]:
    import numpy as np
    parts = [p.strip() for p in re.split(r",(?![^()]*\))", axes_text) if p.strip()]
    names, sizes, device_ids = [], [], None
    for p in parts:
        m = _AXIS.match(p)
        if m:
            names.append(m.group(1))
            sizes.append(int(m.group(2)))
        elif p.startswith("device_ids="):
            body = p[len("device_ids="):].strip()
            iota = re.match(r"^\(\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?\)$", body)
            if iota:
                shape = _ints(iota.group(1))
                ids = np.arange(int(np.prod(shape))).reshape(shape)
                device_ids = (ids.transpose(_ints(iota.group(2))) if iota.group(2) else ids).reshape(-1)
            else:
                device_ids = np.array(_ints(body))
        else:
            raise _refuse(inst, f"mesh axis '{p}' is not supported (only 'name'=size axes and device_ids)")
    listed = [_axis_ref(x.strip(), names, sizes, inst) for x in listed_text.split(",") if x.strip()]
    total = int(np.prod(sizes))
    grid = (np.arange(total) if device_ids is None else device_ids).reshape(sizes)
    factors, labels = _factor_axes(names, sizes, listed, inst)
    grid = grid.reshape(factors)
    position = {label: k for k, label in enumerate(labels) if label is not None}
    order = [k for k, label in enumerate(labels) if label is None] + [position[ref] for ref in listed]
    size = int(np.prod([factors[position[ref]] for ref in listed])) if listed else 1
    return grid.transpose(order).reshape(-1, size).tolist()


_AXIS_REF = re.compile(r"^'([^']*)'(?::\((\d+)\)(\d+))?$")


def _axis_ref(text: str, names: list[str], sizes: list[int], inst) -> tuple[str, int, int]:
    """A listed axis ``'a'`` or sub-axis ``'a':(pre)size`` as ``(name, pre, size)``; a whole
    axis is ``(name, 1, its size)``."""
    m = _AXIS_REF.match(text)
    if m is None or m.group(1) not in names:
        raise _refuse(inst, f"mesh replica groups list axis {text}, which is not an axis of the mesh {names}")
    n = sizes[names.index(m.group(1))]
    if m.group(2) is None:
        return m.group(1), 1, n
    pre, size = int(m.group(2)), int(m.group(3))
    if pre < 1 or size < 1 or n % (pre * size) or size >= n:
        raise _refuse(inst, f"mesh sub-axis {text}: pre-size and size must divide the axis size {n}, "
                            "the size be smaller than it")
    return m.group(1), pre, size


def _factor_axes(names: list[str], sizes: list[int], listed: list[tuple[str, int, int]],
                 inst) -> tuple[list[int], list]:
    """The mesh's axes split into factors (major to minor) so that each listed (sub-)axis is one:
    ``'a':(pre)size`` of an axis of size n is the middle factor of ``[pre, size, n / (pre size)]``
    (several sub-axes of one axis in order of pre, padding factors between). Returns the factor
    sizes and, for each, the listed reference it is, or None."""
    factors: list[int] = []
    labels: list = []
    for name, n in zip(names, sizes):
        refs = sorted((r for r in listed if r[0] == name), key=lambda r: r[1])
        if len(refs) > 1 and any(r[1:] == (1, n) for r in refs):
            raise _refuse(inst, f"mesh axis '{name}' is listed whole and as a sub-axis")
        done = 1
        for ref in refs:
            _, pre, size = ref
            if pre % done:
                raise _refuse(inst, f"mesh sub-axes of '{name}' overlap ({refs})")
            factors += [pre // done, size]
            labels += [None, ref]
            done = pre * size
        factors.append(n // done)
        labels.append(None)
    return factors, labels


def participant_groups(inst: HloInstruction, world: World) -> list[list[int]]:
    """``inst``'s groups as lists of flattened ids, each in rank order; every participant of
    ``world`` is in exactly one (XLA's GetParticipatingDevices, for each device)."""
    mode = group_mode(inst)
    groups = parse_replica_groups(inst.attributes["replica_groups"].raw
                                  if "replica_groups" in inst.attributes else "", inst)
    R, P = world.replicas, world.partitions
    if not groups:
        groups = [list(range(world.size if mode == FLATTENED_ID else P if mode == CROSS_PARTITION else R))]
    limit = {CROSS_REPLICA: R, CROSS_PARTITION: P, CROSS_REPLICA_AND_PARTITION: R, FLATTENED_ID: R * P}[mode]
    for g in groups:
        for i in g:
            if i >= limit:
                raise _refuse(inst, f"its replica groups name id {i}, but the module runs on {R} replica(s) x "
                                    f"{P} partition(s) ({mode.replace('_', '-')} ids < {limit})"
                                    + _participants_hint(mode, groups, world))
    if mode == CROSS_REPLICA:
        out = [[world.flat(g, p) for g in grp] for p in range(P) for grp in groups]
    elif mode == CROSS_PARTITION:
        out = [[world.flat(r, g) for g in grp] for r in range(R) for grp in groups]
    elif mode == CROSS_REPLICA_AND_PARTITION:
        out = [[world.flat(g, p) for g in grp for p in range(P)] for grp in groups]
    else:
        out = [list(g) for g in groups]
    seen = sorted(i for g in out for i in g)
    if seen != list(range(world.size)):
        raise _refuse(inst, f"its replica groups {groups} do not cover each of the {world.size} participants "
                            "exactly once" + _participants_hint(mode, groups, world))
    return out


def _participants_hint(mode: str, groups: list[list[int]], world: World) -> str:
    """The flag that gives the run as many participants as ``groups`` name, when they name
    ids 0..n-1 each once (the module was run with too few or too many); else nothing."""
    ids = sorted(i for g in groups for i in g)
    n = len(ids)
    if not n or ids != list(range(n)):
        return ""
    R, P = world.replicas, world.partitions
    if mode == CROSS_PARTITION:
        if n == P:
            return ""
        flag, header = f"--num-partitions {n}", f"num_partitions={n}"
    elif mode == FLATTENED_ID:
        if n == world.size:
            return ""
        if n % P:
            return f"; run it on {n} participants: --num-replicas R --num-partitions P with R x P = {n}"
        flag = f"--num-replicas {n // P}" + (f" --num-partitions {P}" if P > 1 else "")
        header = f"replica_count={n // P}"
    else:
        if n == R:
            return ""
        flag, header = f"--num-replicas {n}", f"replica_count={n}"
    return f"; run it with {flag} (or {header} in the module's header)"


def group_of(groups: Sequence[Sequence[int]], me: int) -> list[int]:
    """The group holding participant ``me``."""
    for g in groups:
        if me in g:
            return list(g)
    raise ValueError(f"participant {me} is in no group")


def permute_sources(inst: HloInstruction, world: World, frontend: bool = False) -> dict[int, int]:
    """target → source, as flattened ids, of a collective-permute (``frontend``: of a send or
    recv, from its ``_xla_send_recv_source_target_pairs`` frontend attribute):
    pairs name replica ids within one partition (no channel) or partition ids within one replica."""
    attr = inst.attributes.get("source_target_pairs")
    raw = _frontend_pairs(inst) if frontend else attr.raw if attr is not None else ""
    pairs = parse_pairs(raw)
    mode = group_mode(inst)
    R, P = world.replicas, world.partitions
    limit = P if mode == CROSS_PARTITION else R
    out: dict[int, int] = {}
    for s, t in pairs:
        if s >= limit or t >= limit:
            raise _refuse(inst, f"its source-target pair {{{s},{t}}} names an id beyond the module's "
                                f"{limit} {'partitions' if mode == CROSS_PARTITION else 'replicas'}")
        for other in range(R if mode == CROSS_PARTITION else P):
            src, dst = ((world.flat(other, s), world.flat(other, t)) if mode == CROSS_PARTITION
                        else (world.flat(s, other), world.flat(t, other)))
            if dst in out:
                raise _refuse(inst, f"target {t} appears in two source-target pairs")
            out[dst] = src
    return out


_INTEGERS = frozenset({"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"})


def ragged_form_refusal(inst: HloInstruction) -> str | None:
    """Why a ragged-all-to-all's operands are no form we run (XLA's verifier rules, rank-2
    metadata), else None. Needs no world: checked at compile time."""
    if len(inst.operands) != 6:
        return f"it takes 6 operands (input, output, input_offsets, send_sizes, output_offsets, recv_sizes), " \
               f"got {len(inst.operands)}"
    data, out, *meta = (o.shape for o in inst.operands)
    if data.is_tuple or out.is_tuple or not data.dimensions or not out.dimensions:
        return "its input and output must be arrays of rank 1 or more"
    if data.element_type != out.element_type or list(data.dimensions[1:]) != list(out.dimensions[1:]):
        return (f"its input {data.to_text(False)} and output {out.to_text(False)} must hold rows of one shape "
                "and type")
    if not inst.shape.compatible(out):
        return f"its result {inst.shape.to_text(False)} must have the output operand's shape {out.to_text(False)}"
    m = meta[0]
    if any(not s.compatible(m) for s in meta):
        return "its four offset/size operands must have one shape and type"
    if m.is_tuple or m.element_type not in _INTEGERS:
        return f"its offsets and sizes must be integers, not {m.to_text(False)}"
    if len(m.dimensions) == 2:
        return (f"rank-2 offsets and sizes ({m.to_text(False)}) are not supported: XLA:GPU reads their "
                "dimension 0 alone as the number of updates")
    if len(m.dimensions) != 1:
        return f"its offsets and sizes must have rank 1, not {m.to_text(False)}"
    return None


def ragged_updates_per_peer(inst: HloInstruction, group_size: int) -> int:
    """k, the updates each participant sends each member of its group of ``group_size``
    (metadata ``[group_size * k]``); refuses a form we do not run."""
    why = ragged_form_refusal(inst)
    if why is None and inst.operands[2].shape.dimensions[0] % group_size:
        why = (f"its {inst.operands[2].shape.dimensions[0]} offsets are no whole number per member of its "
               f"group of {group_size}")
    if why is not None:
        raise _refuse(inst, why)
    return inst.operands[2].shape.dimensions[0] // group_size


def _frontend_pairs(inst: HloInstruction) -> str:
    fa = inst.attributes.get("frontend_attributes")
    m = re.search(r'_xla_send_recv_source_target_pairs\s*=\s*"([^"]*)"', fa.raw if fa is not None else "")
    return m.group(1) if m else ""


def has_send_recv_pairs(inst: HloInstruction) -> bool:
    return bool(_frontend_pairs(inst))


def _refuse(inst: HloInstruction | None, why: str) -> HloUnsupportedError:
    if inst is None:
        return HloUnsupportedError(why)
    where = f" (line {inst.location.line})" if inst.location else ""
    return HloUnsupportedError(f"{inst.opcode} '%{inst.name}'{where}: {why}", inst.location)
