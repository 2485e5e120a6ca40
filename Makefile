# The two commands: `make run` and `make test`. Both install what is missing first.
JOBS ?= $(shell nproc)
GEN := -G Ninja

.PHONY: all deps build run test test-release test-asan bench stress fuzz format clean install docs \
	device-check device-check-pack device-check-dry

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B build $(GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS)

run: build
	./build/keel train --overwrite

# Both suites: the Release tree, then the sanitizer tree (scripts/make-test).
test: deps
	@scripts/make-test $(JOBS)

# Every test of the Release tree, the host-logic unit tests included (make test runs those in the
# sanitizer tree only).
test-release: deps
	@cmake -S . -B build $(GEN) -DCMAKE_BUILD_TYPE=Release -DKEEL_LOGIC_TESTS=ON >/dev/null
	@cmake --build build -j $(JOBS)
	ctest --test-dir build -j $(JOBS) --output-on-failure --timeout 600

# Unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer, built with clang so the
# tree is also proved -Werror clean with a second compiler. Line tables are all the sanitizers'
# reports need; full debug info made each test binary's link take 10 s.
test-asan: deps
	@CXX=clang++ cmake -S . -B build-asan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DKEEL_SANITIZE=ON -DKEEL_CUDA=OFF -DKEEL_BUILD_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only >/dev/null
	@cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan -L 'unit|fuzz' -j $(JOBS) --output-on-failure --timeout 900

# The fuzz targets (tests/fuzz, libFuzzer + ASan/UBSan) for FUZZ_SECONDS each, in their own tree:
# libFuzzer coverage in every room, -O1. `make test` runs each for 1,000 to 20,000 executions in
# the unit tests' sanitizer tree.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS := ir_text json_readers safetensors profile run_files corpus
fuzz: deps
	@CXX=clang++ cmake -S . -B build-fuzz $(GEN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
	  -DKEEL_SANITIZE=ON -DKEEL_FUZZ_COVERAGE=ON -DKEEL_BUILD_BENCH=OFF -DKEEL_PCH=OFF -DKEEL_UNITY=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@mkdir -p build-fuzz/fuzz; for f in $(FUZZ_TARGETS); do \
	  echo "== fuzz_$$f ($(FUZZ_SECONDS) s)"; \
	  if ! bash tests/fuzz/run_fuzz.sh build-fuzz/tests/fuzz_$$f $$f tests/fuzz build-fuzz/fuzz \
	      -max_total_time=$(FUZZ_SECONDS) >build-fuzz/fuzz/$$f.log 2>&1; then \
	    tail -40 build-fuzz/fuzz/$$f.log; exit 1; \
	  fi; \
	  grep -E 'Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb' build-fuzz/fuzz/$$f.log; \
	done

# Long checks; make test runs a short version of each.
stress: build
	bash tests/fault/fault_sweep.sh build/keel build/tests/libkeel_fault.so full
	bash tests/default_job.sh build/keel
	bash tests/bench_smoke.sh build/bench all
	bash tests/nam_job.sh build/keel
	@# The device check's dry run, where the CUDA backend is built.
	@if [ -x build/tests/conformance_test ] && build/tests/conformance_test --gtest_list_tests | grep -q cuda; then \
	  scripts/device-check dry-run; fi
	bash tests/bf16_train.sh build/keel 200 16 0.15 0.06
	@# The whole conformance suite on the CUDA backend's emulated GPU (where it is built).
	@if [ -x build/tests/conformance_test ] && build/tests/conformance_test --gtest_list_tests | grep -q cuda; then \
	  KEEL_CUDA_EMULATE=true build/tests/conformance_test --gtest_filter='*/cuda'; fi

# Each benchmark's output is kept in build/bench-logs/NAME.log; at the end scripts/bench-report
# turns the logs into docs/performance.md. bash with pipefail: a benchmark that fails still fails
# the target through tee, and then docs/performance.md is left as it was.
BENCH_LOG = 2>&1 | tee build/bench-logs/$(1).log
# The commit parent_bench compares this build against (make bench BENCH_BASE=origin/main);
# empty: HEAD for a tree with local edits, else HEAD^.
BENCH_BASE ?=
bench: private SHELL := /bin/bash
bench: private .SHELLFLAGS := -o pipefail -c
bench: build
	@scripts/install-deps --bench
	@rm -rf build/bench-logs && mkdir -p build/bench-logs
	./build/bench/gemm_bench --reps 10 $(call BENCH_LOG,gemm_bench)
	./build/bench/ttfs_bench --trials 3 $(call BENCH_LOG,ttfs_bench)
	./build/bench/step_bench --steps 10 $(call BENCH_LOG,step_bench)
	./build/bench/depth_bench --steps 8 $(call BENCH_LOG,depth_bench)
	./build/bench/attention_bench --reps 3 $(call BENCH_LOG,attention_bench)
	./build/bench/attention_bench --reps 3 --precision bf16 $(call BENCH_LOG,attention_bench_bf16)
	./build/bench/block_bench --reps 5 $(call BENCH_LOG,block_bench)
	./build/bench/block_bench --reps 3 --seq 2048 $(call BENCH_LOG,block_bench_long)
	bench/hybrid_bench.sh ./build/keel 12 2 $(call BENCH_LOG,hybrid_bench)
	mpirun --allow-run-as-root --oversubscribe -np 2 ./build/bench/allreduce_bench --reps 10 $(call BENCH_LOG,allreduce_bench)
	bench/dp_bench.sh ./build/keel gpt2-s 6 $(call BENCH_LOG,dp_bench)
	bench/zero_bench.sh ./build/keel gpt2-m 4 $(call BENCH_LOG,zero_bench)
	bench/tp_bench.sh ./build/keel nam-s 4 $(call BENCH_LOG,tp_bench)
	bench/ep_bench.sh ./build/keel nam-s 10 $(call BENCH_LOG,ep_bench)
	bench/share_bench.sh ./build/keel $(call BENCH_LOG,share_bench)
	bench/parent_bench.sh ./build/keel . $(if $(BENCH_BASE),--base $(BENCH_BASE)) $(call BENCH_LOG,parent_bench)
	./build/tests/conformance_test --perf --reps 50 $(call BENCH_LOG,conformance_perf)
	scripts/bench-report build/bench-logs

# Headers, libraries, the keel binary, profiles, the CMake package and keel.pc under PREFIX.
PREFIX ?= /usr/local
install: build
	cmake --install build --prefix $(PREFIX)

# The API reference from the installed headers: build/docs/html/index.html (no warnings allowed).
docs: build
	cmake --build build --target docs

format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-asan build-fuzz

# The CUDA backend on a lent GPU (issue 49, docs/backends.md). Here: build, then pack keel, its
# libraries, the corpus and the CPU's reference losses into .device-check/ (carried to the GPU
# machine). There, in one call: make device-check (nothing is installed or built there).
# The dry run first: a broken pack is found here, on the CPU, not in the device's minutes.
device-check-pack: build
	@scripts/device-check dry-run
	@scripts/device-check pack
device-check:
	@scripts/device-check run
# Everything but the device's execution, here: a tiny pack run on keel's emulated GPU.
device-check-dry: build
	@scripts/device-check dry-run
