# Everything runs from the project's own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install system-libs test test-fast lint serve serve-dense serve-hybrid serve-seed demo bench bench-adaptive bench-first-burst bench-mixed bench-one-process bench-sampled-drafts bench-sampling-memory bench-step-profile bench-plain-step tiny-pair tiny-hybrid-pair seed-hybrid-pair tiny-dflash2 gpu-check soak planted law-power law-power-bugs

install: system-libs
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[test]"

# Mooncake's transfer engine (the PD tests move KV with it, over TCP) links libibverbs even when
# no RDMA device is used: Debian's libibverbs1, installed when missing and we may (root).
system-libs:
	@ldconfig -p 2>/dev/null | grep -q libibverbs.so.1 || { [ "$$(id -u)" = 0 ] && \
		{ apt-get install -y --no-install-recommends libibverbs1 || \
		  { apt-get update && apt-get install -y --no-install-recommends libibverbs1; }; }; } || \
		echo "make install: libibverbs.so.1 is missing (apt-get install libibverbs1); the PD tests need it"

# Two workers, whole files each (module-scoped servers stay in one worker; each worker starts its
# own session servers). TEST_WORKERS=0 runs in one process. One OpenMP thread a process (servers
# inherit it): two workers' servers each spinning two threads on two cores ran a law test 15x
# slower; with one thread each worker keeps its sequential pace.
TEST_WORKERS ?= 2
test:
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The inner loop: every test that starts no SGLang server (tests/server/ holds those).
test-fast:
	$(PY) -m pytest --ignore=tests/server $(PYTEST_ARGS)

lint:
	$(PY) -m ruff check python tests
	$(PY) -m ruff format --check python tests

# The README's main job: the seed-shaped pair (launch/seed-hybrid-cpu.sh: a 16-layer Qwen3.5-style
# target, a one-layer drafter, block 16; make seed-hybrid-pair). `make serve-dense` serves the
# dense tiny pair (launch/tiny-cpu.sh), `make serve-hybrid` the 4-layer hybrid one.
serve:
	launch/seed-hybrid-cpu.sh

serve-dense:
	launch/tiny-cpu.sh

# The same with the embedded tiny hybrid pair (Qwen3.5-style target: Gated DeltaNet + attention);
# `make demo` against it starts its no-spec server with the same mamba flags (demo.py).
serve-hybrid:
	launch/tiny-hybrid-cpu.sh

# The same as `make serve`, by the pair's name.
serve-seed:
	launch/seed-hybrid-cpu.sh

# The model cards' chat completion against `make serve` (127.0.0.1:30000), then the same request
# on a no-spec server of the same target that the demo starts and stops (docs/benchmarks.md).
# PROMPT="..." asks your own question instead of the cards'.
DEMO_MAX_TOKENS ?= 512
PROMPT ?=
demo:
	$(PY) -m dflash_sglang_tools.demo --url http://127.0.0.1:30000 --max-tokens $(DEMO_MAX_TOKENS) \
		$(if $(PROMPT),--prompt "$(PROMPT)")

# The tiny pair on CPU, one server at a time: no-spec, our worker with and without
# SGLANG_ENABLE_SPEC_V2=1, SGLang's built-in; tables and plots in docs/bench/ and docs/benchmarks.md.
PAIR ?= python/dflash_sglang/assets/tiny-pair
BENCH_ARGS ?=
bench:
	$(PY) -m dflash_sglang_tools.bench.suite --pair $(PAIR) --out docs/bench --docs docs/benchmarks.md $(BENCH_ARGS)

# The adaptive verify width under load (docs/adaptive.md): a random target of real layer shapes,
# acceptance simulated at a trained drafter's per-position rates, then with none (the worst case);
# tables and plots in docs/bench/ and docs/benchmarks.md.
SIMULATED_ACCEPTANCE ?= 0.9,0.85,0.8
bench-adaptive:
	$(PY) -m dflash_sglang_tools.bench.adaptive --simulate-acceptance $(SIMULATED_ACCEPTANCE) --max-tokens 128
	$(PY) -m dflash_sglang_tools.bench.adaptive

# A new server's first bursts against its steady state and no-spec, fresh servers interleaved,
# REPEATS times (docs/bench/first-burst.json; the runs so far: docs/journal/adaptive.md).
REPEATS ?= 3
bench-first-burst:
	$(PY) -m dflash_sglang_tools.bench.first_burst --repeats $(REPEATS)

# Per-request verify lengths against one width a batch: greedy chat, and chat mixed with requests
# at temperature 1.0 whose drafts rarely fit; fresh servers interleaved, REPEATS times (docs/benchmarks.md).
bench-mixed:
	$(PY) -m dflash_sglang_tools.bench.mixed_load --repeats $(REPEATS)

# Verify policies compared inside one server process, switched between bursts through
# /set_internal_state, so a process's own speed cancels out (docs/journal/adaptive.md). LOAD=chat or mixed;
# trees (their default, one budget a batch, against the fixed trees):
# ONE_PROCESS_ARGS="--topk 8 --block 64 --fixed 16,32,64 --without 'per request'".
LOAD ?= chat
ROUNDS ?= 6
CONCURRENCY ?= 1,4,8,16,32
ONE_PROCESS_ARGS ?=
bench-one-process:
	$(PY) -m dflash_sglang_tools.bench.one_process --load $(LOAD) --rounds $(ROUNDS) \
		--concurrency $(CONCURRENCY) --servers 2 --out docs/bench/one-process-$(LOAD).json $(ONE_PROCESS_ARGS)

