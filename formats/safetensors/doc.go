// Package safetensors owns lithos's reading and writing of the safetensors
// checkpoint format: the header codec (every dtype of the current format,
// validation of every rule), header-only reads from an io.ReaderAt (a local
// file or a remote range reader), tensor sections of open files, sharded
// models through model.safetensors.index.json, and a streaming writer.
//
// # Format
//
// The format is specified in the README of huggingface/safetensors
// ("Format" and "Notes" sections) and, where the README is silent, by the
// reference Rust crate (safetensors/src/tensor.rs: Dtype, Metadata::validate,
// prepare, read_metadata); the digest we rely on is
// /work/shared/reference/hub-and-go.md §A13 and lithos-metal.md §3.1. A file
// is
//
//	bytes [0, 8)        N, u64 little-endian
//	bytes [8, 8+N)      UTF-8 JSON object (the header), optionally padded with spaces
//	bytes [8+N, EOF)    data section, every byte owned by exactly one tensor
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets"}:
// data_offsets = [begin, end) relative to the start of the data section, data
// little-endian, row-major (C order), no strides. The optional key
// "__metadata__" holds a string→string map.
//
// # What is validated
//
// ParseHeader and ReadHeader reject, with a *FormatError naming the tensor and
// the Rule broken: N > MaxHeaderLen (100,000,000, the crate's MAX_HEADER_SIZE)
// or past the end of the file; invalid UTF-8; JSON that is not one object, has
// trailing bytes, or duplicate keys (the README disallows them; serde_json and
// encoding/json silently keep one); a tensor entry with a missing, repeated or
// unknown field (the crate ignores unknown fields: we do not); an unknown
// dtype; shape entries that are not non-negative integers; element count or
// bit count overflow (checked multiplication in shape order, as the crate
// does); sub-byte dtypes whose bit count is not a whole number of bytes;
// shape × dtype size ≠ end − begin; end < begin; ranges past the end of the
// file; overlapping ranges; gaps (including bytes before the first or after
// the last tensor: the README requires the buffer to be "entirely indexed");
// __metadata__ values that are not strings.
//
// JSON key order carries no meaning. Like the crate, the reader sorts tensors
// by (begin, end) before checking that the ranges tile the data section from
// 0 to its end; Header.Tensors is in that order. The Python package writes
// tensors sorted by dtype (widest first) then name, other writers by name or
// in their own order: all are accepted.
//
// Leading and trailing JSON whitespace (space, tab, CR, LF) around the object
// is accepted: the README says the header MUST begin with '{', but the crate
// deliberately accepts leading whitespace since huggingface/safetensors#686
// (2026-04, "writers may pad the header to align the data section"), so
// files the reference reads are read here too. "__metadata__": null is read
// as no metadata, as the crate does.
//
// # Writing
//
// EncodeHeader and Writer produce compact JSON with "__metadata__" first and
// tensors in data order, escaped as serde_json escapes, padded with spaces to a
// multiple of 8 bytes so the data section starts 8-byte aligned. With
// PythonOrder specs and at most one metadata key (the crate writes metadata
// from a HashMap, so the order of several keys is random) the header is
// byte-identical to what the Python package's save_file writes; the interop
// tests check that against committed files.
//
// # Why our own codec
//
// github.com/nlpodyssey/safetensors (in go.mod, used as a cross-check in the
// tests on BF16/F32 files) has no F8_E4M3, F8_E5M2, F8_E8M0 or sub-byte
// dtypes — the dtypes of the FP8 and NVFP4 checkpoints lithos converts — and
// parses only a whole file held in memory, while lithos reads headers alone,
// remotely through HTTP range reads, before downloading anything. It also
// accepts duplicate keys (encoding/json keeps the last) and most of its errors
// do not name the tensor.
//
// # Imports
//
// Standard library only. Other lithos packages import this one; it imports no
// lithos package.
package safetensors
