"""Running an executable on R x P participants: on the host, every participant in this process
(``participants.py``: the communicator and each participant's resources); on cuda, one process
per GPU through NCCL (``nccl_comm.py``), spawned here (``multiprocessing`` spawn: participant k
on GPU k, the NCCL unique id passed to each child) or started by an MPI launcher (``mpirun -n
R*P hlo-run ...``: rank and size from ``mpi4py``, the unique id broadcast from rank 0, rank r on
GPU ``local rank % GPUs``; every rank gets every participant's results, rank 0 writes them).
Spawned processes do not compile the kernels again: this process compiles them once into the
persistent kernel cache (``warm_cache``) and each process's compile reads them from it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..hlo import HloModule
from ..hlo.collective_groups import World
from ..hlo.errors import HloError, HloUnsupportedError
from .participants import HostCommunicator, PeerFailed, SpmdResources


def run_participants(exe: Any, world: World, args: Sequence[Sequence[Any]]) -> list[Any]:
    """Run executable ``exe`` (host) on every participant of ``world`` (``args[k]``: participant
    k's logical arguments); each participant's result, by flattened id."""
    from .values import free_value
    platform = exe.platform
    comm = HostCommunicator(world)
    results: list[Any] = [None] * world.size
    errors: list[BaseException] = []
    params = [exe.upload_arguments(a) for a in args]

    def run(k: int) -> None:
        with comm.baton:
            try:
                results[k] = run_one(exe, SpmdResources(exe.kernels, exe.constants, world, k, comm), params[k])
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


def run_one(exe: Any, resources: SpmdResources, params: Sequence[Any]) -> Any:
    """ENTRY's program for one participant: its result on the host (the buffers it made freed)."""
    from .values import download_value
    platform = exe.platform
    entry = exe.module.entry
    if id(entry) not in exe.programs:
        exe.build_programs()
    value, owned = exe.programs[id(entry)].run(platform, resources, params)
    platform.synchronize()
    result = download_value(platform, value)
    for data in owned.values():
        platform.free(data)
    return result


# ---- cuda: one process per GPU -----------------------------------------------------------------

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


@dataclass
class MpiContext:
    comm: Any  # mpi4py's COMM_WORLD
    rank: int
    size: int
    local_rank: int


def mpi_context(environ: Any = None) -> MpiContext | None:
    """The MPI job this process is a rank of (None when no MPI launcher started it)."""
    env = os.environ if environ is None else environ
    if not any(k in env for k in _MPI_ENV):
        return None
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise HloUnsupportedError("started by an MPI launcher but mpi4py is not installed "
                                  "(pip install 'hlo-compile[mpi]')") from e
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    return MpiContext(comm, comm.Get_rank(), comm.Get_size(), local)


def lead_process() -> bool:
    """Whether this process prints and writes results (not an MPI rank other than 0)."""
    ctx = mpi_context()
    return ctx is None or ctx.rank == 0


def participant_device(k: int, gpus: int, mpi: MpiContext | None = None) -> int:
    """The GPU ordinal participant ``k`` runs on: k in spawned processes, the MPI rank's local
    rank modulo the GPUs of its machine under MPI."""
    if mpi is not None:
        return mpi.local_rank % max(gpus, 1)
    return k


def run_gpu_participant(text: str, options: Any, world: World, k: int, unique_id: Any, args: Sequence[Any],
                        ordinal: int) -> Any:
    """Participant ``k``'s run in this process, on GPU ``ordinal``, through NCCL."""
    from .cuda_platform import CudaPlatform
    from .nccl_comm import NcclCommunicator, load_nccl
    nccl = load_nccl()
    exe = compile_participant(text, options, CudaPlatform(ordinal))
    comm = NcclCommunicator(nccl, nccl.Communicator.init(world.size, k, unique_id), world, k)
    params = exe.upload_arguments(args)
    return run_one(exe, SpmdResources(exe.kernels, exe.constants, world, k, comm), params)


def compile_participant(text: str, options: Any, platform: Any) -> Any:
    """A GPU process's executable of the module: its per-kernel stages read from the
    persistent cache the launching process filled (``warm_cache``), so only the passes, the
    PTX and loading run again here."""
    from ..hlo import parse_module
    from ..driver.kernel_cache import KernelCache, default_cache_dir
    from .executable import compile_executable
    return compile_executable(parse_module(text), platform, options, cache=KernelCache(default_cache_dir()))


def warm_cache(module: HloModule, options: Any) -> Any:
    """Compile ``module``'s kernels once, here, into the persistent cache (``default_cache_dir``,
    which the spawned processes inherit), as the GPU processes will compile them: ``options``
    are made as ``CudaPlatform.compile_options`` makes them for GPU 0's arch, without a
    context here. The options the processes use (their own GPU's arch decides in the end: a
    process on another kind of GPU compiles for it, missing the cache)."""
    from ..driver.kernel_cache import KernelCache, default_cache_dir
    from ..options import CompileOptions
    from ..driver.pipeline import run_pipeline
    from .cuda_platform import cuda_compile_options
    from .nccl_comm import gpu_arch
    opts = cuda_compile_options(options or CompileOptions(), gpu_arch(0))
    run_pipeline(module, opts, emit="llvm-opt", cache=KernelCache(default_cache_dir()))
    return opts


def _child(target: Callable, conn: Any, *args: Any) -> None:
    try:
        conn.send(("ok", target(*args)))
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
        text = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        conn.send(("error", type(e).__name__, text, isinstance(e, HloUnsupportedError)))
    finally:
        conn.close()


def run_spawned(world: World, unique_id: Any, per_participant: Callable[[int], tuple],
                target: Callable = run_gpu_participant, timeout: float | None = None) -> list[Any]:
    """One spawned process per participant k running ``target(text, options, world, k,
    unique_id, args, ordinal)`` where ``(text, options, args, ordinal) = per_participant(k)``;
    their results in order. The first failure ends the others (they would wait for it in NCCL)
    and is raised here, by name when it was a refusal."""
    import multiprocessing
    from multiprocessing.connection import wait
    ctx = multiprocessing.get_context("spawn")
    procs, conns = [], []
    for k in range(world.size):
        text, options, args, ordinal = per_participant(k)
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(target, child, text, options, world, k, unique_id, args, ordinal),
                        daemon=True)
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    results: list[Any] = [None] * world.size
    try:
        pending = dict(enumerate(conns))
        while pending:
            ready = wait(list(pending.values()), timeout)
            if not ready:
                raise HloError(f"the {world.size} GPU processes did not finish in {timeout} s")
            for k, conn in list(pending.items()):
                if conn not in ready:
                    continue
                try:
                    msg = conn.recv()
                except EOFError:
                    raise HloError(f"the process of participant {k} ended without a result "
                                   f"(exit code {procs[k].exitcode})") from None
                del pending[k]
                if msg[0] == "error":
                    _, kind, text, unsupported = msg
                    cls = HloUnsupportedError if unsupported else HloError
                    raise cls(f"participant {k}: {text}" if unsupported else f"participant {k}: {kind}: {text}")
                results[k] = msg[1]
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)
    return results


