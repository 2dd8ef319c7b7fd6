"""Tree verification in the decode step (DDTree, arXiv 2604.12989; docs/tree.md).

The drafter's one forward gives a distribution at every block position; instead of their argmax
chain, the step verifies the `width - 1` most probable prefixes (tree/batch.py builds them on the
device) in one TARGET_VERIFY forward with an ancestor mask, then walks the target's predictions
down the tree. Around the chain step it changes three things:

    draft    the block holds the tree's N nodes (node 0 = the verified token) in N reserved slots
    verify   node i sits at position seq_len + depth[i] and sees the prefix and its ancestors
             (`DFlashVerifyInput.custom_mask` in the layout EAGLE trees use on the device:
             QLEN_ONLY on CPU, FULL_MASK on GPU backends); recurrent layers of hybrid targets
             follow EAGLE's first-child / next-sibling links (step/hybrid.py)
    accept   the accepted root path, moved to the front of the block: its target KV to slots
             seq_len.., its logits and captured features to rows 0.., so the chain's commit
             (injection, request outputs, lengths) runs unchanged

At temperature > 0 every node draws one sample of the target's law and the walk descends while
the sample is a child's token (the target-only rule: exact for deterministic children).
"""

from __future__ import annotations

import logging

import torch
from sglang.srt.arg_groups.model_override_base import attention_backends_of  # (prefill, decode)
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import TreeMaskMode

from ..errors import DFlashConfigError
from ..runtime.block import Block, block_kv_plan
from ..sampling.accept import Acceptance
from .batch import BatchTree, build_batch_trees, follow_batch, path_tokens
from .switches import TreeSettings

logger = logging.getLogger(__name__)

# GPU backends whose TARGET_VERIFY reads `spec_info.custom_mask` (FULL_MASK) whatever the topk
# SGLang resolved (1 under DFLASH). fa3's tree path is keyed to topk > 1 and trtllm_mha ignores
# custom masks, so they would verify the tree as a chain: refused at startup.
MASK_BACKENDS = ("triton", "flashinfer")


def prepare(settings: TreeSettings, block_size: int, server_args, model_runner, one_path: bool) -> DraftVocab:
    """At startup: refuse what the tree path does not serve yet; the drafter's vocabulary.
    `one_path`: the drafter picks its own path (DFlash2, Domino: docs/tree.md)."""
    refuse_unsupported_setups(settings, block_size, server_args, one_path)
    hybrid = mambaish_config(model_runner.model_config) is not None
    backends = "/".join(sorted({str(name) for name in attention_backends_of(server_args)}))
    logger.info("DFLASH tree verification: the %s attention backend verifies the tree (%s mask)%s",
                backends, mask_mode(server_args.device).name,
                "; the recurrent layers follow its parent links" if hybrid else "")  # fmt: skip
    lm_head = model_runner.model.lm_head  # vocab-parallel over its own group, as the chain's argmax
    group = getattr(lm_head, "tp_group", get_parallel().tp_group)
    return DraftVocab(lm_head, group, model_runner.model_config.vocab_size)


def refuse_unsupported_setups(settings: TreeSettings, block_size: int, server_args, one_path=False):
    """What the tree path does not serve yet fails at startup, naming the options."""
    option = f"--speculative-eagle-topk {settings.max_children} (DFLASH tree verification)"
    if settings.width < block_size:
        raise DFlashConfigError(
            f"{option}: --speculative-num-draft-tokens {settings.width} is below the drafter's block "
            f"{block_size}; the drafter writes its whole block into the verify window. Raise N or set "
            "--speculative-dflash-block-size"
        )
    refusals = {  # docs/tree.md says why each is refused
        "--enable-dp-attention": server_args.enable_dp_attention,
        "--speculative-draft-window-size": server_args.speculative_draft_window_size is not None,
        "--disaggregation-mode": server_args.disaggregation_mode not in (None, "null"),
        "a DFlash2 or Domino drafter (it drafts one path of its own)": one_path,
    }
    for what, present in refusals.items():
        if present:
            raise DFlashConfigError(f"{option} with {what}: not supported yet; drop one of the two")
    for name in attention_backends_of(server_args) if server_args.device != "cpu" else ():
        if name not in MASK_BACKENDS:
            raise DFlashConfigError(
                f"{option} with --attention-backend {name}: it does not read the verify's custom mask "
                f"under DFLASH, so it would verify the tree as a chain; use {' or '.join(MASK_BACKENDS)}"
            )


def attach_chain_links(verify_input, batch_size: int, width: int, device) -> None:
    """A tree server's step without a tree (plain decoding at width 1): the recurrent layers of a
    hybrid target still read links once a tree runs, so give them the chain's (each node's child
    is the next one)."""
    nodes = torch.arange(width, device=device)
    next_token = torch.where(nodes + 1 < width, nodes + 1, -1).expand(batch_size, width)
    verify_input.retrieve_next_token = next_token.contiguous()
    verify_input.retrieve_next_sibling = torch.full_like(verify_input.retrieve_next_token, -1)


def mask_mode(device: str) -> TreeMaskMode:
    """SGLang's default_tree_mask_mode, by the device the step runs on (SGLang decides it from the
    machine at import): QLEN_ONLY for the CPU kernels, FULL_MASK for the GPU backends."""
    return TreeMaskMode.QLEN_ONLY if device == "cpu" else TreeMaskMode.FULL_MASK


