"""Benchmark client for running SGLang servers (`python -m dflash_sglang_tools.bench`, docs/benchmarks.md).

prompts.py       datasets (hub, local files, the tiny pair's held-out prompts) -> chats
client.py        streamed chat completions, N in flight; TTFT and SGLang's speculation counters
server_info.py   a server's model and speculative settings; radix-cache flush
level_stats.py   requests -> per-level throughput, TTFT, TPOT, acceptance (pure arithmetic)
results.py       the run's dataclasses and their JSON round trip
report.py        markdown tables; comparison with an earlier run
plots.py         PNG plots
runner.py        one server over the concurrency levels; a run's files
cli.py           the command line
suite.py         `make bench`: the tiny pair's servers on CPU, one at a time
hybrid_variants.py  `make bench`'s run on the trained tiny hybrid pair (the ReplaySSM ring against the rest)
tiny_prompts.py  the embedded pair's held-out prompts
adaptive.py      `make bench-adaptive`: the adaptive width under load, simulated acceptance
first_burst.py   `make bench-first-burst`: a new server's first bursts against its steady state
mixed_load.py    `make bench-mixed`: per-request verify lengths against one width a batch, on a
                 load mixing requests whose drafts fit and requests whose drafts do not
one_process.py   `make bench-one-process`: verify policies inside one server process, switched
                 between bursts (a process's own speed cancels out)
machine_load.py  what else loads the machine while a level runs
sampling_memory.py  `make bench-sampling-memory`: one sampled verify's memory at production sizes
sampled_verify_time.py  one T > 0 verify step's CPU time per path and its drafter LM-head calls
verify_memory.py  the T > 0 verify's peak extra memory on CPU (torch's profiler), chunked or not
step_profile.py  `make bench-step-profile`: a decode step's time by phase, ours against the built-in
plain_step_cpu.py  `make bench-plain-step`: a plain step's CPU per token against no-spec's, by phase,
                 with repeats (issue 64's bar)
phase_clock.py   the CPU clock a server's processes run for it: thread CPU time by phase, no profiler
"""
