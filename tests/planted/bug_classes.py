"""Classes of sampling bugs, each a generator of random instances planted into the package's verify.

bugs.py plants named bugs, one edit each, into a copy of the package for a server. A judge tuned to
those can miss their neighbours (docs/reliability.md: a coin shared by a block's positions, drafts
not drawn from the q the verify is told, a residual off after a rejection). Here each class draws
an instance from a seed: a variant and its parameters, planted for the duration of a `with` by
replacing, in its module, a function the verify calls (plants.py: built from that very function),
so decode.py runs the product's verify with one thing wrong. The classes (issue 66), on a chain
(and on a tree, whose draws are the target's alone: its coins, p rows and bonus):

    coins       the acceptance coins correlated across a block's positions, requests, or steps
    draft law   the drafts drawn from another law than the q reported to the verify
    p rows      the target's law wrong at some block positions: temperature, filter, penalty
    residual    the draw after a rejection: q scaled, p mixed in, p at a power, the block's
                weight dropped, q read at another position
    bonus       the token after a whole block: from the last draft's row, at a power, from a residual
    acceptance  the p(d) the acceptance tests read: at a power, scaled

An instance's strength is drawn from a range a reviewer would call a bug (a temperature 10% to
50% off, a correlation of 0.5 or more), never from where it vanishes; docs/reliability.md has the
power against each class, by path, and what a weaker instance would cost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable
from unittest import mock

from dflash_sglang.sampling import penalties, sampled_drafts, sampled_verify, target_law
from dflash_sglang.tree import verify as tree_verify

from . import plants
from .decode import TREE_NODES

MODULES = {"drafts": sampled_drafts, "verify": sampled_verify, "penalties": penalties,
           "target_law": target_law, "tree": tree_verify}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Instance:
    bug_class: str
    variant: str
    what: str  # the variant and its drawn parameters, in words
    patches: tuple[tuple[str, str, Callable[[], object]], ...]  # (module, attribute, replacement factory)

    @contextlib.contextmanager
    def planted(self):
        """The instance planted (a fresh replacement each time: some keep state across steps)."""
        with contextlib.ExitStack() as stack:
            for module, name, make in self.patches:
                stack.enter_context(mock.patch.object(MODULES[module], name, make()))
            yield


class Strong(random.Random):
    """Draws as Random does, but `uniform(weak, strong)` from the stronger half of its range, and
    the rows a row class changes always include the first draft's (reached every step)."""

    strong = True

    def uniform(self, a: float, b: float) -> float:
        return super().uniform((a + b) / 2, b)


def away(rng: random.Random, low: float, high: float) -> float:
    """A factor between low and high (> 1), or its inverse: off by that much either way."""
    factor = rng.uniform(low, high)
    return factor if rng.random() < 0.5 else 1 / factor


def some_positions(rng: random.Random, block: int, bonus: bool = True) -> list[int]:
    """A non-empty random subset of the block's rows (0 .. B-1; B-1 the bonus row)."""
    rows = list(range(block if bonus else block - 1))
    chosen = set(rng.sample(rows, rng.randint(1, len(rows))))
    return sorted(chosen | ({0} if getattr(rng, "strong", False) else set()))


def one(bug_class: str, how: str, what: str, module: str, name: str, make: Callable[[], object]) -> Instance:
    """An instance that replaces one function: `make()` builds the replacement."""
    return Instance(bug_class, how, what, ((module, name, make),))


