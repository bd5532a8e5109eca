/* test_abi: libcbcmn.so exports the public API and the janus ABI, nothing else. */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static void *lib;

static int open_lib(void **state)
{
	(void)state;
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	/* build[/SAN]/tests/test_abi -> build[/SAN]/lib/libcbcmn.so */
	snprintf(path, sizeof(path), "%s/../lib/libcbcmn.so", dirname(exe));
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
	return lib ? 0 : -1;
}

static int close_lib(void **state)
{
	(void)state;
	return dlclose(lib);
}

static const char *const exported[] = {
	"cbcmn_config_init",     "cbcmn_runtime_create",   "cbcmn_runtime_destroy",
	"cbcmn_runtime_run",     "cbcmn_runtime_workers",  "cbcmn_cx_runtime",
	"cbcmn_cx_task_id",      "cbcmn_cx_executor",      "cbcmn_cx_cancelled",
	"cbcmn_yield",           "cbcmn_nursery_open",     "cbcmn_nursery_spawn",
	"cbcmn_nursery_await_all", "cbcmn_nursery_cancel", "cbcmn_task_join",
	"cbcmn_task_id",         "cbcmn_stats_snapshot",   "cbcmn_strerror",
	"cbcmn_watch_open",      "cbcmn_watch_read",       "cbcmn_watch_close",
	"cbcmn_trace_drain",
	"janus_rt_init",         "janus_rt_shutdown",      "janus_rt_get",
	"janus_nursery_create",  "janus_nursery_spawn",    "janus_nursery_await_all",
	"janus_scheduler_create", "janus_scheduler_shutdown", "janus_scheduler_spawn",
	"janus_scheduler_yield",  "janus_budget_check",     "janus_budget_decrement",
	"janus_nursery_spawn_noarg", "janus_nursery_spawn_i32", "janus_rt_init_ex",
	"janus_scheduler_create_ex", "janus_scheduler_create_error", "janus_scheduler_nursery_create",
	"cbcmn_chan_create",     "cbcmn_chan_destroy",     "cbcmn_chan_send",
	"cbcmn_chan_recv",       "cbcmn_chan_try_send",    "cbcmn_chan_try_recv",
	"cbcmn_chan_close",      "cbcmn_chan_reserve",     "cbcmn_chan_try_reserve",
	"cbcmn_chan_commit",     "cbcmn_chan_abort",
	"cbcmn_actor_spawn",     "cbcmn_actor_send",       "cbcmn_actor_try_send",
	"cbcmn_actor_spawn_handler", "cbcmn_actor_set_receive_timeout",
	"cbcmn_actor_send_timeout", "cbcmn_actor_receive", "cbcmn_actor_self",
	"cbcmn_actor_stop",      "cbcmn_actor_monitor",    "cbcmn_actor_demonitor",
	"cbcmn_actor_link",      "cbcmn_actor_unlink",     "cbcmn_actor_trap_exit",
	"cbcmn_sup_start",       "cbcmn_sup_child_ref",
	"cbcmn_stats_hist_quantile",
	"cbcmn_blocking",
	"cbcmn_acceptor_close",
	"cbcmn_acceptor_next",
	"cbcmn_acceptor_open",
	"cbcmn_stream_close",
	"cbcmn_stream_open",
	"cbcmn_stream_recv",
	"cbcmn_accept",
	"cbcmn_close",
	"cbcmn_connect",
	"cbcmn_fsync",
	"cbcmn_io_set_timeout",
	"cbcmn_openat",
	"cbcmn_poll",
	"cbcmn_metrics_format",
	"cbcmn_metrics_serve",
	"cbcmn_metrics_serve_ex",
	"cbcmn_metrics_port",
	"cbcmn_metrics_stop",
	"cbcmn_pread",
	"cbcmn_pwrite",
	"cbcmn_read",
	"cbcmn_readv",
	"cbcmn_recv",
	"cbcmn_recvmsg",
	"cbcmn_send",
	"cbcmn_sendmsg",
	"cbcmn_shutdown",
	"cbcmn_socket",
	"cbcmn_statx",
	"cbcmn_write",
	"cbcmn_writev",
	"cbcmn_nursery_spawn_pinned",
	"cbcmn_nursery_spawn_stealable",
	"cbcmn_nursery_spawn_stealable_on",
	"cbcmn_nursery_hold",
	"cbcmn_nursery_release",
	"cbcmn_topo_cpu",
	"cbcmn_topo_distance",
	"cbcmn_topo_find",
	"cbcmn_topo_free",
	"cbcmn_topo_load",
	"cbcmn_topo_nallowed",
	"cbcmn_topo_ncores",
	"cbcmn_topo_ncpus",
	"cbcmn_topo_nllcs",
	"cbcmn_topo_nnodes",
	"cbcmn_topo_node_id",
	"cbcmn_topo_npackages",
	"cbcmn_place",
	"cbcmn_policy_name",
	"cbcmn_policy_parse",
	"cbcmn_runtime_snapshot",
	"cbcmn_runtime_is_quiescent",
	"cbcmn_obligation_reserve",
	"cbcmn_obligation_commit",
	"cbcmn_obligation_abort",
};

static void test_public_calls_are_exported(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(exported) / sizeof(exported[0]); i++) {
		void *p = dlsym(lib, exported[i]);
		if (!p)
			fail_msg("%s is not exported", exported[i]);
	}
}

static void test_internals_are_hidden(void **state)
{
	(void)state;
	static const char *const hidden[] = {
		"cbcmn__spawn", "cbcmn__ctx_jump", "cbcmn__gauge_up", "cbcmn__oblig_track", "cbcmn__deque_pop", "cbcmn__tls_exec",
		"cbcmn__notify_one", "cbcmn_spawn_semaphore", "cbcmn__metrics_serve_ex",
	};
	for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
		if (dlsym(lib, hidden[i]))
			fail_msg("%s leaks out of libcbcmn.so", hidden[i]);
}

/* The shared library works on its own, not just links. */
static void test_shared_library_runs_a_task(void **state)
{
	(void)state;
	int (*create)(const cbcmn_config *, cbcmn_runtime **) = dlsym(lib, "cbcmn_runtime_create");
	int (*destroy)(cbcmn_runtime *) = dlsym(lib, "cbcmn_runtime_destroy");
	const char *(*strerr)(int64_t) = dlsym(lib, "cbcmn_strerror");
	assert_non_null(create);
	cbcmn_runtime *rt;
	assert_int_equal(create(NULL, &rt), 0);
	assert_int_equal(destroy(rt), 0);
	assert_string_equal(strerr(CBCMN_ECLOSED), "nursery is closing: no new spawns");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_public_calls_are_exported),
		cmocka_unit_test(test_internals_are_hidden),
		cmocka_unit_test(test_shared_library_runs_a_task),
	};
	return cmocka_run_group_tests_name("abi", tests, open_lib, close_lib);
}
