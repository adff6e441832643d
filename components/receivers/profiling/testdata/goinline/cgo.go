//go:build cgo

package main

// static int profcol_c_twice(int x) { return 2 * x; }
import "C"

// cTwice links C code in (a cgo build is linked by the system linker, which puts C
// code before Go's own text), and is called so that it stays.
func cTwice(x int) int { return int(C.profcol_c_twice(C.int(x))) }