# Engine-free: tokens a step with point against sampled drafts at T 0.6 and 1.0 (docs/sampled-drafts.md).
bench-sampled-drafts:
	$(PY) -m dflash_sglang_tools.train.sampled_acceptance

# One sampled verify's peak memory and time at production sizes, ours against the dense oracle
# (docs/benchmarks.md, "Sampled verify at production sizes").
bench-sampling-memory:
	$(PY) -m dflash_sglang_tools.bench.sampling_memory

# Where a decode step's time goes, ours (both loops) against the built-in, by phase: py-spy samples
# of the scheduler process over the same load (docs/benchmarks.md, "One step by phase"). py-spy is
# a profiler, not a dependency: the target installs it into the venv.
PROFILE_ARGS ?=
bench-step-profile:
	$(PY) -m pip install -q "py-spy>=0.4"
	$(PY) -m dflash_sglang_tools.bench.step_profile $(PROFILE_ARGS)

# A plain step's CPU per 100 tokens against no-spec's decode step, by phase, 3 repeats of fresh
# servers (docs/benchmarks.md, "A plain step against no-spec's"; issue 64's bar), no profiler.
PLAIN_STEP_ARGS ?=
bench-plain-step:
	$(PY) -m dflash_sglang_tools.bench.plain_step_cpu $(PLAIN_STEP_ARGS)

# Retrains the embedded tiny pair (target, drafter, held-out prompts, measured acceptance) from
# the standard library's source: deterministic on one machine (one thread), about half an hour on
# a CPU core. The script's --stage target, then --stage drafter, splits it in two.
tiny-pair:
	$(PY) -m dflash_sglang_tools.train.tiny_pair --out python/dflash_sglang/assets/tiny-pair

# The same recipe on a tiny Qwen3.5-style hybrid target (train/tiny_hybrid_pair.py).
tiny-hybrid-pair:
	OMP_NUM_THREADS=1 $(PY) -m dflash_sglang_tools.train.tiny_hybrid_pair --out python/dflash_sglang/assets/tiny-hybrid-pair

# The seeds' shape: a 16-layer hybrid target and a one-layer drafter at block 16 (train/seed_hybrid_pair.py).
seed-hybrid-pair:
	OMP_NUM_THREADS=1 $(PY) -m dflash_sglang_tools.train.seed_hybrid_pair --out python/dflash_sglang/assets/seed-hybrid-pair

# DFlash2: a candidate selector trained on the embedded drafter (train/dflash2_selector.py).
tiny-dflash2:
	$(PY) -m dflash_sglang_tools.train.dflash2_selector --out python/dflash_sglang/assets/tiny-pair/draft-dflash2

# Our drafter, the verify-side math and a Qwen3-8B-shaped target timed on this machine's GPU with
# torch and transformers only, eager and CUDA-graph replayed; tiny shapes on a CPU (docs/gpu.md).
# Needs no install: `make gpu-check PY=python3` on a machine with only torch and transformers.
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=python $(PY) -m dflash_sglang_tools.gpu_check --markdown docs/gpu-check.md --json docs/gpu-check.json $(GPU_CHECK_ARGS)

# The full soak (tests/server/test_soak.py runs a reduced one in CI): 1,000 mixed requests at
# concurrency 32, ~20% aborted, forced retractions, per configuration (overlap, plain, draft window,
# hybrid target); roughly 25 min on 2 cores (300 per configuration took 4 min for the first three).
soak:
	$(PY) -m dflash_sglang_tools.soak --pair $(PAIR) $(SOAK_ARGS)

# The law tests' power (tests/planted/, docs/reliability.md). `make planted`: every planted bug
# against the law tests of the paths it reaches, on real servers (about two minutes a cell).
# `make law-power`: the judge's power against classes of bugs (tests/planted/bug_classes.py), each
# instance planted into the package's verify, engine-free runs of the chain's law case on the toy
# pair (LAW_POWER_ARGS="--case trained" for the trained pair; about an hour on one core either
# way at the defaults below). `make law-power-bugs`: the named bugs the same way, RUNS runs a bug.
PLANTED_ARGS ?=
RUNS ?= 5
LAW_POWER_ARGS ?= --instances 2 --runs 3
planted:
	$(PY) -m tests.planted.matrix --bugs none,$$($(PY) -m tests.planted.plant --list | cut -d" " -f1 | paste -sd,) $(PLANTED_ARGS)

law-power:
	OMP_NUM_THREADS=1 $(PY) -m tests.planted.class_power $(LAW_POWER_ARGS)

law-power-bugs:
	$(PY) -m tests.planted.power --runs $(RUNS)
	for bug in $$($(PY) -m tests.planted.plant --list | cut -d' ' -f1); do \
		$(PY) -m tests.planted.plant $$bug -- $(PY) -m tests.planted.power --runs $(RUNS); done
