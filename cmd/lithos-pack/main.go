// Command lithos-pack is the lithos toolchain: it fetches Hugging Face
// checkpoints, audits their byte budgets, and (as later issues land)
// re-quantizes DSpark heads and packs bundles for lithos-run. This file is
// cobra wiring only: flags become calls into the packages that do the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	if err := root.ExecuteContext(ctx); err != nil {
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "lithos-pack: interrupted; run the same command again to resume")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "lithos-pack:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:           "lithos-pack",
		Short:         "Fetch, audit and pack Hugging Face checkpoints for lithos-run",
		Long:          "lithos-pack brings checkpoints from a Hugging Face Hub (or a mirror: HF_ENDPOINT) into the\nstandard HF cache, audits the bytes one decode pass reads, and serves directories of repos\nas a Hub for offline use.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log requests and decisions to stderr")
	root.AddCommand(newFetchCmd(), newHubCmd(), newAuditCmd(), newSynthHeadersCmd(), newSynthCmd(), newDemoCmd(), newQuantizeCmd())
	root.AddCommand(newPackCmd(), newVerifyCmd(), newInspectCmd())
	return root
}
