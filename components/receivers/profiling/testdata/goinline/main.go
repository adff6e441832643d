// A Go program whose hot code is inlined, for the profiling receiver's tests of Go's
// inline trees. Built stripped (-ldflags='-s -w'), so its symbols come only from
// .gopclntab. Lines the tests look for end in a `// line:NAME` comment.
//
//	goinline SECONDS   burn CPU in profcolHot (mix and rotl inlined into it) under the
//	                   non-inlined chain main -> profcolChainA -> profcolChainB
//	goinline oracle    print "probe PC" (a return address inside two inlined calls),
//	                   then, for each address read from stdin (decimal, one a line), the
//	                   frames Go's own runtime.CallersFrames gives for it:
//	                   "PC\tFUNCTION\tFILE\tLINE[\tFUNCTION\tFILE\tLINE...]", innermost
//	                   first; just "PC" where no Go function holds it
package main

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// rotl is inlined into mix, and mix into profcolHot: most of profcolHot's
// instructions belong to three functions at once.
func rotl(x uint64, k uint) uint64 {
	return x<<k | x>>(64-k) // line:rotl
}

func mix(x uint64) uint64 {
	x ^= rotl(x, 13) // line:mix-rotl13
	x *= 0x9E3779B97F4A7C15
	x ^= rotl(x, 29) // line:mix-rotl29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 31
	return x
}

// profcolHot makes a call (never taken), so that it keeps a frame pointer: Go
// binaries have no .eh_frame, so they are walked by frame pointers, which skip the
// caller of a function without a frame (a leaf).
//
//go:noinline
func profcolHot(n int, seed uint64) uint64 {
	s := seed
	for i := 0; i < n; i++ {
		s = mix(s + uint64(i)) // line:hot-mix
	}
	if s == 0 {
		profcolNever()
	}
	return s
}

//go:noinline
func profcolNever() { os.Exit(5) }

//go:noinline
func profcolChainB(until time.Time) uint64 {
	var s uint64
	for time.Now().Before(until) {
		s = profcolHot(200000, s) // line:chainB-hot
	}
	return s
}

//go:noinline
func profcolChainA(until time.Time) uint64 {
	return profcolChainB(until) + 1 // line:chainA-chainB
}

// callerPC returns the return address of its own call: a pc inside whatever called
// it, inlined or not.
//
//go:noinline
func callerPC() uintptr {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	return pcs[0]
}

func probeInner() uintptr {
	return callerPC() // line:probe-inner
}

func probeMid() uintptr {
	return probeInner() // line:probe-mid
}

//go:noinline
func profcolProbe() uintptr {
	return probeMid() // line:probe
}

// profcolSentinel ends the pc lists given to runtime.CallersFrames: with a pc after
// it, CallersFrames expands every inlined caller of the pc asked about.
//
//go:noinline
func profcolSentinel() {}

func oracle() {
	if cTwice(21) != 42 {
		os.Exit(4)
	}
	fmt.Printf("probe %d\n", profcolProbe())
	sentinel := reflect.ValueOf(profcolSentinel).Pointer() + 1
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		pc, err := strconv.ParseUint(strings.TrimSpace(in.Text()), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "not an address:", in.Text())
			os.Exit(2)
		}
		fmt.Fprint(out, pc)
		// CallersFrames takes return addresses and looks one byte back.
		frames := runtime.CallersFrames([]uintptr{uintptr(pc) + 1, sentinel})
		for {
			f, more := frames.Next()
			if f.Function == "main.profcolSentinel" {
				break
			}
			fmt.Fprintf(out, "\t%s\t%s\t%d", f.Function, f.File, f.Line)
			if !more {
				break
			}
		}
		fmt.Fprintln(out)
		out.Flush()
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "oracle" {
		oracle()
		return
	}
	seconds := 2.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = s
		}
	}
	until := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	if profcolChainA(until) == 42 {
		os.Exit(3)
	}
}
