// A Go CPU burner with a known function name, built stripped (-ldflags='-s -w') so its
// symbols come only from .gopclntab.
//
//	GO111MODULE=off go build -ldflags='-s -w' -o gospin gospin.go
//	./gospin SECONDS
package main

import (
	"os"
	"strconv"
	"time"
)

//go:noinline
func gospinHotLoop(until time.Time) uint64 {
	var x uint64
	for time.Now().Before(until) {
		for i := uint64(0); i < 100000; i++ {
			x += i * i
		}
	}
	return x
}

func main() {
	seconds := 2.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = s
		}
	}
	if gospinHotLoop(time.Now().Add(time.Duration(seconds*float64(time.Second)))) == 42 {
		os.Exit(3)
	}
}
