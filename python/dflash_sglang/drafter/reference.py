"""Engine-free DFlash decoding on a transformers target: the oracle every engine path is tested against.

One request (batch size 1), as in z-lab's `dflash_generate`:

    prefill:  target(prompt) -> first token, target features of every prompt position
    loop:     draft   block = [last token, mask x (B-1)] -> drafter -> target lm_head -> B-1 drafts
              verify  target(block) -> one prediction per block position
              commit  accept a prefix (+1 target token), crop the target cache, keep the features
                      of the committed positions as the drafter's next context

With `tree_budget`, verify takes a DDTree draft tree instead of the chain (tree/build.py): the target
checks all its nodes in one forward under the ancestor mask, the walk accepts one root path, and
commit keeps only that path, in path order, in the target cache and the drafter's context.
"""

from __future__ import annotations

import dataclasses

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from ..sampling.accept import greedy_accept, rejection_accept, sampling_probs
from ..tree.build import Tree, accept_sampled, build_tree, walk_greedy
from .context import DraftContextCache, target_features
from .domino import domino_block_drafts
from .selector import select_drafts


@dataclasses.dataclass
class DFlashOutput:
    tokens: list[int]  # the new tokens, the prefill's first token included
    accept_lengths: list[int]  # tokens each verify step added (1..block_size), sum = len(tokens) - 1
    branch_steps: int = 0  # tree steps whose accepted path took a node that is not a first child

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / max(len(self.accept_lengths), 1)


def propose(target, draft, block_ids, block_positions, features, feature_positions, cache):
    """Draft logits for block positions 1..B-1: drafter over target embeddings, target lm_head;
    and the drafts of a drafter that picks its own (else None): DFlash2's selector walk over the
    candidates, or Domino's corrected rollout."""
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    block_hidden = draft(embed(block_ids), block_positions, features, feature_positions, cache)
    hidden = block_hidden[:, 1:]
    logits = lm_head(hidden)
    if getattr(draft, "candidate_selector", None) is not None:
        return logits, select_drafts(draft.candidate_selector, draft.config, logits, hidden, block_ids[:, 0])
    if getattr(draft, "prefix_gru", None) is not None:
        shift = draft.config.domino_shift_label
        drafts = domino_block_drafts(block_hidden, shift, lm_head, draft.prefix_gru, draft.embed_proj,
                                     block_ids[:, 0], embed)  # fmt: skip
        return logits, drafts
    return logits, None


def pick(logits: torch.Tensor, temperature: float, generator=None) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = sampling_probs(logits, temperature)
    return torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(probs.shape[:-1])


