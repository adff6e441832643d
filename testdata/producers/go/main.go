// Command fixgen writes real Go runtime/pprof profiles used as test fixtures
// by profcol. Standard library only.
//
//	go build -o /tmp/fixgen . && /tmp/fixgen -out ../../pprof [-prefix go126-]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

var sink uint64
var keep [][]byte

// mix is small enough that the compiler inlines it into hashLoop, so CPU
// samples taken inside it produce locations with two Lines
// (main.mix first, main.hashLoop last).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 29
	return x
}

//go:noinline
func hashLoop(n int) uint64 {
	h := uint64(1469598103934665603)
	for i := 0; i < n; i++ {
		h = mix(h + uint64(i))
	}
	return h
}

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

//go:noinline
func work(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		sink += hashLoop(200000)
		sink += uint64(fib(22))
	}
}

//go:noinline
func allocSmall() {
	for i := 0; i < 20000; i++ {
		b := make([]byte, 64)
		if i%10 == 0 {
			keep = append(keep, b)
		}
	}
}

//go:noinline
func allocLarge() {
	for i := 0; i < 200; i++ {
		keep = append(keep, make([]byte, 32<<10))
	}
}

//go:noinline
func parkOnChannel(ch chan struct{}, wg *sync.WaitGroup) {
	wg.Done()
	<-ch
}

//go:noinline
func parkOnWaitGroup(started, release *sync.WaitGroup) {
	started.Done()
	release.Wait()
}

//go:noinline
func criticalSection(mu *sync.Mutex, counter *int, i int) {
	mu.Lock()
	*counter += int(hashLoop(2000) & 1)
	if i%50 == 0 {
		// Sleeping while holding the lock guarantees waiters even on a
		// machine with few cores.
		time.Sleep(200 * time.Microsecond)
	}
	mu.Unlock()
}

//go:noinline
func contend(mu *sync.Mutex, counter *int, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; i < 2000; i++ {
		criticalSection(mu, counter, i)
	}
}

// contendNested adds one more frame so the mutex profile has two distinct
// stacks.
//
//go:noinline
func contendNested(mu *sync.Mutex, counter *int, wg *sync.WaitGroup) {
	contend(mu, counter, wg)
}

func write(dir, name string, fn func(f *os.File) error) {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		log.Fatal(err)
	}
	if err := fn(f); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", filepath.Join(dir, name))
}

func lookup(name string) func(f *os.File) error {
	return func(f *os.File) error { return pprof.Lookup(name).WriteTo(f, 0) }
}

func main() {
	out := flag.String("out", ".", "output directory")
	cpuDur := flag.Duration("cpu", 2500*time.Millisecond, "duration of CPU workload")
	prefix := flag.String("prefix", "go-", "file name prefix (cpu.pb.gz, heap.pb.gz, ... follow it)")
	flag.Parse()
	runtime.MemProfileRate = 4096
	runtime.SetMutexProfileFraction(1)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}

	// CPU
	write(*out, *prefix+"cpu.pb.gz", func(f *os.File) error {
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		work(*cpuDur)
		pprof.StopCPUProfile()
		return nil
	})

	// heap / allocs
	allocSmall()
	allocLarge()
	runtime.GC() // heap profile reflects state as of the last GC
	write(*out, *prefix+"heap.pb.gz", lookup("heap"))
	write(*out, *prefix+"allocs.pb.gz", lookup("allocs"))

	// goroutine
	ch := make(chan struct{})
	var started, release sync.WaitGroup
	for i := 0; i < 3; i++ {
		started.Add(1)
		go parkOnChannel(ch, &started)
	}
	release.Add(1)
	for i := 0; i < 2; i++ {
		started.Add(1)
		go parkOnWaitGroup(&started, &release)
	}
	started.Wait()
	time.Sleep(50 * time.Millisecond)
	write(*out, *prefix+"goroutine.pb.gz", lookup("goroutine"))
	close(ch)
	release.Done()

	// mutex
	var mu sync.Mutex
	var counter int
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		if i%2 == 0 {
			go contend(&mu, &counter, &wg)
		} else {
			go contendNested(&mu, &counter, &wg)
		}
	}
	wg.Wait()
	write(*out, *prefix+"mutex.pb.gz", lookup("mutex"))
	runtime.KeepAlive(keep)
}
