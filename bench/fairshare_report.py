"""The fair-share benchmark's tables and PASS/FAIL targets, one of each per scenario; every
fair-share figure stands beside today's (fairshare_weight_seconds = 0)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench import report
from bench.report import Target, fmt

MODES = ("today", "fair share")


def _today(s: dict[str, Any], field: str) -> str:
    return f"today {fmt(s['today'][field])}"


def table1(s: dict[str, Any]) -> str:
    rows = [[m, s[m]["weight"], s[m]["served"].get("A"), s[m]["served"].get("B"), s[m]["ratio"],
             s[m]["charged_ratio"], s[m]["completed"]["A"], s[m]["completed"]["B"],
             s[m]["window_ratio_min"], s[m]["window_ratio_max"], s[m]["jain_mean"],
             s[m]["jain_min"], len(s[m]["windows"])] for m in MODES]
    return report.table(
        ["mode", "W s", "A weighted", "B weighted", "A:B served", "A:B charged", "A done",
         "B done", "per window: min", "max", "Jain mean", "Jain min", "windows"], rows,
        title="Scenario 1: A asks 1000 tokens, B 100; equal shares; both backlogged "
              "(weighted tokens over the whole window; charged = the gateway's books)")


def targets1(s: dict[str, Any]) -> list[Target]:
    fair = s["fair share"]
    r = fair["ratio"]
    spread = max(r, 1 / r) if r else None
    return [
        report.target("1. request sizes: weighted service A:B, larger / smaller", spread, "<=",
                      1.25, "x", f"A:B = {fmt(r)} (0.8-1.25); {_today(s, 'ratio')}"),
        report.target("1. request sizes: Jain's index over weighted tokens, mean of windows",
                      fair["jain_mean"], ">=", 0.95, "",
                      f"min {fmt(fair['jain_min'])}; {_today(s, 'jain_mean')}"),
    ]


def table2(s: dict[str, Any]) -> str:
    rows = [[m, s[m]["weight"], s[m]["served"].get("p3"), s[m]["served"].get("p1"),
             s[m]["ratio"], s[m]["charged_ratio"], s[m]["window_ratio_min"],
             s[m]["window_ratio_max"], s[m]["jain_mean"], s[m]["jain_min"]] for m in MODES]
    return report.table(["mode", "W s", "p3 weighted", "p1 weighted", "p3:p1 served",
                         "p3:p1 charged", "per window: min", "max", "Jain/share mean", "min"],
                        rows, title="Scenario 2: accounts with shares 3 and 1, equal request "
                                    "sizes (Jain's index over service / shares per window)")


def targets2(s: dict[str, Any]) -> list[Target]:
    fair = s["fair share"]
    r = fair["ratio"]
    return [
        report.target("2. shares 3:1: served ratio's distance from 3", abs(r / 3 - 1) if r else None,
                      "<=", 0.10, "", f"p3:p1 = {fmt(r)}; {_today(s, 'ratio')}"),
        report.target("  (info) shares 3:1: Jain's index over service / shares, mean of windows",
                      fair["jain_mean"], ">=", 0.95, "",
                      f"per window p3:p1 {fmt(fair['window_ratio_min'])}-"
                      f"{fmt(fair['window_ratio_max'])}; {_today(s, 'jain_mean')}"),
    ]


def table3(s: dict[str, Any]) -> str:
    rows = [[m, s[m]["weight"], s[m]["seeded"], s[m]["half_life"], s[m]["rate"],
             s[m]["predicted"], s[m]["crossing_books"], s[m]["crossing_client"],
             s[m]["fresh_part_before"], s[m]["fresh_part_after"], _span(s[m]["heavy_held_back"]),
             s[m]["duration"]] for m in MODES]
    return report.table(
        ["mode", "W s", "heavy seeded", "half-life s", "pool wtok/s", "predicted meet s",
         "books meet s", "client meet s", "fresh part before", "after", "heavy's longest gap s",
         "window s"], rows,
        title="Scenario 3: heavy (seeded history) and fresh arrive together; equal shares. "
              "Meet: when the fresh user's decayed usage reaches the heavy one's; gap: the "
              "longest time no heavy request started")


def _span(span: Sequence[float] | None) -> str:
    return "-" if not span else f"{fmt(span[0])}-{fmt(span[1])}"


def targets3(s: dict[str, Any]) -> list[Target]:
    fair = s["fair share"]
    off = None
    expected = fair.get("predicted_as_served")
    if fair["crossing_books"] is not None and expected:
        off = abs(fair["crossing_books"] / expected - 1)
    return [
        report.target("3. memory: fresh user's part of service until the factors meet (the larger part)",
                      fair["fresh_part_before"], ">=", 0.5, "",
                      f"{_today(s, 'fresh_part_before')} (whole window: never meet)"),
        report.target("3. memory: measured meeting time off the prediction by", off, "<=", 0.25,
                      "", f"books {fmt(fair['crossing_books'])} s vs {fmt(expected)} s at the rates served "
                          f"(ideal, heavy user never served: {fmt(fair['predicted'])} s)"),
    ]


def table4(s: dict[str, Any]) -> str:
    rows = [[i + 1, seg["mode"], seg["weight"], seg["from"], seg["to"], seg["rate"]]
            for i, seg in enumerate(s["segments"])]
    return report.table(["segment", "mode", "W s", "from s", "to s", "weighted tok/s"], rows,
                        title=f"Scenario 4: one backlogged user alone, the tier switched between "
                              f"segments (nominal pool rate {fmt(s['nominal'])} wtok/s)")


def targets4(s: dict[str, Any]) -> list[Target]:
    return [report.target("4. work conservation: throughput fair share / today", s["ratio"],
                          ">=", 0.95, "x", f"{fmt(s['rate']['fair share'])} vs "
                                           f"{fmt(s['rate']['today'])} weighted tok/s")]


def table5(s: dict[str, Any]) -> str:
    rows = [[m, s[m]["weight"], s[m]["f_zed"], s[m]["zed_requests"], s[m]["zed_served"],
             s[m]["zed_wait"]["p50"], s[m]["zed_wait"]["max"], s[m]["fresh_wait"]["p50"],
             s[m]["fresh_wait"]["max"], s[m]["t_max"], s[m]["bound"]] for m in MODES]
    return report.table(
        ["mode", "W s", "F zed", "zed req", "zed done", "zed wait p50", "zed wait max",
         "fresh wait p50", "fresh max", "T_max s", "bound s"], rows,
        title="Scenario 5: zed (F ~ 0) among six users without history; waits in the gateway's "
              "queue (s)")


def targets5(s: dict[str, Any]) -> list[Target]:
    fair = s["fair share"]
    return [report.target("5. no starvation: zed's longest wait", fair["zed_wait"]["max"], "<=",
                          fair["bound"], " s",
                          f"bound W + ceil((Q+1)/4) x T_max = {fmt(fair['weight'])} + "
                          f"{(fair['queued_ahead'] + 4) // 4} x {fmt(fair['t_max'])}; "
                          f"{fair['zed_served']} served; today max "
                          f"{fmt(s['today']['zed_wait']['max'])} s")]


def table6(s: dict[str, Any]) -> str:
    rows = []
    for n, r in enumerate(s["rounds"], 1):
        for weight, run in r["runs"].items():
            rows.append([n, weight, run["charged"].get("hit"), run["charged"].get("miss"), run["charged_ratio"],
                         run["served"]["hit"], run["served"]["miss"], run["served_ratio"],
                         run["completed"]["hit"], run["completed"]["miss"]])
        rows.append([n, "0.1 / 1", "", "", r["charged_gain"], "", "", r["served_gain"], "", ""])
    for weight, m in s["median"].items():
        rows.append(["median", weight, "", "", m["charged_ratio"], "", "", m["served_ratio"], "", ""])
    rows.append(["median", "0.1 / 1", "", "", s["charged_gain"], "", "", s["served_gain"], "", ""])
    return report.table(
        ["round", "cached weight", "hit charged", "miss charged", "hit:miss charged", "hit served",
         "miss served", "hit:miss served", "hit done", "miss done"], rows,
        title="Scenario 6: hit's prompts share a cached prefix, miss's do not; same traffic, fair share on "
              "(charged: the gateway's books, weighted tokens; served: completion tokens received)")


def targets6(s: dict[str, Any]) -> list[Target]:
    base, cheap = (s["median"][f"{w:g}"] for w in s["weights"])
    return [
        report.target("6. cached prompts: hit:miss served at cached weight 0.1 over at 1.0, median of rounds",
                      s["served_gain"], ">=", 2.0, "x",
                      f"hit:miss served {fmt(cheap['served_ratio'])} vs {fmt(base['served_ratio'])}; "
                      f"charged {fmt(cheap['charged_ratio'])} vs {fmt(base['charged_ratio'])}"),
    ]


def table7(s: dict[str, Any]) -> str:
    people = [name for name in s["today"]["completed"]]
    pairs = list(s["today"]["ratios"])
    rows = [[m, s[m]["weight"], *(s[m]["served"].get(n) for n in people), *(s[m]["ratios"][p] for p in pairs),
             *(s[m]["charged_ratios"][p] for p in pairs), *(s[m]["completed"][n] for n in people),
             s[m]["jain_mean"]] for m in MODES]
    return report.table(
        ["mode", "W s", *(f"{n} weighted" for n in people), *(f"{p} served" for p in pairs),
         *(f"{p} charged" for p in pairs), *(f"{n} done" for n in people), "Jain mean"], rows,
        title=f"Scenario 7: {' and '.join(people[:-1])} through one front-end key (a fresh user JWT each request), "
              f"{people[-1]} with her own key; one account, equal shares, all backlogged")


def targets7(s: dict[str, Any]) -> list[Target]:
    fair = s["fair share"]
    worst = max(fair["ratios"].items(), key=lambda kv: max(kv[1], 1 / kv[1]) if kv[1] else 0.0)
    charged = fair["charged"]
    return [
        report.target("7. people behind a front end: weighted service, every pair, larger / smaller",
                      fair["spread"], "<=", 1.25, "x",
                      f"worst pair {worst[0]} = {fmt(worst[1])} (0.8-1.25); "
                      + ", ".join(f"{p} {fmt(r)}" for p, r in fair["ratios"].items())
                      + f"; today's spread {fmt(s['today']['spread'])}"),
        report.target("  (info) 7. the front end's own membership charged (its people charge their own)",
                      charged.get("openwebui"), "<=", 0.0, " wtok",
                      ", ".join(f"{n} {fmt(v)}" for n, v in charged.items() if n != "openwebui")),
    ]


Section = Callable[[dict[str, Any]], Any]
TABLES: dict[str, Section] = {"1": table1, "2": table2, "3": table3, "4": table4, "5": table5,
                              "6": table6, "7": table7}
TARGETS: dict[str, Section] = {"1": targets1, "2": targets2, "3": targets3, "4": targets4,
                               "5": targets5, "6": targets6, "7": targets7}
