package pack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lithos/formats/safetensors"
	"lithos/manifests"
)

// sha256sum returns the sha256 of the file at p as coreutils' sha256sum prints it: the
// oracle for the source hashes the pack computes (skips the test where the tool is absent).
func sha256sum(t *testing.T, p string) string {
	t.Helper()
	tool, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Skip("sha256sum not installed")
	}
	out, err := exec.Command(tool, p).Output()
	if err != nil {
		t.Fatalf("sha256sum %s: %v", p, err)
	}
	sum, _, _ := strings.Cut(string(out), " ")
	if len(sum) != 64 {
		t.Fatalf("sha256sum %s printed %q", p, out)
	}
	return sum
}

// TestSourceSHA256PlainDirectory packs a plain directory (no HF cache blob names, so the
// pack hashes every source file itself, during packing: srcChain) with 1 to 8 workers and
// checks every recorded source sha256 against sha256sum of the file. The fixture's shards
// hold skipped tensors (vision tower) between and after the packed ones, and a header, which
// the hash must include. The bundles must also be identical whatever the schedule.
func TestSourceSHA256PlainDirectory(t *testing.T) {
	src := copyDir(t, fixtureDir)
	want := map[string]string{}
	for _, n := range []string{"config.json", "hf_quant_config.json", "model.safetensors.index.json",
		"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		want[n] = sha256sum(t, filepath.Join(src, n))
	}
	var first *manifests.Bundle
	for _, workers := range []int{1, 2, 3, 8} {
		_, m := build(t, Options{Target: src, Workers: workers})
		if m.Target.Source.Repo != nil || m.Target.Source.Commit != nil {
			t.Errorf("workers %d: a plain directory got repo/commit %v/%v", workers, m.Target.Source.Repo, m.Target.Source.Commit)
		}
		if len(m.Target.Source.Files) != len(want) {
			t.Fatalf("workers %d: source files %+v, want %d", workers, m.Target.Source.Files, len(want))
		}
		for _, f := range m.Target.Source.Files {
			if f.SHA256 != want[f.Path] {
				t.Errorf("workers %d: source file %s: sha256 %s, sha256sum says %s", workers, f.Path, f.SHA256, want[f.Path])
			}
		}
		if first == nil {
			first = m
			continue
		}
		for i, tt := range m.Tensors {
			if tt.Name != first.Tensors[i].Name || tt.Offset != first.Tensors[i].Offset || tt.SHA256 != first.Tensors[i].SHA256 {
				t.Errorf("workers %d: tensor %d is %s at %d (%s), with 1 worker %s at %d (%s)", workers, i,
					tt.Name, tt.Offset, tt.SHA256, first.Tensors[i].Name, first.Tensors[i].Offset, first.Tensors[i].SHA256)
			}
		}
	}
}

