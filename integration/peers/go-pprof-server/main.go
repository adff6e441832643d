// A Go service exposing net/http/pprof, with known function names doing CPU work,
// allocating, and contending on a mutex, so a scraper's output can be checked for them.
// Standard library only.
//
//	go run main.go -addr 127.0.0.1:6060
package main

import (
	"crypto/sha256"
	"flag"
	"log"
	"net/http"
	_ "net/http/pprof"
	"runtime"
	"sync"
	"time"
)

var sink []byte

//go:noinline
func scrapeTargetBurn(n int) [32]byte {
	var sum [32]byte
	buf := make([]byte, 4096)
	for i := 0; i < n; i++ {
		buf[i%len(buf)] = byte(i)
		sum = sha256.Sum256(buf)
	}
	return sum
}

//go:noinline
func scrapeTargetAllocate() {
	for i := 0; i < 64; i++ {
		sink = make([]byte, 64<<10)
	}
}

var mu sync.Mutex

//go:noinline
func scrapeTargetContend() {
	mu.Lock()
	time.Sleep(200 * time.Microsecond)
	mu.Unlock()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6060", "listen address")
	flag.Parse()
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)
	go func() {
		for {
			scrapeTargetBurn(2000)
			scrapeTargetAllocate()
		}
	}()
	for i := 0; i < 4; i++ {
		go func() {
			for {
				scrapeTargetContend()
			}
		}()
	}
	log.Printf("serving pprof on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
