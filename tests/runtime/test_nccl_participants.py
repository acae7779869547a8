"""Collectives through NCCL (runtime/nccl_comm.py) and the one-process-per-GPU launchers
(runtime/spmd_run.py), without a GPU or nccl4py: a fake ``nccl.core`` moves bytes between
participant threads over host memory with NCCL's semantics (collectives rendezvous; send/recv
FIFO per pair, grouped sends posted before receives), and logs every call. The host platform's
buffers stand in for device memory, so an SPMD module runs end to end through the NCCL path and
must equal the interpreter; the log checks argument order, dtype and op mapping, grouping and
sub-communicators."""
from __future__ import annotations

import contextlib
import ctypes
import enum
import sys
import threading
import types

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.collective_groups import World, world_of
from hlo_compile.hlo.errors import HloError, HloUnsupportedError
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.runtime import literals, spmd_run
from hlo_compile.runtime.cuda_platform import cuda_compile_options
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.host_platform import HostPlatform
from hlo_compile.runtime.nccl_comm import NcclCommunicator, check_cuda_participants
from hlo_compile.runtime.participants import SpmdResources
from hlo_compile.runtime.platform import KERNELS
from hlo_compile.driver.stages import Stage, StageOutput


class RedOp(enum.IntEnum):
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


_REDUCE = {RedOp.SUM: np.add, RedOp.PROD: np.multiply, RedOp.MAX: np.maximum, RedOp.MIN: np.minimum}
_local = threading.local()


def _array(buf) -> tuple[int, int, np.dtype]:
    cai = buf.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    return cai["data"][0], cai["shape"][0], dtype


def _read(buf) -> np.ndarray:
    ptr, count, dtype = _array(buf)
    return np.frombuffer(ctypes.string_at(ptr, count * dtype.itemsize), dtype).copy()


def _write(buf, values: np.ndarray) -> None:
    ptr, count, dtype = _array(buf)
    data = np.ascontiguousarray(values, dtype)
    assert data.size <= count
    ctypes.memmove(ptr, data.ctypes.data, data.nbytes)


class FakeWorld:
    """What the ranks of one (fake) communicator share."""

    def __init__(self, n: int):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=60)
        self.lock = threading.Condition()
        self.slots: dict[int, dict[int, object]] = {}
        self.mail: dict[tuple, list] = {}
        self.subs: dict[tuple, FakeWorld] = {}


class FakeComm:
    log: list[tuple] = []

    def __init__(self, world: FakeWorld, rank: int, name: str = "world", who: int | None = None):
        self.world, self.rank, self.name, self.seq = world, rank, name, 0
        self.who = rank if who is None else who  # the participant (world rank) it belongs to

    @classmethod
    def init(cls, nranks: int, rank: int, unique_id):
        worlds = FAKE.worlds
        with FAKE.lock:
            world = worlds.setdefault(unique_id, FakeWorld(nranks))
        return cls(world, rank)

    @property
    def nranks(self) -> int:
        return self.world.n

    def _log(self, *entry) -> None:
        with FAKE.lock:
            FakeComm.log.append((self.name, self.who) + entry)

    def _everyone(self, payload) -> dict[int, object]:
        w, seq = self.world, self.seq
        self.seq += 1
        with w.lock:
            w.slots.setdefault(seq, {})[self.rank] = payload
        w.barrier.wait()
        return w.slots[seq]

    def _done(self) -> None:
        self.world.barrier.wait()

    def _run(self, kind, *args, stream=0):
        pending = getattr(_local, "group", None)
        if pending is not None:
            pending.append((self, kind, args, stream))
        else:
            self._do(kind, args, stream)

    def _do(self, kind, args, stream):
        # the typestr as nccl4py reads it (numpy.dtype(typestr): ml_dtypes names bf16 and f8)
        self._log(kind, stream, *[(_array(a)[1], a.__cuda_array_interface__["typestr"])
                                  if hasattr(a, "__cuda_array_interface__") else a for a in args])
        if kind == "send":
            buf, peer = args
            with self.world.lock:
                self.world.mail.setdefault((self.rank, peer), []).append(_read(buf))
                self.world.lock.notify_all()
            return
        if kind == "recv":
            buf, peer = args
            with self.world.lock:
                self.world.lock.wait_for(lambda: self.world.mail.get((peer, self.rank)), timeout=60)
                _write(buf, self.world.mail[(peer, self.rank)].pop(0))
            return
        everyone = self._everyone(_read(args[0]))
        values = [everyone[r] for r in range(self.world.n)]
        if kind == "allreduce":
            _write(args[1], _fold(values, args[2]))
        elif kind == "reduce_scatter":
            block = values[0].size // self.world.n
            _write(args[1], _fold(values, args[2])[self.rank * block:(self.rank + 1) * block])
        elif kind == "allgather":
            _write(args[1], np.concatenate(values))
        elif kind == "broadcast":
            _write(args[1], values[args[2]])
        self._done()

    def allreduce(self, send, recv, op, *, stream=None):
        self._run("allreduce", send, recv, op, stream=stream)

    def reduce_scatter(self, send, recv, op, *, stream=None):
        self._run("reduce_scatter", send, recv, op, stream=stream)

    def allgather(self, send, recv, *, stream=None):
        self._run("allgather", send, recv, stream=stream)

    def broadcast(self, send, recv, root, *, stream=None):
        self._run("broadcast", send, recv, root, stream=stream)

    def send(self, buf, peer, *, stream=None):
        self._run("send", buf, peer, stream=stream)

    def recv(self, buf, peer, *, stream=None):
        self._run("recv", buf, peer, stream=stream)

    def split(self, color: int, key: int):
        everyone = self._everyone((color, key))
        members = sorted((k, r) for r, (c, k) in everyone.items() if c == color)
        with self.world.lock:
            sub = self.world.subs.setdefault((self.seq, color), FakeWorld(len(members)))
        self._done()
        self._log("split", color, key)
        return FakeComm(sub, [r for _, r in members].index(self.rank), f"split{color}", self.who)


