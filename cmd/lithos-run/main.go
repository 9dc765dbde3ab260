// Command lithos-run is the lithos runtime: it memory-maps a bundle made by
// lithos-pack, generates text with DSpark speculative decoding and serves
// OpenAI/Anthropic APIs to coding agents. The runtime lands in later issues
// (see docs/ and the issue tracker); today the command carries the version and
// help only, so scripts can depend on its name.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var version = "0.1.0-dev"

func main() {
	root := &cobra.Command{
		Use:           "lithos-run",
		Short:         "Run lithos bundles: generate, serve agents (runtime not yet built)",
		Long:          "lithos-run will load bundles packed by lithos-pack and run them on the CPU, CUDA or Metal\nbackend. The runtime is not part of this release; see README.md for what works today.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lithos-run:", err)
		os.Exit(1)
	}
}
