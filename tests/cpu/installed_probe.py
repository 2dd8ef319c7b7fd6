"""Run by test_installed.py in a fresh interpreter: load the plugin the way SGLang does and report
what the hooks changed, as JSON on the last stdout line.
argv: TARGET_DIR DRAFT_DIR HYBRID_TARGET_DIR."""

import json
import sys

import torch

TARGET, DRAFT, HYBRID_TARGET = sys.argv[1:4]
ARGV = [
    "--model-path", TARGET, "--device", "cpu", "--dtype", "float32",
    "--attention-backend", "torch_native", "--max-total-tokens", "4096",
    "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFT,
]  # fmt: skip
EXTRA_BUFFER_ARGV = [
    "--model-path", HYBRID_TARGET, "--device", "cpu", "--dtype", "float32",
    "--attention-backend", "torch_native", "--max-total-tokens", "4096",
    "--mamba-radix-cache-strategy", "extra_buffer", "--max-mamba-cache-size", "8",
]  # fmt: skip


def resolve():
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(ARGV)
    try:
        server_args.resolve_once()
    except ValueError as error:
        return {"error": str(error)}
    view = resolved_view(server_args)
    sources = [source for source, _ in server_args._resolved_overrides]
    return {
        "device": view.device,
        "draft_backend": view.speculative_draft_attention_backend,
        "num_draft_tokens": view.speculative_num_draft_tokens,
        "sources": sources,
    }


def resolve_extra_buffer():
    """The mamba radix-cache strategy a cpu server of the hybrid target gets for extra_buffer."""
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(EXTRA_BUFFER_ARGV)
    try:
        server_args.resolve_once()
    except (AssertionError, ValueError) as error:
        return {"error": str(error)}
    return {"strategy": resolved_view(server_args).mamba_radix_cache_strategy}


def main():
    report = {"before": resolve(), "extra_buffer_before": resolve_extra_buffer()}

    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    load_plugins()
    report["patched"] = sorted(HookRegistry._patched)
    report["after"] = resolve()
    report["extra_buffer_after"] = resolve_extra_buffer()

    from sglang.srt.layers.rotary_embedding import get_rope
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    rope = get_rope(16, 16, 64, 10000, is_neox_style=True, dtype=torch.float32)
    report["rope"] = type(rope).__name__
    pool = MHATokenToKVPool(
        size=16, page_size=1, dtype=torch.float32, head_num=2, head_dim=4, layer_num=2,
        device="cpu", enable_memory_saver=False, enable_kv_cache_copy=True,
    )  # fmt: skip
    report["pool_native_move"] = pool.use_native_move_kv_cache
    torch.zeros(2).record_stream(torch.cpu.current_stream())
    report["record_stream_cpu"] = "ok"

    # `from X import f` copies: the patch must reach the modules that call the stand-ins.
    from sglang.srt.speculative import dflash_worker_v2, spec_utils

    copies = {
        "spec_utils.assign_req_to_token_pool_func": spec_utils.assign_req_to_token_pool_func,
        "dflash_worker_v2.assign_req_to_token_pool_func": dflash_worker_v2.assign_req_to_token_pool_func,
        "dflash_worker_v2.assign_extend_cache_locs_func": dflash_worker_v2.assign_extend_cache_locs_func,
    }
    report["propagated"] = {name: hasattr(fn, "__wrapped__") for name, fn in copies.items()}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
