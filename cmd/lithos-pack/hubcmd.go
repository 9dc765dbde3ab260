package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"lithos/hub/hubtest"
)

func newHubCmd() *cobra.Command {
	hubCmd := &cobra.Command{
		Use:   "hub",
		Short: "Hub utilities (serve a folder of repos as a Hugging Face Hub)",
	}
	var (
		addr  string
		token string
	)
	serve := &cobra.Command{
		Use:   "serve DIR",
		Short: "Serve DIR/<org>/<name>/... as a Hugging Face Hub-compatible HTTP endpoint",
		Long: `serve answers the Hub API that huggingface_hub and lithos-pack use (model info, tree
listing with LFS sha256, resolve with redirects, Range requests, X-Repo-Commit, error codes)
over a folder of repositories, one per DIR/<org>/<name>. Point clients at it with
HF_ENDPOINT=http://ADDR. With --token, gated repos require that bearer token.`,
		Example: "  lithos-pack hub serve testdata/hub --addr 127.0.0.1:8080 &\n  HF_ENDPOINT=http://127.0.0.1:8080 lithos-pack fetch lithos-test/tiny-sharded",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
				return fmt.Errorf("hub serve: %s is not a directory", args[0])
			}
			fmt.Fprintf(os.Stderr, "serving %s at http://%s (HF_ENDPOINT=http://%s)\n", args[0], addr, addr)
			return hubtest.ListenAndServe(cmd.Context(), addr, args[0], hubtest.Options{Token: token})
		},
	}
	serve.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	serve.Flags().StringVar(&token, "token", "", "bearer token required for gated repos")
	hubCmd.AddCommand(serve)
	return hubCmd
}
