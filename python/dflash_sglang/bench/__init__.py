"""Benchmark client for running SGLang servers (`python -m dflash_sglang.bench`, docs/benchmarks.md).

prompts.py       datasets (hub, local files, the tiny pair's held-out prompts) -> chats
client.py        streamed chat completions, N in flight; TTFT and SGLang's speculation counters
server_info.py   a server's model and speculative settings; radix-cache flush
stats.py         requests -> per-level throughput, TTFT, TPOT, acceptance (pure arithmetic)
results.py       the run's dataclasses and their JSON round trip
report.py        markdown tables; comparison with an earlier run
plots.py         PNG plots
runner.py        one server over the concurrency levels; a run's files
cli.py           the command line
suite.py         `make bench`: the tiny pair's servers on CPU, one at a time
"""
