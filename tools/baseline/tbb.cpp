// cbcmn-baseline-tbb: the spawn and fib workloads of cbcmn-bench, written
// with oneTBB's task_group, the library a C++ user would pick instead.
// cbcmn-bench runs it between its own repetitions and prints the ratio
// (docs/BENCHMARKS.md); run alone it prints the same line format:
//
//   cbcmn-baseline-tbb spawn|fib [--workers N] [--reps N]
//   -> "spawn tbb_tasks_per_s X" / "fib tbb_ms X", medians of the reps
//
// The workloads match tools/workloads/fib.h and bench_spawn(): a task per
// fib call, both children spawned into a task_group and waited for; one
// group of 1 000 000 empty tasks.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now_ns()
{
	using clock = std::chrono::steady_clock;
	return std::chrono::duration<double, std::nano>(clock::now().time_since_epoch()).count();
}

long fib(int n)
{
	if (n < 2)
		return n;
	long a = 0, b = 0;
	tbb::task_group g;
	g.run([&] { a = fib(n - 1); });
	g.run([&] { b = fib(n - 2); });
	g.wait();
	return a + b;
}

double spawn_once()
{
	const long n = 1000000;
	double t0 = now_ns();
	tbb::task_group g;
	for (long i = 0; i < n; i++)
		g.run([] {});
	g.wait();
	return (double)n * 1e9 / (now_ns() - t0);
}

double fib_once()
{
	double t0 = now_ns();
	long r = fib(30);
	double ms = (now_ns() - t0) / 1e6;
	if (r != 832040) {
		std::fprintf(stderr, "cbcmn-baseline-tbb: fib(30) gave %ld\n", r);
		std::exit(1);
	}
	return ms;
}

bool parse_count(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = std::strtol(s, &end, 10);
	if (end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

int usage(FILE *f, int rc)
{
	std::fprintf(f, "usage: cbcmn-baseline-tbb spawn|fib [--workers N] [--reps N]\n");
	return rc;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage(stderr, 2);
	if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help"))
		return usage(stdout, 0);
	const char *name = argv[1];
	if (std::strcmp(name, "spawn") && std::strcmp(name, "fib")) {
		std::fprintf(stderr, "cbcmn-baseline-tbb: no benchmark named '%.40s' (spawn or fib)\n", name);
		return 2;
	}
	long workers = 2, reps = 7;
	for (int i = 2; i < argc; i++) {
		long *dst = !std::strcmp(argv[i], "--workers") ? &workers
			    : !std::strcmp(argv[i], "--reps")  ? &reps
							       : nullptr;
		if (!dst) {
			std::fprintf(stderr, "cbcmn-baseline-tbb: unknown option '%.40s'\n", argv[i]);
			return 2;
		}
		if (i + 1 >= argc || !parse_count(argv[i + 1], 1, 1024, dst)) {
			std::fprintf(stderr, "cbcmn-baseline-tbb: %s needs a number from 1 to 1024\n", argv[i]);
			return 2;
		}
		i++;
	}
	// The same number of threads as cbcmn's executors.
	tbb::global_control limit(tbb::global_control::max_allowed_parallelism, (size_t)workers);
	bool spawn = !std::strcmp(name, "spawn");
	std::vector<double> v;
	for (long r = 0; r < reps; r++)
		v.push_back(spawn ? spawn_once() : fib_once());
	std::sort(v.begin(), v.end());
	double med = v[v.size() / 2];
	if (spawn)
		std::printf("spawn tbb_tasks_per_s %.0f\n", med);
	else
		std::printf("fib tbb_ms %.1f\n", med);
	return 0;
}
