#!/usr/bin/env python3
"""OR-Tools' SimpleMinCostFlow on the instance `auto-assign bench --plan-io` planned.

Reads the resolved instance the bench wrote (one line per channel: the previous bot or -1,
then the bots it may go to; excluded channels are left out, pinned ones list their one bot),
builds the min-cost-flow model and solves it. Only OR-Tools' own work is timed (adding the arcs to
its graph, and solving); reading the file and preparing the arc arrays are not. Prints one JSON line: build and solve seconds, the objective's parts (sum of
squared loads, moves) and the status.

The model is the planner's objective exactly. Source -> channel (capacity 1), channel -> bot
(capacity 1, cost 1 when the bot is not the previous one: a move), bot -> sink as one unit arc
per possible load level, the k-th costing (2k - 1) * M. A bot with load L pays
M * (1 + 3 + ... + (2L - 1)) = M * L^2 (convex costs: the cheaper levels fill first), so the
flow cost is M * sum(L^2) + moves, and with M above the largest possible number of moves the
minimum is least sum of squared loads first, then fewest moves.

Usage: ortools_mcf.py INSTANCE
"""
import json
import sys
import time

import numpy as np
from ortools.graph.python import min_cost_flow


def main(path):
    with open(path) as f:
        bots = int(f.readline())
        prev, valid = [], []
        for line in f:
            parts = [int(x) for x in line.split()]
            prev.append(parts[0])
            valid.append(parts[1:])
    # The arc arrays are prepared untimed, like the parse: OR-Tools' part starts at its graph.
    channels = len(valid)
    source, sink = 0, 1
    chan0, bot0 = 2, 2 + channels
    big = channels + 1
    tails, heads, costs = [], [], []
    degree = np.zeros(bots, dtype=np.int64)
    for c, members in enumerate(valid):
        tails.append(source)
        heads.append(chan0 + c)
        costs.append(0)
        for b in members:
            tails.append(chan0 + c)
            heads.append(bot0 + b)
            costs.append(0 if b == prev[c] else 1)
            degree[b] += 1
    for b in range(bots):
        for k in range(1, int(degree[b]) + 1):
            tails.append(bot0 + b)
            heads.append(sink)
            costs.append((2 * k - 1) * big)
    tails = np.array(tails, dtype=np.int32)
    heads = np.array(heads, dtype=np.int32)
    caps = np.ones(len(tails), dtype=np.int64)
    costs = np.array(costs, dtype=np.int64)
    started = time.perf_counter()
    flow = min_cost_flow.SimpleMinCostFlow()
    arcs = flow.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
    flow.set_nodes_supplies(
        np.array([source, sink], dtype=np.int32),
        np.array([channels, -channels], dtype=np.int64),
    )
    built = time.perf_counter()
    status = flow.solve()
    solved = time.perf_counter()
    cost = flow.optimal_cost() if status == flow.OPTIMAL else -1
    print(
        json.dumps(
            {
                "build_s": built - started,
                "solve_s": solved - built,
                "status": "optimal" if status == flow.OPTIMAL else str(status),
                "arcs": len(arcs),
                "sum_sq": cost // big,
                "moves": cost % big,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
