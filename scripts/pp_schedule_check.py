#!/usr/bin/env python3
"""Deadlock check of the pipeline schedules' messages (src/train/pipeline.c), under the
strictest point-to-point model a device ccl may have: a send completes only once its peer
has posted the matching receive (NCCL's rendezvous), messages between two ranks match by
order alone, and a group's operations are posted together and complete together.

Each stage's tasks are ordered as pipeline.c orders them (Megatron's 1F1B for V = 1 with
--pipeline_schedule 1f1b; InfiniTrain's GPipe and interleaved rules otherwise) and its
messages grouped as it_dist_exchange groups them: rule-based schedules receive each step's
inputs in one group with the previous step's sends; Megatron's 1F1B and the evaluation pass
receive inside each task, the sends held since the last receive going out with it. The
replay also checks that matching by order pairs every send with the receive of its tag.

Usage: pp_schedule_check.py [MAX_P [MAX_V [MAX_M]]]   (default 8 4 16; exit 1 on a deadlock)
"""
import sys


def prev_stage(p, P, v):
    return p - 1 if p > 0 else (P - 1 if v > 0 else -1)


def next_stage(p, P, V, v):
    return p + 1 if p < P - 1 else (0 if v < V - 1 else -1)


def rule_tasks(p, P, V, M, interleaved):
    """(step, mb, v, bwd) sorted as run_rules sorts them."""
    T = P * V
    S = M + T - 1
    t = []
    for i in range(M):
        for v in range(V):
            g = v * P + p
            t.append((g + i, i, v, 0))
            t.append(((2 * (T - 1) - g + i) if interleaved else (S + (S - 1 - g - i)), i, v, 1))
    t.sort(key=(lambda x: (x[0], x[1], x[3])) if interleaved else (lambda x: (x[0], x[2])))
    return t


def messages(p, P, V, i, v, bwd):
    """The (receive, send) of one task: ('R'|'S', peer, tag) or None."""
    g = v * P + p
    fr, to = prev_stage(p, P, v), next_stage(p, P, V, v)
    if not bwd:
        return (('R', fr, ('act', i, g)) if fr >= 0 else None, ('S', to, ('act', i, g + 1)) if to >= 0 else None)
    return (('R', to, ('grad', i, g)) if to >= 0 else None, ('S', fr, ('grad', i, g - 1)) if fr >= 0 else None)


def greedy_groups(p, P, V, tasks):
    """Receive inside each task; the held sends go out with the next receive, the rest at the end."""
    groups, held = [], []
    for (i, v, bwd) in tasks:
        r, s = messages(p, P, V, i, v, bwd)
        if r:
            groups.append(held + [r])
            held = []
        if s:
            held.append(s)
    return groups + ([held] if held else [])


def step_groups(p, P, V, M, interleaved):
    """Before each step: its receives with the previous step's sends; the rest at the end."""
    by_step = {}
    for (step, i, v, bwd) in rule_tasks(p, P, V, M, interleaved):
        by_step.setdefault(step, []).append((i, v, bwd))
    groups, held = [], []
    for step in sorted(by_step):
        recvs = [r for (r, _) in (messages(p, P, V, *t) for t in by_step[step]) if r]
        if held or recvs:
            groups.append(held + recvs)
        held = [s for (_, s) in (messages(p, P, V, *t) for t in by_step[step]) if s]
    return groups + ([held] if held else [])


def schedule_groups(p, P, V, M, kind):
    if kind == "1f1b" and V == 1:  # Megatron's: P - p - 1 warm-up forwards
        warm = min(P - p - 1, M)
        tasks = [(i, 0, 0) for i in range(warm)]
        for i in range(M):
            if warm + i < M:
                tasks.append((warm + i, 0, 0))
            tasks.append((i, 0, 1))
        return greedy_groups(p, P, V, tasks)
    if kind == "eval":  # one batch through every chunk in turn
        return greedy_groups(p, P, V, [(0, v, 0) for v in range(V)])
    return step_groups(p, P, V, M, kind == "1f1b")


def completes(groups_of):
    """Replay every stage's groups; False on a deadlock. Raises when order matching pairs the wrong tags."""
    P = len(groups_of)
    seq, tagged = {}, {}
    labelled = []
    for p in range(P):
        stage = []
        for grp in groups_of[p]:
            ops = []
            for (kind, peer, tag) in grp:
                chan = (p, peer) if kind == "S" else (peer, p)
                n = seq.get((chan, kind), 0)
                seq[(chan, kind)] = n + 1
                tagged[(kind, chan, n)] = tag
                ops.append((kind, chan, n))
            stage.append(ops)
        labelled.append(stage)
    for (kind, chan, n), tag in tagged.items():
        other = tagged.get(("R" if kind == "S" else "S", chan, n))
        if other != tag:
            raise AssertionError(f"channel {chan} message {n}: {kind} {tag} meets {other}")
    pos, posted = [0] * P, set()
    while True:
        for p in range(P):
            if pos[p] < len(labelled[p]):
                posted.update(labelled[p][pos[p]])
        moved = False
        for p in range(P):
            if pos[p] < len(labelled[p]) and all(
                ("R" if k == "S" else "S", c, n) in posted for (k, c, n) in labelled[p][pos[p]]
            ):
                pos[p] += 1
                moved = True
        if all(pos[p] == len(labelled[p]) for p in range(P)):
            return True
        if not moved:
            return False


def main():
    lim = [int(a) for a in sys.argv[1:4]] + [8, 4, 16][len(sys.argv[1:4]):]
    max_p, max_v, max_m = lim
    checked = stuck = 0
    for P in range(2, max_p + 1):
        for V in range(1, max_v + 1):
            for kind in ("gpipe", "1f1b", "eval"):
                for M in range(1, max_m + 1) if kind != "eval" else [1]:
                    checked += 1
                    if not completes([schedule_groups(p, P, V, M, kind) for p in range(P)]):
                        stuck += 1
                        print(f"DEADLOCK: P={P} V={V} M={M} {kind}")
    # the model is strict enough to matter: one message per group deadlocks 1F1B already
    P, M = 2, 2
    ungrouped = [[[op] for grp in schedule_groups(p, P, 1, M, "1f1b") for op in grp] for p in range(P)]
    print(f"{checked} schedules (P 2..{max_p}, V 1..{max_v}, M 1..{max_m}; GPipe, 1F1B, evaluation): "
          f"{stuck} deadlock(s); one message per group instead, PP=2 1F1B M=2: "
          f"{'completes' if completes(ungrouped) else 'deadlocks'}")
    return 1 if stuck else 0


if __name__ == "__main__":
    sys.exit(main())
