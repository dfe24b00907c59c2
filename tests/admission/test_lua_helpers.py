"""lua/lib/'s helpers on their own, through a library of test entries loaded beside them into a
private Redis (functions are server-wide, so not the suite's shared one), the reply states
that acquire.lua and admission.py must name alike, and the name tables as the library holds them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from fairness.scheduling.admission import NAMED_ARGUMENTS, Reply, library_head
from tests.admission.test_lua_names import FIELD, KEY
from tests.support.redis_server import PrivateRedis

# Each entry runs after begin(KEYS, ARGV), as admission's own do; ARGV[5..] are its arguments.
ENTRIES = {
    "handle_of": "return handle_of(ARGV[5])",
    "reply_states": "local out = {} for name, n in pairs(REPLY) do out[#out + 1] = name out[#out + 1] = n end "
                    "return out",
    # ARGV[5]: which name table; flat {name, value, ...}
    "name_table": """
        local t = ({KEY = KEY, FIELD = FIELD, ACQUIRE = ACQUIRE, RELEASE = RELEASE, RETAKE = RETAKE})[ARGV[5]]
        local out = {}
        for name, value in pairs(t) do out[#out + 1] = name; out[#out + 1] = value end
        return out""",
    # read: "limit:taken,..." as read_budgets would have read the windows
    "completion_room": """
        local read = {}
        for limit, taken in string.gmatch(ARGV[5], '([^,:]+):([^,]+)') do
          read[#read + 1] = {'f', 60, tonumber(limit), tonumber(taken), true}
        end
        local tightest, limit = completion_room(read, ARGV[6])
        return {tightest, limit or false}""",
    "budget_remaining": """
        local read = {}
        for limit, taken in string.gmatch(ARGV[5], '([^,:]+):([^,]+)') do
          read[#read + 1] = {'f', 60, tonumber(limit), tonumber(taken), true}
        end
        return budget_remaining(read, tonumber(ARGV[6]))""",
}


@pytest.fixture(scope="module")
def lua() -> Iterator[redis.Redis]:
    server = PrivateRedis().start()
    client = redis.Redis.from_url(server.url())
    code = ["#!lua name=gp_test_helpers", library_head()]
    for name, body in ENTRIES.items():
        code += [f"redis.register_function('t_{name}', function(KEYS, ARGV)", "begin(KEYS, ARGV)", body, "end)"]
    client.function_load("\n".join(code), replace=True)
    yield client
    client.close()
    server.stop()


def call(client: redis.Redis, name: str, *args: object) -> object:
    return client.fcall(f"t_{name}", 1, "ns:", 1000.0, 30, 30, 2, *args)


def test_handle_of_takes_the_handle_after_the_arrival_number(lua):
    member = f"{42:016d}:{'ab' * 16}"
    assert call(lua, "handle_of", member) == ("ab" * 16).encode()


def test_lua_and_python_name_the_same_reply_states(lua):
    flat = call(lua, "reply_states")
    lua_states = {flat[i].decode().upper(): flat[i + 1] for i in range(0, len(flat), 2)}
    assert lua_states == {state.name: state.value for state in Reply}


def test_the_library_holds_the_names_the_source_is_read_for(lua):
    def table(name: str) -> dict[str, object]:
        flat = call(lua, "name_table", name)
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    assert table("KEY") == {name: suffix.encode() for name, suffix in KEY.items()}
    assert table("FIELD") == {name: field.encode() for name, field in FIELD.items()}
    for script, names in NAMED_ARGUMENTS.items():
        assert table(script.upper()) == {name: at for at, name in enumerate(names, 5)}


def test_the_completion_limit_is_what_the_tightest_budget_leaves(lua):
    # Two budgets with 1000 and 300 left; a prompt weighing 100 and completion tokens weighing 2:
    # the second leaves (300 - 100) / 2 = 100 tokens, under the 512 asked.
    assert call(lua, "completion_room", "5000:4000,1000:700", "100~2~512~16") == [2, 100]
    # Room for more than asked: the ask stands.
    assert call(lua, "completion_room", "100000:0", "100~2~512~16") == [1, 512]
    # Not even the least worth running fits: refused by the tightest budget.
    assert call(lua, "completion_room", "1000:900,5000:0", "90~2~512~16") == [1, None]


def test_the_budget_left_is_the_least_any_budget_keeps_after_the_amount(lua):
    assert call(lua, "budget_remaining", "1000:100,500:100", 50) == b"350"
    assert call(lua, "budget_remaining", "100:90", 50) == b"0"  # never below nothing
    assert call(lua, "budget_remaining", "", 50) == b""  # no budget
