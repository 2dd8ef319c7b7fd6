"""Engine-free DFlash decoding on a transformers target: the oracle every engine path is tested against.

One request (batch size 1), as in z-lab's `dflash_generate`:

    prefill:  target(prompt) -> first token, target features of every prompt position
    loop:     draft   block = [last token, mask x (B-1)] -> drafter -> target lm_head -> B-1 drafts
              verify  target(block) -> one prediction per block position
              commit  accept a prefix (+1 target token), crop the target cache, keep the features
                      of the committed positions as the drafter's next context
"""

from __future__ import annotations

import dataclasses

import torch

from .accept import greedy_accept, rejection_accept, sampling_probs
from .model import DFlashDraftModel, DraftContextCache, target_features


@dataclasses.dataclass
class DFlashOutput:
    tokens: list[int]  # the new tokens, the prefill's first token included
    accept_lengths: list[int]  # tokens each verify step added (1..block_size), sum = len(tokens) - 1

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / max(len(self.accept_lengths), 1)


def propose(target, draft: DFlashDraftModel, block_ids, block_positions, features, feature_positions, cache):
    """Draft logits for block positions 1..B-1: drafter over target embeddings, target lm_head."""
    embeds = target.get_input_embeddings()(block_ids)
    hidden = draft(embeds, block_positions, features, feature_positions, cache)
    return target.get_output_embeddings()(hidden[:, 1:])


def pick(logits: torch.Tensor, temperature: float, generator=None) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = sampling_probs(logits, temperature)
    return torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(probs.shape[:-1])


@torch.no_grad()
def dflash_generate(
    target,
    draft: DFlashDraftModel,
    input_ids,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    stop_token_ids=(),
    generator: torch.Generator | None = None,
    block_size: int | None = None,
) -> DFlashOutput:
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

        # draft
        draft_logits = propose(target, draft, block_ids, positions, features, feature_positions, draft_cache)
        if temperature <= 0:
            draft_probs, drafts = None, draft_logits.argmax(-1)
        else:
            draft_probs = sampling_probs(draft_logits, temperature)
            drafts = pick(draft_logits, temperature, generator)
        block_ids[:, 1:] = drafts

        # verify
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

        # commit: the verified token and the accepted drafts enter both caches
        committed = int(accepted.lengths[0])
        new_tokens = accepted.tokens[0, :committed].tolist()
        if committed < block:  # drop the rejected drafts' keys/values
            target_cache.crop(committed - block)
        features = target_features(out.hidden_states, config.target_layer_ids)[:, :committed]
        feature_positions = positions[:, :committed]
        start += committed

        emitted = 0
        for token in new_tokens:
            result.tokens.append(token)
            emitted += 1
            if token in stops or len(result.tokens) >= max_new_tokens:
                break
        result.accept_lengths.append(emitted)
    return result
