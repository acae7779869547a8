"""SPMD on cuda: one participant per GPU. NOT complete: only the one-participant path runs.

With one participant every collective is local (the communicator of ``participants.py`` meets
nobody), so the module runs on the one GPU. More participants need one process per GPU with an
NCCL communicator each (NVIDIA's ``nccl4py``, import path ``nccl.core``: ``get_unique_id``,
``Communicator.init(nranks, rank, uid)``, ``allreduce``/``allgather``/``reduce_scatter``/
``alltoall``/``broadcast``/``send``/``recv``); that launcher is not written yet, so such a run
is refused by name, as is a run with fewer GPUs than participants.
"""
from __future__ import annotations

import importlib.util

from ..hlo import HloModule
from ..hlo.collective_groups import World
from ..hlo.errors import HloUnsupportedError


def gpu_count() -> int:
    """GPUs the driver sees (0 without a driver)."""
    try:
        from cuda.bindings import driver
        if int(driver.cuInit(0)[0]) != 0:
            return 0
        code, count = driver.cuDeviceGetCount()
        return int(count) if int(code) == 0 else 0
    except Exception:  # no cuda-python or no libcuda: no GPU
        return 0


def check_cuda_participants(module: HloModule, world: World) -> None:
    """Refuse, by name, an SPMD run cuda cannot do here (``spmd_run.compile_spmd`` runs the rest)."""
    if world.size > 1:
        have = gpu_count()
        if have < world.size:
            raise HloUnsupportedError(f"module {module.name} runs on {world.size} participants but {have} GPU(s) "
                                      "are here (one GPU per participant)")
        if importlib.util.find_spec("nccl") is None:
            raise HloUnsupportedError("the Python package 'nccl4py' is not installed (pip install 'hlo-compile[cuda]')")
        raise HloUnsupportedError(f"module {module.name}: several GPUs through NCCL (one process per GPU) are not "
                                  "implemented yet; run it with --platform=host or interpreter")
