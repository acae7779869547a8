"""``rng-bit-generator`` bit for bit as XLA: the interpreter (``interpreter/rng_bits.py``), the
expansion into ordinary HLO (``passes/expand_rng_bit_generator.py``, run by the interpreter) and
the host platform (which runs that expansion) against outputs recorded once from XLA:CPU, for
Philox (``rng_philox`` and ``rng_default``, which is Philox on XLA:CPU and XLA:GPU) and Threefry
(``rng_three_fry``): scalars to rank 4, odd, unit, empty and large shapes, every element width,
``u64[2]``/``u64[3]`` states and counters that carry or wrap; a generator inside a while body
(state threaded through the iterations, as JAX emits it); the HLO of ``jax.random`` with the
``rbg`` and ``unsafe_rbg`` implementations. With jax importable, a live comparison against jax
as well (skipped without it)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.verifier import verify_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes import run_passes
from hlo_compile.passes.expand_rng_bit_generator import expand_rng_bit_generators
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable

M64 = 2**64
K2 = (0x0123456789ABCDEF, 0xFEDCBA9876543210)
K3 = (0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0)

# (algorithm without "rng_", state, element type, dimensions, new state after the key, bits).
# bits: the unsigned bits of every element (row-major) for small outputs; for larger ones the
# first 32 hex digits of the SHA-256 of their little-endian bytes (sub-byte types one byte per
# element, high bits clear) and the first three values. Recorded once with XLA:CPU (jax/jaxlib
# 0.10.2, JAX_ENABLE_X64=1) through /work/shared/tools/xla_ref.py; with jax importable,
# test_live_jax_matches_interpreter rechecks the cases jax can express.
XLA_CASES = [
    ('default', K2, 'u32', (), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('default', K2, 'u64', (), (0xfedcba9876543211,), (0xcfa390b51ec53d42,)),
    ('default', K2, 'u8', (), (0xfedcba9876543211,), (0x42,)),
    ('default', K2, 'u32', (1,), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('default', K2, 'u32', (7,), (0xfedcba9876543212,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98)),
    ('default', K2, 'u64', (7,), (0xfedcba9876543214,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb)),
    ('default', K2, 'u16', (7,), (0xfedcba9876543212,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98)),
    ('default', K2, 'u32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('default', K2, 'u8', (3, 5), (0xfedcba9876543214,), (0x42, 0xb5, 0x2, 0x17, 0x19, 0x7a, 0x98, 0x89, 0x49,
     0x67, 0xcf, 0x9b, 0xcb, 0x8a, 0xe5)),
    ('default', K2, 's32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('default', K2, 'f32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('default', K2, 'f16', (3, 5), (0xfedcba9876543214,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98, 0x9f89, 0xdd49, 0x9c67, 0xb2cf, 0x479b, 0xbecb, 0xfd8a, 0x66e5)),
    ('default', K2, 'bf16', (3, 5), (0xfedcba9876543214,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98, 0x9f89, 0xdd49, 0x9c67, 0xb2cf, 0x479b, 0xbecb, 0xfd8a, 0x66e5)),
    ('default', K2, 's64', (3, 5), (0xfedcba9876543218,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb,
     0xa8e9b0f4a07766e5, 0x60e01ae975a5e1a4, 0x502a8e45b8d04f1d, 0x1a375911149f9524, 0x558e2da937bfa74,
     0x73bcd7f11e15cf2b, 0xc78f70ac882da2f8, 0x20963ebf79fb638d)),
    ('default', K2, 'f64', (3, 5), (0xfedcba9876543218,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb,
     0xa8e9b0f4a07766e5, 0x60e01ae975a5e1a4, 0x502a8e45b8d04f1d, 0x1a375911149f9524, 0x558e2da937bfa74,
     0x73bcd7f11e15cf2b, 0xc78f70ac882da2f8, 0x20963ebf79fb638d)),
    ('default', K2, 's8', (3, 5), (0xfedcba9876543214,), (0x42, 0xb5, 0x2, 0x17, 0x19, 0x7a, 0x98, 0x89, 0x49,
     0x67, 0xcf, 0x9b, 0xcb, 0x8a, 0xe5)),
    ('default', K2, 'u4', (3, 5), (0xfedcba9876543214,), (0x2, 0x5, 0x2, 0x7, 0x9, 0xa, 0x8, 0x9, 0x9, 0x7, 0xf,
     0xb, 0xb, 0xa, 0x5)),
    ('default', K2, 's4', (3, 5), (0xfedcba9876543214,), (0x2, 0x5, 0x2, 0x7, 0x9, 0xa, 0x8, 0x9, 0x9, 0x7, 0xf,
     0xb, 0xb, 0xa, 0x5)),
    ('default', K2, 'u32', (4, 6), (0xfedcba9876543216,), ('3e21407d1dcc9bcd280a6d99bf0cc0af', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('default', K2, 'u32', (5, 3, 7), (0xfedcba987654322b,), ('39d2209aad568de1e70d5846c2bb9858', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('default', K2, 'u32', (1, 1, 1, 1), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('default', K2, 'u32', (2, 3, 5, 7), (0xfedcba9876543245,), ('81f9b074a06f9c8a350b1081aab1ca54',
     (0x1ec53d42, 0xcfa390b5, 0xf2235702))),
    ('default', K2, 'u64', (2, 3, 5, 7), (0xfedcba9876543279,), ('da07f28ba20340d7d49cbc324b42fc19',
     (0xcfa390b51ec53d42, 0xe71ff917f2235702, 0xd682777acb472319))),
    ('default', K2, 'u16', (2, 3, 5, 7), (0xfedcba9876543245,), ('5f671527f13691b0a000a65fa2d9607b', (0x3d42,
     0x90b5, 0x5702))),
    ('default', K2, 'u32', (1024, 513), (0xfedcba9876563310,), ('c032fd5e806f29aa1cb1bd956d410a88', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('default', K2, 'u64', (33, 65), (0xfedcba9876543641,), ('ea79fb0446a22260643e478bdbf900ac',
     (0xcfa390b51ec53d42, 0xe71ff917f2235702, 0xd682777acb472319))),
    ('default', K2, 'u32', (0,), (0xfedcba9876543210,), ()),
    ('default', K2, 'f32', (3, 0), (0xfedcba9876543210,), ()),
    ('philox', K2, 'u32', (), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('philox', K2, 'u64', (), (0xfedcba9876543211,), (0xcfa390b51ec53d42,)),
    ('philox', K2, 'u8', (), (0xfedcba9876543211,), (0x42,)),
    ('philox', K2, 'u32', (1,), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('philox', K2, 'u32', (7,), (0xfedcba9876543212,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98)),
    ('philox', K2, 'u64', (7,), (0xfedcba9876543214,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb)),
    ('philox', K2, 'u16', (7,), (0xfedcba9876543212,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98)),
    ('philox', K2, 'u32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('philox', K2, 'u8', (3, 5), (0xfedcba9876543214,), (0x42, 0xb5, 0x2, 0x17, 0x19, 0x7a, 0x98, 0x89, 0x49,
     0x67, 0xcf, 0x9b, 0xcb, 0x8a, 0xe5)),
    ('philox', K2, 's32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('philox', K2, 'f32', (3, 5), (0xfedcba9876543214,), (0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917,
     0xcb472319, 0xd682777a, 0xa09c7b98, 0x304e9f89, 0x9f63dd49, 0x3e1b9c67, 0x5d43b2cf, 0x1ece479b, 0x7a29becb,
     0xb70bfd8a, 0xa07766e5)),
    ('philox', K2, 'f16', (3, 5), (0xfedcba9876543214,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98, 0x9f89, 0xdd49, 0x9c67, 0xb2cf, 0x479b, 0xbecb, 0xfd8a, 0x66e5)),
    ('philox', K2, 'bf16', (3, 5), (0xfedcba9876543214,), (0x3d42, 0x90b5, 0x5702, 0xf917, 0x2319, 0x777a,
     0x7b98, 0x9f89, 0xdd49, 0x9c67, 0xb2cf, 0x479b, 0xbecb, 0xfd8a, 0x66e5)),
    ('philox', K2, 's64', (3, 5), (0xfedcba9876543218,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb,
     0xa8e9b0f4a07766e5, 0x60e01ae975a5e1a4, 0x502a8e45b8d04f1d, 0x1a375911149f9524, 0x558e2da937bfa74,
     0x73bcd7f11e15cf2b, 0xc78f70ac882da2f8, 0x20963ebf79fb638d)),
    ('philox', K2, 'f64', (3, 5), (0xfedcba9876543218,), (0xcfa390b51ec53d42, 0xe71ff917f2235702,
     0xd682777acb472319, 0x304e9f89a09c7b98, 0x3e1b9c679f63dd49, 0x1ece479b5d43b2cf, 0xb70bfd8a7a29becb,
     0xa8e9b0f4a07766e5, 0x60e01ae975a5e1a4, 0x502a8e45b8d04f1d, 0x1a375911149f9524, 0x558e2da937bfa74,
     0x73bcd7f11e15cf2b, 0xc78f70ac882da2f8, 0x20963ebf79fb638d)),
    ('philox', K2, 's8', (3, 5), (0xfedcba9876543214,), (0x42, 0xb5, 0x2, 0x17, 0x19, 0x7a, 0x98, 0x89, 0x49,
     0x67, 0xcf, 0x9b, 0xcb, 0x8a, 0xe5)),
    ('philox', K2, 'u4', (3, 5), (0xfedcba9876543214,), (0x2, 0x5, 0x2, 0x7, 0x9, 0xa, 0x8, 0x9, 0x9, 0x7, 0xf,
     0xb, 0xb, 0xa, 0x5)),
    ('philox', K2, 's4', (3, 5), (0xfedcba9876543214,), (0x2, 0x5, 0x2, 0x7, 0x9, 0xa, 0x8, 0x9, 0x9, 0x7, 0xf,
     0xb, 0xb, 0xa, 0x5)),
    ('philox', K2, 'u32', (4, 6), (0xfedcba9876543216,), ('3e21407d1dcc9bcd280a6d99bf0cc0af', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('philox', K2, 'u32', (5, 3, 7), (0xfedcba987654322b,), ('39d2209aad568de1e70d5846c2bb9858', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('philox', K2, 'u32', (1, 1, 1, 1), (0xfedcba9876543211,), (0x1ec53d42,)),
    ('philox', K2, 'u32', (2, 3, 5, 7), (0xfedcba9876543245,), ('81f9b074a06f9c8a350b1081aab1ca54', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('philox', K2, 'u64', (2, 3, 5, 7), (0xfedcba9876543279,), ('da07f28ba20340d7d49cbc324b42fc19',
     (0xcfa390b51ec53d42, 0xe71ff917f2235702, 0xd682777acb472319))),
    ('philox', K2, 'u16', (2, 3, 5, 7), (0xfedcba9876543245,), ('5f671527f13691b0a000a65fa2d9607b', (0x3d42,
     0x90b5, 0x5702))),
    ('philox', K2, 'u32', (1024, 513), (0xfedcba9876563310,), ('c032fd5e806f29aa1cb1bd956d410a88', (0x1ec53d42,
     0xcfa390b5, 0xf2235702))),
    ('philox', K2, 'u64', (33, 65), (0xfedcba9876543641,), ('ea79fb0446a22260643e478bdbf900ac',
     (0xcfa390b51ec53d42, 0xe71ff917f2235702, 0xd682777acb472319))),
    ('philox', K2, 'u32', (0,), (0xfedcba9876543210,), ()),
    ('philox', K2, 'f32', (3, 0), (0xfedcba9876543210,), ()),
    ('three_fry', K2, 'u32', (), (0xfedcba9876543211,), (0xaed4a37f,)),
    ('three_fry', K2, 'u64', (), (0xfedcba9876543211,), (0x1130d111aed4a37f,)),
    ('three_fry', K2, 'u8', (), (0xfedcba9876543211,), (0x7f,)),
    ('three_fry', K2, 'u32', (1,), (0xfedcba9876543211,), (0xaed4a37f,)),
    ('three_fry', K2, 'u32', (7,), (0xfedcba9876543214,), (0xaed4a37f, 0x1130d111, 0xc3cc4d02, 0x798e402e,
     0xaee5264e, 0xb089da7a, 0x49b105a8)),
    ('three_fry', K2, 'u64', (7,), (0xfedcba9876543217,), (0x1130d111aed4a37f, 0x798e402ec3cc4d02,
     0xb089da7aaee5264e, 0xaf0a8d9949b105a8, 0xdde94182e8e52210, 0xdd188ee6f0a39a78, 0x403dbb94e2a77238)),
    ('three_fry', K2, 'u16', (7,), (0xfedcba9876543214,), (0xa37f, 0xd111, 0x4d02, 0x402e, 0x264e, 0xda7a,
     0x5a8)),
    ('three_fry', K2, 'u32', (3, 5), (0xfedcba9876543219,), (0xaed4a37f, 0x1130d111, 0xc3cc4d02, 0x798e402e,
     0xaee5264e, 0x49b105a8, 0xaf0a8d99, 0xe8e52210, 0xdde94182, 0xf0a39a78, 0xe2a77238, 0x403dbb94, 0xace8e6a6,
     0xc3dc607f, 0x56cf7af2)),
    ('three_fry', K2, 'u8', (3, 5), (0xfedcba9876543219,), (0x7f, 0x11, 0x2, 0x2e, 0x4e, 0xa8, 0x99, 0x10, 0x82,
     0x78, 0x38, 0x94, 0xa6, 0x7f, 0xf2)),
    ('three_fry', K2, 's32', (3, 5), (0xfedcba9876543219,), (0xaed4a37f, 0x1130d111, 0xc3cc4d02, 0x798e402e,
     0xaee5264e, 0x49b105a8, 0xaf0a8d99, 0xe8e52210, 0xdde94182, 0xf0a39a78, 0xe2a77238, 0x403dbb94, 0xace8e6a6,
     0xc3dc607f, 0x56cf7af2)),
    ('three_fry', K2, 'f32', (3, 5), (0xfedcba9876543219,), (0xaed4a37f, 0x1130d111, 0xc3cc4d02, 0x798e402e,
     0xaee5264e, 0x49b105a8, 0xaf0a8d99, 0xe8e52210, 0xdde94182, 0xf0a39a78, 0xe2a77238, 0x403dbb94, 0xace8e6a6,
     0xc3dc607f, 0x56cf7af2)),
    ('three_fry', K2, 'f16', (3, 5), (0xfedcba9876543219,), (0xa37f, 0xd111, 0x4d02, 0x402e, 0x264e, 0x5a8,
     0x8d99, 0x2210, 0x4182, 0x9a78, 0x7238, 0xbb94, 0xe6a6, 0x607f, 0x7af2)),
    ('three_fry', K2, 'bf16', (3, 5), (0xfedcba9876543219,), (0xa37f, 0xd111, 0x4d02, 0x402e, 0x264e, 0x5a8,
     0x8d99, 0x2210, 0x4182, 0x9a78, 0x7238, 0xbb94, 0xe6a6, 0x607f, 0x7af2)),
    ('three_fry', K2, 's64', (3, 5), (0xfedcba987654321f,), (0x1130d111aed4a37f, 0x798e402ec3cc4d02,
     0xb089da7aaee5264e, 0xaf0a8d9949b105a8, 0xdde94182e8e52210, 0xdd188ee6f0a39a78, 0x403dbb94e2a77238,
     0xc3dc607face8e6a6, 0x865bc44256cf7af2, 0xdec05b52aec69f6e, 0x83c5c5d844496796, 0x4050f5ff99e634b6,
     0x4278e75ae9d06f9f, 0xbbec2cd05895c990, 0x8246145b8cebde72)),
    ('three_fry', K2, 'f64', (3, 5), (0xfedcba987654321f,), (0x1130d111aed4a37f, 0x798e402ec3cc4d02,
     0xb089da7aaee5264e, 0xaf0a8d9949b105a8, 0xdde94182e8e52210, 0xdd188ee6f0a39a78, 0x403dbb94e2a77238,
     0xc3dc607face8e6a6, 0x865bc44256cf7af2, 0xdec05b52aec69f6e, 0x83c5c5d844496796, 0x4050f5ff99e634b6,
     0x4278e75ae9d06f9f, 0xbbec2cd05895c990, 0x8246145b8cebde72)),
    ('three_fry', K2, 's8', (3, 5), (0xfedcba9876543219,), (0x7f, 0x11, 0x2, 0x2e, 0x4e, 0xa8, 0x99, 0x10, 0x82,
     0x78, 0x38, 0x94, 0xa6, 0x7f, 0xf2)),
    ('three_fry', K2, 'u4', (3, 5), (0xfedcba9876543219,), (0xf, 0x1, 0x2, 0xe, 0xe, 0x8, 0x9, 0x0, 0x2, 0x8,
     0x8, 0x4, 0x6, 0xf, 0x2)),
    ('three_fry', K2, 's4', (3, 5), (0xfedcba9876543219,), (0xf, 0x1, 0x2, 0xe, 0xe, 0x8, 0x9, 0x0, 0x2, 0x8,
     0x8, 0x4, 0x6, 0xf, 0x2)),
    ('three_fry', K2, 'u32', (4, 6), (0xfedcba987654321c,), ('8442aa9037485d6ef1f3527bcec4a0b7', (0xaed4a37f,
     0xc3cc4d02, 0xaee5264e))),
    ('three_fry', K2, 'u32', (5, 3, 7), (0xfedcba987654324c,), ('d9f7f47222b5a13517498bde68ecdf25', (0xaed4a37f,
     0x1130d111, 0xc3cc4d02))),
    ('three_fry', K2, 'u32', (1, 1, 1, 1), (0xfedcba9876543211,), (0xaed4a37f,)),
    ('three_fry', K2, 'u32', (2, 3, 5, 7), (0xfedcba9876543279,), ('d70c600f57904bb3f8c815d812f0bfae',
     (0xaed4a37f, 0xc3cc4d02, 0xaee5264e))),
    ('three_fry', K2, 'u64', (2, 3, 5, 7), (0xfedcba98765432e2,), ('3b082fb37d17b6872cb5da43b920c291',
     (0x1130d111aed4a37f, 0x798e402ec3cc4d02, 0xb089da7aaee5264e))),
    ('three_fry', K2, 'u16', (2, 3, 5, 7), (0xfedcba9876543279,), ('1870a066df06a8ae5567cd082abc63f6', (0xa37f,
     0x4d02, 0x264e))),
    ('three_fry', K2, 'u32', (1024, 513), (0xfedcba9876583410,), ('7a431cde32bf50f039787b82b3882b01',
     (0xaed4a37f, 0xc3cc4d02, 0xaee5264e))),
    ('three_fry', K2, 'u64', (33, 65), (0xfedcba9876543a71,), ('b487c832f72c18093d0c41701d89e0a4',
     (0x1130d111aed4a37f, 0x798e402ec3cc4d02, 0xb089da7aaee5264e))),
    ('three_fry', K2, 'u32', (0,), (0xfedcba9876543210,), ()),
    ('three_fry', K2, 'f32', (3, 0), (0xfedcba9876543210,), ()),
    ('default', K3, 'u32', (7,), (0x13198a2e03707346, 0xa4093822299f31d0), (0xbe0cb026, 0x55bb4ead, 0x85079805,
     0x5e156c62, 0x66d07ece, 0x8608b616, 0x545e394f)),
    ('default', K3, 'u64', (3, 5), (0x13198a2e0370734c, 0xa4093822299f31d0), (0x55bb4eadbe0cb026,
     0x5e156c6285079805, 0x8608b61666d07ece, 0x29bb1114545e394f, 0x5b191de5cc89530a, 0xf8a6725c1567f379,
     0x16eba62af38e50ee, 0xea8d72791b012bd2, 0xf637a6880ef4d801, 0xfe38e0037f193f79, 0x48a5196d466cc223,
     0xf09422ac0268101, 0x151e66801ff09dd9, 0x73ebe2bbccb4ef48, 0xecdedff698b20dde)),
    ('default', K3, 'u8', (2, 3, 5, 7), (0x13198a2e03707379, 0xa4093822299f31d0),
     ('d012b0dc5bbcbd8abe0db6b4eaad9396', (0x26, 0xad, 0x5))),
    ('default', (0x7, 0xfffffffffffffffe), 'u32', (9,), (0x1,), (0x2b941499, 0x6b622e26, 0xf083080f, 0x83fcd9,
     0xe404ea31, 0xae9e750f, 0xf06e4c03, 0x33a71289, 0xa2221dce)),
    ('default', (0x7, 0xfffffffffffffffe), 'u64', (9,), (0x3,), (0x6b622e262b941499, 0x83fcd9f083080f,
     0xae9e750fe404ea31, 0x33a71289f06e4c03, 0x1d55ad4ca2221dce, 0x46b556140da7336f, 0x4fa3d97afbd6bae8,
     0x8c3391b6752b7046, 0x2f357c22b25be8ff)),
    ('default', (0x7, 0xfffffffffffffffd, 0xffffffffffffffff), 'u32', (13,), (0x1, 0x0), (0xeb3d1e21,
     0x9f7e1bc2, 0x281c19c4, 0x46ab0211, 0x2761ca5a, 0x1ebd3e7a, 0x113e5b48, 0xd47c9e18, 0xb6882757, 0x977462bb,
     0x12280d07, 0x878b9d4e, 0xf4607a2d)),
    ('philox', K3, 'u32', (7,), (0x13198a2e03707346, 0xa4093822299f31d0), (0xbe0cb026, 0x55bb4ead, 0x85079805,
     0x5e156c62, 0x66d07ece, 0x8608b616, 0x545e394f)),
    ('philox', K3, 'u64', (3, 5), (0x13198a2e0370734c, 0xa4093822299f31d0), (0x55bb4eadbe0cb026,
     0x5e156c6285079805, 0x8608b61666d07ece, 0x29bb1114545e394f, 0x5b191de5cc89530a, 0xf8a6725c1567f379,
     0x16eba62af38e50ee, 0xea8d72791b012bd2, 0xf637a6880ef4d801, 0xfe38e0037f193f79, 0x48a5196d466cc223,
     0xf09422ac0268101, 0x151e66801ff09dd9, 0x73ebe2bbccb4ef48, 0xecdedff698b20dde)),
    ('philox', K3, 'u8', (2, 3, 5, 7), (0x13198a2e03707379, 0xa4093822299f31d0),
     ('d012b0dc5bbcbd8abe0db6b4eaad9396', (0x26, 0xad, 0x5))),
    ('philox', (0x7, 0xfffffffffffffffe), 'u32', (9,), (0x1,), (0x2b941499, 0x6b622e26, 0xf083080f, 0x83fcd9,
     0xe404ea31, 0xae9e750f, 0xf06e4c03, 0x33a71289, 0xa2221dce)),
    ('philox', (0x7, 0xfffffffffffffffe), 'u64', (9,), (0x3,), (0x6b622e262b941499, 0x83fcd9f083080f,
     0xae9e750fe404ea31, 0x33a71289f06e4c03, 0x1d55ad4ca2221dce, 0x46b556140da7336f, 0x4fa3d97afbd6bae8,
     0x8c3391b6752b7046, 0x2f357c22b25be8ff)),
    ('philox', (0x7, 0xfffffffffffffffd, 0xffffffffffffffff), 'u32', (13,), (0x1, 0x0), (0xeb3d1e21, 0x9f7e1bc2,
     0x281c19c4, 0x46ab0211, 0x2761ca5a, 0x1ebd3e7a, 0x113e5b48, 0xd47c9e18, 0xb6882757, 0x977462bb, 0x12280d07,
     0x878b9d4e, 0xf4607a2d)),
    ('three_fry', (0x5, 0xfffffffffffffffd), 'u32', (3, 5), (0x6,), (0xb46980bb, 0x24a479d5, 0x4419ab4f,
     0xe73f2f1, 0xe39b2319, 0x5338d363, 0x12d488db, 0x97aff55e, 0x7adc7043, 0x14d7f28b, 0xad45fd60, 0x59c279ba,
     0xc817b2df, 0x824287d6, 0x25decbc8)),
    ('three_fry', (0x5, 0xfffffffffffffffd), 'u64', (4,), (0x1,), (0x24a479d5b46980bb, 0xe73f2f14419ab4f,
     0x4f19f28fe39b2319, 0x12d488db5338d363)),
]


def _case_id(case) -> str:
    alg, state, et, dims = case[:4]
    name = {K2: "K2", K3: "K3"}.get(state, "x".join(hex(v)[2:6] for v in state))
    return f"{alg}-{name}-{et}[{','.join(map(str, dims))}]"


def _module(alg: str, state_size: int, et: str, dims) -> str:
    st = f"u64[{state_size}]"
    return f"""HloModule rbg
