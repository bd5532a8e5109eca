// cbcmn-baseline-go: the blocking channel ping-pong of `cbcmn-bench chan`
// (rtt_ns_one_exec) with Go's unbuffered channels, the runtime a user would
// pick instead.  cbcmn-bench runs it between its own repetitions and
// prints the ratio (docs/BENCHMARKS.md); run alone it prints the same line
// format:
//
//	cbcmn-baseline-go chan [--workers N] [--reps N]
//	-> "chan go_rtt_ns X", the median of the reps
//
// --workers sets GOMAXPROCS, as cbcmn's executors.
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

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fail("usage: cbcmn-baseline-go chan [--workers N] [--reps N]")
	}
	if args[0] == "-h" || args[0] == "--help" {
		fmt.Println("usage: cbcmn-baseline-go chan [--workers N] [--reps N]")
		return
	}
	if args[0] != "chan" {
		name := args[0]
		if len(name) > 40 {
			name = name[:40]
		}
		fail("no benchmark named '%s' (chan)", name)
	}
	workers, reps := 2, 7
	for i := 1; i < len(args); i += 2 {
		var dst *int
		switch args[i] {
		case "--workers":
			dst = &workers
		case "--reps":
			dst = &reps
		default:
			fail("unknown option '%.40s'", args[i])
		}
		if i+1 >= len(args) {
			fail("%s needs a number from 1 to 1024", args[i])
		}
		n, err := strconv.Atoi(args[i+1])
		if err != nil || n < 1 || n > 1024 {
			fail("%s needs a number from 1 to 1024", args[i])
		}
		*dst = n
	}
	runtime.GOMAXPROCS(workers)
	v := make([]float64, 0, reps)
	for r := 0; r < reps; r++ {
		v = append(v, once())
	}
	sort.Float64s(v)
	fmt.Printf("chan go_rtt_ns %.0f\n", v[len(v)/2])
}
