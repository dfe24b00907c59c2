"""The names the admission scripts and Python share, read from the Lua source: the key layout
(state.lua's KEY and FIELD against keyspace.py's ADMISSION_ constants), and the long entry
scripts' arguments (admission.py's tuples against what each script reads)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fairness.scheduling import admission
from fairness.scheduling.admission import ACQUIRE_ARGUMENTS, NAMED_ARGUMENTS
from fairness.store import keyspace

LUA = Path(admission.__file__).with_name("lua")
SOURCES = sorted([*LUA.glob("*.lua"), *(LUA / "lib").glob("*.lua")])
# In keyspace.py and the admission namespace, but no script's: they must not collide with the layout.
PYTHON_ONLY = {"ADMISSION_NAMESPACE", "ADMISSION_BUDGETS_RESTORED"}


def code(path: Path) -> str:
    """The Lua source without its comments (they name tables and arguments in prose)."""
    return re.sub(r"--[^\n]*", "", path.read_text())


def lua_table(name: str) -> dict[str, str]:
    """state.lua's `local <name> = {...}`: entry name -> its string."""
    source = code(LUA / "lib" / "state.lua")
    body = re.search(rf"^local {name} = \{{\n(.*?)^\}}", source, re.M | re.S)
    assert body is not None, name
    entries = re.findall(r"^\s*(\w+) = '([^']*)',\s*$", body.group(1), re.M)
    assert len(entries) == len([line for line in body.group(1).splitlines() if line.strip()]), name
    return dict(entries)


KEY, FIELD = lua_table("KEY"), lua_table("FIELD")


def python_names() -> tuple[dict[str, str], dict[str, str]]:
    """keyspace.py's ADMISSION_<NAME> and ADMISSION_FIELD_<NAME>, by name as the Lua spells it."""
    keys, fields = {}, {}
    for name, value in vars(keyspace).items():
        if name.startswith("ADMISSION_FIELD_"):
            fields[name.removeprefix("ADMISSION_FIELD_").lower()] = value
        elif name.startswith("ADMISSION_") and name not in PYTHON_ONLY:
            keys[name.removeprefix("ADMISSION_").lower()] = value
    return keys, fields


def test_python_names_the_keys_and_fields_it_reads_as_the_scripts_do():
    keys, fields = python_names()
    assert keys and fields
    assert keys.items() <= KEY.items()
    assert fields.items() <= FIELD.items()


def test_no_two_names_share_a_key_and_pythons_own_keys_are_apart():
    assert len(set(KEY.values())) == len(KEY)
    families = [suffix for suffix in KEY.values() if suffix.endswith(":")]
    for name in PYTHON_ONLY - {"ADMISSION_NAMESPACE"}:
        suffix = getattr(keyspace, name)
        assert suffix not in KEY.values() and not any(suffix.startswith(f) for f in families), name


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_key_and_field_a_script_names_is_in_the_layout(path: Path):
    # A name missing from the table reads nil: found only when that line runs.
    source = code(path)
    assert set(re.findall(r"\bKEY\.(\w+)", source)) <= KEY.keys()
    assert set(re.findall(r"\bFIELD\.(\w+)", source)) <= FIELD.keys()


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_script_spells_a_key_suffix_itself(path: Path):
    assert re.findall(r"NS \.\. '", code(path)) == []


@pytest.mark.parametrize("script", sorted(NAMED_ARGUMENTS))
def test_a_script_that_takes_named_arguments_reads_each_by_name(script: str):
    source = code(LUA / f"{script}.lua")
    assert [n for n in map(int, re.findall(r"ARGV\[(\d+)\]", source)) if n >= 5] == []
    # Each name it reads is passed, and each passed is read (a misspelt name would read nil).
    assert set(re.findall(rf"\b{script.upper()}\.(\w+)", source)) == set(NAMED_ARGUMENTS[script])
    header = re.match(r"(?:--[^\n]*\n)+", (LUA / f"{script}.lua").read_text())
    assert header is not None
    assert [name for name in NAMED_ARGUMENTS[script] if not re.search(rf"\b{name}\b", header.group())] == []


@pytest.mark.parametrize("script", sorted(NAMED_ARGUMENTS))
def test_the_library_numbers_each_scripts_arguments_from_five(script: str):
    table = re.search(rf"^local {script.upper()} = \{{(.*)\}}$", admission.library_head(), re.M)
    assert table is not None
    assert dict(re.findall(r"(\w+) = (\d+)", table.group(1))) == {
        name: str(at) for at, name in enumerate(NAMED_ARGUMENTS[script], 5)
    }


def test_a_missing_or_unknown_argument_name_fails_before_redis():
    values = {name: 0 for name in ACQUIRE_ARGUMENTS}
    assert admission._in_order("acquire", values) == (0,) * len(ACQUIRE_ARGUMENTS)
    with pytest.raises(TypeError, match="missing argument 'moving'"):
        admission._in_order("acquire", {k: v for k, v in values.items() if k != "moving"})
    with pytest.raises(TypeError, match="unknown arguments \\['movng'\\]"):
        admission._in_order("acquire", {**values, "movng": 1})


def test_loading_writes_each_names_value_in_its_place():
    # So a call pays no table lookup; the names stay in the comments and the documenting tables.
    library = admission._LIBRARY.code
    code_only = "\n".join(line.partition("--")[0] for line in library.splitlines())
    assert re.findall(r"\b(?:KEY|FIELD|ACQUIRE|RELEASE|RETAKE)\.\w+", code_only) == []
    assert "NS .. 'kin'" in library and f"ARGV[{5 + ACQUIRE_ARGUMENTS.index('moving')}]" in library
    assert admission.lua_names()["KEY"] == {name: f"'{value}'" for name, value in KEY.items()}


def test_a_name_no_table_defines_fails_at_load_not_in_a_call():
    names = admission.lua_names()
    assert admission.resolve_names("x = NS .. KEY.in_flight_by_key  -- KEY.anything", names) == (
        "x = NS .. 'kin'  -- KEY.anything"
    )
    with pytest.raises(ValueError, match="KEY.in_flight_by_kye"):
        admission.resolve_names("x = NS .. KEY.in_flight_by_kye", names)
