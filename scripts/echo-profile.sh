#!/bin/sh
# echo-profile.sh [BENCH] [DURATION] [BENCH ARGS...]: where each echo server spends its CPU
# a request.  Runs one `cbcmn-bench echo --reps 1` under
# `perf record -e cpu-clock -g` (the VM has no hardware counters), splits
# the samples by thread (cbcmn's executor, the epoll server, the load
# client) and phase, and prints ns a request for the parts the API does
# not choose (tcp_sendmsg with the loopback delivery it runs inline,
# tcp_recvmsg) and the parts it does (the kernel's io_uring or syscall and
# epoll work, user space).  Server figures are the bench's own
# server_cpu_us_per_req times each part's share of the thread's samples;
# client figures divide by req_per_s x DURATION.  Needs perf and python3;
# run it through the CPU cgroup like any bench (docs/BENCHMARKS.md,
# "Seventeenth session").  Arguments after DURATION go to the bench
# (`--client ring`: the io_uring load client, "Eighteenth session").
# Then the servers' kernel self time symbol by symbol, the largest
# differences first; ECHO_PROFILE_SYMS="fget fput ..." prints those
# symbols' ns a request for both servers ("Nineteenth session").
# Samples under eBPF programs or syscall tracing hooks are another
# process's tracing (a test_bpf or cbcmn-top running beside: the io_uring
# tracepoints cost the ring server only, the syscall hooks mostly the epoll
# server): counted apart, per server, to be discounted ("Twenty-second
# session, echo").
set -e
bench=${1:-build/bin/cbcmn-bench}
dur=${2:-3}
[ $# -ge 2 ] && shift 2 || shift $#
dir=$(mktemp -d /tmp/echo-profile.XXXXXX)
trap 'rm -rf "$dir"' EXIT
perf record -q -e cpu-clock -F 8000 -g -o "$dir/perf.data" -- \
	"$bench" echo --reps 1 --duration "$dur" -v "$@" > "$dir/bench.txt" 2>&1
grep -E 'per request|req_per_s|server_cpu|ratio' "$dir/bench.txt"
perf script -i "$dir/perf.data" -F comm,tid,time,ip,sym,dso 2> /dev/null > "$dir/script.txt"
python3 - "$dir" "$dur" << 'EOF'
import collections, os, sys
d, dur = sys.argv[1], float(sys.argv[2])
fig = {}
for line in open(d + '/bench.txt'):
    p = line.split()
    if len(p) == 3 and p[0] in ('echo', 'echo-epoll'):
        fig[(p[0], p[1])] = float(p[2])
samples, cur = [], None
for line in open(d + '/script.txt'):
    if not line.strip():
        cur = None
    elif line[0] not in '\t ':
        p = line.split()
        cur = (p[0], float(p[2].rstrip(':')), [])
        samples.append(cur)
    else:
        p = line.strip().split(None, 2)
        if len(p) >= 2:
            cur[2].append((p[1], len(p) > 2 and 'kallsyms' in p[2]))

def span(comm):
    ts = [t for c, t, _ in samples if c == comm]
    return min(ts), max(ts)

# Each part is the samples whose stack holds the first matching frame.
PARTS = [('tcp_sendmsg (with the peer\'s loopback receive)', ('tcp_sendmsg',)),
         ('tcp_recvmsg', ('tcp_recvmsg',)),
         ('io_uring: task work (multishot recv, poll)', ('__io_run_local_work', 'io_run_task_work')),
         ('io_uring: submission (send SQE)', ('io_submit_sqes',)),
         ('epoll_wait', ('do_epoll_wait',)),
         ('recvfrom/sendto outside tcp_*msg', ('__sys_recvfrom', '__sys_sendto')),
         ('schedule', ('schedule', '__schedule')),
         ('other kernel (entry, enter, wakes)', None),
         ('user space', ())]

def part(st):
    if not st[0][1]:
        return 'user space'
    names = {s for s, _ in st}
    for name, frames in PARTS:
        if frames and names.intersection(frames):
            return name
    return 'other kernel (entry, enter, wakes)'

# Frames that are someone's tracing, not the server's work.
TRACING = ('syscall_trace_enter', 'syscall_exit_work', 'perf_syscall_enter',
           'perf_syscall_exit', 'bpf_trace_run1', 'bpf_trace_run2', 'bpf_trace_run3',
           'bpf_trace_run4', 'trace_call_bpf')

def traced(st):
    return any(s.startswith('bpf_prog') or s in TRACING for s, _ in st)

kleaf = {}  # server -> kernel leaf symbol -> ns a request
for label, comm, key in (('cbcmn', 'cbcmn-exec-0', 'echo'), ('epoll', 'epoll-server', 'echo-epoll')):
    lo, hi = span(comm)
    for role in ('server', 'client'):
        want = comm if role == 'server' else 'cbcmn-bench'
        sel = [st for c, t, st in samples if c == want and lo <= t <= hi and st]
        if role == 'server':
            per = fig[(key, 'server_cpu_us_per_req')] * 1000 / len(sel)
        else:
            per = 125000.0 / (fig[(key, 'req_per_s')] * dur)
        cnt = collections.Counter(part(st) for st in sel)
        busy = len(sel) * 125e-6 / (hi - lo)
        print(f'{label} {role}: {len(sel) * per:.0f} ns a request, {busy:.2f} CPU busy')
        nt = sum(1 for st in sel if traced(st))
        if nt:
            print(f'  ({nt * per:.0f} of it under eBPF programs or syscall tracing: '
                  'another process\'s tracing, discount it)')
        for name, _ in PARTS:
            if cnt[name]:
                print(f'  {cnt[name] * per:6.0f}  {name}')
        if role == 'server':
            leaf = collections.Counter(st[0][0] for st in sel
                                       if part(st) not in (PARTS[0][0], PARTS[1][0]))
            print('  top symbols outside tcp_*msg: ' +
                  ', '.join(f'{s} {v * per:.0f}' for s, v in leaf.most_common(8)))
            kl = collections.Counter(st[0][0] for st in sel if st[0][1])
            kleaf[label] = {s: v * per for s, v in kl.items()}

# The servers' kernel side symbol by symbol (self time): where cbcmn's
# kernel work a request differs most from epoll's, either way.
a, b = kleaf.get('cbcmn', {}), kleaf.get('epoll', {})
diff = sorted(set(a) | set(b), key=lambda s: -abs(a.get(s, 0) - b.get(s, 0)))
print(f'servers\' kernel, ns a request: cbcmn {sum(a.values()):.0f}, epoll {sum(b.values()):.0f}; '
      'largest differences (cbcmn - epoll):')
for s in diff[:12]:
    print(f'  {a.get(s, 0) - b.get(s, 0):+6.0f}  {s} ({a.get(s, 0):.0f} against {b.get(s, 0):.0f})')
syms = os.environ.get('ECHO_PROFILE_SYMS', '').split()
if syms:
    print('ECHO_PROFILE_SYMS, ns a request (cbcmn, epoll): ' +
          ', '.join(f'{s} {a.get(s, 0):.0f} {b.get(s, 0):.0f}' for s in syms))
EOF
