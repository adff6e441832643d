// A Go service whose work runs under span context set as pprof labels, the way span
// profiling integrations do it (runtime/pprof.Do with `trace_id` and `span_id`, and
// Pyroscope's span profiles with `span_id` and `span_name` only), exposing
// net/http/pprof. Each span it starts is logged to stdout as `span <trace id> <span id>`
// before its work, so a test can check the links a scraper makes against it.
// Standard library only.
//
//	go run main.go -addr 127.0.0.1:6060
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime/pprof"
	"sync"
	"time"
)

//go:noinline
func burn(d time.Duration) [32]byte {
	var sum [32]byte
	buf := make([]byte, 4096)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 64; i++ {
			buf[i] = byte(i)
			sum = sha256.Sum256(buf)
		}
	}
	return sum
}

//go:noinline
func tracedRequest(d time.Duration) { burn(d) }

//go:noinline
func pyroscopeSpan(d time.Duration) { burn(d) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		log.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var logMu sync.Mutex

func logSpan(kind, trace, span string) {
	logMu.Lock()
	defer logMu.Unlock()
	fmt.Fprintf(os.Stdout, "%s %s %s\n", kind, trace, span)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6060", "listen address")
	spanTime := flag.Duration("span", 400*time.Millisecond, "how long each span works")
	flag.Parse()
	ctx := context.Background()
	go func() {
		for {
			trace, span := randomHex(16), randomHex(8)
			logSpan("span", trace, span)
			labels := pprof.Labels("endpoint", "/pay", "span_id", span, "trace_id", trace)
			pprof.Do(ctx, labels, func(context.Context) { tracedRequest(*spanTime) })
		}
	}()
	go func() {
		for {
			span := randomHex(8)
			logSpan("pyroscope-span", "-", span)
			labels := pprof.Labels("span_id", span, "span_name", "GET /cart")
			pprof.Do(ctx, labels, func(context.Context) { pyroscopeSpan(*spanTime) })
		}
	}()
	log.Printf("serving pprof on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
