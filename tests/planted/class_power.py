"""The law test's power against classes of bugs, engine-free: a table by class and path.

    python -m tests.planted.class_power --case toy --instances 4 --runs 10
    python -m tests.planted.class_power --case trained --paths sampled --classes coins --runs 3

For each path (decode.PATHS) and class (bug_classes.CLASSES), `--instances` instances drawn from
`--seed`, each planted (bug_classes.Instance.planted) while decode.py samples what the chain's
law test asks a server for (law_case.py: 64 completions of 24 tokens and 512 of one block a
setting, law_matrix.SETTINGS), `--runs` times; the judge the server tests use (law_matrix.judge,
with the acceptance pattern a step record gives) fails the path's test when some setting's p is
at most law_matrix.PASS. Class `none` is the unplanted verify: its failures are false alarms.
Prints a JSON line a run and a Markdown table at the end (`make law-power`); docs/reliability.md
keeps it.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from ..server.law_case import COMPLETIONS, FIRST_BLOCKS
from ..server.law_matrix import PASS, SETTINGS, judge
from ..server.law_sampled import SampledDrafter
from .bug_classes import CLASSES, POWERED, draw, variants
from .decode import PATHS, decode
from .toy_pair import toy_case


def case(name: str):
    """(target, drafter, prompt): the toy pair, or the chain law case's trained pair."""
    if name == "toy":
        return toy_case()
    from ..server.law_case import trained_case

    _, target, drafter, prompt = trained_case()
    return target, drafter, prompt


def law_test(target, drafter, prompt, path: str, generator, settings=SETTINGS, stop: bool = True) -> dict:
    """One run of the path's law test, decoded engine-free: {setting: p}; `stop`: at the first
    setting that fails (the test has failed)."""
    # The judge sees point drafts (read back), a sampled chain's q, and nothing of a tree's drafts
    # (a tree server's test: its draws are the target's alone, tree/verify.py).
    judged = (
        None
        if path == "tree"
        else drafter
        if path == "point"
        else SampledDrafter(drafter, block_verified=path == "block")
    )
    out = {}
    for name in settings:
        setting = SETTINGS[name]
        main = decode(target, drafter, prompt, setting.params, COMPLETIONS, 24, path, generator)
        first = decode(
            target, drafter, prompt, setting.params, FIRST_BLOCKS, drafter.block_size, path, generator
        )
        p = judge(
            setting, target, prompt, main.completions, judged, first.completions, main.steps, first.steps
        )[0]
        out[name] = p
        if stop and p <= PASS:
            break
    return out


def runs(instance, target, drafter, prompt, path: str, count: int, seed: int) -> dict:
    """`count` runs of the path's law test with `instance` planted (None: unplanted, every setting)."""
    failed, nats, start = 0, [], time.monotonic()
    for run in range(count):
        generator = torch.Generator().manual_seed(1000 * seed + run)
        if instance is None:
            ps = law_test(target, drafter, prompt, path, generator, stop=False)
        else:
            ps = planted_law_test(instance, target, drafter, prompt, path, generator)
        failed += min(ps.values()) <= PASS
        nats.append(evidence(ps))
    what = "unplanted" if instance is None else instance.what
    return {"instance": what, "runs": count, "failed": failed, "nats": [round(x, 1) for x in nats],
            "seconds": round(time.monotonic() - start)}  # fmt: skip


def planted_law_test(instance, target, drafter, prompt, path: str, generator) -> dict:
    """law_test with `instance` planted; a run the planted verify kills (a law with no token left
    to draw: torch.multinomial raises, as a server's scheduler would die) fails the test: p 0."""
    try:
        with instance.planted():
            return law_test(target, drafter, prompt, path, generator)
    except RuntimeError as error:
        if "probability tensor" not in str(error):
            raise
        return {"the run died": 0.0}


def evidence(ps: dict) -> float:
    """log(1 / the smallest p) in nats (the test fails at log(1 / PASS)); 0 p counts as 700."""
    smallest = min(ps.values())
    return 700.0 if smallest <= 0 else -math.log(smallest)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("toy", "trained"), default="toy")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--classes", default="none," + ",".join(CLASSES))
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="the instances' seed")
    parser.add_argument(
        "--powered", action="store_true", help="CI's draws: bug_classes.POWERED, stronger half"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    target, drafter, prompt = case(args.case)
    rows = []
    for path in args.paths.split(","):
        for bug_class in args.classes.split(","):
            kinds = [None] if bug_class == "none" else variants(bug_class, path)
            if args.powered and bug_class != "none":
                kinds = POWERED[bug_class].get(path, [])
            for how in kinds:
                for k in range(args.instances if how else 1):
                    instance = how and draw(
                        bug_class, path, args.seed + k, drafter.block_size, how, args.powered
                    )
                    row = runs(instance, target, drafter, prompt, path, args.runs, args.seed + k)
                    row = {"case": args.case, "path": path, "class": bug_class, "variant": how or "", **row}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Markdown: a row an instance, the runs whose law test failed and the evidence's range."""
    head = f"| path | class | variant | instance | failed | nats (the test fails at {-math.log(PASS):.1f}) |"
    lines = [head, "|---|---|---|---|---|---|"]
    for row in rows:
        nats = row["nats"]
        lines.append(f"| {row['path']} | {row['class']} | {row['variant']} | {row['instance']} | "
                     f"{row['failed']} of {row['runs']} | {min(nats):.0f} to {max(nats):.0f} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
