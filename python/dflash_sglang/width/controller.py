"""The verify width's controller: how many of the drafted block's positions a decode step
verifies (docs/adaptive.md).

The drafter always drafts its whole block B in one forward; the step may verify only the first w
positions (1 <= w <= B): the verified token and w - 1 drafts. w = 1 is plain decoding through the
verify path (the bonus token only). Whatever w is, the step stays exact: the target verifies what
it is given and the commit keeps the longest correct prefix plus one token of its own.

One width per batch: SGLang's verify forward, its CUDA graphs and the scheduler's result unpacking
(`speculative_num_draft_tokens` is the row stride) take one `draft_token_num` per batch. Every TP
rank must choose the same width (the verify collectives would desynchronise otherwise): the
choice depends only on the step count and host state every rank shares. Under attention DP the
scheduler announces each rank's token count as bs x B before the step, so the width stays B.

Trees (`--speculative-eagle-topk K > 1`): a width w is a tree of w nodes, budget w - 1, up to the
N of `--speculative-num-draft-tokens`; the policy considers the budgets of tree/budgets.py, and
with per-request lengths gives each request its own (request_lengths.tree_request_lengths).

Switches: the adaptive width chooses each step's width by expected committed tokens per second
(width/ranking.py, from width/acceptance_profiles.py's per-request acceptance and
width/step_times.py's measured step times; rank 0's choice on every TP rank). It is on by default
wherever no width would lose a graph: the target's verify runs without graphs (CPU,
`--disable-cuda-graph`) and no attention DP.
`DFLASH_SGLANG_ADAPTIVE_WIDTH=0` turns it off (every step verifies the whole block), `=1` on
(GPU graphs included: narrower steps then verify eager). `DFLASH_SGLANG_VERIFY_WIDTHS="8,1,4"`
forces a cycle of widths step by step (a testing and benchmarking switch: the
lossless-across-switching tests use it).
On a running server, `/set_internal_state` fixes the width or lets the policy choose again, and
turns per-request lengths off and on (width/runtime_switch.py).
"""

from __future__ import annotations

import logging
from collections import Counter

from ..environment import ADAPTIVE_WIDTH, REQUEST_LENGTHS, VERIFY_WIDTHS
from ..errors import DFlashConfigError
from ..runtime import dp_attention
from ..runtime.step_plan import StepPlan
from ..tree.budgets import tree_widths
from .acceptance_profiles import RequestAcceptance, TreeAcceptance, pool_forget
from .plain_hold import PlainHold
from .ranking import plain_could_win, ranked_widths, worth_a_look
from .request_lengths import (
    LENGTHS_ENV,
    TREES_ONE_BUDGET,
    RequestLengths,
    drafted_rows,
    env_cycle,
    forced_lengths,
    forced_request_lengths,
    per_request_requested,
    request_lengths,
    tree_request_lengths,
)
from .runtime_switch import WIDTH, PolicyLedger
from .signal import WidthSignal
from .step_times import StepTimes

logger = logging.getLogger(__name__)

WIDTHS_ENV, ADAPTIVE_ENV = VERIFY_WIDTHS.name, ADAPTIVE_WIDTH.name
REPORT_EVERY = 100  # steps between log lines of the widths that ran (SGLang logs decode every 40)
# Every so many adaptive steps, the best-rated candidate wider than the choice: a step verifies
# only its own width's drafts (and is timed at its own width), so without it a policy that settled
# narrow (plain decoding above all, which tests no draft) would never see the drafts or the
# costs beyond it. Best-rated, not the next wider: drafts that never fit explore width 2, while a
# tree settled at 5 nodes explores the 16 its estimates nearly favour.
EXPLORE_EVERY = 16
# ... while plain decoding is rated best for the whole batch, each exploring step doubles the
# interval to the next, up to this: drafts that never fit paid one drafted step in 16 for nothing
# (each about 1.7x a plain step, at batch 16 and block 16). A step that rates a drafted
# width best starts it over at EXPLORE_EVERY.
EXPLORE_AT_MOST_EVERY = 64
# Until the widest has run this often, every EXPLORE_FIRST_EVERY-th step explores it instead:
# one widest step shows what every narrower width would have accepted (a chain's positions, a
# tree's smaller budgets), so the estimates stop leaning on the prior early. Without it a tree
# server climbed from 5 nodes to its best 16 only after about 400 steps.
WIDEST_FIRST, EXPLORE_FIRST_EVERY = 8, 4
# ... where the widest's estimated rate is at least this share of the best's. A new server pays for
# every exploring step while its users wait: drafts that never fit made the first burst of 16
# concurrent requests at block 16 run at 0.68x no-spec, a quarter of its first steps verifying
# 256 tokens to learn what one step had shown.
WIDEST_WORTH = 0.75
# A batch size's first drafted step verifies the widest where the drafts are expected to commit at
# least this many tokens a request there: its own point then prices every width of that batch size.
# Priced from other batch sizes' points through the token curve instead, a new server's first
# burst (16 requests, a good drafter, block 8) priced width 8 at 130 ms from batch 1's steps where
# it took 55, and verified 2-4 of 8 for dozens of steps. Drafts that do not fit never pay for it.
NEW_BATCH_WIDEST_TOKENS = 1.5


