"""What the width survey's entries share (tests/planted/width_survey.py): the files they edit, the
one text two functions of acceptance_profiles.py share, and `survey`, an entry's constructor."""

from __future__ import annotations

from .bugs import Bug

CONTROLLER = "width/controller.py"
RANKING = "width/ranking.py"
STEP_COST = "width/step_cost.py"
STEP_TIMES = "width/step_times.py"
LENGTHS = "width/request_lengths.py"
PROFILES = "width/acceptance_profiles.py"
SWITCH = "width/runtime_switch.py"
SIGNAL = "width/signal.py"

# A chain's and a tree's expected_tokens read alike: told apart by the docstring that follows.
AT_WIDTH, AT_WIDTH_BELOW = (
    "return self.expected_tokens_at([width])[0]",
    "return self.expected_tokens_at([width - 1])[0]",
)
NEXT_DEF = "\n\n    def expected_tokens_at(self, widths: Sequence[int]) -> list[float]:\n        "


def survey(function: str, file: str, old: str, new: str, what: str, paths: str = "chain, tree (adaptive)"):
    return function, Bug(file, old, new, what, paths)