def _fold(values: list[np.ndarray], op) -> np.ndarray:
    out = values[0]
    for v in values[1:]:
        out = _REDUCE[RedOp(op)](out, v)
    return out


@contextlib.contextmanager
def _group():
    outer = getattr(_local, "group", None)
    if outer is not None:  # nested: part of the outer group
        yield
        return
    _local.group = []
    try:
        yield
        ops = _local.group
    finally:
        _local.group = None
    FakeComm.log.append(("group", len(ops)))
    # NCCL's promise for a group: no operation of it waits before all are posted
    for comm, kind, args, stream in [o for o in ops if o[1] == "send"] + [o for o in ops if o[1] != "send"]:
        comm._do(kind, args, stream)


FAKE = types.SimpleNamespace(NcclRedOp=RedOp, Communicator=FakeComm, group=_group,
                             get_unique_id=lambda: object(), worlds={}, lock=threading.Lock())


COMMS: list = []  # the last run's communicators, by participant


def run_through_fake_nccl(module, world: World, args: list) -> list:
    """Every participant in a thread of its own (no baton: NCCL does not serialise them), each
    with an ``NcclCommunicator`` over the fake, on the host platform."""
    exe = compile_executable(module, "host")
    exe.build_programs()
    uid = object()
    results: list = [None] * world.size
    errors: list = []
    COMMS.clear()
    COMMS.extend([None] * world.size)

    def run(k: int) -> None:
        try:
            comm = COMMS[k] = NcclCommunicator(FAKE, FakeComm.init(world.size, k, uid), world, k)
            res = SpmdResources(exe.kernels, exe.constants, world, k, comm)
            results[k] = spmd_run.run_one(exe, res, exe.upload_arguments(args[k]))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            for w in FAKE.worlds.values():
                w.barrier.abort()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(world.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    return results


@pytest.fixture(autouse=True)
def _fresh_log():
    FakeComm.log.clear()
    FAKE.worlds.clear()
    yield


ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

and {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT m = pred[] and(a, b)
}

cadd {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT s = c64[] add(a, b)
}
"""

SPMD = f"""HloModule nccl_spmd, replica_count=2, num_partitions=2

{ADD}
ENTRY main {{
  x = f32[4,6]{{1,0}} parameter(0)
  y = f32[8]{{0}} parameter(1)
  p = pred[8]{{0}} parameter(2)
  c = c64[3]{{0}} parameter(3)
  e = f32[4,6]{{1,0}} exponential(x)
  r = f32[4,6]{{1,0}} all-reduce(e), channel_id=1, replica_groups={{{{0,2}},{{1,3}}}}, use_global_device_ids=true,
    to_apply=add
  rt = f32[4,6]{{0,1}} all-reduce(x), channel_id=2, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true,
    to_apply=max
  ra = pred[8]{{0}} all-reduce(p), channel_id=3, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true,
    to_apply=and
  rc = c64[3]{{0}} all-reduce(c), channel_id=4, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true,
    to_apply=cadd
  g = f32[4,12]{{1,0}} all-gather(r), replica_groups={{{{0,1}}}}, dimensions={{1}}
  gs = (f32[8]{{0}}, f32[16]{{0}}) all-gather-start(y), replica_groups={{{{0,1}}}}, dimensions={{0}}
  gd = f32[16]{{0}} all-gather-done(gs)
  rs = f32[4,3]{{1,0}} reduce-scatter(x), channel_id=5, replica_groups={{{{0,1}},{{2,3}}}}, use_global_device_ids=true,
    dimensions={{1}}, to_apply=add
  a2a = f32[4,6]{{1,0}} all-to-all(x), channel_id=6, replica_groups={{{{0,1}}}}, dimensions={{0}}
  t2a = (f32[8]{{0}}, f32[8]{{0}}) all-to-all(y, y), channel_id=7, replica_groups={{{{0,1}}}}
  t0 = f32[8]{{0}} get-tuple-element(t2a), index=0
  pp = f32[8]{{0}} collective-permute(y), channel_id=8, source_target_pairs={{{{0,1}},{{1,0}}}}
  one = f32[8]{{0}} collective-permute(y), channel_id=9, source_target_pairs={{{{1,0}}}}
  cb = f32[8]{{0}} collective-broadcast(y), replica_groups={{{{1,0}}}}
  pid = u32[] partition-id()
  ROOT o = tuple(r, rt, ra, rc, g, gd, rs, a2a, t0, pp, one, cb, pid)
}}
"""


def _args(world: World, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(8).astype(np.float32),
             rng.random(8) < 0.8, (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64)]
            for _ in range(world.size)]


def test_every_collective_through_nccl_equals_the_interpreter():
    module = parse_module(SPMD)
    world = world_of(module)
    args = _args(world)
    want = evaluate_spmd(module, lambda k: args[k], world)
    got = run_through_fake_nccl(module, world, args)
    for k in range(world.size):
        w, g = literals.flatten(want[k]), literals.flatten(got[k])
        assert len(w) == len(g) == 13
        for i, (a, b) in enumerate(zip(w, g)):
            assert a.dtype == b.dtype and a.shape == b.shape, (k, i)
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"participant {k}, output {i}")


def _calls(kind: str, rank: int = 0) -> list[tuple]:
    return [e for e in FakeComm.log if len(e) > 2 and e[2] == kind and e[1] == rank]


def test_argument_order_dtypes_ops_groups_and_sub_communicators():
    module = parse_module(SPMD)
    world = world_of(module)
    run_through_fake_nccl(module, world, _args(world))
    reduces = _calls("allreduce")
    # r (sub-communicator of {0,2}, in place on the buffers, layouts equal): 24 f32, SUM
    assert reduces[0][0].startswith("split") and reduces[0][4:] == ((24, "<f4"), (24, "<f4"), RedOp.SUM)
    # rt: its result layout differs from its operand's: staged, as the logical row-major array
    assert reduces[1][0] == "world" and reduces[1][4:] == ((24, "<f4"), (24, "<f4"), RedOp.MAX)
    assert reduces[2][4:] == ((8, "|u1"), (8, "|u1"), RedOp.MIN)  # pred and = MIN of bytes
    assert reduces[3][4:] == ((6, "<f4"), (6, "<f4"), RedOp.SUM)  # c64 add = the sum of its floats
    (rs,) = _calls("reduce_scatter")
    assert rs[0].startswith("split") and rs[4:] == ((24, "<f4"), (12, "<f4"), RedOp.SUM)
    gathers = _calls("allgather")
    assert [g[4:] for g in gathers] == [((96, "|u1"), (192, "|u1")), ((32, "|u1"), (64, "|u1"))]
    splits = [e for e in FakeComm.log if len(e) > 2 and e[2] == "split" and e[1] == 0]
    assert len(splits) == 3  # once per distinct set of groups: r and g share {0,2},{1,3}
    # all-to-all: one group of 2 sends and 2 receives per participant, peers in group-rank order
    sends = _calls("send")
    assert [s[5] for s in sends[:2]] == [0, 1]
    assert ("group", 4) in FakeComm.log
    # permute {{1,0}} alone: participant 0 only receives (from 1), 1 only sends
    one_recvs = [e for e in _calls("recv") if e[0] == "world"]
    assert one_recvs and all(e[5] == 1 for e in one_recvs)
    bcast = [e for e in _calls("broadcast", 1)]
    assert bcast and bcast[0][6] == 0  # from the group's first participant: rank 0 of {1,0}'s communicator


def test_reductions_nccl_has_no_type_for_are_refused_by_name():
    s16 = ("HloModule m, num_partitions=2\n\nadd {\n  a = s16[] parameter(0)\n  b = s16[] parameter(1)\n"
           "  ROOT s = s16[] add(a, b)\n}\n\nENTRY e {\n  x = s16[8]{0} parameter(0)\n"
           "  ROOT r = s16[8]{0} all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, "
           "to_apply=add\n}\n")
    module = parse_module(s16)
    with pytest.raises(HloUnsupportedError, match=r"all-reduce '%r' \(line 11\): a add reduction of s16 does not run "
                                                  r"through NCCL"):
        run_through_fake_nccl(module, world_of(module), [[np.ones(8, np.int16)] for _ in range(2)])
    assert not [e for e in FakeComm.log if len(e) > 2]  # refused before anything moved


# ---- launchers ---------------------------------------------------------------------------------------

def test_refusals_before_any_process_starts(monkeypatch):
    module = parse_module(SPMD)
    world = world_of(module)
    with pytest.raises(HloUnsupportedError, match="runs on 4 participants but 2 GPU"):
        check_cuda_participants(module, world, gpus=2)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(HloUnsupportedError, match="nccl4py' is not installed"):
        check_cuda_participants(module, world, gpus=4)
    check_cuda_participants(module, World(1, 1), gpus=0)  # one participant: no NCCL needed


def test_which_gpu_each_participant_uses():
    assert [spmd_run.participant_device(k, 4) for k in range(4)] == [0, 1, 2, 3]
    ctx = spmd_run.MpiContext(None, rank=5, size=8, local_rank=1)
    assert spmd_run.participant_device(5, 4, ctx) == 1
    assert spmd_run.participant_device(5, 1, spmd_run.MpiContext(None, 5, 8, 3)) == 0


class _FakeMPI:
    COMM_TYPE_SHARED = 1

    class _Comm:
        def __init__(self, rank, size):
            self.rank, self.size, self.bcasts = rank, size, []

        def Get_rank(self):
            return self.rank

        def Get_size(self):
            return self.size

        def Split_type(self, kind):
            assert kind == _FakeMPI.COMM_TYPE_SHARED
            return _FakeMPI._Comm(self.rank % 2, 2)  # two ranks per machine

        def bcast(self, value, root):
            self.bcasts.append((value, root))
            return "uid-of-rank-0" if self.rank else value

        def allgather(self, value):
            return [value] * self.size


def test_mpi_rank_size_local_rank_and_unique_id_broadcast(monkeypatch):
    assert spmd_run.mpi_context({}) is None
    mpi = types.ModuleType("mpi4py")
    fake = _FakeMPI()
    fake.COMM_WORLD = _FakeMPI._Comm(3, 4)
    mpi.MPI = fake
    monkeypatch.setitem(sys.modules, "mpi4py", mpi)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    ctx = spmd_run.mpi_context()
    assert (ctx.rank, ctx.size, ctx.local_rank) == (3, 4, 1) and not spmd_run.lead_process()
    module = parse_module(SPMD)
    monkeypatch.setattr("hlo_compile.runtime.nccl_comm.load_nccl", lambda: FAKE)
    monkeypatch.setattr("hlo_compile.runtime.nccl_comm.gpu_count", lambda: 2)
    seen = {}

    def participant(text, options, world, k, uid, args, ordinal):
        seen.update(k=k, uid=uid, ordinal=ordinal, args=args)
        return "result"
    monkeypatch.setattr(spmd_run, "run_gpu_participant", participant)
    run = spmd_run.compile_spmd(module, "cuda", world_of(module))
    assert run([["a0"], ["a1"], ["a2"], ["a3"]]) == ["result"] * 4
    assert seen == {"k": 3, "uid": "uid-of-rank-0", "ordinal": 1, "args": ["a3"]}
    assert fake.COMM_WORLD.bcasts == [(None, 0)]  # only rank 0 makes the id
    fake.COMM_WORLD = _FakeMPI._Comm(0, 2)
    with pytest.raises(HloUnsupportedError, match="runs on 4 participants but the MPI launcher started 2"):
        spmd_run.compile_spmd(module, "cuda", world_of(module))


def _spawned_participant(text, options, world, k, uid, args, ordinal):
    """Runs in a spawned child: what it was given, or a failure of participant 2."""
    if k == 2 and args == ["fail"]:
        raise HloUnsupportedError("something the child refused")
    return (k, uid, ordinal, args, text[:9])


@pytest.mark.long
def test_spawned_processes_get_the_id_their_gpu_and_report_failures():
    world = World(1, 3)
    res = spmd_run.run_spawned(world, "the-uid", lambda k: ("HloModule x", None, [k * 10], k),
                               target=_spawned_participant, timeout=120)
    assert res == [(k, "the-uid", k, [k * 10], "HloModule") for k in range(3)]
    with pytest.raises(HloUnsupportedError, match="participant 2: something the child refused"):
        spmd_run.run_spawned(world, "uid", lambda k: ("t", None, ["fail"], k), target=_spawned_participant,
                             timeout=120)
    with pytest.raises(HloError):
        spmd_run.run_spawned(world, "uid", lambda k: ("t", None, ["x"], k), target=_exit_without_result,
                             timeout=120)


def _exit_without_result(text, options, world, k, uid, args, ordinal):
    import os
    os._exit(3)


# ---- 4 participants: each new path against the interpreter ------------------------------------------

def _compare(module, args, outputs: int) -> list:
    world = world_of(module)
    want = evaluate_spmd(module, lambda k: args[k], world)
    got = run_through_fake_nccl(module, world, args)
    for k in range(world.size):
        w, g = literals.flatten(want[k]), literals.flatten(got[k])
        assert len(w) == len(g) == outputs
        for i, (a, b) in enumerate(zip(w, g)):
            assert a.dtype == b.dtype and a.shape == b.shape, (k, i)
            np.testing.assert_array_equal(b, a, err_msg=f"participant {k}, output {i}")
    return got


LOW_PRECISION = """HloModule low_precision, num_partitions=4

addbf {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}

maxbf {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT m = bf16[] maximum(a, b)
}

add8 {
  a = f8e5m2[] parameter(0)
  b = f8e5m2[] parameter(1)
  ROOT s = f8e5m2[] add(a, b)
}

ENTRY main {
  x = bf16[4,6]{1,0} parameter(0)
  y = f8e5m2[8]{0} parameter(1)
  s = bf16[4,6]{1,0} all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true,
    to_apply=addbf
  m = bf16[4,6]{1,0} all-reduce(x), channel_id=2, replica_groups={{0,2},{1,3}}, use_global_device_ids=true,
    to_apply=maxbf
  t = bf16[4,6]{0,1} all-reduce(x), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true,
    to_apply=addbf
  rs = bf16[4,3]{1,0} reduce-scatter(x), channel_id=4, replica_groups={{0,1},{2,3}}, use_global_device_ids=true,
    dimensions={1}, to_apply=addbf
  e = f8e5m2[8]{0} all-reduce(y), channel_id=5, replica_groups={{0,1,2,3}}, use_global_device_ids=true,
    to_apply=add8
  ROOT o = tuple(s, m, t, rs, e)
}
"""


def test_bf16_and_f8_reductions_run_in_their_type_and_equal_the_interpreter():
    import ml_dtypes
    module = parse_module(LOW_PRECISION)
    rng = np.random.default_rng(3)
    args = [[rng.standard_normal((4, 6)).astype(ml_dtypes.bfloat16),
             (rng.standard_normal(8) * 4).astype(ml_dtypes.float8_e5m2)] for _ in range(4)]
    _compare(module, args, 5)
    reduces = _calls("allreduce")
    assert reduces[0][4:] == ((24, "bfloat16"), (24, "bfloat16"), RedOp.SUM)  # in bf16, as XLA:GPU reduces it
    assert reduces[1][0].startswith("split") and reduces[1][6] == RedOp.MAX
    assert reduces[-1][4:] == ((8, "float8_e5m2"), (8, "float8_e5m2"), RedOp.SUM)
    (rs,) = _calls("reduce_scatter")
    assert rs[4:] == ((24, "bfloat16"), (12, "bfloat16"), RedOp.SUM)
    assert dict(COMMS[0].paths) == {"s": "direct", "m": "direct", "t": "staged", "rs": "arranged", "e": "direct"}


RING = """HloModule ring, num_partitions=4

ENTRY main {
  x = f32[3,5]{1,0} parameter(0)
  pid = u32[] partition-id()
  f = f32[] convert(pid)
  c = f32[3,5]{1,0} broadcast(f), dimensions={}
  v = f32[3,5]{1,0} add(x, c)
  t0 = token[] after-all()
  r = (f32[3,5]{1,0}, u32[], token[]) recv(t0), channel_id=1,
    frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3},{3,0}}"}
  s = (f32[3,5]{1,0}, u32[], token[]) send(v, t0), channel_id=1,
    frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3},{3,0}}"}
  r2 = (f32[3,5]{1,0}, u32[], token[]) recv(t0), channel_id=2,
    frontend_attributes={_xla_send_recv_source_target_pairs="{{3,1}}"}
  sx = (f32[3,5]{1,0}, u32[], token[]) send(x, t0), channel_id=2,
    frontend_attributes={_xla_send_recv_source_target_pairs="{{3,1}}"}
  rd = (f32[3,5]{1,0}, token[]) recv-done(r), channel_id=1
  sd = token[] send-done(s), channel_id=1
  rd2 = (f32[3,5]{1,0}, token[]) recv-done(r2), channel_id=2
  sd2 = token[] send-done(sx), channel_id=2
  got = f32[3,5]{1,0} get-tuple-element(rd), index=0
  got2 = f32[3,5]{1,0} get-tuple-element(rd2), index=0
  ROOT o = tuple(got, got2)
}
"""


def test_send_recv_ring_on_four_gpus_equals_the_interpreter():
    module = parse_module(RING)
    rng = np.random.default_rng(4)
    args = [[rng.standard_normal((3, 5)).astype(np.float32)] for _ in range(4)]
    got = _compare(module, args, 2)
    np.testing.assert_array_equal(got[1][0], args[0][0] + 0)  # from participant 0 (partition-id 0 added)
    np.testing.assert_array_equal(got[1][1], args[3][0])  # channel 2: from 3
    assert not got[0][1].any()  # no source on channel 2: zeros
    # everything posted went to NCCL in one group at the first done (the ring cannot wait on
    # itself): participant 1 sends one (channel 1) and receives two (channels 1 and 2)
    mine = [e for e in FakeComm.log if len(e) > 2 and e[1] == 1 and e[2] in ("send", "recv")]
    assert sorted((e[2], e[5]) for e in mine) == [("recv", 0), ("recv", 3), ("send", 2)]
    assert all(e[4] == (60, "|u1") for e in mine)
    groups = sorted(e[1] for e in FakeComm.log if e[0] == "group")
    assert groups == [2, 2, 3, 3]  # one per participant: 1 and 3 have a part in channel 2


LAYOUTS = """HloModule layouts, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  xt = f32[4,8]{0,1} copy(x)
  g_minor = f32[4,32]{1,0} all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1},
    use_global_device_ids=true
  g_major = f32[16,8]{1,0} all-gather(x), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0},
    use_global_device_ids=true
  g_cm = f32[4,32]{0,1} all-gather(xt), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={1},
    use_global_device_ids=true
  g_staged = f32[4,32]{0,1} all-gather(x), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={1},
    use_global_device_ids=true
  rs_minor = f32[4,4]{1,0} reduce-scatter(x), channel_id=5, replica_groups={{0,1},{2,3}}, dimensions={1},
    use_global_device_ids=true, to_apply=add
  rs_major = f32[1,8]{1,0} reduce-scatter(x), channel_id=6, replica_groups={{0,1,2,3}}, dimensions={0},
    use_global_device_ids=true, to_apply=add
  rs_staged = f32[4,2]{0,1} reduce-scatter(x), channel_id=7, replica_groups={{0,1,2,3}}, dimensions={1},
    use_global_device_ids=true, to_apply=add
  a_minor = f32[4,8]{1,0} all-to-all(x), channel_id=8, replica_groups={{0,1,2,3}}, dimensions={1}
  a_major = f32[4,8]{1,0} all-to-all(x), channel_id=9, replica_groups={{0,1,2,3}}, dimensions={0}
  a_staged = f32[4,8]{0,1} all-to-all(x), channel_id=10, replica_groups={{0,1,2,3}}, dimensions={1}
  a_tuple = (f32[4,8]{1,0}, f32[4,8]{1,0}) all-to-all(x, x), channel_id=11, replica_groups={{0,1},{2,3}}
  t1 = f32[4,8]{1,0} get-tuple-element(a_tuple), index=1
  p = f32[4,8]{1,0} collective-permute(x), channel_id=12, source_target_pairs={{0,1},{1,2},{2,0}}
  p_staged = f32[4,8]{0,1} collective-permute(x), channel_id=13, source_target_pairs={{0,3},{3,0}}
  b = f32[4,8]{0,1} collective-broadcast(xt), channel_id=14, replica_groups={{2,1,0,3}}
  ROOT o = tuple(g_minor, g_major, g_cm, g_staged, rs_minor, rs_major, rs_staged, a_minor, a_major, a_staged, t1,
    p, p_staged, b)
}
"""


def test_gather_scatter_all_to_all_direct_arranged_and_staged_equal_the_interpreter():
    module = parse_module(LAYOUTS)
    rng = np.random.default_rng(5)
    args = [[rng.standard_normal((4, 8)).astype(np.float32)] for _ in range(4)]
    _compare(module, args, 14)
    for comm in COMMS:
        assert dict(comm.paths) == {
            "g_minor": "arranged", "g_major": "direct", "g_cm": "direct", "g_staged": "staged",
            "rs_minor": "arranged", "rs_major": "direct", "rs_staged": "staged",
            "a_minor": "arranged", "a_major": "direct", "a_staged": "staged", "a_tuple": "direct",
            "p": "direct", "p_staged": "staged", "b": "direct"}
    gathers = _calls("allgather")
    assert [g[4:] for g in gathers[:3]] == [((128, "|u1"), (512, "|u1"))] * 3  # whole buffers, no host bytes
    # a minor-dimension reduce-scatter hands NCCL the blocks made contiguous: all 32 floats, 16 back
    assert _calls("reduce_scatter")[0][4:] == ((32, "<f4"), (16, "<f4"), RedOp.SUM)


# ---- the GPU processes compile nothing the launcher compiled ------------------------------------------

class _PtxPlatform(HostPlatform):
    """The cuda platform's compile without a GPU: its options (``cuda_compile_options`` for
    sm_90) and a kernel stage that needs the PTX, as ``CudaPlatform`` loads it."""

    name = "cuda-like"

    def compile_options(self, options):
        return cuda_compile_options(options, "sm_90")

    def kernel_stage(self):
        return Stage(KERNELS, ("fusions", "ptx"), lambda options, plan, ptx: StageOutput({"ptx": ptx}))


def _compile_in_child(text, options, world, k, uid, args, ordinal):
    """A spawned GPU process's compile (``spmd_run.compile_participant``): what it read from the cache."""
    exe = spmd_run.compile_participant(text, options, _PtxPlatform())
    return exe.pipeline.cache_hits, "ptx" in exe.kernels and ".entry" in exe.kernels["ptx"]


