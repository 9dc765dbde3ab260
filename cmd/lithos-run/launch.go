package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"lithos/runtime/launch"
)

// The launchers: cobra wiring of lithos/runtime/launch.

// launchExec starts the client (replaced in tests).
var launchExec = launch.Exec

// launchEnviron is the environment the client inherits (replaced in tests).
var launchEnviron = os.Environ

type launchFlags struct {
	url, model, apiKey string
	printConfig        bool
}

func (f *launchFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.url, "url", "", "server URL (default $"+launch.EnvURL+", else "+launch.DefaultURL+"); a trailing /v1 is dropped")
	fl.StringVar(&f.model, "model", "", "served model id (default: the one model GET /v1/models lists)")
	fl.StringVar(&f.apiKey, "api-key", "", "API key for the server (default $"+launch.EnvAPIKey+", else "+launch.DefaultAPIKey+")")
	if c.Name() != "env" {
		fl.BoolVar(&f.printConfig, "print-config", false, "print what would run (environment and command; a configured key shows as $"+launch.EnvAPIKey+") instead of running it")
	}
}

// addLaunchers adds claude, codex, opencode, env and run to root.
func addLaunchers(root *cobra.Command, g *genFlags) {
	type client struct {
		name, short string
		build       func(t launch.Target, args []string) (launch.Command, error)
	}
	clients := []client{
		{"claude", "Start Claude Code on the server (Anthropic Messages API)", func(t launch.Target, args []string) (launch.Command, error) {
			return launch.Claude(t, args), nil
		}},
		{"codex", "Start the Codex CLI on the server (Responses API)", func(t launch.Target, args []string) (launch.Command, error) {
			return launch.Codex(t, args), nil
		}},
		{"opencode", "Start opencode on the server (Chat Completions API)", func(t launch.Target, args []string) (launch.Command, error) {
			return launch.OpenCode(t, args, os.Getenv("OPENCODE_CONFIG_CONTENT"))
		}},
		{"run", "Run any command with the OPENAI_* and ANTHROPIC_* variables pointing at the server", launch.Generic},
	}
	for _, cl := range clients {
		f := &launchFlags{}
		use := cl.name + " [flags] [-- CLIENT ARGS...]"
		long := cl.short + ".\n\nThe served model is found with GET /v1/models; the client gets its settings through its own\n" +
			"environment variables and command line only: no configuration file is read or written.\n" +
			"Arguments after -- go to the client unchanged."
		if cl.name == "run" {
			use = "run [flags] -- COMMAND [ARGS...]"
			long += "\nVariables: OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_MODEL."
		}
		build := cl.build
		c := &cobra.Command{
			Use:           use,
			Short:         cl.short,
			Long:          long,
			SilenceUsage:  true,
			SilenceErrors: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				t, err := launch.Resolve(cmd.Context(), launch.Options{URL: f.url, Model: f.model, APIKey: f.apiKey})
				if err != nil {
					return err
				}
				c, err := build(t, args)
				if err != nil {
					return err
				}
				if f.printConfig {
					secret := t.APIKey
					if secret == launch.DefaultAPIKey {
						secret = "" // the placeholder key is no secret: printed as is
					}
					_, err := io.WriteString(g.stdout, c.Script(secret))
					return err
				}
				if _, err := c.Path(); err != nil {
					return err
				}
				fmt.Fprintf(g.stderr, "lithos-run: starting %s on %s (model %s, context %d tokens)\n", c.Program, t.URL, t.Model, t.Context)
				return launchExec(c, launchEnviron())
			},
		}
		f.register(c)
		root.AddCommand(c)
	}
	f := &launchFlags{}
	env := &cobra.Command{
		Use:   "env [flags]",
		Short: "Print shell exports pointing OpenAI and Anthropic SDKs at the server",
		Long: "Print `export NAME=value` lines (POSIX shell) for OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL,\n" +
			"ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and ANTHROPIC_MODEL, after finding the served model with\n" +
			"GET /v1/models. Use: eval \"$(lithos-run env)\". The key is printed as is.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := launch.Resolve(cmd.Context(), launch.Options{URL: f.url, Model: f.model, APIKey: f.apiKey})
			if err != nil {
				return err
			}
			_, err = io.WriteString(g.stdout, launch.Exports(launch.EnvVars(t)))
			return err
		},
	}
	f.register(env)
	root.AddCommand(env)
}
