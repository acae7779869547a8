"""The thin CUDA runtime (hlo_compile/runtime/cuda.py).

Most tests need no GPU and no cuda-python: error formatting, ``available()``'s reasons, the
kernel-parameter array, and the device/module/buffer bookkeeping against a fake driver that keeps
"device" memory in host buffers. The ``gpu`` tests run hand-written PTX on a real device and skip
cleanly when ``available()`` says no.
"""
from __future__ import annotations

import ctypes
import enum
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_compile.hlo.errors import HloError
from hlo_compile.runtime import cuda as rt

REPO = Path(__file__).resolve().parents[2]

# A hand-written axpy: out[i] = a * x[i] + y[i] for i < n (one thread per element).
AXPY_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .entry axpy(
    .param .u64 x_ptr,
    .param .u64 y_ptr,
    .param .u64 out_ptr,
    .param .f32 a,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [x_ptr];
    ld.param.u64 %rd2, [y_ptr];
    ld.param.u64 %rd3, [out_ptr];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f32 %f2, [%rd8];
    add.s64 %rd9, %rd5, %rd7;
    ld.global.f32 %f3, [%rd9];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.s64 %rd10, %rd6, %rd7;
    st.global.f32 [%rd10], %f4;
DONE:
    ret;
}
"""

# The same kernel with an undeclared register: the JIT must reject it and say where.
BROKEN_PTX = AXPY_PTX.replace("fma.rn.f32 %f4, %f1, %f2, %f3;", "fma.rn.f32 %f4, %f1, %f2, %broken9;")


# ---------------------------------------------------------------------------------------------
# A fake driver: the call shapes of cuda.bindings.driver, with "device" memory in host buffers.

class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906


class _DeviceAttr(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class _FuncAttr(enum.IntEnum):
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class _JitOption(enum.IntEnum):
    CU_JIT_INFO_LOG_BUFFER = 3
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
    CU_JIT_ERROR_LOG_BUFFER = 5
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
    CU_JIT_LOG_VERBOSE = 12


class _EventFlags(enum.IntEnum):
    CU_EVENT_DEFAULT = 0


class _StreamFlags(enum.IntEnum):
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class _CaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class FakeDriver:
    """Enough of the driver API for the runtime's bookkeeping; records every call by name."""

    CUresult = _Result
    CUdevice_attribute = _DeviceAttr
    CUfunction_attribute = _FuncAttr
    CUjit_option = _JitOption
    CUevent_flags = _EventFlags
    CUstream_flags = _StreamFlags
    CUstreamCaptureMode = _CaptureMode
    JIT_ERROR = b"ptxas application ptx input, line 31; error   : Unknown symbol '%broken9'"

    def __init__(self, init_result: int = 0, device_count: int = 1):
        self.init_result, self.device_count = init_result, device_count
        self.calls: list[str] = []
        self.memory: dict[int, ctypes.Array] = {}
        self.modules: set[str] = set()
        self.contexts = 0
        self.launches: list[tuple] = []
        self.functions: list[str] = []  # the function of each launch
        # stream capture as the driver does it: work queued on the capturing stream becomes
        # graph nodes; a synchronous call meanwhile invalidates the capture
        self.streams: set[str] = set()
        self.capturing: str | None = None
        self.capture_broken = False
        self.nodes: list[tuple] = []
        self.graphs: dict[str, list[tuple]] = {}
        self.graph_execs: dict[str, str] = {}

    def _during_capture(self) -> bool:
        """A synchronous call: refused (and the capture invalidated) while one is open."""
        if self.capturing is not None:
            self.capture_broken = True
            return True
        return False

    def _log(self, name: str) -> None:
        self.calls.append(name)

    def cuGetErrorName(self, res):
        return 0, f"{_Result(res).name}".encode()

    def cuGetErrorString(self, res):
        return 0, {218: b"a PTX JIT compilation failed"}.get(int(res), b"something failed")

    def cuInit(self, flags):
        self._log("cuInit")
        return (self.init_result,)

    def cuDeviceGetCount(self):
        return 0, self.device_count

    def cuDriverGetVersion(self):
        return 0, 13000

    def cuDeviceGet(self, ordinal):
        return 0, f"dev{ordinal}"

    def cuDevicePrimaryCtxRetain(self, dev):
        self.contexts += 1
        return 0, "ctx"

    def cuDevicePrimaryCtxRelease(self, dev):
        self.contexts -= 1
        return (0,)

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuCtxSynchronize(self):
        if self._during_capture():
            return (_Result.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
        self._log("cuCtxSynchronize")
        return (0,)

    def cuDeviceGetName(self, length, dev):
        return 0, b"Fake GPU\0\0\0"

    def cuDeviceGetAttribute(self, attr, dev):
        return 0, {75: 9, 76: 0, 16: 132}[int(attr)]

    def cuModuleLoadDataEx(self, image, n, opts, vals):
        assert n == len(opts) == len(vals)
        text = ctypes.string_at(image)  # NUL-terminated, as the runtime must pass it
        values = dict(zip((int(o) for o in opts), vals))
        if b"%broken9" in text:
            log = values[int(_JitOption.CU_JIT_ERROR_LOG_BUFFER)]
            log[: len(self.JIT_ERROR) + 1] = self.JIT_ERROR + b"\0"
            return _Result.CUDA_ERROR_INVALID_PTX, None
        info = values[int(_JitOption.CU_JIT_INFO_LOG_BUFFER)]
        info[:20] = b"ptxas info : 10 regs"
        handle = f"module{len(self.modules)}"
        self.modules.add(handle)
        return 0, handle

    def cuModuleUnload(self, handle):
        self.modules.remove(handle)
        return (0,)

    def cuModuleGetFunction(self, module, name):
        return (0, f"{module}:{name.decode()}") if name == b"axpy" else (_Result.CUDA_ERROR_NOT_FOUND, None)

    def cuFuncGetAttribute(self, attr, handle):
        return 0, 10

    def cuFuncSetAttribute(self, handle, attr, value):
        return (0,) if value <= 227 * 1024 else (_Result.CUDA_ERROR_INVALID_VALUE,)

    def cuMemAlloc(self, n):
        if self._during_capture():
            return (_Result.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, None)
        if n == 0:
            return _Result.CUDA_ERROR_INVALID_VALUE, None
        buf = ctypes.create_string_buffer(n)
        self.memory[ctypes.addressof(buf)] = buf
        return 0, ctypes.addressof(buf)

    def cuMemFree(self, ptr):
        del self.memory[int(ptr)]
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):
        if self._during_capture():
            return (_Result.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
        self._log("cuMemcpy")
        ctypes.memmove(dst, src, n)
        return (0,)

    cuMemcpyDtoH = cuMemcpyDtoD = cuMemcpyHtoD

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        if stream == self.capturing:
            self.nodes.append(("copy", int(dst), int(src), int(n)))
            return (0,)
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuStreamCreate(self, flags):
        assert int(flags) == _StreamFlags.CU_STREAM_DEFAULT
        handle = f"stream{len(self.streams)}"
        self.streams.add(handle)
        return 0, handle

    def cuStreamDestroy(self, stream):
        self.streams.remove(stream)
        return (0,)

    def cuStreamSynchronize(self, stream):
        return (0,)

    def cuStreamBeginCapture(self, stream, mode):
        assert stream in self.streams and self.capturing is None  # never the legacy stream
        self.capturing, self.capture_broken, self.nodes = stream, False, []
        return (0,)

    def cuStreamEndCapture(self, stream):
        assert stream == self.capturing
        self.capturing = None
        if self.capture_broken:
            return _Result.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None
        handle = f"graph{len(self.graphs)}"
        self.graphs[handle] = self.nodes
        return 0, handle

    def cuGraphGetNodes(self, graph, count):
        return 0, None, len(self.graphs[graph])

    def cuGraphInstantiate(self, graph, flags):
        handle = f"exec{len(self.graph_execs)}"
        self.graph_execs[handle] = graph
        return 0, handle

    def cuGraphLaunch(self, executable, stream):
        self._log("cuGraphLaunch")
        for node in self.graphs[self.graph_execs[executable]]:
            if node[0] == "copy":
                ctypes.memmove(node[1], node[2], node[3])
            else:
                self.functions.append(node[1])
                self.launches.append(node[2:])
        return (0,)

    def cuGraphExecDestroy(self, executable):
        del self.graph_execs[executable]
        return (0,)

    def cuGraphDestroy(self, graph):
        del self.graphs[graph]
        return (0,)

    def cuMemsetD8(self, dst, value, n):
        ctypes.memset(dst, value, n)
        return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        launch = ((gx, gy, gz), (bx, by, bz), shared, params)
        if self.capturing is not None:
            if stream != self.capturing:  # the legacy stream syncs with the capturing one
                self.capture_broken = True
                return (_Result.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
            self.nodes.append(("launch", f, *launch))
            return (0,)
        self.functions.append(f)
        self.launches.append(launch)
        return (0,)

    def cuEventCreate(self, flags):
        return 0, object()

    def cuEventRecord(self, event, stream):
        return (0,)

    def cuEventSynchronize(self, event):
        return (0,)

    def cuEventElapsedTime(self, start, end):
        return 0, 0.25

    def cuEventDestroy(self, event):
        self._log("cuEventDestroy")
        return (0,)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    driver = FakeDriver()
    monkeypatch.setattr(rt, "driver_module", lambda: driver)
    return driver


def _no_cuda_python() -> None:
    raise ImportError("No module named 'cuda'")


# ---------------------------------------------------------------------------------------------
# No GPU needed.

def test_module_imports_and_answers_without_cuda_python() -> None:
    code = (
        "import sys; sys.modules['cuda'] = None\n"
        "from hlo_compile.runtime import cuda as rt\n"
        "ok, why = rt.available(); assert ok is False and 'cuda-python' in why, why\n"
        "try:\n    rt.CudaDevice()\nexcept rt.CudaError as e:\n    print('refused:', e)\n"
        "print(rt.error_name(218))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "refused: error: cuda-python is not installed" in out.stdout
    assert "('CUresult 218', '')" in out.stdout


def test_available_here_is_a_clean_answer() -> None:
    ok, why = rt.available()
    assert isinstance(ok, bool) and why
    if ok:
        pytest.skip(f"a CUDA device is usable here: {why}")
    assert any(word in why for word in ("cuda-python", "driver", "device")), why


def test_available_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt, "driver_module", _no_cuda_python)
    ok, why = rt.available()
    assert not ok and "cuda-python is not installed" in why

    class NoLibcuda(FakeDriver):
        def cuInit(self, flags):
            raise RuntimeError("Failed to dlopen libcuda.so.1")

    for driver, expected in [(NoLibcuda(), "no CUDA driver"),
                             (FakeDriver(init_result=100), "CUDA_ERROR_NO_DEVICE"),
                             (FakeDriver(device_count=0), "sees 0 device(s)"),
                             (FakeDriver(init_result=1), "CUDA_ERROR_INVALID_VALUE")]:
        monkeypatch.setattr(rt, "driver_module", lambda d=driver: d)
        ok, why = rt.available()
        assert not ok and expected in why, why
    monkeypatch.setattr(rt, "driver_module", lambda: FakeDriver())
    assert rt.available() == (True, "1 CUDA device(s), driver API 13.0")


def test_cuda_error_names_the_call_the_error_and_the_log(fake: FakeDriver) -> None:
    err = rt.CudaError.from_result("cuModuleLoadDataEx", 218, log="line 3; error : bad\n")
    assert isinstance(err, HloError)
    assert str(err) == ("error: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (code 218): "
                        "a PTX JIT compilation failed\nline 3; error : bad")
    assert (err.call, err.code, err.name, err.log) == ("cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX",
                                                       "line 3; error : bad\n")


def test_error_name_falls_back_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoLibcuda(FakeDriver):
        def cuGetErrorName(self, res):
            raise RuntimeError("libcuda.so.1 not found")

    monkeypatch.setattr(rt, "driver_module", lambda: NoLibcuda())
    assert rt.error_name(100) == ("CUDA_ERROR_NO_DEVICE", "")
    assert rt.error_name(12345) == ("CUresult 12345", "")
    monkeypatch.setattr(rt, "driver_module", _no_cuda_python)
    assert str(rt.CudaError.from_result("cuInit", 100)) == "error: cuInit: CUresult 100 (code 100)"


def test_check_unwraps_results(fake: FakeDriver) -> None:
    assert rt.check((0,)) is None
    assert rt.check((_Result.CUDA_SUCCESS, 7)) == 7
    assert rt.check((0, 1, 2)) == (1, 2)
    with pytest.raises(rt.CudaError, match=r"cuMemAlloc: CUDA_ERROR_INVALID_VALUE \(code 1\)") as info:
        rt.check((_Result.CUDA_ERROR_INVALID_VALUE, None), "cuMemAlloc")
    assert info.value.code == 1 and info.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_kernel_params_hold_each_argument(fake: FakeDriver) -> None:
    buf = rt.DeviceBuffer(None, 0xDEAD_BEEF_0000, 16)  # type: ignore[arg-type]
    params, holders = rt.kernel_params([buf, 0x1234, np.float32(2.5), np.uint32(7)])
    assert params.dtype == np.uint64 and len(params) == 4
    assert [int(p) for p in params] == [h.ctypes.data for h in holders]
    read = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_float, ctypes.c_uint32]
    assert [t.from_address(int(p)).value for t, p in zip(read, params)] == [0xDEAD_BEEF_0000, 0x1234, 2.5, 7]
    for bad in (1.5, "x", True):
        with pytest.raises(TypeError):
            rt.kernel_params([bad])


def test_launch_dimensions() -> None:
    assert rt._dims(7) == (7, 1, 1)
    assert rt._dims((4, 2)) == (4, 2, 1)
    for bad in ((), (1, 2, 3, 4), (0,), -1):
        with pytest.raises(ValueError):
            rt._dims(bad)


def test_device_lifecycle_on_fake_driver(fake: FakeDriver) -> None:
    with rt.CudaDevice() as dev:
        assert (dev.name, dev.arch, dev.sm_count) == ("Fake GPU", "sm_90", 132)
        x = np.arange(1000, dtype=np.float32)
        buf = dev.to_device(x)
        out = np.zeros_like(x)
        assert np.array_equal(dev.copy_to_host(buf, out), x)
        other = dev.alloc(buf.size)
        dev.memset(other, 0)
        dev.copy_device_to_device(other, buf, 400)
        back = dev.copy_to_host(other, np.empty_like(x))
        assert np.array_equal(back[:100], x[:100]) and not back[100:].any()
        with pytest.raises(ValueError):
            dev.copy_to_host(buf, np.zeros(2000, np.float32))
        assert dev.alloc(0).ptr == 0  # the driver refuses 0 bytes; we give a null buffer

        module = dev.load_module(AXPY_PTX)
        assert module.entries == ["axpy"] and module.info_log == "ptxas info : 10 regs"
        fn = module.function("axpy")
        assert fn is module.function("axpy") and fn.registers == 10
        fn.max_dynamic_shared(100 * 1024)
        with pytest.raises(rt.CudaError, match="MAX_DYNAMIC|cuFuncSetAttribute"):
            fn.max_dynamic_shared(1 << 20)
        with pytest.raises(rt.CudaError, match=r"(?s)CUDA_ERROR_NOT_FOUND.*kernels \(.entry\) in this module: axpy"):
            module.function("axpi")

        dev.launch(fn, 4, (256,), [buf, other, other.ptr, np.float32(2), np.uint32(1000)])
        grid, block, shared, params = fake.launches[-1]
        assert (grid, block, shared) == ((4, 1, 1), (256, 1, 1), 0)
        # more than 48 KiB of shared memory in all (10 B static here): the launch opts in first,
        # once per size it has not allowed yet
        fresh = rt.CudaFunction(module, "axpy", fn.handle)
        dev.launch(fresh, 1, 32, [buf], shared_bytes=48 * 1024)
        assert fresh.dynamic_shared_limit == 48 * 1024
        dev.launch(fresh, 1, 32, [buf], shared_bytes=16 * 1024)
        assert fresh.dynamic_shared_limit == 48 * 1024 and fake.launches[-1][2] == 16 * 1024
        small = rt.CudaFunction(module, "axpy", fn.handle)
        dev.launch(small, 1, 32, [buf], shared_bytes=1024)
        assert small.dynamic_shared_limit == 0  # within the default: no attribute set
        with pytest.raises(rt.CudaError, match="cuFuncSetAttribute"):
            dev.launch(rt.CudaFunction(module, "axpy", fn.handle), 1, 32, [buf], shared_bytes=1 << 20)
        assert isinstance(params, int) and params != 0
        times = dev.time_kernel(lambda: None, iterations=3)
        assert times == [0.25, 0.25, 0.25] and fake.calls.count("cuEventDestroy") == 6
        assert len(fake.memory) == 2 and len(fake.modules) == 1 and fake.contexts == 1
        buf.free()
        buf.free()  # idempotent
    assert not fake.memory and not fake.modules and fake.contexts == 0  # close() cleaned up


def test_jit_failure_carries_the_log_and_a_repro(fake: FakeDriver) -> None:
    with rt.CudaDevice() as dev:
        with pytest.raises(rt.CudaError) as info:
            dev.load_module(BROKEN_PTX)
    err = info.value
    assert err.log == FakeDriver.JIT_ERROR.decode()
    assert err.log in str(err) and "CUDA_ERROR_INVALID_PTX" in str(err)
    repro = next(line for line in str(err).splitlines() if line.startswith("reproduce with: ptxas -arch=sm_90 "))
    ptx_file = Path(repro.split()[-3])
    assert ptx_file.read_text() == BROKEN_PTX
    ptx_file.unlink()


def test_device_refuses_cleanly_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt, "driver_module", lambda: FakeDriver(init_result=100))
    with pytest.raises(rt.CudaError, match="no CUDA device"):
        rt.CudaDevice()


