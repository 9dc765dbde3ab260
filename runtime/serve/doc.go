// Package serve is lithos' HTTP server for coding agents (docs/serving.md): the OpenAI Chat
// Completions and Responses APIs and the Anthropic Messages API over one loaded model, with SSE
// streaming as each API defines its events, tool calls in the Qwen formats (parsed by
// lithos/runtime/toolcall), usage counts, stop sequences and sampling parameters, JSON errors in
// each API's shape, and Prometheus metrics.
//
// One worker runs the generations one at a time from a bounded FIFO queue (429 with
// Retry-After only when it is full); a client that goes away cancels its generation or gives
// its place back. The worker never waits for a handler (events are buffered per job), every
// write of an answer has a deadline, rendering and tokenizing run in a bounded number of slots
// and stop at the context, and without an API key only localhost/IP Host names and no
// cross-origin browser requests are served (docs/serving.md §9). Prefix checkpoints — parked sessions, and state snapshots at conversation
// boundaries for backends whose sessions implement backend.Snapshotter (the CPU backend's do),
// bounded by count and bytes — let a request that extends a recent conversation prefill only
// its new tokens. The reference design is lithos-metal's
// server (../shared/reference/lithos-metal.md §6.5, §7); Ollama's compatibility layers are the Go
// anchor (hub-and-go.md §B4–B5).
//
// Imports: lithos/runtime/{backend, chat, generate, model, sample, tokenizer, toolcall},
// net/http, log/slog.
package serve