@torch.no_grad()
def dflash_generate(
    target,
    draft,
    input_ids,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    stop_token_ids=(),
    generator: torch.Generator | None = None,
    block_size: int | None = None,
    tree_budget: int | None = None,
    tree_topk: int | None = None,
) -> DFlashOutput:
    """Greedy (temperature 0) or sampled decoding; `tree_budget` drafts per step verify as a tree
    (at most `tree_topk` children per node) instead of the chain of block_size - 1 drafts."""
    config = draft.config
    block = block_size or config.block_size
    device = target.get_input_embeddings().weight.device
    prompt = torch.as_tensor(input_ids, device=device).view(1, -1)
    stops = set(stop_token_ids)
    result = DFlashOutput([], [])
    if max_new_tokens <= 0:
        return result

    out = target(prompt, use_cache=True, output_hidden_states=True, logits_to_keep=1)
    target_cache = out.past_key_values
    result.tokens.append(int(pick(out.logits[0, -1], temperature, generator)))
    features = target_features(out.hidden_states, config.target_layer_ids)
    start = prompt.shape[1]  # position of the last emitted token, not yet seen by the target
    feature_positions = torch.arange(start, device=device).view(1, -1)
    draft_cache = DraftContextCache(config.num_hidden_layers, device=device)

    while len(result.tokens) < max_new_tokens and result.tokens[-1] not in stops:
        positions = torch.arange(start, start + block, device=device).view(1, -1)
        block_ids = torch.full((1, block), config.mask_token_id, device=device)
        block_ids[0, 0] = result.tokens[-1]

        draft_logits, drafts = propose(
            target, draft, block_ids, positions, features, feature_positions, draft_cache
        )
        if tree_budget is None:
            step = verify_chain(
                target, block_ids, positions, draft_logits, target_cache, temperature, generator, drafts
            )
        else:  # DFlash2 and Domino drafters pick one path (tree/verify.py refuses trees with them)
            logprobs = torch.log_softmax(draft_logits[0].float(), dim=-1)
            tree = build_tree(result.tokens[-1], logprobs, tree_budget, tree_topk)
            if has_attention_cache_only(target_cache):
                step = verify_tree(target, tree, start, target_cache, temperature, generator)
            else:  # recurrent layers (Qwen3.5/3.6): node by node, from the tokens seen so far
                done = torch.tensor(result.tokens[:-1], dtype=prompt.dtype, device=device)
                seen = torch.cat([prompt[0], done]).view(1, -1)
                step = verify_tree_node_by_node(target, tree, seen, temperature, generator)
            first_child = tree.retrieve_arrays()[0]
            result.branch_steps += any(int(first_child[tree.parents[n]]) != n for n in step.path[1:])

        # commit: the verified token and the accepted drafts are now in the target cache
        new_tokens = step.tokens
        features = target_features(step.hidden_states, config.target_layer_ids)
        feature_positions = torch.arange(start, start + len(new_tokens), device=device).view(1, -1)
        start += len(new_tokens)

        emitted = 0
        for token in new_tokens:
            result.tokens.append(token)
            emitted += 1
            if token in stops or len(result.tokens) >= max_new_tokens:
                break
        result.accept_lengths.append(emitted)
    return result


def spec_generate(draft, input_ids, max_new_tokens, temperature=0.0, target=None, stop_token_ids=(),
                  generator=None) -> torch.Tensor:  # fmt: skip
    """z-lab's `spec_generate` on `dflash_generate`: one prompt ([1, n] or [n]) in, the prompt
    followed by the new tokens out ([1, n + new]), ending at the first stop token (kept) or after
    `max_new_tokens`. The per-step accept lengths are left on `draft.last_accept_lengths`."""
    if target is None:
        raise ValueError("spec_generate needs the target model: spec_generate(..., target=target)")
    if hasattr(input_ids, "keys") and "input_ids" in input_ids:  # transformers 5's chat template
        input_ids = input_ids["input_ids"]
    prompt = torch.as_tensor(input_ids)
    if prompt.dim() == 2 and prompt.shape[0] != 1:
        raise ValueError(f"spec_generate decodes one prompt at a time, got a batch of {prompt.shape[0]}")
    prompt = prompt.view(1, -1)
    out = dflash_generate(
        target, draft, prompt, max_new_tokens,
        temperature=temperature, stop_token_ids=stop_token_ids or (), generator=generator,
    )  # fmt: skip
    draft.last_accept_lengths = out.accept_lengths
    new = torch.tensor(out.tokens, dtype=prompt.dtype, device=prompt.device).view(1, -1)
    return torch.cat([prompt, new], dim=1)


@dataclasses.dataclass
class Verified:
    tokens: list[int]  # what the step emits: the accepted drafts, then the target's own token
    hidden_states: tuple[torch.Tensor, ...]  # the target's, at the root and the accepted drafts
    path: list[int] | None = None  # a tree's accepted node ids, root first


def verify_chain(
    target, block_ids, positions, draft_logits, target_cache, temperature, generator, drafts=None
) -> Verified:
    """The block [verified token, B-1 drafts] through the target; accept a prefix, crop the rest.
    `drafts` given (a DFlash2 selector's): point proposals at any temperature."""
    if drafts is not None:
        draft_probs = None
    elif temperature <= 0:
        draft_probs, drafts = None, draft_logits.argmax(-1)
    else:
        draft_probs = sampling_probs(draft_logits, temperature)
        drafts = pick(draft_logits, temperature, generator)
    block_ids[:, 1:] = drafts
    out = target(
        block_ids,
        position_ids=positions,
        past_key_values=target_cache,
        use_cache=True,
        output_hidden_states=True,
    )
    if temperature <= 0:
        accepted = greedy_accept(drafts, out.logits.argmax(-1))
    else:
        target_probs = sampling_probs(out.logits, temperature)
        accepted = rejection_accept(drafts, target_probs, draft_probs, generator)
    committed = int(accepted.lengths[0])
    block = block_ids.shape[1]
    if committed < block:  # drop the rejected drafts' keys/values
        target_cache.crop(committed - block)
    hidden = tuple(h[:, :committed] for h in out.hidden_states)
    return Verified(accepted.tokens[0, :committed].tolist(), hidden)