def test_graph_capture_and_replay_on_fake_driver(fake: FakeDriver) -> None:
    with rt.CudaDevice() as dev:
        fn = dev.load_module(AXPY_PTX).function("axpy")
        x = np.arange(64, dtype=np.float32)
        src, dst = dev.to_device(x), dev.alloc(x.nbytes)
        stream = dev.create_stream()

        def enqueue(s: rt.CudaStream) -> None:
            dev.launch(fn, 1, 64, [src, dst, dst, np.float32(1), np.uint32(64)], stream=s)
            dev.copy_device_to_device(dst, src, x.nbytes, stream=s)
        before = len(fake.launches)
        graph = dev.capture_graph(stream, enqueue)
        assert len(fake.launches) == before and graph.node_count == 2  # captured, not run
        assert not dev.copy_to_host(dst, np.empty_like(x)).any()
        graph.launch(stream)
        graph.launch(stream)
        stream.synchronize()
        assert len(fake.launches) == before + 2 and fake.launches[-1][:3] == ((1, 1, 1), (64, 1, 1), 0)
        assert np.array_equal(dev.copy_to_host(dst, np.empty_like(x)), x)  # the copy node ran

        # a synchronous call inside the capture: the driver refuses it; the capture is ended
        # and nothing is left behind
        def bad(s: rt.CudaStream) -> None:
            dev.launch(fn, 1, 64, [src, dst, dst, np.float32(1), np.uint32(64)], stream=s)
            dev.alloc(16)
        with pytest.raises(rt.CudaError, match="cuMemAlloc: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"):
            dev.capture_graph(stream, bad)
        assert fake.capturing is None and len(fake.graphs) == 1
        dev.capture_graph(stream, enqueue)  # the stream is usable again
        assert len(fake.graphs) == 2
    assert not fake.graphs and not fake.graph_execs and not fake.streams  # close() cleaned up


