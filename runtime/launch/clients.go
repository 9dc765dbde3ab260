package launch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// StreamIdleTimeoutMS is how long the launched clients wait for the next event of a stream
// (ms): 15 minutes. Their defaults (Claude Code 90 s, Codex 300 s) are made for hosted models;
// a local prefill of a long prompt sends no event for minutes (Codex 0.171 on the CPU backend
// gave up on a 24 000-token first prompt and retried it from scratch).
const StreamIdleTimeoutMS = 15 * 60 * 1000

// What each client reads, from lithos-metal.md §7.10 and the clients' own documentation;
// every setting goes through the environment or the command line of the one process started.

// EnvVars are the variables of `lithos-run env` and `lithos-run run`: what the OpenAI and
// Anthropic SDKs (and most OpenAI-compatible tools) read.
func EnvVars(t Target) []Var {
	return []Var{
		{"OPENAI_BASE_URL", t.URL + "/v1"},
		{"OPENAI_API_KEY", t.APIKey},
		{"OPENAI_MODEL", t.Model},
		{"ANTHROPIC_BASE_URL", t.URL},
		{"ANTHROPIC_API_KEY", t.APIKey},
		{"ANTHROPIC_MODEL", t.Model},
	}
}

// Generic runs argv (a command and its arguments) with EnvVars.
func Generic(t Target, argv []string) (Command, error) {
	if len(argv) == 0 || argv[0] == "" {
		return Command{}, fmt.Errorf("no command to run: give it after --, e.g. lithos-run run -- python agent.py")
	}
	return Command{Program: argv[0], Args: argv[1:], Set: EnvVars(t)}, nil
}

