"""Session-wide pieces of the server tests: one hot tiny pair at block size 8 and one no-spec
server of its target, shared by every module that compares against plain decoding."""

import pytest

from dflash_sglang.testing.server import SGLangServer

from .pairs import make_pair


@pytest.fixture(scope="session")
def pair8(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair8"), 8)


@pytest.fixture(scope="session")
def nospec8(pair8):
    with SGLangServer(pair8.target) as server:
        yield server