class _AnyKernelDriver(FakeDriver):
    """Every ``.entry`` of a loaded module is found (our compiled modules, not just axpy)."""

    def cuModuleGetFunction(self, module, name):
        return 0, f"{module}:{name.decode()}"


def test_module_graph_on_the_cuda_platform_with_a_fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executable's own path: recorded launches captured on our stream, parameters
    rewritten in place, no allocation or synchronous call inside the capture, the same
    launches as plain runs, and everything released with the graph and the device."""
    from hlo_compile.hlo import parse_module
    from hlo_compile.runtime import literals
    from hlo_compile.runtime.executable import compile_executable
    from hlo_compile.runtime.graph import ModuleGraph
    from test_module_graph import CHAIN

    fake = _AnyKernelDriver()
    monkeypatch.setattr(rt, "driver_module", lambda: fake)
    module = parse_module(CHAIN)
    exe = compile_executable(module, "cuda")
    dev = exe.platform.device
    try:
        args = literals.random_inputs(module, 0)
        exe.run(args)
        plain = list(zip(fake.functions, (l[:3] for l in fake.launches)))
        assert len(plain) == len(exe.plan.kernels) == 3
        graph = ModuleGraph(exe)
        graph.run(args)  # records, captures, replays once
        assert fake.calls.count("cuGraphLaunch") == 1 and graph.graph.node_count == 4  # 3 kernels + 1 copy
        assert list(zip(fake.functions, (l[:3] for l in fake.launches)))[len(plain):] == plain
        allocated = set(fake.memory)
        launches = len(fake.launches)
        for seed in (1, 2):
            graph.run(literals.random_inputs(module, seed))
        assert set(fake.memory) == allocated  # replays neither allocate nor free
        assert len(fake.launches) == launches + 2 * 3 and fake.calls.count("cuGraphLaunch") == 3
        graph.close()
        assert not fake.graphs and len(fake.memory) < len(allocated)
    finally:
        dev.close()
    assert not fake.memory and not fake.streams


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_test_ptx_is_what_ptxas_says(tmp_path: Path) -> None:
    """The hand-written PTX of the GPU tests: the good one assembles, the broken one does not."""
    good, bad = tmp_path / "axpy.ptx", tmp_path / "broken.ptx"
    good.write_text(AXPY_PTX)
    bad.write_text(BROKEN_PTX)
    ok = subprocess.run(["ptxas", "-arch=sm_80", str(good), "-o", str(tmp_path / "a.cubin")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    fail = subprocess.run(["ptxas", "-arch=sm_80", str(bad), "-o", str(tmp_path / "b.cubin")],
                          capture_output=True, text=True, timeout=60)
    assert fail.returncode != 0 and "%broken9" in fail.stderr


# ---------------------------------------------------------------------------------------------
# On a GPU.

@pytest.fixture(scope="module")
def device():
    ok, why = rt.available()
    if not ok:
        pytest.skip(why)
    with rt.CudaDevice() as dev:
        yield dev


@pytest.mark.gpu
def test_gpu_device_properties(device: rt.CudaDevice) -> None:
    assert device.name and device.arch.startswith("sm_") and device.sm_count > 0
    assert device.total_memory > 1 << 30
    print(f"{device}: {device.sm_count} SMs, {device.total_memory / 2**30:.1f} GiB, "
          f"memory clock {device.memory_clock_khz} kHz, bus {device.memory_bus_width_bits} bits")


@pytest.mark.gpu
def test_gpu_axpy_matches_numpy(device: rt.CudaDevice) -> None:
    n, a = 1 << 20, np.float32(1.5)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    with device.load_module(AXPY_PTX) as module:
        fn = module.function("axpy")
        assert fn.registers > 0 and fn.local_bytes == 0
        with device.to_device(x) as dx, device.to_device(y) as dy, device.alloc(4 * n) as dout:
            device.launch(fn, (n + 255) // 256, 256, [dx, dy, dout, a, np.uint32(n)])
            device.synchronize()
            out = device.copy_to_host(dout, np.empty(n, np.float32))
    expected = (a.astype(np.float64) * x + y).astype(np.float32)  # fma rounds once
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_broken_ptx_raises_with_jit_log(device: rt.CudaDevice) -> None:
    with pytest.raises(rt.CudaError) as info:
        device.load_module(BROKEN_PTX)
    err = info.value
    assert "%broken9" in err.log and err.log.strip() in str(err)
    assert "ptxas -arch=" in str(err)


@pytest.mark.gpu
def test_gpu_missing_kernel_lists_entries(device: rt.CudaDevice) -> None:
    with device.load_module(AXPY_PTX) as module:
        with pytest.raises(rt.CudaError, match="axpy"):
            module.function("no_such_kernel")


@pytest.mark.gpu
def test_gpu_device_to_device_copy_bandwidth(device: rt.CudaDevice) -> None:
    nbytes = 256 << 20
    with device.alloc(nbytes) as src, device.alloc(nbytes) as dst:
        device.memset(src, 7)
        device.memset(dst, 0)
        times = device.time_kernel(lambda: device.copy_device_to_device(dst, src), iterations=10)
        head = device.copy_to_host(dst, np.empty(1 << 20, np.uint8))
    assert (head == 7).all()
    ms = float(np.median(times))
    gbs = 2 * nbytes / (ms * 1e-3) / 1e9  # bytes read + written
    print(f"device-to-device copy of 256 MiB: {ms:.3f} ms, {gbs:.0f} GB/s (read + write)")
    assert ms > 0 and gbs > 0
