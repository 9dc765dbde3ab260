package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"lithos/kernels"
)

// TestWrite: every case line names a kernel of the table, carries the record NewBLMParams
// built (20 words: the BLMParams fields, padded), and its grid is the record's Grid(); with
// -clusters every split is also written with each cluster size, with -fragment every line also
// with Layout 1 (mark f).
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if err := write(dir, true, []uint32{4}, true); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(dir, "kernel_table.inc"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := os.ReadFile(filepath.Join(dir, "cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(cases)), "\n")
	if want := len(shapes) * 3 * 5 * 2 * 2; len(lines) != want {
		t.Fatalf("%d cases, want %d (each shape: 1, 8 and 16 rows × 5 splits × clusters 1 and 4 × both layouts)", len(lines), want)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 12+20 {
			t.Fatalf("case %q: %d fields, want 32", l, len(f))
		}
		if !strings.Contains(string(table), "lk::"+f[1]+"}") {
			t.Fatalf("case %q: kernel %s not in the table", l, f[1])
		}
		if _, ok := kernels.Lookup(f[1]); !ok {
			t.Fatalf("case %q: no kernel %s", l, f[1])
		}
		w := func(i int) uint32 {
			v, err := strconv.ParseUint(f[12+i], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		p := kernels.BLMParams{Blocks: w(10), Parts: w(14), WarpBlocks: w(15), Clusters: w(16), Layout: w(17)}
		if fm := strings.Contains(f[6], "f"); fm != (p.Layout == kernels.BLMLayoutFragment) || fm != strings.HasPrefix(f[1], "lithos_blmf_") {
			t.Fatalf("case %q: mark %s, layout %d, kernel %s", l, f[6], p.Layout, f[1])
		}
		if got := strconv.Itoa(int(p.Grid()[0])); got != f[7] {
			t.Fatalf("case %q: grid %s, the record's Grid() is %s", l, f[7], got)
		}
		if f[3] != strconv.Itoa(int(p.Parts)) || f[4] != strconv.Itoa(int(p.WarpBlocks)) || f[5] != strconv.Itoa(int(p.Clusters)) || f[2] != strconv.Itoa(int(w(1))) {
			t.Fatalf("case %q: parts/blocks/rows columns disagree with the record", l)
		}
	}
	src, err := os.ReadFile(filepath.Join(dir, "lithos_kernels.cu"))
	if err != nil {
		t.Fatal(err)
	}
	if string(src) != kernels.Source(kernels.CUDA) {
		t.Fatal("lithos_kernels.cu is not kernels.Source(kernels.CUDA)")
	}
	for name, body := range map[string]string{"proto.cuh": protoSource, "harness.cu": harness, "run.sh": runScript} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != body {
			t.Fatalf("%s not written as embedded: %v", name, err)
		}
	}
}

// TestRecordWords: the harness hands the prototype kernels the record's fields by word index
// (harness.cu: rec[1] rows, rec[3] N, rec[4] K, rec[5] lanes, rec[6] unit words, rec[7]
// stripe, rec[8] payload, rec[9] group, rec[10] blocks, rec[11] ld_x, rec[12] ld_y, rec[13]
// epilogue); a reordered BLMParams must fail here, not misread silently on the device.
func TestRecordWords(t *testing.T) {
	p := kernels.BLMParams{DoneWord: 100, Rows: 101, RowsWord: 102, N: 103, K: 104, Lanes: 105, UnitWords: 106, Stripe: 107,
		Payload: 108, Group: 109, Blocks: 110, LdX: 111, LdY: 112, Epilogue: 113, Parts: 114, WarpBlocks: 115, Clusters: 116}
	rec := kernels.Record(p)
	for i := 0; i <= 16; i++ {
		if got := binary.LittleEndian.Uint32(rec[4*i:]); got != uint32(100+i) {
			t.Fatalf("record word %d = %d, want %d (the field order the harness reads)", i, got, 100+i)
		}
	}
}
