"""`make demo`: the model cards' chat completion against a running DFLASH server, then the same
request without speculation, side by side.

    make serve &      # DFLASH on 127.0.0.1:30000 (launch/seed-hybrid-cpu.sh)
    make demo         # python -m dflash_sglang_tools.demo --max-tokens 512
    make demo PROMPT="Write a function that merges two sorted lists."

The request is the cards' OpenAI client call ("Write a quicksort in Python.", temperature 0.0), or
your own question (`--prompt`); max_tokens is a flag, since the cards' 4096 does not fit the tiny
pair's 4096-token context.
Each server answers it `--repeats` times (5) after a warm-up: the tokens/s shown is the median,
the acceptance length is pooled over the repeats, and every repeat must give the same text, so
one slow moment on a shared machine does not decide the ratio.
Without --baseline-url the demo starts its own no-spec server of the same target: the DFLASH
server's own launch command (from /server_info) without its --speculative-* flags, on a free port
from 30001, and stops it afterwards. At temperature 0 both replies must be the same text. A hybrid
target's (`make serve`, `make serve-hybrid`) mamba flags come with that command; its float32 conv state, an
environment variable, is set for it here (SGLANG_MAMBA_CONV_DTYPE, float32 unless set).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from openai import OpenAI

from .bench.level_stats import from_histogram, sum_histograms
from .bench.server_info import ServerUnreachable, describe, get_json
from .testing.server import SGLangServer

CARDS_PROMPT = "Write a quicksort in Python."  # the model cards' request
NO_SPEC_PORTS = range(30001, 30100)
_OWN_FLAGS = {"--model-path", "--host", "--port"}  # SGLangServer sets these itself


def plain_args(launch_command: str) -> list[str]:
    """A server's launch arguments without speculation and without model path, host and port."""
    kept, skipping = [], False
    for token in shlex.split(launch_command):
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            skipping = name.startswith("--speculative-") or name in _OWN_FLAGS
            if skipping and "=" in token:
                skipping = False  # --flag=value: nothing follows
                continue
        if not skipping:
            kept.append(token)
    return kept


def ask(url: str, model: str, max_tokens: int, repeats: int = 1, prompt: str = CARDS_PROMPT) -> dict:
    """The request `repeats` times: the median run's speed, the acceptance pooled."""
    client = OpenAI(base_url=f"{url}/v1", api_key="EMPTY")
    messages = [{"role": "user", "content": prompt}]
    # Warm-up, not timed: a fresh server's first request pays one-off costs.
    client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0.0)
    runs = [one_request(client, model, max_tokens, messages) for _ in range(max(repeats, 1))]
    speeds = sorted(run["tokens_per_s"] for run in runs)
    median = next(run for run in runs if run["tokens_per_s"] == speeds[len(speeds) // 2])
    return {
        **median,
        "speeds": [round(run["tokens_per_s"], 1) for run in runs],
        "same_text": all(run["text"] == runs[0]["text"] for run in runs),
        "acceptance": from_histogram(sum_histograms([run["histogram"] for run in runs]), None),
    }


def one_request(client, model: str, max_tokens: int, messages: list[dict]) -> dict:
    start = time.perf_counter()
    response = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        extra_body={"return_spec_tokens_details": True},  # SGLang's acceptance counters (sglext)
    )
    seconds = time.perf_counter() - start
    tokens = response.usage.completion_tokens
    details = ((response.model_extra or {}).get("sglext") or {}).get("spec_tokens_details") or {}
    return {
        "text": response.choices[0].message.content,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "histogram": details.get("spec_correct_drafts_histogram") or [],
    }


def show(title: str, result: dict, print_text: bool = True) -> None:
    print(f"=== {title}")
    if print_text:
        print(result["text"])
        print("---")
    acc = result["acceptance"]
    accept = "no speculation"
    if acc.verify_steps:
        accept = (
            f"acceptance length {acc.accept_length:.2f} (tokens per verify step, {acc.verify_steps} steps)"
        )
    runs, median = len(result["speeds"]), result["tokens_per_s"]
    speed = f"{result['tokens']} tokens, median of {runs}: {median:.1f} tokens/s (each: {result['speeds']})"
    same = "" if result["same_text"] else "; the repeats gave DIFFERENT texts"
    print(f"{speed}; {accept}{same}")


def is_hybrid(model_path) -> bool:
    """A target with linear attention layers (Qwen3.5-style), from its config.json if local."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return False
    config = json.loads(path.read_text())
    config = config.get("text_config", config)
    return "linear_attention" in (config.get("layer_types") or []) or "full_attention_interval" in config


def no_spec_server(url: str) -> SGLangServer:
    info = get_json(f"{url}/server_info")
    if not info.get("launch_command"):
        raise ServerUnreachable(
            f"{url}/server_info has no launch_command; start a no-spec server and pass --baseline-url"
        )
    # A relative model path is relative to where `make serve` ran: here, and not the server's cwd.
    model = Path(info["model_path"])
    model = model.resolve() if model.exists() else info["model_path"]
    # launch/tiny-hybrid-cpu.sh exports it; the demo may run in another shell.
    conv_dtype = os.environ.get("SGLANG_MAMBA_CONV_DTYPE", "float32")
    env = {"SGLANG_MAMBA_CONV_DTYPE": conv_dtype} if is_hybrid(model) else {}
    args = plain_args(info["launch_command"])
    return SGLangServer(model, args, env=env, base_args=(), port_range=NO_SPEC_PORTS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.demo", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="the running DFLASH server")
    p.add_argument("--baseline-url", default=None, help="a running no-spec server of the same target")
    p.add_argument("--no-baseline", action="store_true", help="only the DFLASH server")
    p.add_argument("--max-tokens", type=int, default=4096, help="the cards use 4096")
    p.add_argument("--repeats", type=int, default=5, help="timed requests per server (the median is shown)")
    p.add_argument("--prompt", default=CARDS_PROMPT, help="the user message (the cards' by default)")
    args = p.parse_args(argv)
    try:
        server = describe(args.url, "dflash")
    except ServerUnreachable as error:
        print(f"dflash_sglang_tools.demo: {error}\nStart one first: make serve", file=sys.stderr)
        return 2
    if not server.algorithm:
        print(f"note: {args.url} runs without speculation (speculative_algorithm is unset)")
    spec = ask(server.url, server.model, args.max_tokens, args.repeats, args.prompt)
    show(f"{server.model} at {server.url}, {server.algorithm} block {server.block_size}", spec)
    if args.no_baseline:
        return 0
    if args.baseline_url:
        plain = ask(args.baseline_url.rstrip("/"), server.model, args.max_tokens, args.repeats, args.prompt)
    else:
        print(f"\nstarting a no-spec server of {server.model} for the comparison ...", flush=True)
        with no_spec_server(server.url) as baseline:
            plain = ask(baseline.base_url, server.model, args.max_tokens, args.repeats, args.prompt)
    show("same request without speculation", plain, print_text=plain["text"] != spec["text"])
    same = "the same text" if plain["text"] == spec["text"] else "DIFFERENT text"
    ratio = spec["tokens_per_s"] / plain["tokens_per_s"]
    print(f"\nDFLASH: {ratio:.2f}x the no-spec tokens/s (medians of {args.repeats}), {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
