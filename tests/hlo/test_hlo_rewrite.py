"""The rewrite API every pass is built from (``hlo/rewrite.py``) and the copies of ``hlo/ir.py``:
names, new instructions and their place, uses (operands, ROOT, control predecessors), dead
code, computations; each result also prints and re-parses."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.errors import HloError
from hlo_compile.hlo.ir import HloComputation, clone_computation, clone_instruction, clone_module
from hlo_compile.hlo.rewrite import (NameScope, add_computation, computation_of, control_predecessors,
                                     insert_instructions, module_of, new_instruction, remove_computations,
                                     remove_dead, remove_instructions, rename, replace_instructions, replace_uses,
                                     set_control_predecessors, set_entry, take_name)
from hlo_compile.hlo.shape import Shape

TEXT = """HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] negate(p)
  b = f32[4] exponential(a), control-predecessors={%p}
  c = f32[4] add(a, b), control-predecessors={%a,%b}
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(c, zero), dimensions={0}, to_apply=add
}
"""

F32_4 = Shape.array("f32", (4,))


@pytest.fixture
def module():
    return parse_module(TEXT)


def _reparses(module) -> None:
    again = parse_module(module.to_text())
    assert again.to_text() == module.to_text()


def _users_are_exact(comp: HloComputation) -> None:
    for inst in comp.instructions:
        want = [u for u in comp.instructions if any(o is inst for o in u.operands)]
        assert sorted(map(id, inst.users)) == sorted(map(id, want)), inst.name


# ---- names ----------------------------------------------------------------------------------

def test_fresh_names_count_up_and_release_frees_a_name():
    names = NameScope(["x", "x.1"])
    assert names.fresh("y") == "y"
    assert names.fresh("x") == "x.2"
    assert names.fresh("x") == "x.3"
    names.release("x.1")
    assert "x.1" not in names
    assert names.fresh("x") == "x.1"


def test_name_scopes_of_a_module(module):
    assert "s" in NameScope.of_instructions(module.computations)
    assert "s" not in NameScope.of_instructions([module.entry])
    comps = NameScope.of_computations(module)
    assert comps.fresh("add") == "add.1" and comps.fresh("other") == "other"


def test_take_name_gives_the_old_name_and_releases_the_new_one(module):
    names = NameScope.of_instructions([module.entry])
    a = module.entry.instruction("a")
    new = new_instruction(names.fresh("a"), "copy", F32_4, [a])
    assert new.name == "a.1"
    take_name(new, a, names)
    assert new.name == "a" and "a.1" not in names


def test_rename_rebuilds_control_predecessor_text(module):
    a = module.entry.instruction("a")
    rename(a, "first")
    c = module.entry.instruction("c")
    assert c.attributes["control-predecessors"].raw == "{%first, %b}"
    _reparses(module)


# ---- new instructions and their place --------------------------------------------------------

def test_new_instruction_declares_operand_shapes_and_takes_the_location(module):
    a = module.entry.instruction("a")
    n = new_instruction("n", "negate", F32_4, [a], like=a)
    assert n.declared_operand_shapes == [a.shape]
    assert n.location == a.location and n.location is not None
    assert n.parent is None and n not in a.users


def test_insert_before_after_and_at_the_end(module):
    comp = module.entry
    a, b = comp.instruction("a"), comp.instruction("b")
    first = new_instruction("first", "negate", F32_4, [a])
    second = new_instruction("second", "negate", F32_4, [first])
    insert_instructions(comp, [first, second], before=b)
    late = new_instruction("late", "copy", F32_4, [b])
    insert_instructions(comp, [late], after=b)
    end = new_instruction("end", "copy", F32_4, [late])
    insert_instructions(comp, [end])
    order = [i.name for i in comp.instructions]
    assert order == ["p", "a", "first", "second", "b", "late", "c", "zero", "r", "end"]
    assert all(i.parent is comp for i in (first, second, late, end))
    assert first in a.users and second in first.users and late in b.users
    _users_are_exact(comp)
    with pytest.raises(ValueError):
        insert_instructions(comp, [new_instruction("x", "copy", F32_4, [a])], before=a, after=b)


def test_insert_before_an_instruction_of_another_computation_fails(module):
    s = module.computation("add").instruction("s")
    with pytest.raises(HloError, match="not an instruction of computation e"):
        insert_instructions(module.entry, [new_instruction("x", "copy", F32_4, [])], before=s)


def test_remove_instructions_detaches_them(module):
    comp = module.entry
    b = comp.instruction("b")
    dead = new_instruction("dead", "copy", F32_4, [b])
    insert_instructions(comp, [dead])
    remove_instructions(comp, [dead])
    assert dead.parent is None and all(i is not dead for i in comp.instructions)
    assert dead not in b.users


# ---- control predecessors --------------------------------------------------------------------

def test_set_control_predecessors_drops_duplicates_and_an_empty_list_removes_them(module):
    comp = module.entry
    p, a, c = comp.instruction("p"), comp.instruction("a"), comp.instruction("c")
    set_control_predecessors(c, [p, a, p])
    assert control_predecessors(c) == [p, a]
    assert c.attributes["control-predecessors"].raw == "{%p, %a}"
    set_control_predecessors(c, [])
    assert "control-predecessors" not in c.attributes and control_predecessors(c) == []


def test_setting_control_predecessors_never_changes_a_shared_attribute(module):
    copy = clone_module(module)
    c0, c1 = module.entry.instruction("c"), copy.entry.instruction("c")
    set_control_predecessors(c1, [copy.entry.instruction("p")])
    assert [i.name for i in control_predecessors(c0)] == ["a", "b"]


# ---- uses ---------------------------------------------------------------------------------

def test_replace_uses_redirects_operands_root_and_control_lists(module):
    comp = module.entry
    a, b, c, r = (comp.instruction(n) for n in "abcr")
    a2 = new_instruction("a2", "abs", F32_4, [comp.instruction("p")])
    insert_instructions(comp, [a2], after=a)
    r2 = new_instruction("r2", "negate", r.shape, [r])  # reads r: joins comp after the sweep
    replace_uses(comp, {a: a2, r: r2})
    insert_instructions(comp, [r2])
    assert b.operands == [a2] and c.operands[0] is a2
    assert control_predecessors(c) == [a2, b]
    assert c.attributes["control-predecessors"].raw == "{%a2, %b}"  # names changed: rebuilt
    assert comp.root is r2 and r2.operands == [r]
    assert a.users == [] and r.users == [r2]
    _users_are_exact(comp)


def test_replace_uses_keeps_control_text_when_the_names_stay(module):
    comp = module.entry
    a, c = comp.instruction("a"), comp.instruction("c")
    twin = new_instruction("a", "negate", F32_4, [comp.instruction("p")])
    insert_instructions(comp, [twin], after=a)
    replace_uses(comp, {a: twin})
    attr = c.attributes["control-predecessors"]
    assert attr.raw == "{%a,%b}" and attr.value[0] is twin  # verbatim text, new value


def test_replace_instructions_takes_place_control_predecessors_and_uses(module):
    comp = module.entry
    b, c = comp.instruction("b"), comp.instruction("c")
    fresh = new_instruction("b", "log", F32_4, [comp.instruction("a")])
    replace_instructions(comp, {b: fresh})
    assert [i.name for i in comp.instructions] == ["p", "a", "b", "c", "zero", "r"]
    assert comp.instructions[2] is fresh and fresh.parent is comp and b.parent is None
    assert control_predecessors(fresh) == [comp.instruction("p")] and control_predecessors(b) == []
    assert c.operands[1] is fresh and control_predecessors(c)[1] is fresh
    _users_are_exact(comp)
    _reparses(module)


def test_replace_instructions_with_a_value_already_in_place_drops_the_old_one(module):
    comp = module.entry
    r, c = comp.instruction("r"), comp.instruction("c")
    total = new_instruction("total", "reduce", r.shape, [c, comp.instruction("zero")], dict(r.attributes))
    insert_instructions(comp, [total], before=r)
    replace_instructions(comp, {r: total})
    assert comp.root is total and comp.instructions[-1] is total
    assert all(i is not r for i in comp.instructions)
    _reparses(module)


def test_control_predecessors_merge_when_the_new_one_has_its_own(module):
    comp = module.entry
    p, a, b = comp.instruction("p"), comp.instruction("a"), comp.instruction("b")
    new = new_instruction("b.new", "log", F32_4, [a])
    set_control_predecessors(new, [a])
    replace_instructions(comp, {b: new})
    assert control_predecessors(new) == [a, p]


# ---- dead code ---------------------------------------------------------------------------

def test_remove_dead_is_transitive_and_removes_only_candidates(module):
    comp = module.entry
    a = comp.instruction("a")
    x = new_instruction("x", "negate", F32_4, [a])
    y = new_instruction("y", "negate", F32_4, [x])
    kept = new_instruction("kept", "negate", F32_4, [a])
    insert_instructions(comp, [x, y, kept])
    removed = remove_dead(comp, [x, y, a])
    assert {i.name for i in removed} == {"x", "y"}  # a is still read by b, c and kept
    assert [i.name for i in comp.instructions][-1] == "kept"  # not a candidate: stays
    _users_are_exact(comp)


def test_remove_dead_keeps_root_and_control_predecessors(module):
    comp = module.entry
    p, a, r = comp.instruction("p"), comp.instruction("a"), comp.instruction("r")
    only_control = new_instruction("only_control", "negate", F32_4, [p])
    insert_instructions(comp, [only_control], before=a)
    set_control_predecessors(a, [only_control])
    assert remove_dead(comp, [only_control, r]) == []


# ---- computations ------------------------------------------------------------------------

def test_add_remove_computations_and_set_entry(module):
    p = new_instruction("q", "parameter", F32_4, parameter_number=0)
    neg = new_instruction("n", "negate", F32_4, [p])
    body = HloComputation("body", [p, neg], neg)
    add_computation(module, body, before=module.entry)
    assert [c.name for c in module.computations] == ["add", "body", "e"] and body.parent is module
    p2 = new_instruction("q", "parameter", F32_4, parameter_number=0)
    call = new_instruction("c", "call", F32_4, [p2], {"to_apply": Attribute("to_apply", "%body", body)})
    main = HloComputation("main", [p2, call], call)
    add_computation(module, main, after=body)
    set_entry(module, main)
    assert module.entry is main and main.is_entry and not module.computation("e").is_entry
    remove_computations(module, [module.computation("e"), module.computation("add")])
    assert [c.name for c in module.computations] == ["body", "main"]
    text = module.to_text()
    assert "ENTRY %main" in text
    _reparses(module)
    assert computation_of(module) is main and computation_of(body) is body and module_of(body) is module


def test_module_of_a_loose_computation_is_an_error():
    p = new_instruction("q", "parameter", F32_4, parameter_number=0)
    with pytest.raises(HloError, match="belongs to no module"):
        module_of(HloComputation("loose", [p], p))


# ---- copies ------------------------------------------------------------------------------

def test_clone_instruction_renames_and_shares_attributes(module):
    r = module.entry.instruction("r")
    c = clone_instruction(r, r.operands, name="r.copy")
    assert c.name == "r.copy" and c.opcode == "reduce" and c.to_apply is r.to_apply
    assert c.attributes is not r.attributes and c.attributes["dimensions"] is r.attributes["dimensions"]
    assert c.parent is None and c.users == []


def test_clone_computation_remaps_control_predecessors(module):
    mapping: dict = {}
    copy = clone_computation(module.entry, "e2", instruction_map=mapping)
    assert copy.name == "e2" and copy.root is mapping[id(module.entry.root)]
    c = copy.instruction("c")
    assert control_predecessors(c) == [copy.instruction("a"), copy.instruction("b")]
    assert all(i.parent is copy for i in copy.instructions)
    assert all(o.parent is copy for i in copy.instructions for o in i.operands)
    assert copy.root.to_apply is module.computation("add")  # called computations stay shared


def test_clone_module_remaps_called_computations_and_leaves_the_input_alone(module):
    before = module.to_text()
    copy = clone_module(module)
    assert copy.entry.root.to_apply is copy.computation("add")
    assert copy.computation("add") is not module.computation("add")
    replace_instructions(copy.entry, {copy.entry.instruction("b"):
                                      new_instruction("b", "log", F32_4, [copy.entry.instruction("a")])})
    assert module.to_text() == before and copy.to_text() != before


def test_control_holders_are_kept_and_found_again_when_control_predecessors_appear(module):
    from hlo_compile.hlo.rewrite import control_holders
    comp = module.entry
    a, b, c = (comp.instruction(n) for n in "abc")
    assert control_holders(comp) == [b, c]
    assert control_holders(comp) == [b, c]  # from the index: the same answer
    set_control_predecessors(b, [])  # one less: never a stale holder
    assert control_holders(comp) == [c]
    # a replacement carrying control predecessors joins the holders, and later
    # replacements retarget the lists that name it
    fresh = new_instruction("b2", "log", F32_4, [a], {"control-predecessors": Attribute(
        "control-predecessors", "{%p}", (comp.instruction("p"),))})
    replace_instructions(comp, {b: fresh})
    assert control_holders(comp) == [fresh, c]
    later = new_instruction("a2", "abs", F32_4, [comp.instruction("p")])
    replace_instructions(comp, {a: later})
    assert control_predecessors(c)[0] is later
    _users_are_exact(comp)
    _reparses(module)


def test_control_holder_index_survives_inserts_and_sees_inserted_holders(module):
    from hlo_compile.hlo import rewrite
    comp = module.entry
    b, c = comp.instruction("b"), comp.instruction("c")
    assert rewrite.control_holders(comp) == [b, c]
    plain = new_instruction("n1", "negate", F32_4, [comp.instruction("a")])
    insert_instructions(comp, [plain], before=c)  # no control predecessors: the index is kept
    entry = rewrite._CONTROL_HOLDERS[comp]
    assert entry[2] == len(comp.instructions) and entry[1] is comp.instructions
    assert rewrite.control_holders(comp) == [b, c]
    holder = new_instruction("n2", "negate", F32_4, [comp.instruction("a")], {"control-predecessors": Attribute(
        "control-predecessors", "{%p}", (comp.instruction("p"),))})
    insert_instructions(comp, [holder], before=c)  # one with them: found
    assert set(map(id, rewrite.control_holders(comp))) == {id(b), id(c), id(holder)}
    remove_instructions(comp, [plain])
    assert set(map(id, rewrite.control_holders(comp))) == {id(b), id(c), id(holder)}
