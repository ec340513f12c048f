# The two commands of README.md:
#   make run    install, build, fetch the default model and generate an answer
#   make test   install the test references, build, fetch the test models and run the suite
PRESET ?= release
BUILD := build/$(PRESET)
SALVO := $(BUILD)/salvo
MODEL ?= smollm2-135m
PROMPT ?= Write a Python function that checks whether a number is prime.
JOBS ?= $(shell nproc)

.PHONY: run test build setup setup-test models format bench clean

run: setup build
	$(SALVO) pull $(MODEL)
	$(SALVO) run --model $(MODEL) -m "$(PROMPT)" --max-tokens 256

test: setup-test build
	python3 scripts/models.py all
	cd $(BUILD) && ctest --output-on-failure -j1 --timeout 1800

setup:
	scripts/setup.sh build

setup-test:
	scripts/setup.sh test

build:
	cmake --preset $(PRESET) >/dev/null
	cmake --build --preset $(PRESET) -j $(JOBS)

models:
	python3 scripts/models.py all

bench: build
	python3 bench/bench_vs_llamacpp.py --models smollm2-135m qwen2.5-coder-1.5b

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build