class DraftVocab:
    """The drafter's log q over the whole vocabulary, through the target's LM head (untempered).

    Under TP the head is vocab-parallel: each rank holds a contiguous shard of the vocabulary (its
    tail rows padding). Every rank's (start, count) is read once here, at startup, so a step
    gathers the shards' logits into whole rows with no host read, and every rank builds the same
    tree from the same rows."""

    def __init__(self, lm_head, tp_group, vocab: int):
        self.weight, self.group, self.vocab = lm_head.weight, tp_group, vocab
        shard = getattr(lm_head, "shard_indices", None)
        self.counts = None  # unsharded
        if shard is not None and tp_group is not None and tp_group.world_size > 1:
            mine = torch.tensor(
                [[shard.org_vocab_start_index, shard.num_org_elements]], device=self.weight.device
            )
            shards = tp_group.all_gather(mine, dim=0).tolist()
            starts = [start for start, _ in shards]
            self.counts = [count for _, count in shards]
            if starts != [sum(self.counts[:r]) for r in range(len(shards))]:
                raise DFlashConfigError(f"DFLASH tree verification: the LM head's vocabulary shards {shards} "
                                        "are not contiguous in rank order")  # fmt: skip

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """[bs, L, H] drafter features -> [bs, L, V] log q."""
        if self.counts is None:
            logits = hidden.to(self.weight.dtype) @ self.weight[: self.vocab].T
        else:
            local = hidden.to(self.weight.dtype) @ self.weight.T  # this rank's shard, padding included
            shards = self.group.all_gather(local.unsqueeze(0), dim=0)  # [tp, bs, L, shard rows]
            logits = torch.cat(
                [shard[..., :count] for shard, count in zip(shards, self.counts, strict=True)], -1
            )
            logits = logits[..., : self.vocab]
        return torch.log_softmax(logits.float(), dim=-1)


def build_trees(
    settings: TreeSettings, verified: torch.Tensor, logprobs: torch.Tensor, width: int
) -> BatchTree:
    """Trees of `width` nodes (the step's verify width, at most N: tree/budgets.py)."""
    return build_batch_trees(verified, logprobs, width - 1, settings.max_children)


def tree_block(tree: BatchTree, batch, req_to_token, translator, draft_translator, host_lens) -> Block:
    """The step's block for a tree: its N nodes in the N slots after each request's prefix."""
    bs, n = tree.tokens.shape
    positions = batch.seq_lens.unsqueeze(1) + torch.arange(n, device=tree.tokens.device)
    cache_loc = req_to_token[batch.req_pool_indices.unsqueeze(1), positions].flatten()
    kv_plan = block_kv_plan(translator, batch, host_lens, cache_loc, n)
    draft_loc = kv_plan.write_ids(draft_translator).view(bs, n)
    # `positions` are the chain's (what the commit injects at); the verify reads the tree's.
    return Block(tree.tokens, positions.flatten(), cache_loc, kv_plan, draft_loc, tree)


def attach(verify_input, tree: BatchTree, seq_lens: torch.Tensor, prefix_bound: int, rows=None) -> None:
    """The tree on SGLang's verify input, as EAGLE's tree verify carries it: node positions
    seq_len + depth, the ancestor mask in the device's layout, and the first-child / next-sibling
    links the recurrent layers of a hybrid target read. `prefix_bound`: at least sum(seq_lens)
    (a FULL_MASK may be longer than its rows: the backends index it from the device lengths).
    `rows`: per-request lengths (step/ragged.py), each request its first L_i nodes (CPU only:
    worker ragged_off_because keeps GPU backends, whose masks take N nodes a request, uniform)."""
    positions = tree.positions(seq_lens).flatten()
    verify_input.positions = positions if rows is None else positions[rows.keep]
    if rows is not None:
        verify_input.custom_mask = tree.ragged_mask(rows.lengths_cpu)
    elif mask_mode(tree.tokens.device.type) == TreeMaskMode.QLEN_ONLY:
        verify_input.custom_mask = tree.ancestor_mask().flatten()
    else:
        verify_input.custom_mask = tree.full_mask(seq_lens, prefix_bound)
    verify_input.retrieve_next_token, verify_input.retrieve_next_sibling = tree.retrieve_arrays()


def accept(tree: BatchTree, target_tokens: torch.Tensor, lengths=None) -> tuple[Acceptance, torch.Tensor]:
    """The walk: (the chain-layout acceptance, padded to [bs, N]; the row each front position
    takes: the accepted path's nodes, then the rest in place). `lengths`: per-request lengths,
    each request walking its first lengths[i] nodes (the rest were not verified)."""
    walk = follow_batch(tree if lengths is None else tree.truncated(lengths), target_tokens)
    chain = path_tokens(tree, walk)
    bs, n = target_tokens.shape
    depth = walk.accept_index.shape[1]  # L + 1
    front = torch.arange(n, device=target_tokens.device).expand(bs, n).clone()
    front[:, :depth] = torch.where(walk.accept_index >= 0, walk.accept_index, front[:, :depth])
    tokens = torch.nn.functional.pad(chain.tokens, (0, n - chain.tokens.shape[1]))
    return Acceptance(chain.lengths, tokens), front


def move_path_to_front(front: torch.Tensor, cache_loc: torch.Tensor, kv_pool, logits_output) -> None:
    """Target KV, logits and captured features of the accepted path to the block's first rows."""
    bs, n = front.shape
    src = cache_loc.view(bs, n).gather(1, front).flatten()
    # All N rows (off-path rows move onto themselves): fixed shapes, no host read of the lengths.
    kv_pool.move_kv_cache(cache_loc, src)  # gathers before it scatters: overlaps are safe
    rows = (front + torch.arange(bs, device=front.device).unsqueeze(1) * n).flatten()
    logits_output.next_token_logits = logits_output.next_token_logits.index_select(0, rows)
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states.index_select(0, rows)
