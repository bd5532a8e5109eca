// cbcmn-baseline-go: the blocking channel ping-pong of `cbcmn-bench chan`
// (rtt_ns_one_exec) with Go's unbuffered channels, the runtime a user would
// pick instead.  cbcmn-bench runs it between its own repetitions and
// prints the ratio (docs/BENCHMARKS.md); run alone it prints the same line
// format:
//
//	cbcmn-baseline-go chan [--workers N] [--reps N]
//	-> "chan go_rtt_ns X", the median of the reps
//
// --workers sets GOMAXPROCS, as cbcmn's executors.  ring and skynet, the
// shapes of `cbcmn-bench actors`: actors.go.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"
)

const rounds = 200000

func once() float64 {
	ab, ba := make(chan int64), make(chan int64)
	go func() {
		for v := range ab {
			ba <- v + 1
		}
		close(ba)
	}()
	t0 := time.Now()
	var v int64
	for i := 0; i < rounds; i++ {
		ab <- v
		v = <-ba
	}
	ns := float64(time.Since(t0).Nanoseconds()) / rounds
	close(ab)
	<-ba
	if v != rounds {
		fmt.Fprintf(os.Stderr, "cbcmn-baseline-go: %d round trips counted, not %d\n", v, rounds)
		os.Exit(1)
	}
	return ns
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "cbcmn-baseline-go: "+format+"\n", a...)
	os.Exit(2)
}

const usage = "usage: cbcmn-baseline-go chan|ring|skynet [--workers N] [--reps N] " +
	"[--ring N] [--hops N] [--leaves N]"

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fail(usage)
	}
	if args[0] == "-h" || args[0] == "--help" {
		fmt.Println(usage)
		return
	}
	bench := args[0]
	if bench != "chan" && bench != "ring" && bench != "skynet" {
		if len(bench) > 40 {
			bench = bench[:40]
		}
		fail("no benchmark named '%s' (chan, ring, skynet)", bench)
	}
	// the shapes of cbcmn-bench actors' defaults
	var workers, reps, ring, hops, leaves int64 = 2, 7, 10000, 1000000, 1000000
	for i := 1; i < len(args); i += 2 {
		var dst *int64
		max := int64(1024)
		switch args[i] {
		case "--workers":
			dst = &workers
		case "--reps":
			dst = &reps
		case "--ring":
			dst, max = &ring, 10000000
		case "--hops":
			dst, max = &hops, 1000000000
		case "--leaves":
			dst, max = &leaves, 10000000
		default:
			fail("unknown option '%.40s'", args[i])
		}
		if i+1 >= len(args) {
			fail("%s needs a number from 1 to %d", args[i], max)
		}
		n, err := strconv.ParseInt(args[i+1], 10, 64)
		if err != nil || n < 1 || n > max {
			fail("%s needs a number from 1 to %d", args[i], max)
		}
		*dst = n
	}
	p10 := int64(1)
	for p10 < leaves {
		p10 *= 10
	}
	if bench == "skynet" && (p10 != leaves || leaves < 10) {
		fail("--leaves wants a power of 10 from 10, got %d", leaves)
	}
	runtime.GOMAXPROCS(int(workers))
	v := make([]float64, 0, reps)
	for r := int64(0); r < reps; r++ {
		switch bench {
		case "chan":
			v = append(v, once())
		case "ring":
			v = append(v, ringOnce(ring, hops))
		case "skynet":
			v = append(v, skynetOnce(leaves))
		}
	}
	sort.Float64s(v)
	metric := map[string]string{"chan": "go_rtt_ns", "ring": "go_ring_ns_per_hop",
		"skynet": "go_skynet_ms"}[bench]
	fmt.Printf("%s %s %.1f\n", bench, metric, v[len(v)/2])
}
