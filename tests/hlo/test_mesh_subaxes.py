"""Mesh replica groups with sub-axes (``'a':(pre)size``), expanded as XLA's
MeshAxesReplicaGroupList does: the expected groups are those of XLA's replica_group_test.cc
(MaterializedReplicaGroupsWithSubaxes, and the iota equivalents of MatchExpectedV2)."""
from __future__ import annotations

import pytest

from hlo_compile.hlo.collective_groups import parse_replica_groups
from hlo_compile.hlo.errors import HloUnsupportedError

MESH66 = "mesh['a'=6,'b'=6]"


@pytest.mark.parametrize("listed, first, count", [
    ("'a':(1)2", [[0, 18], [1, 19], [2, 20]], 18),
    ("'a':(1)3", [[0, 12, 24], [1, 13, 25], [2, 14, 26]], 12),
    ("'b':(1)3", [[0, 2, 4], [1, 3, 5], [6, 8, 10]], 12),
    ("'b':(3)2", [[0, 1], [2, 3], [4, 5]], 18),
    ("'a':(1)2,'b':(1)2", [[0, 3, 18, 21], [1, 4, 19, 22], [2, 5, 20, 23]], 9),
    ("'a':(1)3,'b':(1)3", [[0, 2, 4, 12, 14, 16, 24, 26, 28], [1, 3, 5, 13, 15, 17, 25, 27, 29]], 4),
    ("'a':(3)2,'b':(3)2", [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]], 9),
])
def test_sub_axes_of_a_6x6_mesh(listed, first, count):
    groups = parse_replica_groups(f"{MESH66} {{{listed}}}")
    assert groups[:len(first)] == first and len(groups) == count
    assert sorted(i for g in groups for i in g) == list(range(36))


@pytest.mark.parametrize("listed, iota", [
    ("'a':(1)2", "[4,2]<=[2,4]T(1,0)"),
    ("'a':(1)4", "[2,4]<=[4,2]T(1,0)"),
    ("'a':(2)2", "[4,2]<=[2,2,2]T(0,2,1)"),
    ("'a':(2)4", "[2,4]<=[8]"),
    ("'a':(4)2", "[4,2]<=[8]"),
    ("'a':(1)2,'a':(4)2", "[2,4]<=[2,2,2]T(1,0,2)"),
    ("'a':(4)2,'a':(1)2", "[2,4]<=[2,2,2]T(1,2,0)"),
    ("'a'", "[1,8]<=[8]"),
])
def test_sub_axes_equal_their_iota_form(listed, iota):
    assert parse_replica_groups(f"mesh['a'=8] {{{listed}}}") == parse_replica_groups(iota)


def test_sub_axes_follow_the_device_order():
    assert parse_replica_groups("mesh['a'=4, device_ids=(3,1,0,2)] {'a':(1)2}") == [[3, 0], [1, 2]]


@pytest.mark.parametrize("listed, words", [
    ("'u':(6)5,'u':(10)3", "overlap"),
    ("'u':(8)2", "must divide"),
    ("'u':(1)30", "smaller"),
    ("'v'", "not an axis"),
    ("'u','u':(1)2", "whole and as a sub-axis"),
])
def test_bad_sub_axes_are_refused(listed, words):
    with pytest.raises(HloUnsupportedError, match=words):
        parse_replica_groups(f"mesh['u'=30] {{{listed}}}")
