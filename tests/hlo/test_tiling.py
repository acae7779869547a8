"""Tiled-layout arithmetic: the examples of XLA's tiled_layout.md, and properties."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_compile import parse_shape
from hlo_compile.hlo.shape import COMBINE_DIM, Layout, Shape, Tile
from hlo_compile.hlo.tiling import linear_index, logical_index, physical_permutation, physical_size


def _all_indices(shape: Shape):
    return itertools.product(*(range(d) for d in shape.dimensions))


# ---- documented examples -----------------------------------------------------------------

def test_doc_figure1_f32_3x5_tiled_2x2():
    s = parse_shape("f32[3,5]{1,0:T(2,2)}")
    assert s.linear_index((2, 3)) == 17
    # 2 x 3 tiles of 4 elements: the odd bounds are padded to whole tiles.
    assert s.physical_size() == 24
    # Element (2,3) is in tile (1,1), the 5th tile, at offset 1 inside it.
    assert linear_index(s, (0, 0)) == 0
    assert linear_index(s, (1, 1)) == 3
    assert linear_index(s, (0, 2)) == 4
    assert linear_index(s, (2, 4)) == 20


def test_doc_figure2_repeated_tiling_4x8():
    s = parse_shape("f32[4,8]{1,0:T(2,4)(2,1)}")
    expected = np.array([
        [0, 2, 4, 6, 8, 10, 12, 14],
        [1, 3, 5, 7, 9, 11, 13, 15],
        [16, 18, 20, 22, 24, 26, 28, 30],
        [17, 19, 21, 23, 25, 27, 29, 31],
    ])
    got = np.array([[s.linear_index((i, j)) for j in range(8)] for i in range(4)])
    np.testing.assert_array_equal(got, expected)
    assert s.physical_size() == 32
    np.testing.assert_array_equal(physical_permutation(s), expected.reshape(-1))


def test_doc_combined_dimensions():
    # (*,*,2,*,3) merges [2,7,8,11,10] into [112,110] and tiles that by (2,3).
    s = parse_shape("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    flat = parse_shape("f32[112,110]{1,0:T(2,3)}")
    assert s.physical_size() == flat.physical_size() == 56 * 37 * 6
    for e in [(0, 0, 0, 0, 0), (1, 6, 7, 10, 9), (1, 3, 5, 2, 4), (0, 1, 2, 3, 4)]:
        row = (e[0] * 7 + e[1]) * 8 + e[2]
        col = e[3] * 10 + e[4]
        assert s.linear_index(e) == flat.linear_index((row, col))
    assert s.linear_index((1, 6, 7, 10, 9)) == 12430


def test_untiled_layouts_follow_minor_to_major():
    row_major = parse_shape("f32[2,3]{1,0}")
    col_major = parse_shape("f32[2,3]{0,1}")
    assert row_major.linear_index((1, 2)) == 5
    assert col_major.linear_index((1, 2)) == 5
    assert col_major.linear_index((1, 0)) == 1
    assert col_major.linear_index((0, 1)) == 2
    assert physical_size(Shape.array("f32", ())) == 1


def test_tile_with_more_dims_than_shape_pads_major_dims():
    s = parse_shape("f32[5]{0:T(2,4)}")
    # Treated as [1,5] tiled by (2,4): 1 x 2 tiles of 8 slots.
    assert s.physical_size() == 16
    assert [s.linear_index((i,)) for i in range(5)] == [0, 1, 2, 3, 8]
    assert s.logical_index(4) is None  # row 1 of the first tile is padding


def test_tail_padding_alignment():
    s = parse_shape("f32[5]{0:L(4)}")
    assert s.physical_size() == 8
    assert s.logical_index(6) is None
    assert s.logical_index(4) == (4,)


def test_logical_index_reports_padding():
    s = parse_shape("f32[3,5]{1,0:T(2,2)}")
    assert s.logical_index(17) == (2, 3)
    assert s.logical_index(2) == (1, 0)
    # Tile (0,2) holds column 4 only: its second column is padding.
    assert s.logical_index(9) is None
    # The last tile row covers row 2 only: row 3 does not exist.
    assert s.logical_index(22) is None
    with pytest.raises(ValueError):
        s.logical_index(24)


def test_bad_indices_raise():
    s = parse_shape("f32[3,5]{1,0:T(2,2)}")
    with pytest.raises(ValueError):
        s.linear_index((3, 0))
    with pytest.raises(ValueError):
        s.linear_index((1,))


# ---- properties --------------------------------------------------------------------------

@st.composite
def tiled_shapes(draw) -> Shape:
    rank = draw(st.integers(0, 3))
    dims = draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank))
    m2m = draw(st.permutations(list(range(rank))))
    tiles = []
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(1, 3))
        entries = draw(st.lists(st.one_of(st.integers(1, 4), st.just(COMBINE_DIM)), min_size=k, max_size=k))
        entries[-1] = draw(st.integers(1, 4))  # a `*` must have a minor neighbour
        tiles.append(Tile(tuple(entries)))
    align = draw(st.sampled_from([1, 1, 3, 8]))
    return Shape.array("f32", dims, Layout(tuple(m2m), tuple(tiles), tail_padding_alignment=align))


@settings(max_examples=300, deadline=None)
@given(tiled_shapes())
def test_linear_index_is_a_bijection_onto_non_padding_slots(shape: Shape):
    size = physical_size(shape)
    seen = {}
    for idx in _all_indices(shape):
        lin = linear_index(shape, idx)
        assert 0 <= lin < size
        assert lin not in seen, f"{idx} and {seen.get(lin)} share slot {lin} in {shape}"
        seen[lin] = idx
        assert logical_index(shape, lin) == idx
    assert len(seen) == shape.element_count()
    for lin in range(size):
        if lin not in seen:
            assert logical_index(shape, lin) is None
    assert size >= max(shape.element_count(), 1) or shape.element_count() == 0


@settings(max_examples=200, deadline=None)
@given(tiled_shapes())
def test_physical_permutation_matches_linear_index(shape: Shape):
    perm = physical_permutation(shape)
    expected = [linear_index(shape, idx) for idx in _all_indices(shape)]
    assert perm.dtype == np.int64
    assert perm.tolist() == expected
