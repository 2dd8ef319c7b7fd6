import pytest
import torch

from dflash_sglang_tools.testing.tiny_dense import tiny_draft, tiny_target


@pytest.fixture(scope="session")
def target():
    torch.manual_seed(0)
    return tiny_target(seed=0)


@pytest.fixture(scope="session")
def draft(target):
    return tiny_draft(target.config, seed=1, block_size=16)


def prompt_of(length: int, seed: int, vocab: int = 500) -> torch.Tensor:
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))
