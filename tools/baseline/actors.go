// The actor shapes of `cbcmn-bench actors` with goroutines, each with a
// channel as its mailbox (issue 16's "for scale": Go's figures measured in
// the same run as ours).  cbcmn-bench runs them between its own
// repetitions and prints the ratios (docs/BENCHMARKS.md); run alone:
//
//	cbcmn-baseline-go ring [--ring N] [--hops N] [--workers N] [--reps N]
//	-> "ring go_ring_ns_per_hop X"
//	cbcmn-baseline-go skynet [--leaves N] [--workers N] [--reps N]
//	-> "skynet go_skynet_ms X"
//
// The medians of the reps; --workers sets GOMAXPROCS, as cbcmn's executors.
package main

import (
	"fmt"
	"os"
	"time"
)

// ringOnce: n goroutines in a ring, a token passed hops times; each hop
// takes the token from the goroutine's own channel, counts it down and
// sends it to the next.  The mailboxes hold 2, as the ring actors' in
// cbcmn-bench (mailbox_cap 2): with one token a send never finds one
// full, so it never waits, as an actor's send to a mailbox with room (an
// unbuffered channel would make every send a rendezvous, which no
// mailbox is).  Timed from the token's first send to its last receive,
// after the goroutines are started (as cbcmn-bench times after the
// spawns).
func ringOnce(n, hops int64) float64 {
	mbox := make([]chan int64, n)
	for i := range mbox {
		mbox[i] = make(chan int64, 2)
	}
	done := make(chan int64, 1)
	for i := int64(0); i < n; i++ {
		go func(i int64) {
			next := mbox[(i+1)%n]
			for v := range mbox[i] {
				if v == 0 {
					done <- i
					continue
				}
				next <- v - 1
			}
		}(i)
	}
	t0 := time.Now()
	mbox[0] <- hops
	at := <-done
	ns := float64(time.Since(t0).Nanoseconds()) / float64(hops)
	for _, c := range mbox {
		close(c)
	}
	if at != hops%n {
		fail1("ring: the token ended at goroutine %d, not %d", at, hops%n)
	}
	return ns
}

// skynetNode: a node of the 10-ary tree; a leaf sends its index to its
// parent, an inner node starts its ten children, each with the node's
// channel (room for ten answers, as the inner actors' mailboxes) and
// sends the sum of their answers up.
func skynetNode(index, size int64, parent chan<- int64) {
	if size == 1 {
		parent <- index
		return
	}
	step := size / 10
	kids := make(chan int64, 10)
	for i := int64(0); i < 10; i++ {
		go skynetNode(index+i*step, step, kids)
	}
	var sum int64
	for i := 0; i < 10; i++ {
		sum += <-kids
	}
	parent <- sum
}

// skynetOnce: the tree of leaves leaves (a power of 10), timed from the
// root's start to its answer, the goroutines' starts included (as
// cbcmn-bench times its tree's spawns).
func skynetOnce(leaves int64) float64 {
	root := make(chan int64, 1)
	t0 := time.Now()
	go skynetNode(0, leaves, root)
	sum := <-root
	ms := float64(time.Since(t0).Nanoseconds()) / 1e6
	if want := leaves * (leaves - 1) / 2; sum != want {
		fail1("skynet: sum %d, expected %d", sum, want)
	}
	return ms
}

func fail1(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "cbcmn-baseline-go: "+format+"\n", a...)
	os.Exit(1)
}
