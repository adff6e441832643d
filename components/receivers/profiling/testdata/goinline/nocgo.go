//go:build !cgo

package main

func cTwice(x int) int { return 2 * x }
