# chorus: CMake underneath, these targets on top.
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all test perf install asan tsan mutate clean

all: $(BUILD)/Makefile
	@$(MAKE) --no-print-directory -C $(BUILD) -j$(JOBS)

$(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

# CTEST_ARGS narrows a run, e.g. CTEST_ARGS="-L faults" (the fault-injection suite).
CTEST_ARGS ?=

test: all
	cd $(BUILD) && ctest --output-on-failure -j2 --timeout 600 $(CTEST_ARGS)

# The main job: an AllReduce size sweep over 2 local ranks.
perf: all
	$(BUILD)/bin/chorusrun -n 2 $(BUILD)/bin/all_reduce_perf -b 8 -e 128M -f 2

install: all
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@$(MAKE) --no-print-directory -C $(BUILD) -j$(JOBS)
	cmake --install $(BUILD)

asan:
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DCHORUS_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo" test

tsan:
	CHORUS_TEST_COMM_ID=1 TSAN_OPTIONS="die_after_fork=0 $(TSAN_OPTIONS)" $(MAKE) BUILD=build-tsan CMAKE_FLAGS="-DCHORUS_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo" test

# Mutation testing (tests/mutate.sh): every mutant of tests/mutants.txt must
# be killed by a failing check; MUTATE_ARGS picks mutants or sets deadlines.
MUTATE_ARGS ?=
mutate:
	tests/mutate.sh $(MUTATE_ARGS)

clean:
	rm -rf build build-asan build-tsan