def drafts_fit(ranked, widest: int, batch_size: int) -> bool:
    """The widest's expected tokens a request reach NEW_BATCH_WIDEST_TOKENS."""
    estimate = next(e for e in ranked if e.width == widest)
    return estimate.tokens >= NEW_BATCH_WIDEST_TOKENS * batch_size


def adaptive_requested(by_default: bool = False) -> bool:
    """The switch: `1` on, `0` off, unset (or empty) `by_default`."""
    on = ADAPTIVE_WIDTH.value()
    if on is None:
        return by_default and not dp_attention.enabled()
    if on and dp_attention.enabled():
        raise DFlashConfigError(f"{ADAPTIVE_ENV} with --enable-dp-attention: DP ranks verify whole blocks")
    return on


def adaptive_default_off_because(model_runner) -> str | None:
    """Why the adaptive width is off by default on this server, or None where it is on: a width
    narrower than the widest runs its verify eager, so it defaults on only where no verify has a
    graph to lose (per-width verify graphs are not built yet). On CPU SGLang captures none for
    speculative decoding (its CPUGraphRunner refuses it)."""
    if getattr(model_runner, "decode_cuda_graph_runner", None) is not None:
        return "the target's verify runs graphs"
    return None


def forced_widths(widest: int) -> tuple[int, ...]:
    """The forced cycle of widths, or () when none is set; each must be in 1..widest."""
    widths = env_cycle(VERIFY_WIDTHS, widest, "width")
    if widths and dp_attention.enabled():
        raise DFlashConfigError(f"{WIDTHS_ENV} with --enable-dp-attention: DP ranks verify whole blocks")
    return widths


# Why a policy built without a server's reasons (a unit test's) keeps the adaptive width off.
OUTSIDE_A_SERVER = "no server gave its reasons"


