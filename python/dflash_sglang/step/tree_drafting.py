"""Tree drafting: the drafter's block features turned into a tree of the step's width in nodes
(the `plan.width - 1` most probable prefixes, tree/verify.py builds them on the device), and the
tree's block: its nodes in the slots after each request's prefix. The chain's drafts:
step/chain_drafts.py."""

from __future__ import annotations

from ..runtime.block import Block
from ..runtime.step_plan import StepPlan
from ..tree import verify as tree_verify


class TreeBlocks:
    def __init__(self, settings, draft_vocab, model_runner, draft_runner):
        self.settings = settings  # tree/switches.py's TreeSettings (the node budget's children)
        self.draft_vocab = draft_vocab  # the drafter's log q over the vocabulary (tree_verify.prepare)
        self.model_runner, self.draft_runner = model_runner, draft_runner

    def __call__(self, batch, plan: StepPlan, verified, block: Block, hidden, host_lens) -> Block:
        """`hidden`: the drafter's features over the block; its mask positions' log q grow the trees."""
        logprobs = self.draft_vocab.logprobs(hidden[:, 1:])
        tree = tree_verify.build_trees(self.settings, verified, logprobs, plan.width)
        translators = (self.model_runner.kv_index_translator, self.draft_runner.kv_index_translator)
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        return tree_verify.tree_block(tree, batch, req_to_token, *translators, host_lens)
