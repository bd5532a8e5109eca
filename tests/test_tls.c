/* test_tls: libcbcmn.so reads its thread-locals in one load (initial-exec),
 * never through __tls_get_addr, and still loads with dlopen(). */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

static char so_path[PATH_MAX + 32];

static void find_so(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = 0;
	/* build[/SAN]/tests/test_tls -> build[/SAN]/lib/libcbcmn.so */
	snprintf(so_path, sizeof(so_path), "%s/../lib/libcbcmn.so", dirname(exe));
}

/* What the library's dynamic symbols and relocations ask of the loader. */
struct tls_use {
	bool imports_tls_get_addr; /* general/local-dynamic accesses */
	unsigned dtpmod;           /* R_X86_64_DTPMOD64: a module id for them */
	unsigned tpoff;            /* R_X86_64_TPOFF64: initial-exec offsets */
	bool static_tls;           /* DF_STATIC_TLS in DT_FLAGS */
};

static void scan_so(struct tls_use *u)
{
	memset(u, 0, sizeof(*u));
	int fd = open(so_path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	const char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	assert_true(m != MAP_FAILED);
	close(fd);
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
	assert_int_equal(memcmp(eh->e_ident, ELFMAG, SELFMAG), 0);
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type == SHT_DYNSYM) {
			const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
			const char *str = m + sh[sh[i].sh_link].sh_offset;
			for (size_t k = 0; k < sh[i].sh_size / sizeof(*sym); k++)
				if (!strcmp(str + sym[k].st_name, "__tls_get_addr"))
					u->imports_tls_get_addr = true;
		} else if (sh[i].sh_type == SHT_RELA) {
			const Elf64_Rela *r = (const Elf64_Rela *)(m + sh[i].sh_offset);
			for (size_t k = 0; k < sh[i].sh_size / sizeof(*r); k++) {
				unsigned type = (unsigned)ELF64_R_TYPE(r[k].r_info);
				u->dtpmod += type == R_X86_64_DTPMOD64;
				u->tpoff += type == R_X86_64_TPOFF64;
			}
		} else if (sh[i].sh_type == SHT_DYNAMIC) {
			const Elf64_Dyn *d = (const Elf64_Dyn *)(m + sh[i].sh_offset);
			for (size_t k = 0; k < sh[i].sh_size / sizeof(*d); k++)
				if (d[k].d_tag == DT_FLAGS && (d[k].d_un.d_val & DF_STATIC_TLS))
					u->static_tls = true;
		}
	}
	munmap((void *)m, (size_t)st.st_size);
}

/* Before: 82 calls of __tls_get_addr in libcbcmn.so (cbcmn__tls_exec on
 * every wake, spawn and running-task check), one of them in the SIGSEGV
 * handler, where the call is not async-signal-safe. */
static void test_so_thread_locals_are_initial_exec(void **state)
{
	(void)state;
	struct tls_use u;
	scan_so(&u);
	assert_false(u.imports_tls_get_addr);
	assert_int_equal(u.dtpmod, 0);
	assert_true(u.tpoff > 0);   /* cbcmn__tls_exec and the others */
	assert_true(u.static_tls);  /* the loader is told */
}

/* Initial-exec TLS in a dlopen()ed library takes glibc's static TLS
 * surplus: the library's few hundred bytes fit, and a call through it
 * reaches the thread-locals (an executor sets cbcmn__tls_exec). */
static void test_so_loads_with_dlopen_and_runs(void **state)
{
	(void)state;
	void *lib = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		fail_msg("dlopen %s: %s", so_path, dlerror());
	void (*init)(cbcmn_config *) = (void (*)(cbcmn_config *))dlsym(lib, "cbcmn_config_init");
	int (*create)(const cbcmn_config *, cbcmn_runtime **) =
		(int (*)(const cbcmn_config *, cbcmn_runtime **))dlsym(lib, "cbcmn_runtime_create");
	int (*destroy)(cbcmn_runtime *) = (int (*)(cbcmn_runtime *))dlsym(lib, "cbcmn_runtime_destroy");
	assert_non_null(init);
	assert_non_null(create);
	assert_non_null(destroy);
	cbcmn_config cfg;
	init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt = NULL;
	assert_int_equal(create(&cfg, &rt), 0);
	assert_int_equal(destroy(rt), 0);
	assert_int_equal(dlclose(lib), 0);
}

int main(void)
{
	find_so();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_so_thread_locals_are_initial_exec),
		cmocka_unit_test(test_so_loads_with_dlopen_and_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
