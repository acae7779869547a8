"""A thin CUDA runtime over ``cuda.bindings.driver``: load PTX, allocate, copy, launch, time.

Why the driver layer and not ``cuda.core``: the GPU machines run their own cuda-python, whose
version we do not pick, and the driver bindings are the part that stays stable across releases;
they also give us the JIT's error log and raw function attributes (shared/notes/nvptx.md §5).

cuda-python is imported lazily, inside functions, so that this module imports (and
:func:`available` answers) on machines without it. Every driver call goes through :func:`check`,
so a failure names the call and the driver's error name. Resources are released
deterministically: :class:`CudaDevice`, :class:`CudaModule` and :class:`DeviceBuffer` are
context managers, and closing the device frees whatever is still alive; nothing relies on
``__del__``.
"""
from __future__ import annotations

import ctypes
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hlo_compile.codegen.launch_limits import needs_dynamic_shared_optin
from hlo_compile.hlo.errors import HloError

JIT_LOG_BYTES = 64 * 1024
_CUDA_ERROR_NO_DEVICE = 100
_CUDA_ERROR_NOT_READY = 600


class CudaError(HloError):
    """A CUDA driver call failed; ``call``, ``code``/``name`` and the JIT ``log`` are kept."""

    def __init__(self, message: str, *, call: str = "", code: int | None = None,
                 name: str = "", log: str = ""):
        super().__init__(message)
        self.call, self.code, self.name, self.log = call, code, name, log

    @classmethod
    def from_result(cls, call: str, code: int, log: str = "", hint: str = "") -> CudaError:
        """Formats ``call: NAME (code N): description`` plus the log; works without a driver."""
        name, text = error_name(code)
        message = f"{call}: {name} (code {code})" + (f": {text}" if text else "")
        if hint:
            message += f"\n{hint}"
        if log:
            message += f"\n{log.rstrip()}"
        return cls(message, call=call, code=code, name=name, log=log)


def driver_module() -> Any:
    """``cuda.bindings.driver``, or ``cuda.cuda`` of old 12.x bindings; ImportError if neither."""
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def error_name(code: int) -> tuple[str, str]:
    """(name, description) of a CUresult. The driver answers when it can; without one (no
    libcuda, or no cuda-python at all) we still give the enum's name or the bare number."""
    try:
        d = driver_module()
        res = d.CUresult(code)
    except Exception:
        return f"CUresult {code}", ""
    try:
        err, name = d.cuGetErrorName(res)
        err2, text = d.cuGetErrorString(res)
        if int(err) == 0 and int(err2) == 0:
            return _text(name), _text(text)
    except Exception:  # libcuda missing: the bindings raise before calling anything
        pass
    return res.name, ""


def check(result: Any, call: str = "CUDA driver call") -> Any:
    """Unwraps a driver result ``(CUresult, *values)``: raises CudaError unless CUDA_SUCCESS,
    else returns None, the single value, or the tuple of values."""
    code, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(code) != 0:
        raise CudaError.from_result(call, int(code))
    return None if not values else values[0] if len(values) == 1 else tuple(values)


def _call(name: str, *args: Any) -> Any:
    return check(getattr(driver_module(), name)(*args), name)


def _text(raw: bytes | bytearray | str) -> str:
    raw = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
    return raw.split("\0", 1)[0]


def available(ordinal: int = 0) -> tuple[bool, str]:
    """Whether a CUDA driver and device ``ordinal`` can be used, and why not; never raises."""
    try:
        d = driver_module()
    except ImportError as e:
        return False, f"cuda-python is not installed (pip install cuda-python): {e}"
    try:
        code = int(d.cuInit(0)[0])
    except Exception as e:  # the bindings raise when libcuda.so cannot be loaded
        return False, f"no CUDA driver (libcuda could not be loaded): {e}"
    if code == _CUDA_ERROR_NO_DEVICE:
        return False, "no CUDA device: cuInit returned CUDA_ERROR_NO_DEVICE"
    try:
        if code != 0:
            raise CudaError.from_result("cuInit", code)
        count = _call("cuDeviceGetCount")
        if ordinal >= count:
            return False, f"no CUDA device {ordinal}: the driver sees {count} device(s)"
        version = _call("cuDriverGetVersion")
    except Exception as e:
        return False, f"the CUDA driver cannot be used: {e}"
    return True, f"{count} CUDA device(s), driver API {version // 1000}.{version % 1000 // 10}"


