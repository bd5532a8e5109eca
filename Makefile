# cbcmn: the one build file.
#   make                 library (static + shared), tools and examples/, under build/
#   make run             install missing packages, build, run a workload under cbcmn-top -b
#   make test            install missing packages, then every cmocka suite:
#                        release build (also as a user without privilege, but for a
#                        few slow compute-only suites), ASan+UBSan build,
#                        concurrency suites under TSan; the I/O suites also on
#                        the epoll backend (EPOLL_TESTS)
#   make test-unprivileged  every release suite as nobody with Debian's default limits
#   make bench           build cbcmn-bench (release) and its baselines (oneTBB, Go, Erlang)
#   make scripts         the measuring programs scripts/*.c, in build/scripts (make test
#                        builds them, so that none rots)
#   make SAN=asan|tsan   a sanitizer build in build/asan or build/tsan
#   make V=1             show the commands
#   make LTO=0           the release library file by file, without link-time optimisation
#   make LTO_ARCHIVE=fat libcbcmn.a of fat LTO objects: a user's -flto link optimises across
#   make TOOLS_LTO=1     the tools linked whole-program with lib/'s IR (default: the archive)
#   make install         headers, libraries, tools, man pages, cbcmn.pc under PREFIX
#                        (/usr/local); DESTDIR, LIBDIR, ... : docs/INSTALL.md
#   make uninstall       removes what make install put there (same variables)
#   make bpf             the CO-RE programs and their skeleton (build/gen/*.skel.h)
#   make fuzz            the libFuzzer targets tests/fuzz/fuzz_*.c, in build/fuzz (clang)
#   make fuzz-smoke      each of them for FUZZ_SECONDS (15) on its corpus: fails on a crash
#   make test-kernels    the release suites again under Debian's 6.1 and 6.12 kernels in
#                        QEMU (scripts/kernel-matrix.sh; long: 35-45 min a kernel under TCG here)
#   make test-kernels-short  test_bpf and test_io only on both (about 5 min under TCG:
#                        not part of make test, which would pass 20 min with it)
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
LTO        ?= 1
else ifeq ($(SAN),asan)
BUILD      ?= build/asan
MODE_CFLAGS = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=undefined -DCBCMN_DEBUG=1 -DCBCMN_FAULTS=1
MODE_LDFLAGS = -fsanitize=address,undefined
else ifeq ($(SAN),tsan)
BUILD      ?= build/tsan
MODE_CFLAGS = -O1 -fno-omit-frame-pointer -fsanitize=thread -DCBCMN_DEBUG=1 -DCBCMN_FAULTS=1
MODE_LDFLAGS = -fsanitize=thread
else
$(error SAN must be empty, asan or tsan)
endif
# What libcbcmn.a holds in an LTO build (docs/INSTALL.md): one, lib/'s
# files linked into one object of machine code; fat, each file's object
# with GCC's IR beside its machine code (-ffat-lto-objects), so that a
# program linked with -flto is optimised with the library.
LTO_ARCHIVE ?= one
# Our tools (cbcmn-bench, cbcmn-run, ...) linked with the library's IR and
# their own: the whole program optimised at its link.  Off by default: the
# tools, the bench's figures included, link the library as it is
# installed (docs/INSTALL.md, docs/BENCHMARKS.md).
TOOLS_LTO   ?= 0
# A sanitizer build is never LTO, whatever LTO says (the command line's or
# the environment's LTO=1 made one).
ifneq ($(SAN),)
override LTO := 0
override LTO_ARCHIVE := one
endif
ifneq ($(LTO),1)
override TOOLS_LTO := 0
endif
ifeq ($(filter one fat,$(LTO_ARCHIVE)),)
$(error LTO_ARCHIVE must be one or fat, not '$(LTO_ARCHIVE)')
endif
ifeq ($(LTO)$(LTO_ARCHIVE),0fat)
$(error LTO_ARCHIVE=fat archives GCC's IR: it needs LTO=1)
endif
ifeq ($(filter 0 1,$(TOOLS_LTO)),)
$(error TOOLS_LTO must be 0 or 1, not '$(TOOLS_LTO)')
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
# The library's own objects: executors' TLS (below) and, in release, LTO.
LIB_LTO  := $(if $(filter 1,$(LTO)),-flto=auto)
# GCC's alone: the static archive's one object is linked with GCC's
# -flinker-output=nolto-rel.  clang failed there, after every file was
# compiled ("unknown argument").
ifneq ($(LIB_LTO),)
ifneq ($(shell $(CC) -dM -E -x c /dev/null 2>/dev/null | grep -c __clang__),0)
$(error CC=$(CC) is clang: the release build's LTO needs GCC; build with LTO=0 (docs/INSTALL.md))
endif
endif
# strip: the flags file (below) reads as main's did before LTO_ARCHIVE,
# '-ftls-model=initial-exec -flto=auto', not with a space after, which
# rebuilt lib/ once in each build directory the change reached.
LIB_CFLAGS := $(strip -ftls-model=initial-exec $(LIB_LTO) $(if $(filter fat,$(LTO_ARCHIVE)),-ffat-lto-objects))
# The tools' shared code, for TOOLS_LTO: fat, so that the suites, which
# link it too, link its machine code (-fno-lto) without an LTO link each.
TOOL_CFLAGS := $(if $(filter 1,$(TOOLS_LTO)),-flto=auto -ffat-lto-objects)

LIB_SRCS := $(wildcard lib/*.c)
ASM_SRCS := $(wildcard asm/$(ARCH)/*.S)
ifeq ($(ASM_SRCS),)
$(error no context-switch assembly for $(ARCH) under asm/$(ARCH))
endif
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(ASM_SRCS:%.S=$(BUILD)/obj/%.o)
STATIC   := $(BUILD)/lib/libcbcmn.a
SHARED   := $(BUILD)/lib/libcbcmn.so
TOOLS    := $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/cbcmn-*.c))
# Code the tools share, a folder per part (docs/TOOLS.md): the BPF loader,
# the viewer, the workloads, the servers and load client, the baselines,
# the export formats, the command lines and small utilities.  One archive
# linked into each tool and test.
TOOL_DIRS := bpf top workloads net baseline export cli util
TOOLCOMMON_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard $(TOOL_DIRS:%=tools/%/*.c)))
TOOLCOMMON := $(BUILD)/lib/libtoolcommon.a
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
# Programs a user copies from (README, "Examples"): one .c file each, built
# as a user's program would be, against the public headers alone.
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
# The measuring programs under scripts/ (docs/BENCHMARKS.md names their
# commands), built the same way by make test so that none rots.
SCRIPTS  := $(patsubst scripts/%.c,$(BUILD)/scripts/%,$(wildcard scripts/*.c))
# The version is held by lib/include/cbcmn.h alone (docs/INSTALL.md): the
# soname carries its MAJOR.
VERSION  := $(shell awk '/^.define CBCMN_VERSION_(MAJOR|MINOR|PATCH) /{v = v s $$3; s = "."} END {print v}' lib/include/cbcmn.h)
ifeq ($(shell echo '$(VERSION)' | grep -xE '[0-9]+[.][0-9]+[.][0-9]+'),)
$(error cannot read CBCMN_VERSION_MAJOR/MINOR/PATCH from lib/include/cbcmn.h (got '$(VERSION)'))
endif
SONAME   := libcbcmn.so.$(firstword $(subst ., ,$(VERSION)))

# CO-RE eBPF: bpf/*.bpf.c -> build/bpf/*.bpf.o -> build/gen/*.skel.h, against a
# vmlinux.h dumped from the running kernel's BTF.  Always under build/, for
# every SAN variant: sanitizers do not apply to BPF code and the skeleton
# header is the same.  clang -target bpf does not search the multiarch
# include dir, where asm/errno.h (pulled in by usdt.bpf.h) lives.
BPF_OUT     := build
BPF_CLANG   ?= clang
BPFTOOL     ?= bpftool
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPF_SRCS    := $(wildcard bpf/*.bpf.c)
BPF_OBJS    := $(patsubst bpf/%.bpf.c,$(BPF_OUT)/bpf/%.bpf.o,$(BPF_SRCS))
BPF_SKELS   := $(patsubst bpf/%.bpf.c,$(BPF_OUT)/gen/%.skel.h,$(BPF_SRCS))
BPF_CFLAGS  := -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror \
               -I$(BPF_OUT)/gen -I/usr/include/$(shell gcc -dumpmachine) -Ibpf
BPF_LDLIBS  := -lbpf -lelf -lz
CPPFLAGS    += -I$(BPF_OUT)/gen -Ibpf
# What links the loader (tools/bpf/bpfmon.c) and so libbpf.
BPF_USERS   := $(BUILD)/bin/cbcmn-stat $(BUILD)/bin/cbcmn-bench $(BUILD)/bin/cbcmn-run \
               $(BUILD)/bin/cbcmn-top $(BUILD)/tests/test_bpf $(BUILD)/tests/test_run \
               $(BUILD)/tests/test_top $(BUILD)/tests/test_bpfns $(BUILD)/tests/test_bpfscale \
               $(BUILD)/tests/test_bpfsched $(BUILD)/tests/test_bpfactor
# Suites that exercise threads racing each other: these also run under TSan.
TSAN_TESTS := test_deque test_wake test_sched test_sched_spin test_nursery test_cancel test_lockorder test_budget test_budget_defaults test_budget_refund test_budget_limited test_janus test_janus_budget test_chan test_profile test_timer test_lab test_blocking test_shard test_io test_iocancel test_stream test_stream_fixed test_stream_inc test_grow test_watch test_run test_faults test_errtail test_backend test_bpfscale test_snapshot test_obligation test_poll test_trace test_actor test_actor_sup test_stall test_cancelscope test_actor_sched test_metrics test_actor_stats test_actor_handler test_actor_lanes test_chan_handoff test_recstack test_trace_actor test_taskcache test_actor_handler_timeout test_liveness test_actor_table test_actor_direct test_actor_budget test_clock test_budget_nohandle test_actor_room test_actor_drop test_actor_prefetch test_actor_notify test_cpuquota test_stack test_sysstack

# Suites that do fiber I/O or park executors: `make test` runs them a second
# time on the epoll backend (CBCMN_BACKEND=epoll, docs/IO.md "Backends");
# those of them that test io_uring itself skip there, saying so.  Under ASan
# the shorter EPOLL_ASAN_TESTS, for the time budget.
EPOLL_TESTS := test_io test_iocancel test_stream test_stream_fixed test_stream_inc test_echo test_timer test_worker test_blocking test_lab test_takeover test_grow test_fork test_wake test_sched_spin test_limits test_ring test_poll
EPOLL_ASAN_TESTS := test_io test_iocancel test_stream test_timer test_echo test_blocking test_poll

all: $(STATIC) $(SHARED) $(TOOLS) examples

$(BUILD)/obj/%.o: %.c
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.S
	$(call msg,AS,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# Thread-locals in one load from %fs, not a __tls_get_addr call per access
# (the default for -fPIC code in libcbcmn.so: cbcmn__tls_exec is read on
# every wake and spawn); the SIGSEGV handler reads them too, and the call
# is not async-signal-safe.  Costs a few hundred bytes of glibc's static TLS
# surplus when the library is dlopen()ed (tests/test_tls.c).
$(LIB_OBJS): CFLAGS += $(LIB_CFLAGS)

# The library's objects are built again when LIB_CFLAGS change: make LTO=0
# after an LTO build archived the LTO objects, GCC's IR alone (a program
# linked by clang found none of the library's symbols, one linked by GCC
# was optimised at its link), and LTO=1 after LTO=0 linked without LTO.
# The file changes only when the flags do.
LIB_FLAGS := $(BUILD)/obj/lib/flags
$(LIB_FLAGS): FORCE
	@mkdir -p $(@D)
	@echo '$(LIB_CFLAGS)' | cmp -s - $@ || echo '$(LIB_CFLAGS)' > $@
$(LIB_OBJS): $(LIB_FLAGS)
# The same for the tools' shared code and TOOLS_LTO.
TOOL_FLAGS := $(BUILD)/obj/tools/flags
$(TOOL_FLAGS): FORCE
	@mkdir -p $(@D)
	@echo '$(TOOL_CFLAGS)' | cmp -s - $@ || echo '$(TOOL_CFLAGS)' > $@
$(TOOLCOMMON_OBJS): $(TOOL_FLAGS)
$(TOOLCOMMON_OBJS): CFLAGS += $(TOOL_CFLAGS)
FORCE:

# The release library is optimised as one unit (link-time optimisation):
# an actor's hop crosses eight of lib/'s files, and calls between them cost
# the fiber ring 7-9 % of its time (docs/BENCHMARKS.md, "Twenty-fourth
# session, the library as one unit").  The static archive holds one object,
# lib/'s files linked into one with GCC's LTO (-r, nolto-rel: plain machine
# code), so that a program links it with any toolchain, LTO or not; the
# shared library is linked with LTO.  LTO=0 builds and archives the files
# one by one (a compiler without GCC's LTO plugin).
#
# objcopy: the -r link leaves global (hidden) the names LTO made for
# lib/'s static functions and data shared between its partitions
# (take.lto_priv.0, seterr.lto_priv.0, ...) and for their debug info
# (actor.c.f45d6153).  A program linked with GCC's LTO names its own
# statics so: one with a static take() in two files failed to link
# against libcbcmn.a ("multiple definition of `take.lto_priv.0'").  No C
# name holds a dot: each such name goes local (test_install), but sdt.h's
# _.stapsdt.base, weak on purpose (one per program, in a COMDAT group).
#
# LIB_ONE is that archive; the suites, examples/ and scripts/ link it in
# every LTO build.  LIB_IR archives lib/'s objects as they are, GCC's IR
# (gcc-ar: its index names the IR's symbols): the tools link it with
# TOOLS_LTO, and LTO_ARCHIVE=fat installs it as libcbcmn.a, its objects
# fat (machine code beside the IR).
ifeq ($(LTO),1)
# GCC's ar with its LTO plugin, of CC's version: gcc-ar for gcc or cc,
# gcc-ar-13 for gcc-13, x86_64-linux-gnu-gcc-ar-12 for
# x86_64-linux-gnu-gcc-12 (another version's plugin may misread the IR).
# Needed by LTO_ARCHIVE=fat and TOOLS_LTO=1 alone, and looked for before
# anything is built (it failed at the archive, after every file compiled,
# in sh's "gcc-ar-13: not found" and make's line).
CC_WORD := $(firstword $(CC))
GCC_AR  ?= $(if $(findstring gcc,$(notdir $(CC_WORD))),$(if $(findstring /,$(CC_WORD)),$(dir $(CC_WORD)))$(subst gcc,gcc-ar,$(notdir $(CC_WORD))),gcc-ar)
ifneq ($(LTO_ARCHIVE)$(TOOLS_LTO),one0)
ifeq ($(shell command -v $(firstword $(GCC_AR)) 2>/dev/null),)
$(error GCC_AR=$(GCC_AR) is not found: LTO_ARCHIVE=fat and TOOLS_LTO=1 archive GCC's IR with the ar of CC=$(CC)'s GCC; give its name in GCC_AR (docs/INSTALL.md))
endif
endif
LIB_ONE := $(BUILD)/obj/libcbcmn-one.a
LIB_IR  := $(BUILD)/obj/libcbcmn-ir.a
LINK_LIB := $(LIB_ONE)
TOOL_LIB := $(if $(filter 1,$(TOOLS_LTO)),$(LIB_IR),$(LIB_ONE))

$(LIB_ONE): $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LIB_CFLAGS) -r -nostdlib -flinker-output=nolto-rel \
		-o $(BUILD)/obj/libcbcmn-lto.o $^
	$(Q)objcopy --wildcard --localize-symbol='!_.stapsdt.base' --localize-symbol='*.*' \
		$(BUILD)/obj/libcbcmn-lto.o
	$(Q)rm -f $@ && ar rcs $@ $(BUILD)/obj/libcbcmn-lto.o

$(LIB_IR): $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(GCC_AR) rcs $@ $^

$(STATIC): $(if $(filter fat,$(LTO_ARCHIVE)),$(LIB_IR),$(LIB_ONE))
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)cp $< $@
else
LINK_LIB := $(STATIC)
TOOL_LIB := $(STATIC)

$(STATIC): $(LIB_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^
endif
# The suites link the tools' shared code; with TOOLS_LTO its objects are
# fat and -fno-lto links their machine code, not an LTO link per suite.
NOLTO_LINK := $(if $(filter 1,$(TOOLS_LTO)),-fno-lto)

# -z nodelete: dlclose() leaves the library mapped.  Its thread-exit hook
# (janus's pthread key), signal handlers and executor code may outlive a
# host's dlclose(); unmapped, the next thread exit would jump into nothing.
$(SHARED): $(LIB_OBJS) lib/libcbcmn.map
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -shared -Wl,--version-script=lib/libcbcmn.map -Wl,-soname,$(SONAME) \
		-Wl,-z,noexecstack -Wl,-z,nodelete $(if $(LIB_LTO),$(CFLAGS) $(LIB_CFLAGS)) \
		$(LDFLAGS) -o $@ $(LIB_OBJS) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(LINK_LIB)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -D_GNU_SOURCE -Ilib/include $(CFLAGS) -MMD -MP -o $@ $< $(LINK_LIB) $(LDFLAGS) $(LDLIBS) $(EXTRA_LDLIBS)

$(BUILD)/scripts/%: scripts/%.c $(LINK_LIB)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -D_GNU_SOURCE -Ilib/include $(CFLAGS) -MMD -MP -o $@ $< $(LINK_LIB) $(LDFLAGS) $(LDLIBS)

# The TLS echo server uses OpenSSL (libssl-dev); test_examples is its client.
$(BUILD)/examples/tls_echo $(BUILD)/tests/test_examples: EXTRA_LDLIBS := -lssl -lcrypto
# test_examples runs the examples of its own build.
$(BUILD)/tests/test_examples: | $(EXAMPLES)

$(TOOLCOMMON): $(TOOLCOMMON_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(if $(filter 1,$(TOOLS_LTO)),$(GCC_AR),ar) rcs $@ $^

# A tool with TOOLS_LTO: its file, the shared code and the library
# optimised as one program at its link.
$(BUILD)/bin/%: tools/%.c $(TOOLCOMMON) $(TOOL_LIB) $(TOOL_FLAGS)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(TOOL_CFLAGS) -MMD -MP -o $@ $< $(TOOLCOMMON) $(TOOL_LIB) $(LDFLAGS) $(LDLIBS) $(EXTRA_LDLIBS) -lm

$(BUILD)/tests/%: tests/%.c tests/helpers.h $(TOOLCOMMON) $(LINK_LIB) $(STATIC) $(SHARED)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(NOLTO_LINK) -MMD -MP -o $@ $< $(TOOLCOMMON) $(LINK_LIB) $(LDFLAGS) $(LDLIBS) $(EXTRA_LDLIBS) -lcmocka -lm -ldl

# ---- BPF pipeline ----
$(BPF_OUT)/gen/vmlinux.h:
	@mkdir -p $(@D)
	@test -r $(VMLINUX_BTF) || { echo "cbcmn: $(VMLINUX_BTF) is missing: this kernel has no BTF (CONFIG_DEBUG_INFO_BTF=y is needed to build the eBPF programs)" >&2; exit 1; }
	$(call msg,GEN,$@)
	$(Q)$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@

$(BPF_OUT)/bpf/%.bpf.o: bpf/%.bpf.c bpf/cbcmn_bpf.h $(BPF_OUT)/gen/vmlinux.h
	$(call msg,BPF,$<)
	@mkdir -p $(@D)
	$(Q)$(BPF_CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BPF_OUT)/gen/%.skel.h: $(BPF_OUT)/bpf/%.bpf.o
	$(call msg,GENSKEL,$@)
	@mkdir -p $(@D)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst .,_,$*)_bpf > $@

# The loader includes the skeleton; what links it needs libbpf.
$(BUILD)/obj/tools/bpf/bpfmon.o: $(BPF_SKELS)
$(BPF_USERS): EXTRA_LDLIBS := $(BPF_LDLIBS)
# The viewer draws with ncurses (wide-character build).
$(BUILD)/bin/cbcmn-top: EXTRA_LDLIBS := $(BPF_LDLIBS) -lncursesw
$(BPF_USERS): $(BPF_SKELS)
# test_backend denies io_uring with a seccomp filter, as a container does.
$(BUILD)/tests/test_backend: EXTRA_LDLIBS := -lseccomp
# test_cancelscope: a cancellation under a filter that kills membarrier(2).
$(BUILD)/tests/test_cancelscope: EXTRA_LDLIBS := -lseccomp
# test_bpf runs cbcmn-stat (the one from its own build) against a child,
# test_bpfactor against itself.
$(BUILD)/tests/test_bpf $(BUILD)/tests/test_bpfactor: | $(BUILD)/bin/cbcmn-stat
$(BUILD)/tests/test_bpfns: | $(BUILD)/bin/cbcmn-stat $(BUILD)/bin/cbcmn-top $(BUILD)/bin/cbcmn-bench
# test_bpfscale runs cbcmn-top and cbcmn-stat against a child, and cbcmn-run --bpf.
$(BUILD)/tests/test_bpfscale: | $(BUILD)/bin/cbcmn-stat $(BUILD)/bin/cbcmn-top $(BUILD)/bin/cbcmn-run
# test_cli runs every tool of its own build with bad arguments.
$(BUILD)/tests/test_cli: | $(TOOLS)
# test_export runs cbcmn-stat --prometheus; test_trace runs cbcmn-run --trace.
$(BUILD)/tests/test_export: | $(BUILD)/bin/cbcmn-stat
$(BUILD)/tests/test_trace: | $(BUILD)/bin/cbcmn-run
# test_toprecord runs cbcmn-top --record over cbcmn-run.
$(BUILD)/tests/test_toprecord: | $(BUILD)/bin/cbcmn-top $(BUILD)/bin/cbcmn-run
# test_install installs this build (tools included) into a scratch DESTDIR,
# and checks that libcbcmn.a is the LTO_ARCHIVE asked for (an archive
# without IR had passed as the default one).  private: not passed on to
# the library's objects, which it may build first.
$(BUILD)/tests/test_install: | $(TOOLS)
$(BUILD)/tests/test_install: private CPPFLAGS += -DT_LTO_ARCHIVE_FAT=$(if $(filter fat,$(LTO_ARCHIVE)),1,0)

# The objects stay: bpftool reads them and they are worth keeping to inspect.
.SECONDARY: $(BPF_OBJS)

bpf: $(BPF_SKELS)

tests: $(TESTS)
tools: $(TOOLS)
examples: $(EXAMPLES)
scripts: $(SCRIPTS)
# make bench: cbcmn-bench and the baselines it compares with in one run
# (tools/baseline/: oneTBB's task_group, Go's channels and goroutines,
# Erlang/OTP's processes), after installing libtbb-dev, golang-go and
# erlang-base (scripts/install-deps.sh --bench; not needed by make test).
# A second make, so that the checks below see them installed.
bench:
	$(Q)scripts/install-deps.sh --bench
	$(Q)$(MAKE) --no-print-directory bench-build

BASELINES :=
ifneq ($(wildcard /usr/include/oneapi/tbb/task_group.h),)
BASELINES += $(BUILD)/bin/cbcmn-baseline-tbb
endif
ifneq ($(shell command -v go 2>/dev/null),)
BASELINES += $(BUILD)/bin/cbcmn-baseline-go
endif
ifneq ($(shell command -v erlc 2>/dev/null),)
BASELINES += $(BUILD)/bin/cbcmn-baseline-erlang
endif
bench-build: $(BUILD)/bin/cbcmn-bench $(BASELINES)

$(BUILD)/bin/cbcmn-baseline-tbb: tools/baseline/tbb.cpp
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $< -o $@ -ltbb

# GOCACHE under build/: the build neither needs nor writes $$HOME.
$(BUILD)/bin/cbcmn-baseline-go: tools/baseline/chan.go tools/baseline/actors.go
	@mkdir -p $(@D)
	$(Q)GOCACHE=$(abspath $(BUILD))/gocache GO111MODULE=off go build -o $@ $^

# The module in build/erl/, the script that starts erl beside it in bin/.
$(BUILD)/bin/cbcmn-baseline-erlang: tools/baseline/erlang.sh $(BUILD)/erl/cbcmn_baseline.beam
	@mkdir -p $(@D)
	$(Q)install -m 755 $< $@

$(BUILD)/erl/cbcmn_baseline.beam: tools/baseline/cbcmn_baseline.erl
	@mkdir -p $(@D)
	$(Q)erlc -Werror -o $(@D) $<

deps:
	@scripts/install-deps.sh

# Release suites as a user without privilege and with default limits
# (scripts/run-unprivileged.sh): make test leaves out these, which compute
# only (scheduling, deques, fixtures' predictions, a million fibers) and
# take a minute and a half of the run; make test-unprivileged runs all.
UNPRIV_SKIP := test_fiber test_experiment test_wake test_deque test_sched
UNPRIV_TESTS := $(filter-out $(UNPRIV_SKIP),$(patsubst tests/%.c,%,$(wildcard tests/test_*.c)))

# make test: the release suites, the same as a user without privilege, the
# same suites under ASan+UBSan, then the concurrency suites under TSan, then
# a short run of every fuzz target.  Stops with a non-zero status on any
# failure.
#
# The builds use every CPU (TEST_JOBS): `make test` is typed, and CI runs
# it, without -j, and a one-job build of three flavours was a third of the
# 20 minutes.  Each phase prints its wall time (make test's budget).
#
# The suites run in two lanes at once (TEST_LANES, scripts/run-tests.sh's
# T_LANES) where there are 2 CPUs or more: the tool suites, which wait on
# the kernel's verifier and on the tools' intervals, beside the others.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
TEST_LANES ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 1)
test: export T_LANES = $(TEST_LANES)
test_make = $(MAKE) -j$(TEST_JOBS) --no-print-directory
test: deps
	@scripts/phase-time.sh build $(test_make) SAN= all tests scripts
	@scripts/phase-time.sh release scripts/run-tests.sh build/tests
	@CBCMN_BACKEND=epoll scripts/phase-time.sh epoll scripts/run-tests.sh build/tests $(EPOLL_TESTS)
	@scripts/phase-time.sh unprivileged scripts/run-unprivileged.sh build $(UNPRIV_TESTS)
	@scripts/phase-time.sh asan-build $(test_make) SAN=asan tests
	@scripts/phase-time.sh asan scripts/run-tests.sh build/asan/tests
	@CBCMN_BACKEND=epoll scripts/phase-time.sh asan-epoll scripts/run-tests.sh build/asan/tests $(EPOLL_ASAN_TESTS)
	@scripts/phase-time.sh tsan-build $(test_make) SAN=tsan $(addprefix build/tsan/tests/,$(TSAN_TESTS))
	@scripts/phase-time.sh tsan scripts/run-tests.sh build/tsan/tests $(TSAN_TESTS)
	@scripts/phase-time.sh fuzz-build $(test_make) fuzz
	@scripts/phase-time.sh fuzz-smoke $(MAKE) --no-print-directory fuzz-smoke

# ---- install (docs/INSTALL.md) ----
# GNU's names for the places; LIBDIR stays $(PREFIX)/lib as liburing's and
# libuv's do (Debian's /usr/local/lib is in ld.so.conf and pkg-config's
# path); a multiarch packaging passes LIBDIR=/usr/lib/$$(gcc -dumpmachine).
# Everything is written under $(DESTDIR) alone.  make install builds
# first; NOBUILD=1 installs what $(BUILD) holds as it is (test_install:
# the copy of a build it runs from has no objects to compare against).
PREFIX       ?= /usr/local
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
BINDIR       ?= $(PREFIX)/bin
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INST_HEADERS := $(wildcard lib/include/*.h)
INST_MAN     := $(wildcard man/man1/*.1 man/man3/*.3)
INST_FILES   := $(addprefix $(INCLUDEDIR)/,$(notdir $(INST_HEADERS))) \
                $(addprefix $(LIBDIR)/,libcbcmn.a libcbcmn.so.$(VERSION) $(SONAME) libcbcmn.so) \
                $(addprefix $(BINDIR)/,$(notdir $(TOOLS))) \
                $(foreach m,$(INST_MAN),$(MANDIR)/$(lastword $(subst /, ,$(dir $(m))))/$(notdir $(m))) \
                $(PKGCONFIGDIR)/cbcmn.pc
# After a real install (no DESTDIR) as root, the loader's cache must know
# the new soname.
ldconfig_if_live = $(if $(DESTDIR),,if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi)

# A sanitizer build is for the suites, not for installing.
ifneq ($(SAN),)
ifneq ($(filter install,$(MAKECMDGOALS)),)
$(error make install takes the release build: run it without SAN)
endif
endif

# The places are absolute (cbcmn.pc names them to every later build, and
# DESTDIR is glued in front of them) and one word each (make lists them);
# DESTDIR may be anything: it reaches the shell quoted, never split.
ifneq ($(filter install uninstall,$(MAKECMDGOALS)),)
$(foreach v,PREFIX LIBDIR INCLUDEDIR BINDIR MANDIR PKGCONFIGDIR,\
  $(if $(or $(filter-out /%,$($(v))),$(word 2,$($(v)))),\
    $(error $(v)='$($(v))': make install wants an absolute path without spaces)))
endif
# $(call shq,path): path as one shell word, whatever it holds.
shq = '$(subst ','\'',$(1))'

# The directories make install writes in, each as one shell word.
INST_DIRS = $(foreach d,$(INCLUDEDIR) $(LIBDIR) $(BINDIR) $(PKGCONFIGDIR) \
		$(sort $(dir $(filter $(MANDIR)/%,$(INST_FILES)))),$(call shq,$(DESTDIR)$(d)))

# Before a file is written: each directory, or the nearest part of its
# path that exists, is a directory we may write in.  A user's make install
# without root (or a DESTDIR under a file) said it in a line per place,
# install's "cannot change permissions ... No such file or directory".
install: cbcmn.pc.in $(if $(NOBUILD),,all)
	$(call msg,INSTALL,$(call shq,$(DESTDIR)$(PREFIX)))
	$(Q)for d in $(INST_DIRS); do p=$$d; \
		while [ ! -e "$$p" ] && [ ! -L "$$p" ]; do p=$$(dirname -- "$$p"); done; \
		[ -d "$$p" ] && [ -w "$$p" ] || { echo "cbcmn: make install cannot write in $$d" \
		"($$p is not a directory this user may write): run it as root, or give DESTDIR" \
		"or PREFIX (docs/INSTALL.md)" >&2; exit 1; }; done
	$(Q)install -d -m 755 $(INST_DIRS)
	$(Q)install -m 644 $(INST_HEADERS) $(call shq,$(DESTDIR)$(INCLUDEDIR))/
	$(Q)install -m 644 $(STATIC) $(call shq,$(DESTDIR)$(LIBDIR)/libcbcmn.a)
	$(Q)install -m 644 $(SHARED) $(call shq,$(DESTDIR)$(LIBDIR)/libcbcmn.so.$(VERSION))
	$(Q)ln -sfn libcbcmn.so.$(VERSION) $(call shq,$(DESTDIR)$(LIBDIR)/$(SONAME))
	$(Q)ln -sfn $(SONAME) $(call shq,$(DESTDIR)$(LIBDIR)/libcbcmn.so)
	$(Q)install -m 755 $(TOOLS) $(call shq,$(DESTDIR)$(BINDIR))/
	$(Q)$(foreach m,$(INST_MAN),install -m 644 $(m) $(call shq,$(DESTDIR)$(MANDIR)/$(lastword $(subst /, ,$(dir $(m)))))/ &&) true
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
		-e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|' \
		-e 's|@VERSION@|$(VERSION)|' cbcmn.pc.in | install -m 644 /dev/stdin $(call shq,$(DESTDIR)$(PKGCONFIGDIR)/cbcmn.pc)
	$(Q)$(ldconfig_if_live)

uninstall:
	$(call msg,RM,$(call shq,$(DESTDIR)$(PREFIX)))
	$(Q)rm -f $(foreach f,$(INST_FILES),$(call shq,$(DESTDIR)$(f)))
	$(Q)$(ldconfig_if_live)

# ---- the kernel matrix (docs/OBSERVABILITY.md, "Kernel matrix") ----
# The release suites under other kernels: the newest Debian 12 6.1 and
# 6.12 packages, booted in QEMU with this machine's root shared read-only.
# A kernel that cannot be had (no qemu, the download refused) is a skip
# that says why (exit 77 of the script), not a pass and not a failure.
KERNELS           ?= all
KM_SHORT_SUITES   ?= test_bpf test_io
km_run = scripts/kernel-matrix.sh --kernel $(KERNELS) $(1) -- scripts/run-tests.sh build/tests $(2); \
	rc=$$?; if [ $$rc = 77 ]; then echo "kernel matrix: SKIPPED (the reason is above)"; else exit $$rc; fi
test-kernels-short: all tests
	@$(call km_run,--mem 2G --timeout 900,$(KM_SHORT_SUITES))
# The whole release suite: the million-fiber test wants ~6 GiB; 38-45 min
# a kernel under TCG on this loaded 2-CPU machine (the script sets
# CBCMN_TEST_SLOW for the tests' hang bounds), so 90 min's bound a kernel.
test-kernels: all tests
	@$(call km_run,--mem 6G --timeout 5400,)

test-unprivileged: deps
	@$(MAKE) --no-print-directory SAN= all tests
	@scripts/run-unprivileged.sh build

# ---- fuzzing (docs/FUZZ.md) ----
# libFuzzer targets, built by clang with ASan+UBSan into build/fuzz against
# the library and the tools' parsers compiled the same way (with coverage).
# A target is tests/fuzz/fuzz_NAME.c; its seed corpus tests/fuzz/corpus/NAME.
FUZZ_CC       ?= clang
FUZZ_OUT      := build/fuzz
FUZZ_SECONDS  ?= 15
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CPPFLAGS := -D_GNU_SOURCE -Ilib/include -Ilib -Itools -Ibpf -Itests/fuzz
FUZZ_CFLAGS   := -std=gnu11 -g -O1 -fno-omit-frame-pointer -fvisibility=hidden $(WARN) \
                 $(FUZZ_SAN) -DCBCMN_DEBUG=1
FUZZ_SRCS     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS  := $(patsubst tests/fuzz/%.c,$(FUZZ_OUT)/%,$(FUZZ_SRCS))
# The tools' parsers the targets drive; the rest of the tools' code needs libbpf.
FUZZ_TOOL_SRCS := tools/cli/cli.c tools/cli/opts.c tools/net/httpmsg.c \
                  tools/cli/stealmx.c
FUZZ_OBJS     := $(LIB_SRCS:%.c=$(FUZZ_OUT)/obj/%.o) $(ASM_SRCS:%.S=$(FUZZ_OUT)/obj/%.o) \
                 $(FUZZ_TOOL_SRCS:%.c=$(FUZZ_OUT)/obj/%.o)
FUZZ_LIB      := $(FUZZ_OUT)/lib/libfuzzed.a

$(FUZZ_OUT)/obj/%.o: %.c
	$(call msg,FUZZCC,$<)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_OUT)/obj/%.o: %.S
	$(call msg,FUZZAS,$<)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) -g -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(FUZZ_OUT)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB)
	$(call msg,FUZZLD,$@)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -o $@ $< \
		$(FUZZ_LIB) -luring -lnuma -lpthread

fuzz: $(FUZZ_TARGETS)

# Every target for FUZZ_SECONDS from its seed corpus alone; a crash, a
# leak, a timeout or a broken contract fails, with the input kept in
# build/fuzz/crashes (tests/fuzz/run.sh says what to do with it).  One
# target per CPU at a time: each is one CPU-bound process, and the time of
# `make test` is bounded (20 minutes).
FUZZ_JOBS     ?= $(shell nproc 2>/dev/null || echo 1)
fuzz-smoke: fuzz
	@tests/fuzz/run.sh -s -j $(FUZZ_JOBS) -t $(FUZZ_SECONDS) $(notdir $(FUZZ_TARGETS))

# The README's first command: an instrumented workload watched by the viewer
# in batch mode.  skew: all work is born on executor 0 and stealing must
# balance it; cbcmn-top prints a snapshot a second (the runtime's figures,
# and the kernel's through eBPF when run as root), then the workload's
# checked result and statistics.
RUN_WORKLOAD ?= skew
RUN_SECONDS  ?= 5
run: deps all
	@$(BUILD)/bin/cbcmn-top -b -d 1 -o $(BUILD)/run-$(RUN_WORKLOAD).txt -- \
		$(BUILD)/bin/cbcmn-run $(RUN_WORKLOAD) --duration $(RUN_SECONDS)
	@echo; echo "== cbcmn-run $(RUN_WORKLOAD): its result ($(BUILD)/run-$(RUN_WORKLOAD).txt)"
	@cat $(BUILD)/run-$(RUN_WORKLOAD).txt

clean:
	rm -rf build

.PHONY: FORCE all tests tools examples scripts bench bench-build deps test test-unprivileged run clean install uninstall bpf fuzz fuzz-smoke test-kernels test-kernels-short

-include $(shell find $(BUILD)/obj $(BUILD)/bin $(BUILD)/tests $(BUILD)/examples $(BUILD)/scripts $(FUZZ_OUT) -name '*.d' 2>/dev/null)
