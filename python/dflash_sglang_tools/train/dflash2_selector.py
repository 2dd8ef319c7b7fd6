"""DFlash2's candidate selector, trained on a trained DFlash drafter: the recipe extended to it.

    python -m dflash_sglang_tools.train.dflash2_selector --out DIR [--top-k 8] [--rank 32] [--epochs 8]

A DFlash2 drafter (drafter/selector.py) is a DFlash backbone plus a candidate selector: each draft
position's top-K candidates from the target's LM head, scored with the transition from the
candidate chosen before it, and one walk over that lattice. Here the backbone is the embedded
pair's trained drafter, frozen; only the selector learns (its two codebooks and its projection).

The loss is teacher-forced: at every learned block position e whose target token y_e is among the
backbone's K candidates, cross-entropy of y_e over the candidates' scores given the true
predecessor y_{e-1} (the block's verified token at the first position),

    score(c) = unary(c) + < A[y_{e-1}] * W h_e, B[c] >

which is the lattice row a walk reads while its drafts so far are right: its argmax is the greedy
walk's next draft, its softmax at T the sampled walk's q. Positions weigh as the drafter's loss
(exp(-(k-1)/gamma)). The blocks, anchors and data are the drafter recipe's (blocks.py, the
target's own greedy responses).

DIR gets the drafter in the published format (`architectures: ["DFlash2DraftModel"]`,
`dflash_config.selector_top_k`, `selector_rank`: what SGLang's built-in and ours load) and
acceptance.json: greedy acceptance length on the held-out prompts, the backbone alone against the
selector's walk, at block sizes 4, 8 and 16.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, Qwen3ForCausalLM

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.selector import unary_scores

from .blocks import IGNORE, Blocks, default_gamma, make_blocks, sample_anchors
from .data import Batch, epoch_batches, prompt_ids
from .evaluate import acceptance
from .loop import Schedule, fit
from .loss import LossOutput, draft_hidden, target_context
from .recipe import freeze
from .regenerate import regenerate
from .stdlib_corpus import build_corpus
from .tiny_pair import EVAL_BLOCK_SIZES, THREADS, embedded_pair, held_out_prompts

ACCEPTANCE_FILE = "acceptance.json"


@dataclasses.dataclass
class SelectorRecipe:
    top_k: int = 8  # candidates a position
    rank: int = 32  # the transition tables' rank
    train_block_sizes: tuple[int, ...] = (4, 8, 16)  # as the backbone trained
    anchors: int = 64  # blocks per sequence at block 8, at most
    tokens_per_batch: int = 4096
    init_std: float = 0.1  # both codebooks start random: from zeros neither would move
    seed: int = 0
    schedule: Schedule = dataclasses.field(default_factory=lambda: Schedule(epochs=8, lr=3e-3))


def with_selector(backbone: DFlashDraftModel, recipe: SelectorRecipe) -> DFlashDraftModel:
    """A DFlash2 drafter: `backbone`'s weights and a fresh selector of the recipe's shape."""
    config = dataclasses.replace(backbone.config, selector_top_k=recipe.top_k, selector_rank=recipe.rank)
    model = DFlashDraftModel(config)
    missing, unexpected = model.load_state_dict(backbone.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("candidate_selector.") for k in missing), (missing, unexpected)
    generator = torch.Generator().manual_seed(recipe.seed)
    with torch.no_grad():
        for param in model.candidate_selector.parameters():
            param.copy_(recipe.init_std * torch.randn(param.shape, generator=generator))
    return model


def predecessors(blocks: Blocks, block_size: int) -> torch.Tensor:
    """[b, N*B]: the token before each block position's label (the verified token at position 1)."""
    b = blocks.labels.shape[0]
    labels = blocks.labels.view(b, -1, block_size)
    before = torch.cat([blocks.input_ids.view(b, -1, block_size)[..., :1], labels[..., 1:-1]], dim=-1)
    return torch.cat([labels[..., :1], before], dim=-1).clamp(min=0).flatten(1)  # position 0 unused


def transition_scores(selector, config, values, ids, hidden, previous) -> torch.Tensor:
    """Candidates' (logits, ids) [n, K], features [n, H], the true predecessors [n] -> scores [n, K]:
    the lattice row (drafter/selector.py) of the predecessor, without building the lattice."""
    unary = unary_scores(values, config.output_multiplier, config.final_logit_softcapping)
    state = selector.hidden_projection(hidden) * selector.predecessor_codebook[previous]
    return unary + torch.einsum("nr,ncr->nc", state, selector.successor_codebook[ids])


