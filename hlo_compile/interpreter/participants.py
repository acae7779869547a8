"""How many participants a module runs on, and the guard that keeps collectives honest.

The interpreter gives a collective its one-device meaning (all-reduce and all-gather return
their operand, ``partition-id`` is 0). That is XLA's meaning only when the module runs on one
participant: ``replica_count`` x ``num_partitions`` from the module header is 1 and no replica
group or source-target pair names another participant. Anything else (every SPMD module) is
refused, naming the instruction, rather than run as if it were alone.
"""
from __future__ import annotations

import re

from ..hlo import HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError

_IOTA = re.compile(r"\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\]")
_GROUP_ATTRS = ("replica_groups", "source_target_pairs")


def participant_count(module: HloModule | None) -> int:
    """``replica_count`` x ``num_partitions`` of the module header (1 where absent)."""
    if module is None:
        return 1
    count = 1
    for key in ("replica_count", "num_partitions"):
        attr = module.attributes.get(key)
        if attr is not None:
            count *= int(attr.value)
    return count


def named_participants(inst: HloInstruction) -> int:
    """One more than the largest participant id ``inst``'s groups or pairs name (0: none)."""
    highest = 0
    for key in _GROUP_ATTRS:
        attr = inst.attributes.get(key)
        raw = attr.raw if attr is not None else ""
        iota = _IOTA.search(raw)
        if iota:  # [groups,size]<=[N]...: ids 0..N-1
            total = 1
            for n in iota.group(1).split(","):
                total *= int(n)
            highest = max(highest, total)
            continue
        ids = [int(n) for n in re.findall(r"\d+", raw)]
        if ids:
            highest = max(highest, max(ids) + 1)
    return highest


def require_one_participant(module: HloModule | None, inst: HloInstruction) -> None:
    """Refuse ``inst`` (a collective or an id op) unless its one-device meaning is XLA's."""
    where = f" (line {inst.location.line})" if inst.location else ""
    n = participant_count(module)
    if n > 1:
        raise HloUnsupportedError(
            f"{inst.opcode} '%{inst.name}'{where}: the module runs on {n} participants (replica_count x "
            f"num_partitions); collectives across participants are not executed yet, and one device "
            f"alone would give other results", inst.location)
    named = named_participants(inst)
    if named > 1:
        raise HloUnsupportedError(
            f"{inst.opcode} '%{inst.name}'{where}: its groups name {named} participants but the module "
            f"runs on one; collectives across participants are not executed yet", inst.location)