ENTRY e {{
  k = {st} parameter(0)
  ROOT r = ({st}, {et}[{','.join(map(str, dims))}]) rng-bit-generator(k), algorithm=rng_{alg}
}}
"""


def _bits(x: np.ndarray, et: str) -> np.ndarray:
    """The unsigned bits of ``x`` (sub-byte types: the low bits of each byte)."""
    x = np.array(x, order="C")
    u = x.view(f"u{x.dtype.itemsize}")
    width = {"u4": 4, "s4": 4, "u2": 2, "s2": 2}.get(et)
    return u & np.array((1 << width) - 1, u.dtype) if width else u


def _mismatch(case, new_state, bits) -> str | None:
    """None when (new_state, bits) are what XLA gave for ``case``, else what differs."""
    alg, state, et, dims, tail, expect = case
    got_state = tuple(int(v) for v in np.asarray(new_state))
    if got_state != (state[0], *tail):
        return f"new state {[hex(v) for v in got_state]}, XLA {[hex(v) for v in (state[0], *tail)]}"
    u = _bits(bits, et)
    if u.shape != tuple(dims):
        return f"shape {u.shape}, XLA {dims}"
    if expect and isinstance(expect[0], str):
        digest, first = expect
        got = (hashlib.sha256(u.tobytes()).hexdigest()[:32], tuple(int(v) for v in u.ravel()[:3]))
        return None if got == (digest, first) else f"digest/first values {got}, XLA {(digest, first)}"
    got_bits = tuple(int(v) for v in u.ravel())
    return None if got_bits == tuple(expect) else f"bits {[hex(v) for v in got_bits]}, XLA {[hex(v) for v in expect]}"


def _run_interpreter(case, state=None):
    alg, st, et, dims = case[:4]
    module = parse_module(_module(alg, len(st), et, dims))
    return evaluate_module(module, [np.array(st if state is None else state, np.uint64)])


def _run_host(text: str, args):
    exe = compile_executable(parse_module(text), "host", CompileOptions())
    return literals.flatten(exe.run(args))


@pytest.mark.parametrize("case", XLA_CASES, ids=_case_id)
def test_interpreter_matches_xla(case):
    new_state, bits = _run_interpreter(case)
    assert _mismatch(case, new_state, bits) is None, _mismatch(case, new_state, bits)


@pytest.mark.parametrize("case", XLA_CASES, ids=_case_id)
def test_expansion_matches_xla(case):
    """The pass's HLO, verified, printed, parsed back and run by the interpreter: every case
    checks the expansion itself, apart from the emitters (the host runs a spread below)."""
    alg, state, et, dims = case[:4]
    expanded = expand_rng_bit_generators(parse_module(_module(alg, len(state), et, dims)))
    verify_module(expanded)
    assert all(i.opcode != "rng-bit-generator" for i in expanded.entry.instructions)
    new_state, bits = evaluate_module(parse_module(expanded.to_text()), [np.array(state, np.uint64)])
    assert _mismatch(case, new_state, bits) is None, _mismatch(case, new_state, bits)


# the host compiles ~20 kernels per generator (1-3 s each case), so it runs a spread: every
# path of the expansion (Philox u32/u64/narrow/bitcast, u64[2]/u64[3] states, both carries;
# Threefry scalar, one element, split along an even or the largest odd dimension, u64, narrow;
# empty and large outputs); rng_default takes the Philox path by construction
HOST_CASES = [c for c in XLA_CASES if _case_id(c) in {
    "default-K2-u32[]", "default-K2-f32[3,5]", "default-K2-u32[1024,513]",
    "philox-K2-u32[7]", "philox-K2-u16[7]", "philox-K2-s8[3,5]", "philox-K2-u4[3,5]",
    "philox-K2-u64[2,3,5,7]", "philox-K2-u32[0]", "philox-K3-u64[3,5]", "philox-7xffff-u32[9]",
    "philox-7xffffxffff-u32[13]",
    "three_fry-K2-u32[]", "three_fry-K2-u32[1,1,1,1]", "three_fry-K2-u32[4,6]", "three_fry-K2-u32[5,3,7]",
    "three_fry-K2-u8[3,5]", "three_fry-K2-f64[3,5]", "three_fry-K2-u64[2,3,5,7]",
    "three_fry-K2-u32[1024,513]", "three_fry-K2-f32[3,0]", "three_fry-5xffff-u32[3,5]"}]


@pytest.mark.parametrize("case", HOST_CASES, ids=_case_id)
def test_host_matches_xla(case):
    alg, state, et, dims = case[:4]
    new_state, bits = _run_host(_module(alg, len(state), et, dims), [np.array(state, np.uint64)])
    assert _mismatch(case, new_state, bits) is None, _mismatch(case, new_state, bits)


def test_comparison_can_fail():
    """The check is not vacuous: another counter, a flipped bit or a wrong shape is caught, for
    inline and for digested expectations."""
    for case in (XLA_CASES[4], next(c for c in XLA_CASES if c[3] == (1024, 513))):
        new_state, bits = _run_interpreter(case)
        assert _mismatch(case, new_state, bits) is None
        moved = list(case[1])
        moved[1] = (moved[1] + 1) % M64
        assert _mismatch(case, *_run_interpreter(case, moved)) is not None
        flipped = np.array(bits)
        flipped.reshape(-1)[-1] ^= 1
        assert _mismatch(case, new_state, flipped) is not None
        assert _mismatch(case, new_state, bits.reshape(1, -1)) is not None
        assert _mismatch(case, np.array([case[1][0], 0], np.uint64), bits) is not None


@pytest.mark.parametrize("alg", ["rng_philox", "rng_three_fry"])
def test_bits_output_with_a_non_default_layout(alg):
    """The expansion builds row-major values; a bits output declared column-major gets a copy
    to its layout (the fuzzer found the host reading the row-major buffer as column-major)."""
    text = f"""HloModule m
