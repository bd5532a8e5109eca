# cbcmn: the one build file.
#   make                 library (static + shared) and tools, under build/
#   make test            install missing packages, then every cmocka suite:
#                        release build, ASan+UBSan build, concurrency suites under TSan
#   make bench           build cbcmn-bench (release)
#   make SAN=asan|tsan   a sanitizer build in build/asan or build/tsan
#   make V=1             show the commands
.DELETE_ON_ERROR:
.SUFFIXES:
.DEFAULT_GOAL := all

ARCH   := $(shell uname -m)
CC     ?= gcc
SAN    ?=

ifeq ($(SAN),)
BUILD      ?= build
MODE_CFLAGS = -O2
MODE_LDFLAGS =
else ifeq ($(SAN),asan)
BUILD      ?= build/asan
MODE_CFLAGS = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=undefined -DCBCMN_DEBUG=1
MODE_LDFLAGS = -fsanitize=address,undefined
else ifeq ($(SAN),tsan)
BUILD      ?= build/tsan
MODE_CFLAGS = -O1 -fno-omit-frame-pointer -fsanitize=thread -DCBCMN_DEBUG=1
MODE_LDFLAGS = -fsanitize=thread
else
$(error SAN must be empty, asan or tsan)
endif

ifeq ($(V),1)
Q =
msg = @true
else
Q = @
msg = @printf '  %-6s %s\n' $(1) $(2)
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CPPFLAGS := -D_GNU_SOURCE -Ilib/include -Ilib -Itools -I$(BUILD)/gen
CFLAGS   := -std=gnu11 -g -fPIC -fvisibility=hidden $(WARN) $(MODE_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := -luring -lnuma -lpthread
LDFLAGS  := $(MODE_LDFLAGS)

LIB_SRCS := $(wildcard lib/*.c)
ASM_SRCS := $(wildcard asm/$(ARCH)/*.S)
ifeq ($(ASM_SRCS),)
$(error no context-switch assembly for $(ARCH) under asm/$(ARCH))
endif
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(ASM_SRCS:%.S=$(BUILD)/obj/%.o)
STATIC   := $(BUILD)/lib/libcbcmn.a
SHARED   := $(BUILD)/lib/libcbcmn.so
TOOLS    := $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/cbcmn-*.c))
# Code the tools share (load client, baselines): one archive linked into each.
TOOLCOMMON_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/common/*.c))
TOOLCOMMON := $(BUILD)/lib/libtoolcommon.a
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
# Suites that exercise threads racing each other: these also run under TSan.
TSAN_TESTS := test_deque test_wake test_sched test_nursery test_lockorder test_budget test_chan test_profile test_timer test_lab test_blocking test_shard test_io test_stream test_grow

all: $(STATIC) $(SHARED) $(TOOLS)

$(BUILD)/obj/%.o: %.c
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.S
	$(call msg,AS,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(STATIC): $(LIB_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJS) lib/libcbcmn.map
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -shared -Wl,--version-script=lib/libcbcmn.map -Wl,-soname,libcbcmn.so.0 \
		-Wl,-z,noexecstack $(LDFLAGS) -o $@ $(LIB_OBJS) $(LDLIBS)

$(TOOLCOMMON): $(TOOLCOMMON_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/%: tools/%.c $(TOOLCOMMON) $(STATIC)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -o $@ $< $(TOOLCOMMON) $(STATIC) $(LDFLAGS) $(LDLIBS) -lm

$(BUILD)/tests/%: tests/%.c tests/helpers.h $(TOOLCOMMON) $(STATIC) $(SHARED)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -o $@ $< $(TOOLCOMMON) $(STATIC) $(LDFLAGS) $(LDLIBS) -lcmocka -lm -ldl

tests: $(TESTS)
tools: $(TOOLS)
bench: $(BUILD)/bin/cbcmn-bench

deps:
	@scripts/install-deps.sh

# make test: the release suites, the same suites under ASan+UBSan, then the
# concurrency suites under TSan.  Stops with a non-zero status on any failure.
test: deps
	@$(MAKE) --no-print-directory SAN= all tests
	@scripts/run-tests.sh build/tests
	@$(MAKE) --no-print-directory SAN=asan tests
	@scripts/run-tests.sh build/asan/tests
	@$(MAKE) --no-print-directory SAN=tsan $(addprefix build/tsan/tests/,$(TSAN_TESTS))
	@scripts/run-tests.sh build/tsan/tests $(TSAN_TESTS)

# The README's first command: a small fork-join workload with the runtime's stats.
run: deps all
	@$(BUILD)/bin/cbcmn-demo

clean:
	rm -rf build

.PHONY: all tests tools bench deps test run clean

-include $(shell find $(BUILD)/obj $(BUILD)/bin $(BUILD)/tests -name '*.d' 2>/dev/null)
