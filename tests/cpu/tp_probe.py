"""One rank of a 2-process gloo group on CPU, run by test_collectives.py: SGLang's own TP group
built with the CPU layer installed, then its collectives against plain torch references.
argv: RANK PORT. Prints a JSON report as the last stdout line."""

import json
import sys
from types import SimpleNamespace

import torch

RANK, PORT = int(sys.argv[1]), int(sys.argv[2])
WORLD = 2


def main():
    from sglang.srt.distributed import parallel_state
    from sglang.srt.plugins.hook_registry import HookRegistry

    from dflash_sglang.cpu import install
    from dflash_sglang.sampling.accept import Acceptance
    from dflash_sglang.sampling.distribution import vocab_parallel_argmax
    from dflash_sglang.step.tp_agreement import TpAgreement

    report = {}
    parallel_state.init_distributed_environment(
        world_size=WORLD, rank=RANK, distributed_init_method=f"tcp://127.0.0.1:{PORT}", local_rank=RANK,
        backend="gloo",
    )  # fmt: skip
    # Without the CPU layer: the group wants PyNccl, and the all-gather op has no CPU kernel.
    try:
        parallel_state.init_model_parallel_group([[0, 1]], RANK, "gloo", group_name="unhooked")
        report["group_before"] = "built"
    except ValueError as error:
        report["group_before"] = str(error)
    plain = parallel_state.init_model_parallel_group(
        [[0, 1]], RANK, "gloo", use_pynccl=False, group_name="plain"
    )
    try:
        plain.all_gather_into_tensor(torch.empty(WORLD), torch.ones(1))
        report["all_gather_before"] = "ran"
    except NotImplementedError as error:
        report["all_gather_before"] = "no CPU kernel" if "'CPU' backend" in str(error) else str(error)

    install()
    HookRegistry.apply_hooks()
    group = parallel_state.init_model_parallel_group([[0, 1]], RANK, "gloo", group_name="tp_probe")
    report["pynccl"] = group.pynccl_comm is not None

    gathered = torch.empty(WORLD * 3)
    group.all_gather_into_tensor(gathered, torch.arange(3.0) + 10 * RANK)
    report["all_gather_into_tensor"] = gathered.tolist()

    # The TP draft argmax: each rank holds half of a vocabulary (the last rows padding).
    generator = torch.Generator().manual_seed(0)
    full = torch.randn(10, 8, generator=generator)  # vocab 10, hidden 8
    hidden = torch.randn(5, 8, generator=generator)
    full[3] = full[7]  # a tie across the shards: the lower id wins, as in torch.argmax
    shard = SimpleNamespace(org_vocab_start_index=5 * RANK, num_org_elements=5)
    head = SimpleNamespace(
        weight=torch.cat([full[5 * RANK : 5 * RANK + 5], torch.zeros(1, 8)]), shard_indices=shard
    )
    report["argmax"] = vocab_parallel_argmax(hidden, head, group).tolist()
    report["argmax_reference"] = (hidden @ full.T).argmax(-1).tolist()
    hidden[0] = full[3]  # a row whose top logit is the tie
    report["tie"] = vocab_parallel_argmax(hidden[:1], head, group).tolist()
    report["tie_reference"] = (hidden[:1] @ full.T).argmax(-1).tolist()

    # Rank 0's acceptance on every rank, whatever each rank decided.
    mine = Acceptance(torch.tensor([1 + RANK, 2]), torch.tensor([[5, 6, 7], [8, 9, 10 + RANK]]))
    agreement = TpAgreement(group)
    for greedy in (True, False):
        agreed = agreement.accepted(mine, greedy=greedy)
        report[f"agreed_greedy_{greedy}"] = [agreed.lengths.tolist(), agreed.tokens.tolist()]
        mine = Acceptance(torch.tensor([1 + RANK, 2]), torch.tensor([[5, 6, 7], [8, 9, 10 + RANK]]))
    report["first_tokens"] = agreement.first_tokens(torch.tensor([100 + RANK])).tolist()
    print(json.dumps(report))


main()
