# Thin wrapper over CMake: the README's two commands are `make run` and `make test`.
JOBS ?= $(shell nproc)
WERROR := $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: setup build run test test-main test-asan test-fuzz bench clean

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B build -DDSL_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build build -j$(JOBS)

# The main job: train the Fashion-MNIST MLP on two local CPU ranks.
run: build
	./build/dslaunch --include localhost:0,1 train --config configs/fashion_mnist.json

# Every test: the normal build (unit, flow, cluster; GPU tests skip without a GPU),
# the unit and flow tests again under ASan+UBSan, and every fuzz target for a bounded time.
test: test-main test-asan test-fuzz

test-main: build
	python3 scripts/check-layers.py build
	ctest --test-dir build --output-on-failure -j$(JOBS) -LE fuzz

test-asan: setup
	cmake -S . -B build-asan -DDSL_WERROR=$(WERROR) -DDSL_SANITIZE=address,undefined \
	  -DDSL_WITH_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -j$(JOBS) -L 'unit|flow' -LE 'blascore|torch'

test-fuzz: setup
	CC=clang cmake -S . -B build-fuzz -DDSL_FUZZ=ON -DDSL_WITH_CUDA=OFF \
	  -DDSL_SANITIZE=address,undefined -DDSL_FUZZ_SECONDS=$(or $(FUZZ_SECONDS),20) $(CMAKE_FLAGS)
	cmake --build build-fuzz -j$(JOBS)
	ctest --test-dir build-fuzz --output-on-failure -j$(JOBS) -L fuzz

clean:
	rm -rf build build-asan build-fuzz