// TestSrcChainSchedules drives srcChain as packing does, with random entries (overlapping,
// repeated, empty, leaving gaps before, between and after them), random worker counts, random
// read sizes and random delays, so that entries claim the chain, find it busy or past their
// offset, and finish in any order. Entries write through entryWriter, which hashes a plain
// tensor's bytes for both hashes and a matrix's own bytes beside the source bytes it read
// (sha256x2). The source hash must always be the file's, and each entry's its bytes'.
func TestSrcChainSchedules(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256sum(t, path)
	ck := &checkpoint{model: manifests.ModelTarget}
	wfile, err := os.Create(filepath.Join(dir, "weights.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer wfile.Close()
	for trial := range 40 {
		// Entries in file order: [off, off+size), from 0.5 % into the file to 2 % before its end.
		type span struct{ off, size int64 }
		var spans []span
		for off := int64(len(data) / 200); off < int64(len(data))*98/100; {
			size := int64(r.IntN(300000))
			if r.IntN(10) == 0 {
				size = 0
			}
			spans = append(spans, span{off, min(size, int64(len(data))-off)})
			switch r.IntN(4) {
			case 0: // the next entry reads the same tensor (a tied head)
			case 1: // a gap: a skipped tensor
				off += size + int64(r.IntN(200000))
			default:
				off += size
			}
		}
		sf := &sourceFile{rel: "model.safetensors", path: path, bytes: int64(len(data))}
		c := newSrcChain(ck, sf)
		for range spans {
			c.expect()
		}
		workers := 1 + trial%5
		next := make(chan span, len(spans))
		for _, s := range spans {
			next <- s
		}
		close(next)
		wf := newWeightsFile(wfile, nil, 2*workers, 2)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			rw := rand.New(rand.NewPCG(uint64(trial), uint64(w)))
			wg.Go(func() {
				for s := range next {
					held, err := c.claim(context.Background(), s.off)
					if err != nil {
						errs <- err
						return
					}
					// "Pack" the entry as writeEntry does: a plain tensor writes the source
					// bytes themselves, a matrix other bytes while it reads the source.
					ew, err := newEntryWriter(wf, int64(w)<<20)
					if err != nil {
						errs <- err
						return
					}
					plain := rw.IntN(2) == 0
					var tap srcTap
					if held {
						ew.feed(c.h, plain)
						tap = srcTap{c: c, w: ew, copy: !plain}
					}
					out := sha256.New()
					for p := s.off; p < s.off+s.size; {
						k := min(s.off+s.size-p, 1+int64(rw.IntN(70000)))
						src := data[p : p+k]
						if held {
							tap.Write(src)
						}
						if plain {
							ew.Write(src)
							out.Write(src)
						} else { // packed bytes: the source reversed, and some more
							b := slices.Clone(src)
							slices.Reverse(b)
							b = append(b, byte(k))
							ew.Write(b)
							out.Write(b)
						}
						p += k
						if rw.IntN(8) == 0 {
							time.Sleep(time.Duration(rw.IntN(200)) * time.Microsecond)
						}
					}
					sum, err := ew.Close()
					if held {
						c.release()
					}
					if err != nil {
						errs <- err
						return
					}
					if sum != hex.EncodeToString(out.Sum(nil)) {
						errs <- fmt.Errorf("entry [%d, +%d): sha256 %s of the bytes written is wrong", s.off, s.size, sum)
						return
					}
					if err := c.entryDone(context.Background(), s.off+s.size); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		wf.stop()
		close(errs)
		for err := range errs {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if sf.sha256 != want {
			t.Fatalf("trial %d (%d entries, %d workers): sha256 %s, sha256sum says %s", trial, len(spans), workers, sf.sha256, want)
		}
	}

	// A file no entry reads.
	sf := &sourceFile{rel: "model.safetensors", path: path, bytes: int64(len(data))}
	if err := newSrcChain(ck, sf).run(context.Background()); err != nil || sf.sha256 != want {
		t.Fatalf("run: %v, sha256 %s, want %s", err, sf.sha256, want)
	}
}

// TestSrcChainFileChanged: a source file shorter or longer than when the checkpoint was
// opened fails the hash, naming the file; a cancelled context stops it.
func TestSrcChainFileChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model-00002-of-00002.safetensors")
	if err := os.WriteFile(path, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := &checkpoint{model: manifests.ModelTarget}
	for _, tc := range []struct {
		bytes int64
		want  string
	}{
		{3<<20 + 1, "the file changed while packing"},
		{3<<20 - 1, "longer than the 3145727 bytes"},
	} {
		sf := &sourceFile{rel: "model-00002-of-00002.safetensors", path: path, bytes: tc.bytes}
		c := newSrcChain(ck, sf)
		c.expect()
		c.expect()
		if err := c.entryDone(context.Background(), 1<<20); err != nil {
			t.Fatal(err)
		}
		err := c.entryDone(context.Background(), 2<<20)
		wantErr(t, err, "target", "hash model-00002-of-00002.safetensors", tc.want)
		if sf.sha256 != "" {
			t.Errorf("size %d: sha256 recorded after an error", tc.bytes)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sf := &sourceFile{rel: "x", path: path, bytes: 3 << 20}
	if err := newSrcChain(ck, sf).run(ctx); err == nil || sf.sha256 != "" {
		t.Fatalf("a cancelled hash returned %v, sha256 %q", err, sf.sha256)
	}
}

// TestScheduler: every entry is handed out once, each shard's in file order; a worker stays on
// its shard; a worker without one takes the untouched shard with the most bytes left, then the
// busiest-left one.
func TestScheduler(t *testing.T) {
	files := []*safetensors.File{{Path: "a"}, {Path: "b"}, {Path: "c"}}
	var entries []*entry
	mk := func(f int, off, size int64) {
		e := &entry{plain: tensorRef{file: files[f], t: safetensors.Tensor{Offset: off, Size: size}}}
		e.rec.Name = fmt.Sprintf("%s@%d", files[f].Path, off)
		entries = append(entries, e)
	}
	// Shard a: 3 entries (30 bytes), b: 2 (100 bytes), c: 1 (50 bytes); manifest order mixed.
	mk(0, 20, 10)
	mk(1, 0, 60)
	mk(0, 0, 10)
	mk(2, 0, 50)
	mk(1, 60, 40)
	mk(0, 10, 10)
	s := newScheduler(entries)
	var got []string
	take := func(cur int) int {
		e, q := s.next(cur)
		if e == nil {
			got = append(got, "-")
			return q
		}
		got = append(got, e.rec.Name)
		return q
	}
	w1 := take(-1) // b: most bytes
	w2 := take(-1) // c: untouched, more than a
	w1 = take(w1)  // b again
	w2 = take(w2)  // c is empty: a is untouched
	w2 = take(w2)
	w1 = take(w1) // b is empty: a is the only one left
	w1 = take(w1)
	w2 = take(w2)
	want := []string{"b@0", "c@0", "b@60", "a@0", "a@10", "a@20", "-", "-"}
	if !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want %v", got, want)
	}
}
