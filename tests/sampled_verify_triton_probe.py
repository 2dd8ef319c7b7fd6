"""`sampled_accept` end to end through its Triton branch (the row law, `accept` and `draw` kernels)
against its torch path, run by Triton's interpreter on CPU (`TRITON_INTERPRET=1`, set by
test_sampled_verify_triton.py before Triton loads). Both are the one function on the same CPU
tensors: once as CPU runs it, once with the kernels' branches opened to CPU (sampled_verify's
TRITON_ACCEPT_DEVICES, and target_law's TRITON_ROW_LAW_DEVICES in the "every kernel" cases, as
CUDA runs: the row-law search under the cards' filter takes ~15 s in the interpreter, so the other
cards cases take the torch row law, which test_row_law_triton shows equal), so the wiring is compared.

Per case, the same seed for both: the coins are the generator's first [bs, B-1] uniforms on both
paths, and the kernel's final uniforms the next [bs]. The torch path's final law is captured where
it is drawn (its torch.multinomial). Compared: the accepted lengths request for request, the
accepted prefix, and the added token against the inverse CDF of the torch path's final law at the
kernel path's uniform. Prints a JSON report as the last stdout line.

With TWIN_CASES set ("point;sampled ragged", test_accept_twins.py, in a planted copy), it runs only
those cases (the cards' filter, the torch row law; "argmax": the target's argmax as point drafts,
so that whole blocks occur) and reports each request's length and inverse-CDF token too.
"""

import json
import os
import sys
from pathlib import Path

import torch

from dflash_sglang.sampling import sampled_verify, target_law
from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from tests.planted.simulate import sampling_info  # noqa: E402

BS, BLOCK, H, VOCAB = 48, 6, 32, 300
MODES = ("point", "sampled", "block")
FILTERS = {
    "cards": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
    "min_p": {"temperature": 0.8, "min_p": 0.05},
}


