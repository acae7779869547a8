"""The one table of the GPU architectures we compile for: for each, the PTX ISA it needs and
the device whose numbers the heuristics use. ``--arch`` is checked against it (light: no LLVM
is loaded), the NVPTX target writes its ``.version`` from it, and code generation plans for its
device."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .device_info import A100_SXM, B200, H100_SXM, DeviceInfo

MAX_PTX_ISA = 90  # the GPU image's driver (CUDA 13.0) JITs PTX up to ISA 9.0


@dataclass(frozen=True)
class Arch:
    min_ptx_isa: int            # the PTX ISA (times ten) the architecture first appears in: what LLVM 22 picks
    device: DeviceInfo | None   # whose numbers the launch heuristics and the cost model use (None: no plans)


# sm_70 and older are gone from CUDA 13's ptxas; sm_101 was renamed sm_110 in CUDA 13. sm_90/sm_90a
# plan as an H100 SXM; sm_80, sm_86 and sm_89 with A100 numbers; sm_100/sm_100a as a B200. The
# others have PTX only (the NVPTX target emits for them; nothing plans for them: not an --arch).
ARCHS: dict[str, Arch] = {
    "sm_75": Arch(63, None),
    "sm_80": Arch(70, A100_SXM),
    "sm_86": Arch(71, replace(A100_SXM, name="A100-like (sm_86)", arch="sm_86")),
    "sm_87": Arch(74, None), "sm_88": Arch(90, None),
    "sm_89": Arch(78, replace(A100_SXM, name="A100-like (sm_89)", arch="sm_89")),
    "sm_90": Arch(78, H100_SXM),
    "sm_90a": Arch(80, replace(H100_SXM, arch="sm_90a")),
    "sm_100": Arch(86, B200),
    "sm_100a": Arch(86, replace(B200, arch="sm_100a")),
    "sm_100f": Arch(88, None), "sm_101": Arch(86, None), "sm_101a": Arch(86, None),
    "sm_103": Arch(88, None), "sm_103a": Arch(88, None), "sm_110": Arch(90, None), "sm_110a": Arch(90, None),
    "sm_110f": Arch(90, None), "sm_120": Arch(87, None), "sm_120a": Arch(87, None), "sm_120f": Arch(88, None),
    "sm_121": Arch(88, None), "sm_121a": Arch(88, None), "sm_121f": Arch(88, None),
}
# what the NVPTX target emits PTX for: the driver JITs PTX up to MAX_PTX_ISA
PTX_ARCHS: tuple[str, ...] = tuple(a for a, v in ARCHS.items() if v.min_ptx_isa <= MAX_PTX_ISA)
# what --arch takes: PTX and a device to plan for
SUPPORTED_ARCHS: tuple[str, ...] = tuple(a for a in PTX_ARCHS if ARCHS[a].device is not None)


def device_for_arch(arch: str) -> DeviceInfo:
    """The device whose heuristics apply when compiling for ``arch`` (e.g. ``"sm_90"``)."""
    key = arch.strip().lower()
    device = ARCHS[key].device if key in ARCHS else None
    if device is None:
        raise ValueError(f"unknown GPU architecture '{arch}'; known: {', '.join(SUPPORTED_ARCHS)}")
    return device