class VerifyWidth:
    """The width of every decode step: the widest (the block, or a tree's N nodes), the forced
    cycle, or the adaptive choice."""

    def __init__(
        self, block_size: int, device="cpu", tp_group=None, tree_nodes: int | None = None,
        default_off_because: str | None = OUTSIDE_A_SERVER, metrics: bool = False, tp_rank: int = 0,
        ragged_off_because: str | None = "per-request lengths not asked for", partial_drafter: bool = False,
    ):  # fmt: skip
        """default_off_because: why the adaptive width is off unless asked for (None: on unless
        asked off; adaptive_default_off_because); metrics: SGLang's --enable-metrics;
        ragged_off_because: why this server cannot verify per-request lengths (None: it can);
        partial_drafter: a ragged step drafts only for the requests verifying drafts."""
        self.widest, self.tp_group = tree_nodes or block_size, tp_group
        self.pattern = forced_widths(self.widest)
        self.adaptive = not self.pattern and adaptive_requested(by_default=default_off_because is None)
        self.default_off_because = default_off_because
        self.candidates = tree_widths(self.widest) if tree_nodes else range(1, block_size + 1)
        self.acceptance = None
        if self.adaptive:
            self.acceptance = (
                TreeAcceptance(self.candidates, block_size - 1, device, pool_forget=pool_forget())
                if tree_nodes
                else RequestAcceptance(block_size - 1, pool_forget=pool_forget())
            )
        self.times = StepTimes(device) if self.adaptive else None
        self.signal = WidthSignal(metrics, tp_rank) if self.adaptive else None
        self.steps, self.ran, self.step_started, self.ran_widest = 0, Counter(), None, 0
        self.explore_every, self.next_explore = EXPLORE_EVERY, EXPLORE_EVERY - 1
        # Ragged steps among them, and the requests' own lengths there (request-steps by length).
        self.ragged_steps, self.ran_lengths = 0, Counter()
        self.probed: set[int] = set()  # batch sizes the widest has been chosen at
        # Per-request lengths (width/request_lengths.py): the adaptive choice's exploiting steps,
        # or a forced testing cycle.
        self.forced_lengths = forced_request_lengths(self.widest, ragged_off_because)
        self.per_request = self.adaptive and per_request_requested(ragged_off_because, not tree_nodes)
        self.trees = bool(tree_nodes)
        self.ragged_off_because = ragged_off_because
        self.partial_drafter = partial_drafter
        self.last_view = None  # (batch size, the ranked estimates) of the latest adaptive choice
        self.plain_hold = PlainHold()  # a ranking that chose plain decoding, held a few steps
        self.ledger = PolicyLedger()  # the policy switched at runtime (width/runtime_switch.py)

    @property
    def describe(self) -> str:
        if self.forced_lengths:
            return f"forced per-request lengths {list(self.forced_lengths)}"
        if self.pattern:
            return f"forced cycle {list(self.pattern)}"
        explicit = ADAPTIVE_WIDTH.value() is not None
        if self.adaptive:
            how = "adaptive" if explicit else f"adaptive (the default here; {ADAPTIVE_ENV}=0 turns it off)"
            if self.per_request:
                partial = ", drafting only requests that verify drafts" if self.partial_drafter else ""
                return f"{how}, per request ({LENGTHS_ENV}=0: one width a batch{partial})"
            asked_off = REQUEST_LENGTHS.value() is not None  # else a tree's default
            why = self.ragged_off_because
            if why is None:  # it could, but was asked not to (or a tree's default)
                why = f"{LENGTHS_ENV}=0" if asked_off or not self.trees else TREES_ONE_BUDGET
            return f"{how}, one width a batch ({why})" if self.widest > 1 else how
        if explicit or self.default_off_because is None:
            return "the block size"
        why = self.default_off_because
        return f"the block size (adaptive off by default: {why}; {ADAPTIVE_ENV}=1 turns it on)"

    def switch(self, key: str, value) -> None:
        """A runtime switch (width/runtime_switch.py; `refusal` checked it), from the next step."""
        self.ledger.switched(key, int(value))
        if key == WIDTH:
            self.ledger.fixed_width = int(value) or None
        else:
            self.per_request = bool(value)

    def choose(self, batch) -> StepPlan:
        """The step's plan: its width, and each request's length where they differ."""
        if self.ledger.fixed_width:  # as a server started with DFLASH_SGLANG_VERIFY_WIDTHS=N
            width = self.ledger.fixed_width
            if self.acceptance is not None and width < self.widest:
                # paired with its width: a step the policy has no width for counts as the widest's
                self.acceptance.profiles(batch.reqs)
                self.acceptance.verified(batch.reqs, width)
            self.ledger.count(width, ragged=False)
            return self.plan(width)
        lengths = None
        if self.forced_lengths:
            lengths = forced_lengths(self.forced_lengths, self.steps, len(batch.reqs), self.widest)
            # ragged only where they differ
            width, lengths = lengths.width, None if lengths.uniform else lengths
        elif self.pattern:
            width = self.pattern[self.steps % len(self.pattern)]
        elif self.adaptive:
            width, lengths = self.adaptive_choice(batch)
        else:
            self.ledger.count(self.widest, ragged=False)
            return self.plan(self.widest)
        self.steps += 1
        self.ran[width] += 1
        self.ledger.count(width, ragged=lengths is not None)
        if lengths is not None:
            self.ragged_steps += 1
            self.ran_lengths.update(lengths.lengths)
        if self.steps % REPORT_EVERY == 0:
            self.report()
        return self.plan(width, lengths)

    def plan(self, width: int, lengths: RequestLengths | None = None) -> StepPlan:
        """The step's plan; with the partial drafter, a ragged step drafts only its requests of
        length > 1."""
        per_request = None if lengths is None else lengths.lengths
        drafted = drafted_rows(per_request) if self.partial_drafter else None
        drafted = None if drafted is None else tuple(drafted)
        return StepPlan(width, width == self.widest, per_request, self.trees, drafted)

    def report(self) -> None:
        """What ran, when the width varies: a log line every REPORT_EVERY steps."""
        logger.info("dflash_sglang: verify widths of the last %d steps: %s", REPORT_EVERY, dict(self.ran))
        if self.ragged_steps:  # which requests verified how much, in the ragged steps
            logger.info(
                "dflash_sglang: per-request lengths in %d of them (request-steps by length): %s",
                self.ragged_steps, dict(sorted(self.ran_lengths.items())),
            )  # fmt: skip
            self.ragged_steps = 0
            self.ran_lengths.clear()
        if self.signal is not None:  # plain decoding for most of the load, in the log and metrics
            self.signal.report(self.ran, self.acceptance.recent_accepted_drafts(), self.widest)
        if self.last_view is not None:  # why: the latest choice's estimates, best first
            bs, ranked, fixed_share = self.last_view
            logger.info(
                "dflash_sglang: adaptive width estimates at batch %d: %s (partial steps: fixed %.2f)",
                bs, ", ".join(map(str, ranked)), fixed_share,
            )  # fmt: skip
        self.ran.clear()

    def adaptive_choice(self, batch) -> tuple[int, RequestLengths | None]:
        profiles = self.acceptance.profiles(batch.reqs)
        batch_size, lengths = len(batch.reqs), None
        widest_turn = self.steps % EXPLORE_FIRST_EVERY == EXPLORE_FIRST_EVERY - 1
        early_widest = self.ran_widest < WIDEST_FIRST and widest_turn  # a turn to look at the widest
        if not early_widest and self.plain_hold.holds(batch.reqs, self.steps, self.next_explore):
            width = 1  # plain ranked first for these requests a few steps ago
        elif (curve := self.times.curve()) is None:  # time the whole block, half of it and plain first
            width = self.times.unmeasured_width(batch_size, self.candidates) or self.widest
        else:
            ranked = ranked_widths(profiles, curve, self.candidates)
            self.last_view = (batch_size, ranked, curve.partial_fixed)
            width = ranked[0].width
            if self.times.unmeasured_plain(batch_size) and plain_could_win(ranked, curve, batch_size):
                width = 1  # one cheap step a new batch size, where plain decoding could win
            elif batch_size not in self.probed and drafts_fit(ranked, self.widest, batch_size):
                width = self.widest  # its own point prices this batch size's widths
            elif early_widest and worth_a_look(ranked, self.widest, WIDEST_WORTH):
                width = self.widest
            elif self.steps >= self.next_explore:
                width = next((e.width for e in ranked if e.width > width), width)
                self.explore_later(plain_wins=ranked[0].width == 1)
            elif ranked[0].width > 1 and self.explore_every > EXPLORE_EVERY:
                self.drafting_wins()
            if self.per_request and width == ranked[0].width:  # not exploring: each its own
                lengths = (
                    tree_request_lengths(profiles, curve, self.candidates)
                    if self.trees
                    else request_lengths(profiles, curve, self.widest, partial_drafter=self.partial_drafter)
                )
            if ranked[0].width == width == 1 and (lengths is None or lengths.width == 1):
                self.plain_hold.hold(batch.reqs, self.steps)
            else:
                self.plain_hold.release()
        if self.tp_group is not None and self.tp_group.world_size > 1:
            # rank 0's timings decide for all
            width, lengths = self.tp_group.broadcast_object((width, lengths))
        if lengths is not None and lengths.uniform:
            width, lengths = lengths.width, None
        elif lengths is not None:
            width = lengths.width
        if lengths is None:
            self.ran_widest += width == self.widest  # what ran, the same on every rank
            if width == self.widest:
                self.probed.add(batch_size)
            self.acceptance.verified(batch.reqs, width)
            self.step_started = self.times.start(batch_size, width)
        else:  # timed by its own tokens, and by batch size at the nearest whole width
            self.acceptance.verified(batch.reqs, width, lengths.lengths)
            total, rows = lengths.total, drafted_rows(lengths.lengths)
            drafted = len(rows) if self.partial_drafter and rows is not None else None  # part of the batch
            self.step_started = self.times.start(
                batch_size, max(2, round(total / batch_size)), total, drafted
            )
        return width, lengths

    def explore_later(self, plain_wins: bool) -> None:
        """An exploring step: the next one further off while plain decoding wins, else at
        EXPLORE_EVERY."""
        self.explore_every = (
            min(2 * self.explore_every, EXPLORE_AT_MOST_EVERY) if plain_wins else EXPLORE_EVERY
        )
        self.next_explore = self.steps + self.explore_every

    def drafting_wins(self) -> None:
        """A step rating a drafted width best: exploring at EXPLORE_EVERY again."""
        self.explore_every = EXPLORE_EVERY
        self.next_explore = min(self.next_explore, self.steps + EXPLORE_EVERY)

    def step_done(self, plan: StepPlan | None = None, reqs=(), verified=None) -> None:
        """The decode step `plan` has been issued in full: what its verify learned (`verified`,
        step/verifying.Verified: a tree's walk, what each budget would have accepted), and its
        time (adaptive only)."""
        walk = None if verified is None else verified.path_rows  # a tree's accepted node a depth
        if walk is not None and isinstance(self.acceptance, TreeAcceptance):  # adaptive, with trees
            self.acceptance.walked(reqs, walk, verified.accepted.lengths, plan.lengths)
        if self.step_started is not None:
            self.times.stop(self.step_started)
            self.step_started = None
