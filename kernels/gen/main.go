// Command gen writes a generated kernel source to stdout: `go run ./kernels/gen -target metal >
// lithos.metal` (or -target cuda), for the real Metal compiler on a Mac (docs/metal.md §6) or
// for reading.
package main

import (
	"flag"
	"fmt"
	"os"

	"lithos/kernels"
)

func main() {
	target := flag.String("target", "metal", "metal or cuda")
	flag.Parse()
	switch *target {
	case "metal":
		fmt.Print(kernels.Source(kernels.Metal))
	case "cuda":
		fmt.Print(kernels.Source(kernels.CUDA))
	default:
		fmt.Fprintf(os.Stderr, "gen: unknown target %q (metal or cuda)\n", *target)
		os.Exit(2)
	}
}