ENTRY main {{
  s = u64[2]{{0}} parameter(0)
  r = (u64[2]{{0}}, u32[3,5]{{0,1}}) rng-bit-generator(s), algorithm={alg}
  b = u32[3,5]{{0,1}} get-tuple-element(r), index=1
  flat = u32[15]{{0}} bitcast(b)
  sum = u32[3,5]{{1,0}} add(b, b)
  ROOT t = (u32[15]{{0}}, u32[3,5]{{1,0}}) tuple(flat, sum)
}}"""
    state = [np.array([7, 2 ** 40 + 3], np.uint64)]
    want = literals.flatten(evaluate_module(parse_module(text), state))
    exe = compile_executable(parse_module(text), "host", CompileOptions())
    for got, expected in zip(literals.flatten(exe.run(state)), want):
        np.testing.assert_array_equal(got, expected)


def test_expansion_is_ordinary_hlo_everywhere():
    """After the passes no rng-bit-generator is left, in ENTRY, while bodies or fusions."""
    for text in (_module("default", 3, "u32", (3, 5)), _module("three_fry", 2, "u8", (7,)), WHILE_HLO):
        out = run_passes(parse_module(text))
        left = [i.name for c in out.computations for i in c.instructions if i.opcode == "rng-bit-generator"]
        assert not left


@pytest.mark.parametrize("alg,size,et", [("three_fry", 3, "u32"), ("philox", 4, "u32"), ("philox", 1, "u32"),
                                          ("default", 2, "pred"), ("philox", 2, "c64")])
def test_refused_like_xla(alg, size, et):
    """What XLA refuses (Threefry with a u64[3] state, Philox with u64[1]/u64[4], pred and
    complex outputs) is an unsupported-feature error, in the interpreter and in the pass."""
    text = _module(alg, size, et, (4,))
    with pytest.raises(HloUnsupportedError):
        evaluate_module(parse_module(text), [np.arange(size, dtype=np.uint64)])
    with pytest.raises(HloUnsupportedError):
        run_passes(parse_module(text))


# ---- a generator in a while body, as JAX's fori_loop over lax.rng_bit_generator emits it -------

WHILE_HLO = """HloModule rng_in_while