def kernel_params(args: Sequence[Any]) -> tuple[np.ndarray, list[np.ndarray]]:
    """cuLaunchKernel's ``void**``: a uint64 array of the addresses of one holder per argument.
    Buffers and int pointers hold a uint64; numpy scalars (np.int32(n)) hold their own type.
    The holders must stay alive until the launch returns (the driver copies them then)."""
    holders: list[np.ndarray] = []
    for a in args:
        if isinstance(a, DeviceBuffer):
            holders.append(np.array([a.ptr], dtype=np.uint64))
        elif isinstance(a, np.generic):
            holders.append(np.array([a]))
        elif isinstance(a, int) and not isinstance(a, bool):
            holders.append(np.array([a], dtype=np.uint64))
        else:
            raise TypeError(f"kernel argument {a!r}: expected a DeviceBuffer, an int pointer or a numpy scalar")
    return np.array([h.ctypes.data for h in holders], dtype=np.uint64), holders


def _dims(d: int | Sequence[int]) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(d)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise ValueError(f"launch dimensions must be 1 to 3 positive ints, got {d!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


class DeviceBuffer:
    """``size`` bytes of device memory at ``ptr``; ``free()`` is idempotent."""

    def __init__(self, device: CudaDevice, ptr: int, size: int):
        self.device, self.ptr, self.size = device, ptr, size

    def free(self) -> None:
        if self.ptr:
            self.device.forget(self)
            _call("cuMemFree", self.ptr)
            self.ptr = 0

    release = free  # what CudaDevice.close calls

    def __int__(self) -> int:
        return self.ptr

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr=0x{self.ptr:x}, size={self.size})"


def _node_count(graph: Any) -> int | None:
    """How many nodes a graph has (informational: None when the bindings answer otherwise)."""
    try:
        res = driver_module().cuGraphGetNodes(graph, 0)  # a null array: only the count
        return int(res[-1]) if int(res[0]) == 0 else None
    except Exception:
        return None


class CudaStream:
    """A stream of the device's context; ``destroy()`` is idempotent (closing the device
    destroys the streams still alive)."""

    def __init__(self, device: CudaDevice, handle: Any):
        self.device, self.handle = device, handle

    def synchronize(self) -> None:
        _call("cuStreamSynchronize", self.handle)

    def destroy(self) -> None:
        if self.handle is not None:
            self.device.forget(self)
            _call("cuStreamDestroy", self.handle)
            self.handle = None

    release = destroy  # what CudaDevice.close calls


class CudaEvent:
    """A CUDA event (timing disabled: only ordering); ``destroy()`` is idempotent (the driver
    releases a recorded event once its work completes)."""

    def __init__(self, device: CudaDevice, handle: Any):
        self.device, self.handle = device, handle

    def record(self, stream: CudaStream | None) -> None:
        """Mark what ``stream`` (None: the legacy stream) has queued so far."""
        _call("cuEventRecord", self.handle, stream.handle if stream is not None else 0)

    def query(self) -> bool:
        """Whether the work the event marks is complete (``cuEventQuery``: NOT_READY is False)."""
        code = int(driver_module().cuEventQuery(self.handle)[0])
        if code == _CUDA_ERROR_NOT_READY:
            return False
        if code != 0:
            raise CudaError.from_result("cuEventQuery", code)
        return True

    def destroy(self) -> None:
        if self.handle is not None:
            self.device.forget(self)
            _call("cuEventDestroy", self.handle)
            self.handle = None

    release = destroy  # what CudaDevice.close calls


