#!/usr/bin/env python3
"""OR-Tools CP-SAT, started from the plan, on a weighted instance `auto-assign bench --weighted`
wrote (balanceBy: messages: least sum of squared weighted loads).

The instance: the bot count on the first line, then one line per channel that can be assigned:
its weight (a whole number of messages a day), the bot the plan gave it, then the bots it may
go to. The model: a Boolean per (channel, valid bot), exactly one per channel; each bot's load
an integer equal to the weights it takes; the objective the sum of the loads' squares (each
square by AddMultiplicationEquality). The plan is given as the solution hint, so CP-SAT starts
from it. Prints one JSON line: the plan's objective, the best CP-SAT found, its proven bound,
the status and the wall time.

Usage: ortools_cpsat.py INSTANCE SECONDS
"""
import json
import sys

from ortools.sat.python import cp_model


def main(path, seconds):
    with open(path) as f:
        bots = int(f.readline())
        channels = []
        for line in f:
            parts = [int(x) for x in line.split()]
            if parts:
                channels.append((parts[0], parts[1], parts[2:]))
    model = cp_model.CpModel()
    base = [0] * bots
    terms = [[] for _ in range(bots)]
    hint_load = [0] * bots
    for weight, planned, valid in channels:
        hint_load[planned] += weight
        if len(valid) == 1:
            base[valid[0]] += weight
            continue
        chosen = []
        for b in valid:
            x = model.new_bool_var("")
            chosen.append(x)
            terms[b].append((weight, x))
            model.add_hint(x, b == planned)
        model.add_exactly_one(chosen)
    squares = []
    for b in range(bots):
        most = base[b] + sum(w for w, _ in terms[b])
        load = model.new_int_var(base[b], most, "")
        model.add(load == base[b] + sum(w * x for w, x in terms[b]))
        square = model.new_int_var(base[b] * base[b], most * most, "")
        model.add_multiplication_equality(square, [load, load])
        model.add_hint(load, hint_load[b])
        model.add_hint(square, hint_load[b] * hint_load[b])
        squares.append(square)
    model.minimize(sum(squares))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    status = solver.solve(model)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    print(
        json.dumps(
            {
                "plan_sum_sq": sum(l * l for l in hint_load),
                "sum_sq": int(solver.objective_value) if found else None,
                "bound": solver.best_objective_bound,
                "status": solver.status_name(status),
                "wall_s": solver.wall_time,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