draw {
  key = u64[2]{0} parameter(0)
  acc = u32[3,5]{1,0} parameter(1)
  rbg = (u64[2]{0}, u32[3,5]{1,0}) rng-bit-generator(key), algorithm=rng_default
  next = u64[2]{0} get-tuple-element(rbg), index=0
  bits = u32[3,5]{1,0} get-tuple-element(rbg), index=1
  mixed = u32[3,5]{1,0} xor(acc, bits)
  ROOT out = (u64[2]{0}, u32[3,5]{1,0}) tuple(next, mixed)
}

body {
  p = (s32[], u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  k = u64[2]{0} get-tuple-element(p), index=1
  acc = u32[3,5]{1,0} get-tuple-element(p), index=2
  drawn = (u64[2]{0}, u32[3,5]{1,0}) call(k, acc), to_apply=draw
  k1 = u64[2]{0} get-tuple-element(drawn), index=0
  acc1 = u32[3,5]{1,0} get-tuple-element(drawn), index=1
  t = u64[2]{0} get-tuple-element(p), index=3
  sum = u8[7]{0} get-tuple-element(p), index=4
  tf = (u64[2]{0}, u8[7]{0}) rng-bit-generator(t), algorithm=rng_three_fry
  t1 = u64[2]{0} get-tuple-element(tf), index=0
  b8 = u8[7]{0} get-tuple-element(tf), index=1
  sum1 = u8[7]{0} add(sum, b8)
  ROOT r = (s32[], u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) tuple(i1, k1, acc1, t1, sum1)
}

cond {
  p = (s32[], u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  a = u64[2]{0} parameter(0)
  b = u64[2]{0} parameter(1)
  zero = s32[] constant(0)
  z32 = u32[] constant(0)
  acc = u32[3,5]{1,0} broadcast(z32), dimensions={}
  z8 = u8[] constant(0)
  sum = u8[7]{0} broadcast(z8), dimensions={}
  init = (s32[], u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) tuple(zero, a, acc, b, sum)
  w = (s32[], u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) while(init), condition=cond, body=body
  ka = u64[2]{0} get-tuple-element(w), index=1
  xa = u32[3,5]{1,0} get-tuple-element(w), index=2
  kb = u64[2]{0} get-tuple-element(w), index=3
  sb = u8[7]{0} get-tuple-element(w), index=4
  ROOT out = (u64[2]{0}, u32[3,5]{1,0}, u64[2]{0}, u8[7]{0}) tuple(ka, xa, kb, sb)
}
"""
WHILE_ARGS = [np.array(K2, np.uint64), np.array([0x9E3779B97F4A7C15, M64 - 30], np.uint64)]
# XLA:CPU's outputs: four Philox draws XOR-ed, four Threefry u8 draws summed, both final states
WHILE_XLA = [
    (0x0123456789ABCDEF, 0xFEDCBA9876543220),
    (0x8CFFF533, 0xB567BA30, 0x2624897D, 0x1E032624, 0x535278C6, 0xFBF942DA, 0x5793176F, 0x7C68A117,
     0x97EC241D, 0xEFBEE107, 0xCB1FC2ED, 0xA516D9F9, 0x115BF90C, 0x11880EC3, 0x68314834),
    (0x9E3779B97F4A7C15, 0xFFFFFFFFFFFFFFF2),
    (0x9A, 0xF9, 0xB1, 0xE2, 0x88, 0x14, 0x4C),
]


def _leaves_bits(values) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in _bits(x, "").ravel()) for x in values]


def test_while_body_interpreter():
    got = literals.flatten(evaluate_module(parse_module(WHILE_HLO), WHILE_ARGS))
    assert _leaves_bits(got) == WHILE_XLA


def test_while_body_host():
    assert _leaves_bits(_run_host(WHILE_HLO, WHILE_ARGS)) == WHILE_XLA


# ---- jax.random with the rbg and unsafe_rbg implementations ----------------------------------------

# jax.jit(f).lower(jnp.zeros(4, jnp.uint32)).as_text(dialect="hlo") with
#   key = jax.random.wrap_key_data(data, impl="rbg")
#   f = lambda data: (jax.random.bits(key, (4, 7), jnp.uint32), jax.random.uniform(key, (3, 5)))
RBG_HLO = """HloModule jit_rbg, entry_computation_layout={(u32[4]{0})->(u32[4,7]{1,0}, f32[3,5]{1,0})}

_uniform.1 {
  Arg_0.1 = u32[4]{0} parameter(0)
  rng_bit_generator.10 = u32[2,2]{1,0} reshape(Arg_0.1)
  rng_bit_generator.11 = u64[2]{0} bitcast-convert(rng_bit_generator.10)
  rng_bit_generator.12 = (u64[2]{0}, u32[3,5]{1,0}) rng-bit-generator(rng_bit_generator.11), algorithm=rng_default
  rng_bit_generator.13 = u64[2]{0} get-tuple-element(rng_bit_generator.12), index=0
  Arg_1.1 = f32[] parameter(1)
  broadcast_in_dim.2 = f32[1,1]{1,0} reshape(Arg_1.1)
  max.4 = f32[1,1]{1,0} broadcast(broadcast_in_dim.2), dimensions={0,1}
  max.5 = f32[] reshape(max.4)
  max.6 = f32[3,5]{1,0} broadcast(max.5), dimensions={}
  rng_bit_generator.14 = u32[3,5]{1,0} get-tuple-element(rng_bit_generator.12), index=1
  constant.7 = u32[] constant(9)
  broadcast.5 = u32[3,5]{1,0} broadcast(constant.7), dimensions={}
  shift_right_logical.1 = u32[3,5]{1,0} shift-right-logical(rng_bit_generator.14, broadcast.5)
  constant.6 = u32[] constant(1065353216)
  broadcast.4 = u32[3,5]{1,0} broadcast(constant.6), dimensions={}
  or.1 = u32[3,5]{1,0} or(shift_right_logical.1, broadcast.4)
  bitcast_convert_type.1 = f32[3,5]{1,0} bitcast-convert(or.1)
  constant.5 = f32[] constant(1)
  broadcast.3 = f32[3,5]{1,0} broadcast(constant.5), dimensions={}
  sub.2 = f32[3,5]{1,0} subtract(bitcast_convert_type.1, broadcast.3)
  Arg_2.1 = f32[] parameter(2)
  broadcast_in_dim.3 = f32[1,1]{1,0} reshape(Arg_2.1)
  sub.3 = f32[1,1]{1,0} subtract(broadcast_in_dim.3, broadcast_in_dim.2)
  mul.4 = f32[1,1]{1,0} broadcast(sub.3), dimensions={0,1}
  mul.5 = f32[] reshape(mul.4)
  mul.6 = f32[3,5]{1,0} broadcast(mul.5), dimensions={}
  mul.7 = f32[3,5]{1,0} multiply(sub.2, mul.6)
  add.4 = f32[1,1]{1,0} broadcast(broadcast_in_dim.2), dimensions={0,1}
  add.5 = f32[] reshape(add.4)
  add.6 = f32[3,5]{1,0} broadcast(add.5), dimensions={}
  add.7 = f32[3,5]{1,0} add(mul.7, add.6)
  ROOT max.7 = f32[3,5]{1,0} maximum(max.6, add.7)
}

ENTRY main.2 {
  data.1 = u32[4]{0} parameter(0)
  rng_bit_generator.15 = u32[2,2]{1,0} reshape(data.1)
  rng_bit_generator.16 = u64[2]{0} bitcast-convert(rng_bit_generator.15)
  rng_bit_generator.17 = (u64[2]{0}, u32[4,7]{1,0}) rng-bit-generator(rng_bit_generator.16), algorithm=rng_default
  rng_bit_generator.18 = u64[2]{0} get-tuple-element(rng_bit_generator.17), index=0
  rng_bit_generator.19 = u32[4,7]{1,0} get-tuple-element(rng_bit_generator.17), index=1
  constant.9 = f32[] constant(0)
  constant.8 = f32[] constant(1)
  jit__uniform_.1 = f32[3,5]{1,0} call(data.1, constant.9, constant.8), to_apply=_uniform.1
  ROOT tuple.1 = (u32[4,7]{1,0}, f32[3,5]{1,0}) tuple(rng_bit_generator.19, jit__uniform_.1)
}
"""
RBG_XLA = [
    (0x245DD6D3, 0xF4EB2799, 0xBF498E5, 0x9C8262BC, 0xDBB6AF72, 0xEBCF23B2, 0x4E2414B2, 0x638108B0,
     0x4FEA9332, 0xE8B0CCEA, 0x2D2B85B8, 0x41CF516B, 0x4B361462, 0xD82EACDF, 0xE358D435, 0xA020F0CE,
     0xF909E7C4, 0xA7C5B402, 0xC7235476, 0x752F654A, 0x5286CE6D, 0x674CB9CA, 0x1B316195, 0x88317EC8,
     0x60863651, 0x285231F4, 0x8BB52DEA, 0x7BF7E112),
    (0x3E117758, 0x3F74EB26, 0x3D3F4980, 0x3F1C8262, 0x3F5BB6AE, 0x3F6BCF22, 0x3E9C4828, 0x3EC70210,
     0x3E9FD524, 0x3F68B0CC, 0x3E34AE10, 0x3E839EA0, 0x3E966C28, 0x3F582EAC, 0x3F6358D4),
]


# the same with impl="unsafe_rbg" and
#   k1, k2 = jax.random.split(key)
#   f = lambda data: (jax.random.bits(k1, (9,), jnp.uint8), jax.random.uniform(k2, (2, 3)))
UNSAFE_RBG_HLO = """HloModule jit_unsafe, entry_computation_layout={(u32[4]{0})->(u8[9]{0}, f32[2,3]{1,0})}

_uniform.1 {
  Arg_0.1 = u32[4]{0} parameter(0)
  rng_bit_generator.14 = u32[2,2]{1,0} reshape(Arg_0.1)
  rng_bit_generator.15 = u64[2]{0} bitcast-convert(rng_bit_generator.14)
  rng_bit_generator.16 = (u64[2]{0}, u32[2,3]{1,0}) rng-bit-generator(rng_bit_generator.15), algorithm=rng_default
  rng_bit_generator.17 = u64[2]{0} get-tuple-element(rng_bit_generator.16), index=0
  Arg_1.1 = f32[] parameter(1)
  broadcast_in_dim.2 = f32[1,1]{1,0} reshape(Arg_1.1)
  max.4 = f32[1,1]{1,0} broadcast(broadcast_in_dim.2), dimensions={0,1}
  max.5 = f32[] reshape(max.4)
  max.6 = f32[2,3]{1,0} broadcast(max.5), dimensions={}
  rng_bit_generator.18 = u32[2,3]{1,0} get-tuple-element(rng_bit_generator.16), index=1
  constant.7 = u32[] constant(9)
  broadcast.5 = u32[2,3]{1,0} broadcast(constant.7), dimensions={}
  shift_right_logical.1 = u32[2,3]{1,0} shift-right-logical(rng_bit_generator.18, broadcast.5)
  constant.6 = u32[] constant(1065353216)
  broadcast.4 = u32[2,3]{1,0} broadcast(constant.6), dimensions={}
  or.1 = u32[2,3]{1,0} or(shift_right_logical.1, broadcast.4)
  bitcast_convert_type.1 = f32[2,3]{1,0} bitcast-convert(or.1)
  constant.5 = f32[] constant(1)
  broadcast.3 = f32[2,3]{1,0} broadcast(constant.5), dimensions={}
  sub.2 = f32[2,3]{1,0} subtract(bitcast_convert_type.1, broadcast.3)
  Arg_2.1 = f32[] parameter(2)
  broadcast_in_dim.3 = f32[1,1]{1,0} reshape(Arg_2.1)
  sub.3 = f32[1,1]{1,0} subtract(broadcast_in_dim.3, broadcast_in_dim.2)
  mul.4 = f32[1,1]{1,0} broadcast(sub.3), dimensions={0,1}
  mul.5 = f32[] reshape(mul.4)
  mul.6 = f32[2,3]{1,0} broadcast(mul.5), dimensions={}
  mul.7 = f32[2,3]{1,0} multiply(sub.2, mul.6)
  add.4 = f32[1,1]{1,0} broadcast(broadcast_in_dim.2), dimensions={0,1}
  add.5 = f32[] reshape(add.4)
  add.6 = f32[2,3]{1,0} broadcast(add.5), dimensions={}
  add.7 = f32[2,3]{1,0} add(mul.7, add.6)
  ROOT max.7 = f32[2,3]{1,0} maximum(max.6, add.7)
}

ENTRY main.2 {
  data.1 = u32[4]{0} parameter(0)
  rng_bit_generator.19 = u32[2,2]{1,0} reshape(data.1)
  rng_bit_generator.20 = u64[2]{0} bitcast-convert(rng_bit_generator.19)
  rng_bit_generator.21 = (u64[2]{0}, u32[20,4]{1,0}) rng-bit-generator(rng_bit_generator.20), algorithm=rng_default
  rng_bit_generator.22 = u64[2]{0} get-tuple-element(rng_bit_generator.21), index=0
  rng_bit_generator.23 = u32[20,4]{1,0} get-tuple-element(rng_bit_generator.21), index=1
  slice.3 = u32[2,4]{1,0} slice(rng_bit_generator.23), slice={[0:20:10], [0:4:1]}
  slice.4 = u32[1,4]{1,0} slice(slice.3), slice={[0:1], [0:4]}
  squeeze.3 = u32[2,2]{1,0} reshape(slice.4)
  rng_bit_generator.24 = u64[2]{0} bitcast-convert(squeeze.3)
  rng_bit_generator.25 = (u64[2]{0}, u8[9]{0}) rng-bit-generator(rng_bit_generator.24), algorithm=rng_default
  rng_bit_generator.26 = u64[2]{0} get-tuple-element(rng_bit_generator.25), index=0
  rng_bit_generator.27 = u8[9]{0} get-tuple-element(rng_bit_generator.25), index=1
  slice.5 = u32[1,4]{1,0} slice(slice.3), slice={[1:2], [0:4]}
  squeeze.2 = u32[4]{0} reshape(slice.5)
  constant.9 = f32[] constant(0)
  constant.8 = f32[] constant(1)
  jit__uniform_.1 = f32[2,3]{1,0} call(squeeze.2, constant.9, constant.8), to_apply=_uniform.1
  ROOT tuple.1 = (u8[9]{0}, f32[2,3]{1,0}) tuple(rng_bit_generator.27, jit__uniform_.1)
}
"""
UNSAFE_RBG_XLA = [
    (0x8, 0xA2, 0xB2, 0x1A, 0x5A, 0xD4, 0xC4, 0x8B, 0xD6),
    (0x3F66D09A, 0x3F2751E6, 0x3F0BF9BE, 0x3E800F38, 0x3EF3F094, 0x3E310918),
]


# a JAX key's data (u32[4]) and XLA:CPU's outputs (float results as their bits)
RBG_DATA = np.array([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], np.uint32)


@pytest.mark.parametrize("text,expected", [(RBG_HLO, RBG_XLA), (UNSAFE_RBG_HLO, UNSAFE_RBG_XLA)],
                         ids=["rbg", "unsafe_rbg"])
def test_jax_random_rbg(text, expected):
    got = literals.flatten(evaluate_module(parse_module(text), [RBG_DATA]))
    assert _leaves_bits(got) == expected
    assert _leaves_bits(_run_host(text, [RBG_DATA])) == expected


# ---- live, against jax (skipped when jax is not importable) -----------------------------------------

def _jax():
    jax = pytest.importorskip("jax")
    return jax


@pytest.mark.parametrize("alg", ["default", "philox", "three_fry"])
def test_live_jax_matches_interpreter(alg):
    """lax.rng_bit_generator with u64[2] keys (jax accepts no u64[3]) for every width jax
    allows, against the interpreter; and the recorded cases with such keys, against jax."""
    jax = _jax()
    import jax.numpy as jnp
    algorithm = {"default": jax.lax.RandomAlgorithm.RNG_DEFAULT, "philox": jax.lax.RandomAlgorithm.RNG_PHILOX,
                 "three_fry": jax.lax.RandomAlgorithm.RNG_THREE_FRY}[alg]
    dtypes = {"u8": jnp.uint8, "u16": jnp.uint16, "u32": jnp.uint32, "u64": jnp.uint64}
    rng = np.random.default_rng(7)
    cases = [(alg, tuple(int(v) for v in rng.integers(0, M64, 2, dtype=np.uint64)), et, dims)
             for et in dtypes for dims in [(), (6,), (7,), (4, 1, 3)]]
    cases += [c[:4] for c in XLA_CASES if c[0] == alg and len(c[1]) == 2 and c[2] in dtypes
              and len(c[3]) != 2]
    with jax.enable_x64(True):
        for case in cases:
            _, state, et, dims = case
            key, bits = jax.lax.rng_bit_generator(jnp.array(state, jnp.uint64), dims, dtypes[et], algorithm)
            new_state, ours = _run_interpreter(case)
            assert tuple(np.asarray(key)) == tuple(new_state), case
            assert np.asarray(bits).tobytes() == np.asarray(ours).tobytes() and np.shape(bits) == ours.shape, case