def compile_cuda_spmd(module: HloModule, world: World, options: Any = None) -> Callable[[list], list]:
    """``run(args per participant)`` on one GPU per participant (spawned, or this MPI rank)."""
    from .nccl_comm import check_cuda_participants, gpu_count, load_nccl
    mpi = mpi_context()
    text = module.to_text("long")
    if mpi is None:
        check_cuda_participants(module, world)
        opts = warm_cache(module, options)  # compiled once; the processes read its kernels

        def run(args: list) -> list:
            unique_id = load_nccl().get_unique_id()
            return run_spawned(world, unique_id, lambda k: (text, opts, args[k], participant_device(k, world.size)))
        return run
    if mpi.size != world.size:
        raise HloUnsupportedError(f"module {module.name} runs on {world.size} participants but the MPI launcher "
                                  f"started {mpi.size} rank(s) (one rank per participant)")
    nccl = load_nccl()

    def run_rank(args: list) -> list:
        unique_id = mpi.comm.bcast(nccl.get_unique_id() if mpi.rank == 0 else None, root=0)
        mine = run_gpu_participant(text, options, world, mpi.rank, unique_id, args[mpi.rank],
                                   participant_device(mpi.rank, gpu_count(), mpi))
        return mpi.comm.allgather(mine)
    return run_rank


def compile_spmd(module: HloModule, platform: str, world: World, options: Any = None) -> Callable[[list], list]:
    """Compile ``module`` once for ``platform`` and return ``run(args per participant)``
    (``rng-get-and-update-state`` counters live in the executable's steps: they persist; on
    several GPUs they live in each process, for one run)."""
    if platform == "cuda" and world.size > 1:
        return compile_cuda_spmd(module, world, options)
    if platform not in ("host", "cuda"):
        raise HloUnsupportedError(f"platform '{platform}' cannot run {world.size} participants")
    from .executable import compile_executable
    exe = compile_executable(module, platform, options)
    return lambda args: run_participants(exe, world, args)
