"""Running an executable on R x P participants in this process (``participants.py``: the
communicator and each participant's resources)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

from ..hlo import HloModule
from ..hlo.collective_groups import World
from ..hlo.errors import HloUnsupportedError
from .participants import HostCommunicator, PeerFailed, SpmdResources


def run_participants(exe: Any, world: World, args: Sequence[Sequence[Any]]) -> list[Any]:
    """Run executable ``exe`` (host) on every participant of ``world`` (``args[k]``: participant
    k's logical arguments); each participant's result, by flattened id."""
    from .values import download_value, free_value
    platform = exe.platform
    comm = HostCommunicator(world)
    results: list[Any] = [None] * world.size
    errors: list[BaseException] = []
    params = [exe.upload_arguments(a) for a in args]

    def run(k: int) -> None:
        with comm.baton:
            try:
                res = SpmdResources(exe.kernels, exe.constants, world, k, comm)
                entry = exe.module.entry
                if id(entry) not in exe.programs:
                    exe.build_programs()
                value, owned = exe.programs[id(entry)].run(platform, res, params[k])
                platform.synchronize()
                results[k] = download_value(platform, value)
                for data in owned.values():
                    platform.free(data)
                comm.finished(k)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
                comm.failed(e)

    if world.size == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(world.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for p in params:
        for v in p:
            free_value(platform, v)
    if errors:
        raise next((e for e in errors if not isinstance(e, PeerFailed)), errors[0])
    return results


def compile_spmd(module: HloModule, platform: str, world: World, options: Any = None) -> Callable[[list], list]:
    """Compile ``module`` once for ``platform`` and return ``run(args per participant)``
    (``rng-get-and-update-state`` counters live in the executable's steps: they persist)."""
    if platform == "cuda":
        from .nccl_comm import check_cuda_participants
        check_cuda_participants(module, world)
    elif platform != "host":
        raise HloUnsupportedError(f"platform '{platform}' cannot run {world.size} participants")
    from .executable import compile_executable
    exe = compile_executable(module, platform, options)
    return lambda args: run_participants(exe, world, args)