def selector_loss(target, draft: DFlashDraftModel, input_ids: torch.Tensor, blocks: Blocks, block_size: int):
    """The teacher-forced transition loss (module docstring) over every block of the batch."""
    config, selector = draft.config, draft.candidate_selector
    learn = blocks.labels != IGNORE
    with torch.no_grad():  # the backbone and the target are frozen
        features = target_context(target, input_ids, config.target_layer_ids)
        embeds = target.get_input_embeddings()(blocks.input_ids)
        hidden = draft_hidden(draft, embeds, blocks, features)[learn]
        values, ids = target.get_output_embeddings()(hidden).float().topk(selector.top_k, dim=-1)
        labels, previous = blocks.labels[learn], predecessors(blocks, block_size)[learn]
        hits = ids == labels[:, None]
        covered = hits.any(-1)
    scores = transition_scores(selector, config, values, ids, hidden, previous)
    scores, answer = scores[covered], hits[covered].to(torch.int64).argmax(-1)
    weights = blocks.weights[learn][covered]
    ce = F.cross_entropy(scores, answer, reduction="none")
    return LossOutput(
        loss=(ce * weights).sum() / weights.sum().clamp(min=1e-6),
        accuracy=(scores.argmax(-1) == answer).float().mean() if len(answer) else ce.new_zeros(()),
        positions=len(answer),
    )


def train_selector(target, draft: DFlashDraftModel, examples, recipe: SelectorRecipe, pad_id: int) -> None:
    freeze(target)
    for name, param in draft.named_parameters():
        param.requires_grad_(name.startswith("candidate_selector."))
    draft.eval()  # the backbone as at inference; nothing in it behaves differently in training
    generator = torch.Generator().manual_seed(recipe.seed)
    sizes = recipe.train_block_sizes

    def loss_of(batch: Batch, step: int):
        block = sizes[step % len(sizes)]
        count = max(1, recipe.anchors * 8 // block)
        anchors = torch.stack([sample_anchors(m, count, generator) for m in batch.loss_mask])
        anchors = anchors[:, : max(1, int((anchors >= 0).sum(1).max()))]
        blocks = make_blocks(batch.input_ids, batch.loss_mask, anchors, block, draft.config.mask_token_id,
                             default_gamma(block))  # fmt: skip
        out = selector_loss(target, draft, batch.input_ids, blocks, block)
        return out.loss, {"acc": float(out.accuracy)}

    def batches_of_epoch(epoch: int) -> list[Batch]:
        return epoch_batches(examples, recipe.tokens_per_batch, pad_id, recipe.seed + epoch)

    params = list(draft.candidate_selector.parameters())
    fit(params, loss_of, batches_of_epoch, recipe.schedule, desc="selector")  # no periodic evaluation


def build(out: Path, recipe: SelectorRecipe | None = None, pairs: int = 600, max_new: int = 96) -> dict:
    """Train a selector on the embedded pair's drafter; write DIR (module docstring)."""
    recipe = recipe or SelectorRecipe()
    torch.set_num_threads(THREADS)
    started = time.monotonic()
    pair = embedded_pair()
    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target = Qwen3ForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    backbone = DFlashDraftModel.from_pretrained(pair.draft)
    train_pairs, _ = build_corpus()
    prompts = [prompt_ids(tokenizer, p["instruction"]) for p in train_pairs[:pairs]]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    examples = regenerate(target, prompts, 256, eos, pad)
    draft = with_selector(backbone, recipe)
    train_selector(target, draft, examples, recipe, pad)
    draft.eval().save_pretrained(out)
    eval_ids = [prompt_ids(tokenizer, text) for text in held_out_prompts()]  # the pair's own
    measured = {
        name: {
            str(b): round(acceptance(target, model, eval_ids, b, max_new, [eos]).mean, 3)
            for b in EVAL_BLOCK_SIZES
        }  # fmt: skip
        for name, model in (("backbone alone (DFlash)", backbone), ("with the selector (DFlash2)", draft))
    }
    report = {
        "held_out_prompts": len(eval_ids),
        "max_new_tokens": max_new,
        "greedy_acceptance_length": measured,
        "train_pairs": len(prompts),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "recipe": {k: v for k, v in dataclasses.asdict(recipe).items() if k != "schedule"}
        | {"schedule": dataclasses.asdict(recipe.schedule)},
    }
    (out / ACCEPTANCE_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--top-k", type=int, default=SelectorRecipe.top_k)
    parser.add_argument("--rank", type=int, default=SelectorRecipe.rank)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=600, help="training prompts (the target answers them)")
    args = parser.parse_args(argv)
    recipe = SelectorRecipe(top_k=args.top_k, rank=args.rank, schedule=Schedule(epochs=args.epochs, lr=3e-3))
    report = build(args.out, recipe, args.pairs)
    print(json.dumps({k: report[k] for k in ("greedy_acceptance_length", "minutes")}))


if __name__ == "__main__":
    main()
