#!/usr/bin/env python3
"""Least sum of squared loads with OR-Tools' SimpleMinCostFlow, for `auto-assign bench --plan-io`.

Reads an `auto-assign plan` snapshot, applies the same rules as `auto-assign plan` (active bots:
known, online, platform enabled; valid bots: a channel's active members; excluded channels left
out; a channel with a priority list pinned to the first valid bot of the list; channels with no
valid bot unassigned), and solves the balancing as a min-cost flow:

    channel --(cap 1, cost 0)--> each valid bot --(cap 1, cost 2k - 1)--> sink,  k = p+1, p+2, ...

where p is the bot's pinned load and there is one unit arc per load level k up to p + the
number of free channels the bot is in (its highest possible load). Every free channel with a
valid bot supplies one unit; the sink takes them all.

Why this is the same objective: a bot's load ends at some L >= p, and 2k - 1 = k^2 - (k-1)^2,
so the cost of its level arcs k = p+1..L sums to L^2 - p^2. The costs rise with k, so a min-cost
flow uses the cheaper levels first (any flow using level k+1 but not k costs more than swapping
them, at the same loads). Hence min cost = min sum(L^2) - sum(p^2): the minimum of sum(load^2)
over all assignments that honour the pins, which is what `auto-assign plan --strategy optimal`
minimises first (the fewest moves come second and do not change sum(load^2)).

Prints one JSON line: the time of OR-Tools' own work (building the model from arrays, then
Solve; reading and parsing the snapshot and resolving the rules are not counted), the solver's
sum(load^2), and with --assignment the sum(load^2) of a plan output to compare.

Install: python3 -m venv DIR && DIR/bin/pip install ortools
"""

import argparse
import json
import sys
import time
from collections import Counter


def platform_of(key):
    return key.split(":", 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--assignment", help="a plan output ({channel: bot}) whose sum(load^2) to report")
    args = ap.parse_args()
    try:
        import numpy as np
        from ortools.graph.python import min_cost_flow
    except ImportError as e:
        print(json.dumps({"error": f"ortools is not installed: {e}"}))
        return 2

    with open(args.snapshot, "rb") as f:
        snap = json.load(f)

    enabled = set(snap.get("enabled_platforms") or [])

    def platform_enabled(p):
        return not enabled or p in enabled

    active = set()
    for b in snap["bots"]:
        if isinstance(b, str):
            key, online = b, True
        else:
            bid, online = b["id"], b.get("online", True)
            p = b.get("platform")
            key = f"{p}:{bid}" if p and not bid.startswith(p + ":") else bid
        if online and platform_enabled(platform_of(key)):
            active.add(key)

    def full(bot, platform):
        return bot if ":" in bot else f"{platform}:{bot}"

    exclude = snap.get("exclude") or []
    excluded_full = {k for k in exclude if ":" in k}
    excluded_short = {k for k in exclude if ":" not in k}
    priority = snap.get("priority") or {}

    bot_ix = {}
    pinned = Counter()
    chan_of_arc = []
    bot_of_arc = []
    free = 0
    for ch in snap["channels"]:
        key = ch["id"]
        platform, short = key.split(":", 1)
        if not platform_enabled(platform) or key in excluded_full or short in excluded_short:
            continue
        valid = [full(m, platform) for m in ch["bots"]]
        valid = [m for m in valid if m in active]
        if not valid:
            continue
        prio = priority.get(key, priority.get(short))
        pin = None
        if prio:
            vs = set(valid)
            pin = next((full(b, platform) for b in prio if full(b, platform) in vs), None)
        if pin is not None:
            pinned[pin] += 1
            continue
        for m in valid:
            chan_of_arc.append(free)
            bot_of_arc.append(bot_ix.setdefault(m, len(bot_ix)))
        free += 1

    started = time.perf_counter()
    n_bots = len(bot_ix)
    chan_of_arc = np.asarray(chan_of_arc, dtype=np.int32)
    bot_of_arc = np.asarray(bot_of_arc, dtype=np.int32)
    sink = free + n_bots
    # Level arcs: bot b gets degree(b) unit arcs costing 2k - 1 for k = p+1 .. p+degree(b).
    degree = np.bincount(bot_of_arc, minlength=n_bots)
    base = np.zeros(n_bots, dtype=np.int64)
    for bot, i in bot_ix.items():
        base[i] = pinned.get(bot, 0)
    level_bot = np.repeat(np.arange(n_bots, dtype=np.int32), degree)
    starts = np.cumsum(degree) - degree
    k = np.arange(len(level_bot), dtype=np.int64) - np.repeat(starts, degree) + 1 + np.repeat(base, degree)
    tails = np.concatenate([chan_of_arc, free + level_bot]).astype(np.int32)
    heads = np.concatenate([free + bot_of_arc, np.full(len(level_bot), sink, dtype=np.int32)])
    capacities = np.ones(len(tails), dtype=np.int64)
    costs = np.concatenate([np.zeros(len(chan_of_arc), dtype=np.int64), 2 * k - 1])
    supplies = np.concatenate([np.ones(free, dtype=np.int64), np.zeros(n_bots, dtype=np.int64), [-free]])

    solver = min_cost_flow.SimpleMinCostFlow()
    solver.add_arcs_with_capacity_and_unit_cost(tails, heads, capacities, costs)
    solver.set_nodes_supplies(np.arange(len(supplies), dtype=np.int32), supplies)
    built = time.perf_counter()
    status = solver.solve()
    solved = time.perf_counter()
    if status != solver.OPTIMAL:
        print(json.dumps({"error": f"OR-Tools status {status}"}))
        return 1
    sum_sq = int(solver.optimal_cost()) + sum(p * p for p in pinned.values())
    result = {
        "build_s": built - started,
        "solve_s": solved - built,
        "sum_sq": sum_sq,
        "channels": free + sum(pinned.values()),
        "arcs": int(len(tails)),
    }
    if args.assignment:
        with open(args.assignment, "rb") as f:
            loads = Counter(json.load(f).values())
        result["assignment_sum_sq"] = sum(v * v for v in loads.values())
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