def coins(rng: random.Random, how: str, path: str, block: int) -> Instance:
    if how == "block":
        rho = rng.uniform(0.5, 0.95) * rng.choice([1, -1])
        what, make = f"a block's coins correlated, rho {rho:.2f}", lambda: plants.coins_within_block(rho)
    elif how == "requests":
        group = 0 if getattr(rng, "strong", False) else rng.choice([2, 4, 0])
        what = f"coins shared by {f'groups of {group} requests' if group else 'the whole batch'}"
        make = lambda: plants.coins_across_requests(group)  # noqa: E731
    else:
        keep = rng.uniform(0.5, 1.0)
        what = f"a batch row's coins kept from its last step with probability {keep:.2f}"
        make = lambda: plants.coins_across_steps(keep)  # noqa: E731
    if path == "tree":  # the uniforms of the target's draws at the nodes, not acceptance coins
        what = what.replace("a block's coins", "a request's node draws").replace("coins", "node draws")
        draws = lambda: plants.NodeDrawTorch(make().transform, TREE_NODES)  # noqa: E731
        return one("coins", how, what, "target_law", "torch", draws)
    return one("coins", how, what, "verify", "torch", make)


def draft_law(rng: random.Random, how: str, path: str, block: int) -> Instance:
    first = 1 if getattr(rng, "strong", False) else rng.randint(1, block - 2)
    value = {"temperature": away(rng, 1.25, 2.0), "argmax": first}.get(how, 0.0)
    what = {
        "temperature": f"drafts drawn at {value:.2f} x T, q reported at T",
        "argmax": f"drafts from position {int(value) + 1} on the argmax of q, q reported sampled",
        "unfiltered": "drafts drawn unfiltered, q reported filtered",
        "shifted": "draft i drawn from position i + 1's logits, q reported at i",
    }[how]
    return one(
        "draft law", how, what, "drafts", "draw_drafts", lambda: plants.drafts_drawn_otherwise(how, value)
    )


def p_rows(rng: random.Random, how: str, path: str, block: int) -> Instance:
    tree = path == "tree"  # its rows are nodes (0: the root)
    rows, where = some_positions(rng, TREE_NODES if tree else block), "tree nodes" if tree else "block rows"
    if how == "penalty":
        factor = rng.choice([0.0, rng.uniform(0.7, 0.3), rng.uniform(1.5, 2.5)])
        what = f"the frequency penalty x {factor:.2f} at {where} {rows}"
        name = "apply_tree_penalties" if tree else "apply_block_penalties"
        return one(
            "p rows", how, what, "penalties", name, lambda: plants.penalty_otherwise(rows, factor, name)
        )
    value = {"temperature": away(rng, 1.1, 1.5), "top_p": rng.uniform(-0.1, -0.3), "min_p": rng.uniform(2, 4)}
    value = value.get(how, 0.0)
    words = {"temperature": f"at {value:.2f} x T", "top_p": f"top_p {value:+.2f}",
             "min_p": f"min_p x {value:.2f}", "no filter": "unfiltered"}[how]  # fmt: skip
    what = f"the target's law {words} at {where} {rows}"
    module = "target_law" if tree else "verify"  # draw_every_row's row_laws, or the verify's
    return one("p rows", how, what, module, "row_laws", lambda: plants.rows_law_otherwise(rows, how, value))


def residual(rng: random.Random, how: str, path: str, block: int) -> Instance:
    if how == "q position":
        offset = rng.randint(1, block - 2)
        what = f"the residual's q read {offset} positions on"
        return one("residual", how, what, "verify", "rejected_q", lambda: plants.rejected_q_otherwise(offset))
    value = {"q scaled": rng.choice([rng.uniform(0.6, 0.0), rng.uniform(1.5, 3.0)]),
             "p mixed": rng.uniform(0.3, 1.0), "p power": away(rng, 1.25, 2.0)}.get(how, 1.0)  # fmt: skip
    if path == "point":  # q one-hot at the draft: the rejected draft's own row
        what, make = f"point drafts' residual: {how} {value:.2f}", plants.point_residual_otherwise
        return one("residual", how, what, "verify", "final_probs", lambda: make(how, value))
    what = f"the residual: {how} {value:.2f}"
    return one("residual", how, what, "verify", "final_law", lambda: plants.residual_otherwise(how, value))


