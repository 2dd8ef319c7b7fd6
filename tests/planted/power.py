"""How often the law judge of the server tests catches a planted bug: in-process detection rates.

    python -m tests.planted.power --runs 20                          # no bug: the false alarms
    python -m tests.planted.plant no_residual -- python -m tests.planted.power --runs 20
    python -m tests.planted.plant sampled_residual_from_p -- python -m tests.planted.power --sampled

Each run decodes, engine-free (simulate.py), what test_worker.py's law test asks a chain server
for (law_case.py: the trained pair at block 4, its prompt, law_matrix.SETTINGS, 64 completions of
24 tokens each); then judges them as the server test does (law_matrix.judge with the drafts
read back; `--sampled`: drafts sampled from q, as the sampled-draft server draws them, judged with
law_sampled.py's bug laws). A run is caught when any setting's law p-value is at most
law_matrix.PASS (the server test then fails). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from ..server.law_case import COMPLETIONS, trained_case
from ..server.law_matrix import PASS, SETTINGS, judge
from ..server.law_sampled import SampledDrafter
from .simulate import simulate_chain


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--n", type=int, default=COMPLETIONS, help="completions a setting")
    parser.add_argument("--max-new", type=int, default=24)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="law_matrix.SETTINGS names")
    parser.add_argument("--sampled", action="store_true", help="drafts sampled from q (the default at T > 0)")
    parser.add_argument("--blind", action="store_true", help="judge without the drafter (no draft laws)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    _, target, drafter, prompt = trained_case()
    if args.sampled:
        drafter = SampledDrafter(drafter)
    names = args.settings.split(",")
    caught, by_setting, smallest = 0, dict.fromkeys(names, 0), dict.fromkeys(names, 1.0)
    for run in range(args.runs):
        generator = torch.Generator().manual_seed(run)
        hit = False
        for name in names:
            setting = SETTINGS[name]
            params = setting.params
            completions = simulate_chain(target, drafter, prompt, params, args.n, args.max_new, generator)
            p = judge(setting, target, prompt, completions, None if args.blind else drafter)[0]
            smallest[name] = min(smallest[name], p)
            by_setting[name] += p <= PASS
            hit |= p <= PASS
        caught += hit
    print(json.dumps({
        "bug": os.environ.get("PLANTED_BUG", "none"), "drafts": "sampled" if args.sampled else "point",
        "blind": args.blind, "runs": args.runs, "caught": caught / args.runs,
        "by_setting": {k: v / args.runs for k, v in by_setting.items()},
        "smallest_p": {k: float(f"{v:.3g}") for k, v in smallest.items()},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