class CudaGraph:
    """A captured and instantiated CUDA graph of ``node_count`` nodes (kernels and copies)."""

    def __init__(self, device: CudaDevice, graph: Any, executable: Any, node_count: int | None):
        self.device, self.graph, self.executable, self.node_count = device, graph, executable, node_count

    def launch(self, stream: CudaStream) -> None:
        """Queue one replay of the whole graph on ``stream`` (asynchronous)."""
        _call("cuGraphLaunch", self.executable, stream.handle)

    def destroy(self) -> None:
        if self.executable is not None:
            self.device.forget(self)
            _call("cuGraphExecDestroy", self.executable)
            _call("cuGraphDestroy", self.graph)
            self.executable = self.graph = None

    release = destroy  # what CudaDevice.close calls


class CudaFunction:
    """A kernel of a loaded module, with the attributes ptxas decided (registers, spills)."""

    def __init__(self, module: CudaModule, name: str, handle: Any):
        self.module, self.name, self.handle = module, name, handle
        self.dynamic_shared_limit = 0  # what max_dynamic_shared last allowed (0: the driver's default)
        self._dynamic_shared_checked = 0  # the largest dynamic shared size a launch was checked for

    def attribute(self, name: str) -> int:
        """``cuFuncGetAttribute`` by short name, e.g. ``"NUM_REGS"``."""
        attr = getattr(driver_module().CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(check(driver_module().cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({name})"))

    @property
    def registers(self) -> int:
        return self.attribute("NUM_REGS")

    @property
    def local_bytes(self) -> int:
        """Local memory per thread: non-zero means register spills (or a local array)."""
        return self.attribute("LOCAL_SIZE_BYTES")

    @property
    def shared_bytes(self) -> int:
        """Static shared memory; dynamic shared memory is given at launch."""
        return self.attribute("SHARED_SIZE_BYTES")

    @property
    def max_threads_per_block(self) -> int:
        return self.attribute("MAX_THREADS_PER_BLOCK")

    def max_dynamic_shared(self, nbytes: int) -> None:
        """Allows launches with more than 48 KiB of dynamic shared memory (opt-in per kernel)."""
        d = driver_module()
        attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(d.cuFuncSetAttribute(self.handle, attr, int(nbytes)), f"cuFuncSetAttribute({self.name})")
        self.dynamic_shared_limit = int(nbytes)

    def prepare_dynamic_shared(self, nbytes: int) -> None:
        """Before a launch with ``nbytes`` of dynamic shared memory: opt in where the total
        passes 48 KiB (``max_dynamic_shared``). The static size is asked of the driver once per
        new largest size, not at every launch."""
        if nbytes <= max(self._dynamic_shared_checked, self.dynamic_shared_limit):
            return
        if needs_dynamic_shared_optin(nbytes, self.shared_bytes):
            self.max_dynamic_shared(nbytes)
        self._dynamic_shared_checked = nbytes


class CudaModule:
    """A loaded PTX/cubin image; ``info_log`` is the JIT's verbose log (ptxas's usage lines)."""

    def __init__(self, handle: Any, entries: list[str], info_log: str):
        self.handle, self.entries, self.info_log = handle, entries, info_log
        self._functions: dict[str, CudaFunction] = {}
        self.device: CudaDevice | None = None

    def function(self, name: str) -> CudaFunction:
        if name not in self._functions:
            res = driver_module().cuModuleGetFunction(self.handle, name.encode())
            if int(res[0]) != 0:
                hint = f"kernels (.entry) in this module: {', '.join(self.entries) or 'none'}"
                raise CudaError.from_result(f"cuModuleGetFunction({name!r})", int(res[0]), hint=hint)
            self._functions[name] = CudaFunction(self, name, res[1])
        return self._functions[name]

    def unload(self) -> None:
        if self.handle is not None:
            if self.device is not None:
                self.device.forget(self)
            _call("cuModuleUnload", self.handle)
            self.handle, self._functions = None, {}

    release = unload  # what CudaDevice.close calls

    def __enter__(self) -> CudaModule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unload()


class CudaDevice:
    """One GPU through its primary context (retained, made current in this thread). ``close()``
    unloads modules, frees buffers still alive and releases the context."""

    def __init__(self, ordinal: int = 0):
        ok, why = available(ordinal)  # cuInit, and a clear reason when there is no GPU
        if not ok:
            raise CudaError(why, call="cuInit")
        d = driver_module()
        self.ordinal = ordinal
        self.handle = _call("cuDeviceGet", ordinal)
        self.context = _call("cuDevicePrimaryCtxRetain", self.handle)
        # what close() still has to release, by kind in the order it releases them
        self._live: dict[type, dict[int, Any]] = {CudaGraph: {}, CudaEvent: {}, CudaStream: {}, CudaModule: {},
                                                  DeviceBuffer: {}}
        try:
            self.make_current()
            self.name = _text(_call("cuDeviceGetName", 256, self.handle))
            self.compute_capability = (self.attribute("COMPUTE_CAPABILITY_MAJOR"),
                                       self.attribute("COMPUTE_CAPABILITY_MINOR"))
        except BaseException:
            check(d.cuDevicePrimaryCtxRelease(self.handle), "cuDevicePrimaryCtxRelease")
            raise

    def _track(self, resource: Any) -> None:
        self._live[type(resource)][id(resource)] = resource

    def forget(self, resource: Any) -> None:
        """Stop tracking a resource released on its own (``close`` then leaves it alone)."""
        self._live[type(resource)].pop(id(resource), None)

    def make_current(self) -> None:
        """The context is current per OS thread; call this first when using another thread."""
        _call("cuCtxSetCurrent", self.context)

    def attribute(self, name: str) -> int:
        """``cuDeviceGetAttribute`` by short name, e.g. ``"MULTIPROCESSOR_COUNT"``."""
        d = driver_module()
        attr = getattr(d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(check(d.cuDeviceGetAttribute(attr, self.handle), f"cuDeviceGetAttribute({name})"))

    def _optional_attribute(self, name: str) -> int | None:
        try:
            return self.attribute(name) or None
        except (AttributeError, CudaError):  # deprecated/removed in some driver versions
            return None

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability

    @property
    def sm_count(self) -> int:
        return self.attribute("MULTIPROCESSOR_COUNT")

    @property
    def total_memory(self) -> int:
        return int(_call("cuDeviceTotalMem", self.handle))

    @property
    def memory_clock_khz(self) -> int | None:
        return self._optional_attribute("MEMORY_CLOCK_RATE")

    @property
    def memory_bus_width_bits(self) -> int | None:
        return self._optional_attribute("GLOBAL_MEMORY_BUS_WIDTH")

    # -- modules -------------------------------------------------------------------------------
    def load_module(self, image: str | bytes) -> CudaModule:
        """Loads PTX (str) or a cubin/fatbin/PTX image (bytes), JIT-compiling PTX for this GPU.
        A failure raises CudaError carrying the JIT's error log and a ptxas command to rerun it."""
        d = driver_module()
        data = image.encode() if isinstance(image, str) else bytes(image)
        blob = ctypes.create_string_buffer(data)  # NUL-terminated, as PTX must be
        err_log, info_log = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
        o = d.CUjit_option
        opts = [o.CU_JIT_ERROR_LOG_BUFFER, o.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                o.CU_JIT_INFO_LOG_BUFFER, o.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, o.CU_JIT_LOG_VERBOSE]
        vals = [err_log, JIT_LOG_BYTES, info_log, JIT_LOG_BYTES, 1]
        res = d.cuModuleLoadDataEx(ctypes.addressof(blob), len(opts), opts, vals)
        text = data.decode("utf-8", "replace") if b".entry" in data else ""
        if int(res[0]) != 0:
            raise CudaError.from_result("cuModuleLoadDataEx", int(res[0]),
                                        log=_text(err_log), hint=self._repro_hint(data))
        module = CudaModule(res[1], re.findall(r"\.entry\s+([\w$.]+)", text), _text(info_log))
        module.device = self
        self._track(module)
        return module

    def _repro_hint(self, data: bytes) -> str:
        """Keeps the failing PTX in a temp file and says how to rerun ptxas on it (DESIGN §7)."""
        if b".target" not in data:
            return ""
        try:
            fd, path = tempfile.mkstemp(prefix="hlo_compile_jit_", suffix=".ptx")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError:
            return ""
        return f"reproduce with: ptxas -arch={self.arch} {path} -o /dev/null"

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        """Device memory; a 0-byte buffer has a null pointer (the driver refuses size 0)."""
        ptr = int(_call("cuMemAlloc", int(nbytes))) if nbytes > 0 else 0
        buf = DeviceBuffer(self, ptr, int(nbytes))
        if ptr:
            self._track(buf)
        return buf

    def to_device(self, array: np.ndarray) -> DeviceBuffer:
        host = np.ascontiguousarray(array)
        buf = self.alloc(host.nbytes)
        self.copy_into(buf, host)
        return buf

    def copy_to_host(self, buf: DeviceBuffer, out: np.ndarray) -> np.ndarray:
        """Fills ``out`` (C-contiguous, writable, at most ``buf.size`` bytes) and returns it."""
        if not (out.flags.c_contiguous and out.flags.writeable) or out.nbytes > buf.size:
            raise ValueError(f"copy_to_host: out must be a writable C-contiguous array of at most "
                             f"{buf.size} bytes, got {out.nbytes} bytes")
        if out.nbytes:
            _call("cuMemcpyDtoH", out.ctypes.data, buf.ptr, out.nbytes)
        return out

    def copy_into(self, buf: DeviceBuffer, array: np.ndarray) -> None:
        """Overwrite the start of an existing buffer with ``array``'s bytes (synchronous: the
        legacy stream, which waits for earlier work on blocking streams)."""
        host = np.ascontiguousarray(array)
        if host.nbytes > buf.size:
            raise ValueError(f"copy of {host.nbytes} bytes into a {buf.size}-byte buffer")
        if host.nbytes:
            _call("cuMemcpyHtoD", buf.ptr, host.ctypes.data, host.nbytes)

    def copy_device_to_device(self, dst: DeviceBuffer, src: DeviceBuffer, nbytes: int | None = None,
                              stream: CudaStream | None = None) -> None:
        """Synchronous on the legacy stream, or queued on ``stream`` (as stream capture needs)."""
        n = min(dst.size, src.size) if nbytes is None else int(nbytes)
        if n > dst.size or n > src.size:
            raise ValueError(f"copy of {n} bytes from a {src.size}-byte to a {dst.size}-byte buffer")
        if not n:
            return
        if stream is None:
            _call("cuMemcpyDtoD", dst.ptr, src.ptr, n)
        else:
            _call("cuMemcpyDtoDAsync", dst.ptr, src.ptr, n, stream.handle)

    def memset(self, buf: DeviceBuffer, value: int = 0, nbytes: int | None = None) -> None:
        """Sets bytes to ``value`` (0..255)."""
        n = buf.size if nbytes is None else min(int(nbytes), buf.size)
        if n:
            _call("cuMemsetD8", buf.ptr, int(value) & 0xFF, n)

    # -- execution -----------------------------------------------------------------------------
    def launch(self, function: CudaFunction, grid: int | Sequence[int], block: int | Sequence[int],
               args: Sequence[DeviceBuffer | int | np.generic], shared_bytes: int = 0,
               stream: Any = 0) -> None:
        """Asynchronous on ``stream`` (0: the legacy stream, or a :class:`CudaStream`); errors
        inside the kernel surface at the next sync."""
        if isinstance(stream, CudaStream):
            stream = stream.handle
        function.prepare_dynamic_shared(int(shared_bytes))  # over 48 KiB in all: opt in first
        params, holders = kernel_params(args)
        gx, gy, gz = _dims(grid)
        bx, by, bz = _dims(block)
        res = driver_module().cuLaunchKernel(function.handle, gx, gy, gz, bx, by, bz, int(shared_bytes),
                                             stream, params.ctypes.data if holders else 0, 0)
        check(res, f"cuLaunchKernel({function.name}, grid={(gx, gy, gz)}, block={(bx, by, bz)}, "
                   f"shared={shared_bytes})")

    def synchronize(self) -> None:
        _call("cuCtxSynchronize")

    # -- streams and graphs --------------------------------------------------------------------
    def create_stream(self, non_blocking: bool = False) -> CudaStream:
        """A blocking stream (``CU_STREAM_DEFAULT``): the legacy stream's synchronous copies
        still wait for its work, so downloads need no extra synchronisation. ``non_blocking``
        (``CU_STREAM_NON_BLOCKING``): no implicit ordering with the legacy stream at all, only
        the events it is told to wait for (async pairs: the overlap XLA scheduled)."""
        d = driver_module()
        flag = d.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else d.CUstream_flags.CU_STREAM_DEFAULT
        stream = CudaStream(self, _call("cuStreamCreate", int(flag)))
        self._track(stream)
        return stream

    def create_event(self) -> CudaEvent:
        """An event for ordering only (``CU_EVENT_DISABLE_TIMING``: cheaper to record and wait on)."""
        d = driver_module()
        event = CudaEvent(self, _call("cuEventCreate", int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)))
        self._track(event)
        return event

    def wait_event(self, stream: CudaStream | None, event: CudaEvent) -> None:
        """Work queued on ``stream`` (None: the legacy stream) from now on waits for ``event``
        (``cuStreamWaitEvent``; the host does not wait)."""
        _call("cuStreamWaitEvent", stream.handle if stream is not None else 0, event.handle, 0)

    def capture_graph(self, stream: CudaStream, enqueue: Callable[[CudaStream], None]) -> CudaGraph:
        """Capture what ``enqueue(stream)`` queues on ``stream`` into an instantiated graph.

        Thread-local capture mode: this thread may not allocate, free or copy synchronously
        until the capture ends (the driver invalidates the capture and says so), which is why
        callers allocate every buffer first. A failure ends the capture before raising."""
        d = driver_module()
        mode = int(d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        _call("cuStreamBeginCapture", stream.handle, mode)
        try:
            enqueue(stream)
        except BaseException:
            res = d.cuStreamEndCapture(stream.handle)
            if int(res[0]) == 0 and res[1] is not None:
                d.cuGraphDestroy(res[1])
            raise
        graph = _call("cuStreamEndCapture", stream.handle)
        try:
            executable = _call("cuGraphInstantiate", graph, 0)
        except BaseException:
            d.cuGraphDestroy(graph)
            raise
        result = CudaGraph(self, graph, executable, _node_count(graph))
        self._track(result)
        return result

    def time_kernel(self, fn: Callable[[], None], iterations: int = 10, warmup: int = 1,
                    stream: Any = 0) -> list[float]:
        """Milliseconds per call of ``fn`` (which enqueues work on ``stream``), measured by
        events around each call; one host sync at the end, so no host gap is timed."""
        d = driver_module()
        for _ in range(warmup):
            fn()
        if iterations <= 0:
            return []
        events: list[Any] = []
        try:
            for _ in range(2 * iterations):
                events.append(_call("cuEventCreate", int(d.CUevent_flags.CU_EVENT_DEFAULT)))
            for i in range(iterations):
                _call("cuEventRecord", events[2 * i], stream)
                fn()
                _call("cuEventRecord", events[2 * i + 1], stream)
            _call("cuEventSynchronize", events[-1])
            return [float(_call("cuEventElapsedTime", events[2 * i], events[2 * i + 1]))
                    for i in range(iterations)]
        finally:
            for e in events:
                d.cuEventDestroy(e)

    def close(self) -> None:
        """Unloads modules and frees buffers still alive, then releases the primary context."""
        if self.context is None:
            return
        try:
            self.make_current()
            for live in self._live.values():
                for resource in list(live.values()):
                    resource.release()
        finally:
            self.context = None
            _call("cuDevicePrimaryCtxRelease", self.handle)

    def __enter__(self) -> CudaDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CudaDevice({self.ordinal}: {self.name}, {self.arch})"
