package serve

import (
	"errors"
	"slices"
	"strings"

	"lithos/runtime/tokenizer"
	"lithos/runtime/toolcall"
)

// Finish reasons of a generation (API-neutral; each API maps them to its own words).
const (
	finishEOS       = "eos"       // the model produced an EOS token
	finishStop      = "stop"      // a stop sequence appeared (the text is cut before it)
	finishLength    = "length"    // the output token limit was reached
	finishContext   = "context"   // the context is full
	finishCancelled = "cancelled" // the client went away
)

// evKind is the kind of a generation event.
type evKind uint8

const (
	evText      evKind = iota // visible assistant text
	evReasoning               // thinking text (between <think> and </think>)
	evToolStart               // a tool call begins: index, name
	evToolArgs                // a fragment of the call's arguments JSON
	evToolEnd                 // the call is complete: text = the arguments not yet sent, args = all
)

// genEvent is one piece of a generation's output, in the order the client must see it.
type genEvent struct {
	kind  evKind
	text  string
	index int    // tool call index (0, 1, …) for the evTool* kinds
	id    string // evToolStart, evToolEnd: the call id
	name  string // evToolStart, evToolEnd: the function name
	args  string // evToolEnd: the complete arguments JSON object
}

// output turns the drained token ids of one generation into events: EOS ends it, the stream
// decoder makes text (special tokens skipped, incomplete UTF-8 held back), stop sequences cut
// it (text that could still become a stop sequence is held back, so a stop sequence is never
// streamed), and the tool-call parser (runtime/toolcall) separates reasoning from the answer
// and turns <tool_call> blocks into tool-call events without letting any part of a tag
// through as text.
type output struct {
	tok       *tokenizer.Tokenizer
	dec       *tokenizer.StreamDecoder
	eos       []int32
	stops     []string
	maxTokens int

	tokens  int // ids drained, the EOS included (usage counts it, as the reference does)
	text    strings.Builder
	sent    int    // bytes of text passed on
	reason  string // finish reason once over
	stopSeq string // the stop sequence that ended it

	parser *toolcall.Parser
	calls  int // tool calls completed
	evs    []genEvent
	err    error // a tool call that started and then failed to parse
}

func newOutput(tok *tokenizer.Tokenizer, eos []int32, stops []string, maxTokens int, parser *toolcall.Parser) *output {
	return &output{tok: tok, dec: tok.NewStreamDecoder(true), eos: eos, stops: stops, maxTokens: maxTokens, parser: parser}
}

// add consumes drained ids and returns the events they produce. After the reason is set the
// rest is ignored.
func (o *output) add(ids []int32) []genEvent {
	o.evs = o.evs[:0]
	for _, id := range ids {
		if o.reason != "" {
			break
		}
		o.tokens++
		if slices.Contains(o.eos, id) {
			o.reason = finishEOS
			break
		}
		if o.tok.Known(int(id)) {
			piece, err := o.dec.Add(int(id))
			if err == nil {
				o.text.WriteString(piece)
				o.emit(false)
			}
		}
		if o.reason == "" && o.tokens >= o.maxTokens {
			o.reason = finishLength
		}
	}
	return o.evs
}

// finish ends the stream with reason (when none is set yet) and returns the last events.
func (o *output) finish(reason string) []genEvent {
	o.evs = o.evs[:0]
	if o.reason == "" {
		o.reason = reason
	}
	if o.reason != finishStop {
		o.text.WriteString(o.dec.Flush())
		o.emit(true)
	}
	o.push(o.parser.Close())
	return o.evs
}

// emit checks the stop sequences and passes on the text that is final: all of it when final,
// else all but the longest tail that begins a stop sequence.
func (o *output) emit(final bool) {
	s := o.text.String()
	from := o.sent
	for _, stop := range o.stops {
		from = min(from, max(0, o.sent-len(stop)+1))
	}
	cut, seq := -1, ""
	for _, stop := range o.stops {
		if i := strings.Index(s[from:], stop); i >= 0 && (cut < 0 || from+i < cut) {
			cut, seq = from+i, stop
		}
	}
	end := len(s)
	if cut >= 0 {
		end = cut
		o.reason, o.stopSeq = finishStop, seq
	} else if !final {
		for _, stop := range o.stops {
			for k := min(len(stop)-1, len(s)-o.sent); k > 0; k-- {
				if strings.HasSuffix(s, stop[:k]) {
					end = min(end, len(s)-k)
					break
				}
			}
		}
	}
	if end > o.sent {
		piece := s[o.sent:end]
		o.sent = end
		o.push(o.parser.Feed(piece))
	}
}

// push converts the parser's events. A malformed block that never started a call is shown as
// text (the model wrote something that is not a call after all). A call cut off by the token
// limit, the context or a stop sequence is dropped: the finish reason says the output is
// incomplete (an error would make the client retry with the same budget). Any other call
// that started and then failed is an error of the generation (the reference answers 502
// invalid_tool_call, lithos-metal.md §7.5), reported after the events so far.
func (o *output) push(evs []toolcall.Event) {
	for _, e := range evs {
		switch e.Kind {
		case toolcall.Text:
			o.evs = append(o.evs, genEvent{kind: evText, text: e.Text})
		case toolcall.Reasoning:
			o.evs = append(o.evs, genEvent{kind: evReasoning, text: e.Text})
		case toolcall.CallStart:
			o.evs = append(o.evs, genEvent{kind: evToolStart, index: e.Index, id: e.ID, name: e.Name})
		case toolcall.CallArgs:
			o.evs = append(o.evs, genEvent{kind: evToolArgs, index: e.Index, text: e.Text})
		case toolcall.CallEnd:
			o.calls++
			o.evs = append(o.evs, genEvent{kind: evToolEnd, index: e.Index, id: e.ID, name: e.Name, text: e.Text, args: e.Arguments})
		case toolcall.Invalid:
			switch {
			case !e.Started:
				o.evs = append(o.evs, genEvent{kind: evText, text: e.Text})
			case errors.Is(e.Err, toolcall.ErrUnterminated) && o.reason != "" && o.reason != finishEOS:
			case o.err == nil:
				o.err = e.Err
			}
		}
	}
}