// Claude runs `claude --model MODEL ARGS...` (Claude Code) against the server's Anthropic
// Messages API. The key goes in ANTHROPIC_AUTH_TOKEN (sent as a Bearer token); the variables
// that would route elsewhere or authenticate differently (Bedrock, Vertex, Foundry, an OAuth
// token, custom headers, an ANTHROPIC_API_KEY that interactive Claude Code asks to approve)
// are removed from its environment. Every model alias (opus, sonnet, haiku, subagents) maps
// to the served model; non-essential traffic, experimental betas and thinking are off; the
// output limit is Target.OutputTokens; the stream idle timeout is StreamIdleTimeoutMS.
func Claude(t Target, args []string) Command {
	return Command{
		Program: "claude",
		Args:    append([]string{"--model", t.Model}, args...),
		Set: []Var{
			{"ANTHROPIC_BASE_URL", t.URL},
			{"ANTHROPIC_AUTH_TOKEN", t.APIKey},
			{"ANTHROPIC_MODEL", t.Model},
			{"ANTHROPIC_DEFAULT_OPUS_MODEL", t.Model},
			{"ANTHROPIC_DEFAULT_SONNET_MODEL", t.Model},
			{"ANTHROPIC_DEFAULT_HAIKU_MODEL", t.Model},
			{"ANTHROPIC_SMALL_FAST_MODEL", t.Model},
			{"CLAUDE_CODE_SUBAGENT_MODEL", t.Model},
			{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
			{"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1"},
			{"CLAUDE_CODE_ATTRIBUTION_HEADER", "0"},
			{"CLAUDE_CODE_MAX_CONTEXT_TOKENS", strconv.Itoa(t.Context)},
			{"CLAUDE_CODE_MAX_OUTPUT_TOKENS", strconv.Itoa(t.OutputTokens())},
			{"MAX_THINKING_TOKENS", "0"},
			{"CLAUDE_STREAM_IDLE_TIMEOUT_MS", strconv.Itoa(StreamIdleTimeoutMS)},
		},
		Unset: []string{
			"ANTHROPIC_API_KEY", "ANTHROPIC_CUSTOM_HEADERS", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_API_BASE_URL",
			"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
		},
		Install: "npm install -g @anthropic-ai/claude-code",
	}
}

// Codex runs `codex -c KEY=VALUE... ARGS...` (OpenAI Codex CLI) against the server's
// Responses API: the -c overrides (TOML values; they also apply to subcommands such as
// `codex exec`) define a provider "lithos" whose key Codex reads from $LITHOS_API_KEY, select
// it and the model, and give the context window (auto-compaction at 3/4 of it), the stream
// idle timeout (StreamIdleTimeoutMS), no reasoning and no web search. Sub-agents are off (features.multi_agent=false): Codex 0.171 sends their
// tools as one tool of type "namespace", which the server does not take, and one model
// answering one request at a time gains nothing from fanning out. (Codex 0.171 warns that
// model_supports_reasoning_summaries, which lithos-metal sets, is an unknown key: it is left
// out.)
func Codex(t Target, args []string) Command {
	p := "model_providers." + ProviderID + "."
	q := jsonString // a JSON string is a TOML basic string: both escape '"', '\\' and control characters alike
	overrides := [][2]string{
		{"model_provider", q(ProviderID)},
		{p + "name", q("lithos")},
		{p + "base_url", q(t.URL + "/v1")},
		{p + "wire_api", q("responses")},
		{p + "env_key", q(EnvAPIKey)},
		{p + "requires_openai_auth", "false"},
		{p + "supports_websockets", "false"},
		{p + "stream_idle_timeout_ms", strconv.Itoa(StreamIdleTimeoutMS)},
		{"model", q(t.Model)},
		{"model_context_window", strconv.Itoa(t.Context)},
		{"model_auto_compact_token_limit", strconv.Itoa(t.Context * 3 / 4)},
		{"model_reasoning_effort", q("none")},
		{"web_search", q("disabled")},
		{"features.multi_agent", "false"},
	}
	var argv []string
	for _, o := range overrides {
		argv = append(argv, "-c", o[0]+"="+o[1])
	}
	return Command{
		Program: "codex",
		Args:    append(argv, args...),
		Set:     []Var{{EnvAPIKey, t.APIKey}, {"OPENAI_BASE_URL", t.URL + "/v1"}, {"OPENAI_API_KEY", t.APIKey}, {"OPENAI_MODEL", t.Model}},
		Install: "npm install -g @openai/codex",
	}
}

func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

// OpenCode runs `opencode ARGS...` with OPENCODE_CONFIG_CONTENT (a config opencode merges over
// its files) defining a provider "lithos" (the @ai-sdk/openai-compatible adapter on the
// server's Chat Completions API) with the served model, tool calls on, its context and output
// limits, and making it the model and small model. existing is the OPENCODE_CONFIG_CONTENT
// already in the environment: when it is a JSON object, lithos' settings are merged into it
// (provider by provider); anything else is an error.
func OpenCode(t Target, args []string, existing string) (Command, error) {
	cfg := map[string]any{}
	if strings.TrimSpace(existing) != "" {
		if err := json.Unmarshal([]byte(existing), &cfg); err != nil || cfg == nil {
			return Command{}, fmt.Errorf("$OPENCODE_CONFIG_CONTENT is set but is not a JSON object; unset it or fix it")
		}
	}
	providers, _ := cfg["provider"].(map[string]any)
	if providers == nil {
		providers = map[string]any{}
	}
	providers[ProviderID] = map[string]any{
		"npm":     "@ai-sdk/openai-compatible",
		"name":    "lithos",
		"options": map[string]any{"baseURL": t.URL + "/v1", "apiKey": t.APIKey},
		"models": map[string]any{
			t.Model: map[string]any{
				"name":      t.Model,
				"tool_call": true,
				"limit":     map[string]any{"context": t.Context, "output": t.OutputTokens()},
			},
		},
	}
	cfg["provider"] = providers
	cfg["model"] = ProviderID + "/" + t.Model
	cfg["small_model"] = ProviderID + "/" + t.Model
	if _, ok := cfg["$schema"]; !ok {
		cfg["$schema"] = "https://opencode.ai/config.json"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cfg); err != nil {
		return Command{}, fmt.Errorf("opencode config: %w", err)
	}
	return Command{
		Program: "opencode",
		Args:    args,
		Set:     []Var{{"OPENCODE_CONFIG_CONTENT", strings.TrimSuffix(buf.String(), "\n")}},
		Install: "npm install -g opencode-ai",
	}, nil
}