def inverse_cdf(law: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = law.cumsum(-1)
    return torch.searchsorted(cdf, u.unsqueeze(1), right=True).squeeze(1).clamp_max(law.shape[-1] - 1)


def inputs(params: dict, seed: int, dtype):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(VOCAB, H, generator=g) / H**0.5
    features = torch.randn(BS, BLOCK - 1, H, generator=g) * 3
    logits = torch.randn(BS, BLOCK, VOCAB, generator=g)
    logits[:, :-1] += features @ weight.T  # the target near the drafter: both outcomes occur
    info = sampling_info(params, BS)
    drafts, proposal = draw_drafts(features, lambda x: (x @ weight.T).float(), info, VOCAB, generator=g)
    return logits.view(BS * BLOCK, VOCAB).to(dtype), info, drafts, proposal


def open_kernels(devices: tuple[str, ...], row_law: bool = True) -> None:
    target_law.TRITON_ROW_LAW_DEVICES = devices if row_law else ()
    sampled_verify.TRITON_ACCEPT_DEVICES = devices


def torch_path(call, seed: int):
    """The torch path's Acceptance and the [bs, V] law its final draw sampled from."""
    laws = []
    multinomial = torch.multinomial

    def capture(probs, *args, **kwargs):
        laws.append(probs.clone())
        return multinomial(probs, *args, **kwargs)

    open_kernels(())
    torch.multinomial = capture
    try:
        result = call(torch.Generator().manual_seed(seed))
    finally:
        torch.multinomial = multinomial
    return result, torch.cat(laws)


def torch_side(params: dict, mode: str, ragged: bool, seed: int, dtype=torch.float32):
    """One case on the torch path: (the call, drafts, counts, its Acceptance, its final law, and
    the kernel path's final uniforms: the generator's draws after the coins)."""
    logits, info, drafts, proposal = inputs(params, seed, dtype)
    if mode == "argmax":  # point drafts the target likes: whole blocks, bonus draws
        drafts = logits.view(BS, BLOCK, VOCAB)[:, :-1].argmax(-1)
    counts = torch.arange(BS) % BLOCK if ragged else None

    def call(generator):
        return sampled_accept(
            drafts, logits, info, BLOCK, generator=generator, draft_counts=counts,
            proposal=None if mode in ("point", "argmax") else proposal, block_verification=mode == "block",
        )  # fmt: skip

    reference, law = torch_path(call, seed)
    replay = torch.Generator().manual_seed(seed)
    torch.rand(BS, BLOCK - 1, generator=replay)  # the coins
    return call, drafts, counts, reference, law, torch.rand(BS, generator=replay)


def torch_answers(mode: str, ragged: bool, seed: int) -> tuple[list, list]:
    """A twin case's accepted lengths and inverse-CDF tokens on the torch path (no Triton)."""
    _, _, _, reference, law, final_u = torch_side(FILTERS["cards"], mode, ragged, seed)
    return reference.lengths.tolist(), inverse_cdf(law, final_u).tolist()


def compare(params: dict, mode: str, ragged: bool, seed: int, row_law: bool, dtype=torch.float32) -> dict:
    n = BLOCK - 1
    call, drafts, counts, reference, law, final_u = torch_side(params, mode, ragged, seed, dtype)
    open_kernels(("cpu",), row_law)
    kernel = call(torch.Generator().manual_seed(seed))
    open_kernels(())
    accepted = reference.lengths - 1
    token = kernel.tokens.gather(1, (kernel.lengths - 1).unsqueeze(1)).squeeze(1)
    expected = inverse_cdf(law, final_u)
    differs = token != expected
    gap = (law.cumsum(-1) - final_u.unsqueeze(1)).abs().min(-1).values  # distance to a CDF boundary
    prefix = torch.arange(n).unsqueeze(0) < accepted.unsqueeze(1)
    return {
        "accepted_differ": int((kernel.lengths != reference.lengths).sum()),
        "prefix_differ": int(((kernel.tokens[:, :n] != drafts) & prefix).sum()),
        "tokens_differ": int(differs.sum()),
        "tokens_differ_off_boundary": int((differs & (gap > 1e-5)).sum()),
        "token_prob_zero": int((law.gather(1, token.unsqueeze(1)).squeeze(1) <= 0).sum()),
        "rejected": int((accepted < (n if counts is None else counts)).sum()),
        "whole_blocks": int((accepted == (n if counts is None else counts)).sum()),
        "torch_draws_differ": int(
            (reference.tokens.gather(1, accepted.unsqueeze(1)).squeeze(1) != expected).sum()
        ),
        "lengths": reference.lengths.tolist(),
        "expected": expected.tolist(),
    }


def twin_cases(text: str) -> list[tuple[str, str, bool, int]]:
    """TWIN_CASES="point;sampled ragged" -> (key, mode, ragged, seed), the cards' filter each."""
    cases = [c.strip() for c in text.split(";") if c.strip()]
    return [(f"cards {c}", c.split()[0], c.endswith("ragged"), 201 + i) for i, c in enumerate(cases)]


CASES = [  # (filter, mode, ragged, every kernel)
    *[("cards", mode, ragged, False) for mode in MODES for ragged in (False, True)],
    ("cards", "sampled", True, True),
    *[("min_p", mode, mode != "sampled", True) for mode in MODES],
]


def main():
    report = {}
    if os.environ.get("TWIN_CASES"):  # test_accept_twins: a planted copy's cases, torch row law
        for key, mode, ragged, seed in twin_cases(os.environ["TWIN_CASES"]):
            report[key] = compare(FILTERS["cards"], mode, ragged, seed, False)
        print(json.dumps(report))
        return
    for seed, (name, mode, ragged, every) in enumerate(CASES, start=101):
        key = f"{name} {mode}{' ragged' if ragged else ''}{', every kernel' if every else ''}"
        report[key] = compare(FILTERS[name], mode, ragged, seed, every)
    report["cards sampled bf16"] = compare(FILTERS["cards"], "sampled", False, 99, False, torch.bfloat16)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
