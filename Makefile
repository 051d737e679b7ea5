# SpecLab — `make demo` and `make test` do all the setup on a fresh machine.
BUILD    ?= build
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=
SPECLAB  := $(BUILD)/speclab

.PHONY: all setup configure build test demo bench clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: setup $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

demo: build
	bash scripts/demo.sh $(SPECLAB)

bench: build
	$(SPECLAB) bench

clean:
	rm -rf $(BUILD)