def bonus(rng: random.Random, how: str, path: str, block: int) -> Instance:
    value = rng.uniform(0.3, 1.0) if how == "row" else away(rng, 1.25, 2.0)
    if path == "tree":
        what = f"the bonus, in {value:.2f} of the steps that accept a draft, the root's draw"
        return one("bonus", how, what, "tree", "follow_batch", lambda: plants.tree_bonus_from_the_root(value))
    name, made = plants.bonus_otherwise(how, value, path == "point")
    words = {"row": f"mixed {value:.2f} with the last draft's row", "power": f"at the power {value:.2f}",
             "residual": "from the residual of the last q"}[how]  # fmt: skip
    return one("bonus", how, f"the bonus {words}", "verify", name, lambda: made)


def acceptance(rng: random.Random, how: str, path: str, block: int) -> Instance:
    value = away(rng, 1.25, 2.0) if how == "power" else away(rng, 1.2, 1.6)
    words = f"p(d) ** {value:.2f}" if how == "power" else f"p(d) x {value:.2f}"
    what = f"the acceptance tests read {words}"
    return one(
        "acceptance", how, what, "verify", "draft_probs", lambda: plants.acceptance_otherwise(how, value)
    )


CLASSES = {
    "coins": coins,
    "draft law": draft_law,
    "p rows": p_rows,
    "residual": residual,
    "bonus": bonus,
    "acceptance": acceptance,
}
POINT, SAMPLED, BLOCK, TREE = ("point",), ("sampled",), ("block",), ("tree",)
ALL, DRAWN = POINT + SAMPLED + BLOCK, SAMPLED + BLOCK  # the chain's paths
# Each class's variants and the paths they apply to (point drafts have no draft law to get wrong,
# their residual has no q to scale or misplace; the prefix weight is block verification's; a tree
# has draws at its nodes, not coins, and its bonus is the draw at the last accepted node).
VARIANTS = {
    "coins": {"block": ALL + TREE, "requests": ALL + TREE, "steps": ALL + TREE},
    "draft law": {"temperature": DRAWN, "argmax": DRAWN, "unfiltered": DRAWN, "shifted": DRAWN},
    "p rows": {how: ALL + TREE for how in ("temperature", "top_p", "min_p", "no filter", "penalty")},
    "residual": {"q scaled": DRAWN, "p mixed": ALL, "p power": ALL, "q position": DRAWN, "no weight": BLOCK},
    "bonus": {"row": ALL + TREE, "power": ALL, "residual": DRAWN},
    "acceptance": {"power": ALL, "scale": ALL},
}


# The variants CI draws (tests/test_law_classes.py), from the stronger half of their ranges: each
# instance failed the chain's law test in every run of `make law-power` (docs/reliability.md has
# every variant, these and the rest, and what the rest would cost).
POWERED = {
    "coins": {"point": ["block", "requests", "steps"], "sampled": ["requests"], "tree": ["requests"]},
    "draft law": {path: ["temperature", "argmax", "shifted"] for path in DRAWN},
    "p rows": {path: ["temperature", "top_p", "min_p", "no filter"] for path in ALL + TREE},
    "residual": {
        "point": ["p mixed", "p power"],
        **{path: ["q scaled", "p mixed", "p power", "q position"] for path in DRAWN},
    },
    "bonus": {path: ["row"] for path in ALL + TREE},
    "acceptance": {path: ["power", "scale"] for path in ALL},
}


def variants(bug_class: str, path: str) -> list[str]:
    return [how for how, paths in VARIANTS[bug_class].items() if path in paths]


def draw(
    bug_class: str, path: str, seed: int, block: int = 4, how: str | None = None, powered: bool = False
) -> Instance:
    """The instance of `bug_class` on `path` (decode.PATHS) that `seed` picks: of variant `how`, or
    of any; `powered`: of those in POWERED, from the stronger half of its ranges (`Strong`)."""
    rng = (Strong if powered else random.Random)(f"{bug_class}/{path}/{how}/{seed}")
    kinds = POWERED[bug_class].get(path, []) if powered else variants(bug_class, path)
    return CLASSES[bug_class](rng, how or rng.choice(kinds), path, block)
