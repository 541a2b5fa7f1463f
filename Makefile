# braid — the two commands:
#   make run    set up, build, run the main job (benchmarks on a multi-GPU node; `braid info` otherwise)
#   make test   set up, build, run every test (GPU tests report themselves skipped without GPUs)
BUILD ?= build
JOBS ?= $(shell nproc)
ARCHS ?= 90a
CMAKE_FLAGS ?=

.PHONY: all setup configure build test run clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRAID_CUDA_ARCHS=$(ARCHS) $(CMAKE_FLAGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 1

run: build
	@bash scripts/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