def verify_tree(target, tree: Tree, seq_len: int, target_cache, temperature, generator) -> Verified:
    """All tree nodes through the target in one forward (node i at position seq_len + depth[i],
    seeing the cache, its ancestors and itself); walk to one root path; keep only its K/V."""
    out = target(
        tree.tokens.view(1, -1),
        position_ids=tree.positions(seq_len).view(1, -1),
        attention_mask=tree_attention_mask(tree, seq_len, target.dtype),
        past_key_values=target_cache,
        use_cache=True,
        output_hidden_states=True,
    )
    logits = out.logits[0]
    if temperature <= 0:
        path, bonus = walk_greedy(tree, logits.argmax(-1))
    else:
        path, bonus = accept_sampled(tree, sampling_probs(logits, temperature), generator)
    keep_path(target_cache, seq_len, path)
    index = torch.tensor(path, device=logits.device)
    hidden = tuple(h.index_select(1, index) for h in out.hidden_states)
    return Verified(tree.tokens[path[1:]].tolist() + [bonus], hidden, path)


def has_attention_cache_only(cache) -> bool:
    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", ()))


def verify_tree_node_by_node(target, tree: Tree, seen: torch.Tensor, temperature, generator) -> Verified:
    """A tree on a target with recurrent layers, which no attention mask can branch: each node's
    prediction from the target over the tokens it has seen and the node's root path (no cache),
    then the accepted path once more for its features. Slow and plain: an oracle. Padding nodes
    (never accepted) get no forward."""
    rows = []
    for node in range(tree.num_real or len(tree)):
        path = tree.tokens[tree.root_path(node)].view(1, -1)
        rows.append(target(torch.cat([seen, path], dim=1), logits_to_keep=1).logits[0, -1].float())
    logits = torch.stack(rows + [torch.zeros_like(rows[0])] * (len(tree) - len(rows)))
    if temperature <= 0:
        path, bonus = walk_greedy(tree, logits.argmax(-1))
    else:
        path, bonus = accept_sampled(tree, sampling_probs(logits, temperature), generator)
    ids = torch.cat([seen, tree.tokens[path].view(1, -1)], dim=1)
    out = target(ids, output_hidden_states=True)
    hidden = tuple(h[:, -len(path) :] for h in out.hidden_states)
    return Verified(tree.tokens[path[1:]].tolist() + [bonus], hidden, path)


def tree_attention_mask(tree: Tree, past: int, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, N, past + N] additive mask for transformers: 0 where node i may look (the whole
    cached prefix, its ancestors, itself), the dtype's minimum elsewhere (-inf would give NaN rows
    in eager attention if a row were ever fully masked). A 4D mask is used as given."""
    ancestors = tree.ancestor_mask()
    visible = torch.cat([ancestors.new_ones(len(tree), past), ancestors], dim=1)
    mask = torch.zeros(visible.shape, dtype=dtype, device=tree.tokens.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min).view(1, 1, *visible.shape)


def keep_path(cache: DynamicCache, seq_len: int, path: list[int]) -> None:
    """Compact the cache after a tree verify: keep the prefix, then the path's nodes in path order.

    A node's keys were rotated at seq_len + depth, and the path holds one node per depth, so after
    compaction slot seq_len + d holds the right key for position seq_len + d.
    """
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"tree verify needs full-attention cache layers, got {type(layer).__name__}"
            )
        kept = torch.cat([torch.arange(seq_len), seq_len + torch.tensor(path)]).to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, kept)
        layer.values = layer.values.index_select(-2, kept)
