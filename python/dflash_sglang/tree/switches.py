"""The tree switches, SGLang's own options as its open DFLASH tree PR (#31069) uses them:

    --speculative-eagle-topk K         K > 1 turns tree verification on: at most K children a node
    --speculative-num-draft-tokens N   the verify width: the node budget N - 1 plus the root
    --speculative-dflash-block-size B  the drafter's block (default: the drafter's config)

Without K > 1 nothing changes and the seed cards' commands stay chains. SGLang's `_handle_dflash`
forces topk to 1 and requires N == B; around it we resolve the chain SGLang knows (topk 1, N
verify tokens a step: its KV reservation, buffers and graphs size themselves by N) and the worker
reads K from the operator's raw input (`server_args._raw_input`, SGLang's own record of it).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass

from ..errors import DFlashConfigError

logger = logging.getLogger(__name__)

HANDLE_DFLASH = "sglang.srt.arg_groups.speculative_hook._handle_dflash"
CONV_WINDOW_DEDUP = "sglang.srt.mem_cache.memory_pool.conv_window_dedup_enabled"
RING_CHECK = "sglang.srt.arg_groups.attention_hook.handle_linear_attn_backend"
SOURCE = "dflash_sglang.tree.switches"

# (K, N) the operator asked for, from the BEFORE hook to the AFTER hook of one `_handle_dflash`.
_requested_width: ContextVar[tuple[int, int] | None] = ContextVar("requested_tree_width", default=None)


@dataclass(frozen=True)
class TreeSettings:
    max_children: int  # K: --speculative-eagle-topk
    width: int  # N: --speculative-num-draft-tokens, nodes verified per request, root included


def requested_topk(server_args) -> int:
    raw = getattr(server_args, "_raw_input", None) or {}
    topk = raw.get("speculative_eagle_topk")
    return 1 if topk is None else int(topk)


def tree_settings(server_args) -> TreeSettings | None:
    """The worker's view: None for a chain."""
    from sglang.srt.runtime_context import get_spec

    topk = requested_topk(server_args)
    if topk <= 1:
        return None
    return TreeSettings(max_children=topk, width=int(get_spec().speculative_num_draft_tokens))


def declare_a_chain(server_args):
    """BEFORE _handle_dflash: with topk > 1, SGLang's handler must see a chain: topk 1, and N
    unset so that it resolves the drafter's block (from --speculative-dflash-block-size or the
    drafter's config) without insisting N == B. The verify width N is kept for the AFTER hook."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    topk = requested_topk(server_args)  # the operator's: `chain_for_the_ring_check` may have declared 1
    if topk <= 1:
        _requested_width.set(None)
        return None
    width = cfg.speculative_num_draft_tokens
    if width is None or int(width) < 2:
        raise DFlashConfigError(
            f"--speculative-eagle-topk {topk} turns DFLASH tree verification on and needs "
            f"--speculative-num-draft-tokens N >= 2, the verify width (node budget + 1); got {width}"
        )
    _requested_width.set((int(topk), int(width)))
    declare_resolution(server_args, SOURCE, speculative_eagle_topk=1, speculative_num_draft_tokens=None)
    return None


def declare_the_tree_width(result, server_args):
    """AFTER _handle_dflash: the verify width N in the block's place (SGLang keeps topk 1: its
    KV reservation, buffers and graphs size themselves for a chain of N verify tokens)."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    requested = _requested_width.get()
    if requested is None:
        return result
    topk, width = requested
    block = int(resolving_view(server_args).speculative_num_draft_tokens)
    declare_resolution(
        server_args, SOURCE, speculative_num_draft_tokens=width, speculative_dflash_block_size=block
    )
    logger.info("dflash_sglang: DFLASH tree verification: at most %s children a node, %s nodes "
                "verified per request (root included), drafter block %d", topk, width, block)  # fmt: skip
    return result


def dense_conv_windows_for_trees(original, is_npu, is_cpu, speculative_eagle_topk, is_kda):
    """AROUND SGLang's choice of the hybrid pool's conv-window layout: its deduplicated layout
    overlaps step t's window with step t+1's, right for a chain and wrong for a tree (a node's
    window follows its parent, not the node before it); SGLang keeps dense windows for topk > 1,
    and a DFLASH tree resolves topk to 1, so the operator's K is passed instead."""
    from sglang.srt.runtime_context import get_server_args

    topk = max(speculative_eagle_topk or 1, requested_topk(get_server_args()))
    return original(is_npu, is_cpu, topk, is_kda)


def chain_for_the_ring_check(server_args):
    """BEFORE SGLang's linear-attention checks, which refuse its ReplaySSM ring for topk > 1 (its
    verify kernel replays a chain): a DFLASH tree's verify through the ring is ours
    (tree/replay_ring.py, parent pointers), so the check sees the chain SGLang will run anyway."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    if (
        cfg.speculative_algorithm == "DFLASH"
        and cfg.enable_linear_replayssm_spec
        and requested_topk(server_args) > 1
    ):
        declare_resolution(server_args, SOURCE, speculative_eagle_topk=1)