@pytest.mark.long
def test_spawned_processes_read_the_kernels_the_launcher_compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("HLO_COMPILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("hlo_compile.runtime.nccl_comm.gpu_arch", lambda ordinal=0: "sm_90")
    module = parse_module(SPMD)
    options = spmd_run.warm_cache(module, None)  # the launcher: once
    assert options.arch == "sm_90" and list(tmp_path.rglob("*.entry"))
    text = module.to_text("long")
    got = spmd_run.run_spawned(World(1, 2), "uid", lambda k: (text, options, [], k), target=_compile_in_child,
                               timeout=300)
    assert got == [(["llvm-opt"], True)] * 2  # every kernel optimized IR from the cache; the PTX made from it
    cold = tmp_path / "cold"
    monkeypatch.setenv("HLO_COMPILE_CACHE_DIR", str(cold))  # without the launcher's compile: nothing to read
    assert spmd_run.run_spawned(World(1, 1), "uid", lambda k: (text, options, [], k), target=_compile_in_child,
                                timeout=300) == [([], True)]


# ---- ragged-all-to-all: metadata gathered, rows by grouped send/recv ----------------------------------------

RAGGED = """HloModule ragged_nccl, num_partitions=4

ENTRY main {
  input = f32[25,3]{1,0} parameter(0)
  output = f32[27,3]{1,0} parameter(1)
  io = s64[8]{0} parameter(2)
  ss = s64[8]{0} parameter(3)
  oo = s64[8]{0} parameter(4)
  rs = s64[8]{0} parameter(5)
  input2 = f32[25,3]{1,0} parameter(6)
  output2 = f32[27,3]{1,0} parameter(7)
  io2 = s32[4]{0} parameter(8)
  ss2 = s32[4]{0} parameter(9)
  oo2 = s32[4]{0} parameter(10)
  rs2 = s32[4]{0} parameter(11)
  it = f32[25,3]{0,1} copy(input)
  ot = f32[27,3]{0,1} copy(output)
  direct = f32[27,3]{1,0} ragged-all-to-all(input, output, io, ss, oo, rs), channel_id=1, replica_groups={{0,1,2,3}}
  staged = f32[27,3]{0,1} ragged-all-to-all(it, ot, io, ss, oo, rs), channel_id=2, replica_groups={{0,1,2,3}}
  pairs = f32[27,3]{1,0} ragged-all-to-all(input2, output2, io2, ss2, oo2, rs2), channel_id=3,
    replica_groups={{0,1},{2,3}}
  start = ((f32[25,3]{1,0}, f32[27,3]{1,0}, s64[8]{0}, s64[8]{0}, s64[8]{0}, s64[8]{0}), f32[27,3]{1,0}, s32[])
    ragged-all-to-all-start(input, output2, io, ss, oo, rs), channel_id=4, replica_groups={{0,1,2,3}}
  done = f32[27,3]{1,0} ragged-all-to-all-done(start)
  ROOT o = tuple(direct, staged, pairs, done)
}
"""


def _ragged_args(seed: int) -> list:
    from test_ragged_all_to_all import random_case
    four = random_case([[0, 1, 2, 3]], 2, 25, 27, (3,), seed)
    pairs = random_case([[0, 1], [2, 3]], 2, 25, 27, (3,), seed + 1, meta_dtype=np.int32)
    return [four[k] + pairs[k] for k in range(4)]


def test_ragged_all_to_all_through_nccl_equals_the_interpreter_and_the_model():
    from test_ragged_all_to_all import model
    module = parse_module(RAGGED)
    args = _ragged_args(7)
    got = _compare(module, args, 4)
    want = model([[0, 1, 2, 3]], [a[:6] for a in args], 2)
    for k in range(4):
        np.testing.assert_array_equal(got[k][0], want[k])
        np.testing.assert_array_equal(got[k][1], want[k])
    for comm in COMMS:
        assert dict(comm.paths) == {"direct": "direct", "staged": "staged", "pairs": "direct",
                                    "wrapped_start": "direct"}
    # each participant gathers its metadata once per op: int64[4, 8] (256 bytes), int64[4, 4] in pairs
    gathers = [e for e in FakeComm.log if len(e) > 2 and e[1] == 0 and e[2] == "allgather"]
    assert [g[4:] for g in gathers] == [((256, "|u1"), (1024, "|u1"))] * 2 + [((128, "|u1"), (256, "|u1"))] \
        + [((256, "|u1"), (1024, "|u1"))]
    assert gathers[2][0].startswith("split")  # the pairs' sub-communicator
    # participant 1's sends of the direct op: each non-empty update, 12 bytes a row, in (peer, update) order
    io, ss = args[1][2], args[1][3]
    sends = [e for e in FakeComm.log if len(e) > 2 and e[1] == 1 and e[2] == "send" and e[0] == "world"]
    expect = [((int(ss[e]) * 12, "|u1"), e // 2) for e in range(8) if ss[e]]
    assert [(s[4], s[5]) for s in sends[:len(expect)]] == expect
    assert io.dtype == np.int64


def test_ragged_rows_out_of_range_stop_every_participant_before_any_row_moves():
    module = parse_module(RAGGED)
    args = _ragged_args(8)
    args[3][3] = args[3][3].copy()
    args[3][3][0] = max(int(args[3][3][0]), 1)
    args[0][5] = args[0][5].copy()
    args[0][5][3 * 2] = args[3][3][0]
    args[3][2] = args[3][2].copy()
    args[3][2][0] = 25  # participant 3's first update for rank 0 starts past its 25 input rows
    with pytest.raises(HloUnsupportedError, match=r"ragged-all-to-all '%direct' \(line 18\): update 0 from group "
                                                  r"rank 3 to rank 0: rows \[25, 2\d\) of an input of 25"):
        run_through_fake_nccl(module, world_of(module), args)
    assert not [e for e in FakeComm.log if len(e) > 2 and e[2] in ("send", "recv")]
    assert len([e for e in FakeComm.log if len(e) > 2 and e[2] == "allgather"]) == 4  # every one gathered
