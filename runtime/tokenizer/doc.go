// Package tokenizer owns text ↔ token ids for the runtime: byte-level BPE read from a Hugging
// Face tokenizer.json, as the Qwen2/Qwen3/Qwen3.5 checkpoints ship it.
//
// The pipeline is the one HF tokenizers runs (hub-and-go.md §B14):
//
//  1. added tokens (special and not) are cut out of the raw text first, leftmost-longest,
//     honouring their lstrip/rstrip/single_word flags;
//  2. every other piece is normalized (null or NFC);
//  3. pre-tokenized by the Split regex (behavior Isolated; the Qwen pattern has a lookahead the
//     standard regexp package cannot express, so it runs on github.com/dlclark/regexp2, with a
//     hand-written matcher for the two known Qwen patterns that is checked against regexp2);
//  4. each pre-token's bytes go through the GPT-2 byte↔unicode table (ByteLevel) and BPE merges
//     (lowest rank first, leftmost on ties), cached per pre-token.
//
// Decode maps ids back to bytes through the same table (a token whose characters are not all in
// the table contributes its raw UTF-8, as the HF ByteLevel decoder does) and replaces invalid
// UTF-8 the way Rust's String::from_utf8_lossy does (one U+FFFD per maximal invalid subpart).
// StreamDecoder emits only complete UTF-8 while ids arrive one by one.
//
// Anything in tokenizer.json outside that scope (other normalizers, pre-tokenizers, models,
// post-processors, BPE dropout, byte_fallback) is refused at load with the field named.
//
// The package imports only the standard library, regexp2 and golang.org/x/text.
package tokenizer
