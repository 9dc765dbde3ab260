package blm

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"lithos/formats"
)

// invMatrix is one packed matrix kind of the 27B inventory: Count of them, each a stack of
// source matrices of one format. Shapes: qwen35-and-quant.md §A.2 (target) and §D.4 with
// lithos-metal.md §5.3 (DSpark head); formats: the article's byte table (000_…txt: GDN and
// attention projections FP8, MLP and vocabulary head NVFP4, in_proj_a/b BF16) and the NVFP4
// head's export policy (lithos-metal.md §5.3: every matrix with K % 256 == 0 except
// markov_w1). Stacks as lithos-metal.md §2.4 forms them.
type invMatrix struct {
	model, name string
	format      formats.Format
	parts       []int64 // source matrices' N, stacked in this order
	k           int64
	count       int64
}

var inventory27B = []invMatrix{
	{"target", "GDN in_proj_z+in_proj_qkv", formats.FP8, []int64{6144, 10240}, 5120, 48},
	{"target", "GDN in_proj_a+in_proj_b", formats.BF16, []int64{48, 48}, 5120, 48},
	{"target", "GDN out_proj", formats.FP8, []int64{5120}, 6144, 48},
	{"target", "attention q_proj+k_proj+v_proj", formats.FP8, []int64{12288, 1024, 1024}, 5120, 16},
	{"target", "attention o_proj", formats.FP8, []int64{5120}, 6144, 16},
	{"target", "MLP gate_proj+up_proj (interleaved)", formats.NVFP4, []int64{17408, 17408}, 5120, 64},
	{"target", "MLP down_proj", formats.NVFP4, []int64{5120}, 17408, 64},
	{"target", "lm_head", formats.NVFP4, []int64{248320}, 5120, 1},
	{"draft", "fc", formats.NVFP4, []int64{5120}, 25600, 1},
	{"draft", "q_proj+k_proj+v_proj", formats.NVFP4, []int64{4096, 1024, 1024}, 5120, 5},
	{"draft", "o_proj", formats.NVFP4, []int64{5120}, 4096, 5},
	{"draft", "gate_proj+up_proj (interleaved)", formats.NVFP4, []int64{17408, 17408}, 5120, 5},
	{"draft", "down_proj", formats.NVFP4, []int64{5120}, 17408, 5},
	{"draft", "markov_w2", formats.NVFP4, []int64{248320}, 256, 1},
	{"draft", "confidence_head.proj", formats.BF16, []int64{1}, 5376, 1},
}

func (m invMatrix) geometry(lanes int) (Geometry, error) {
	var n int64
	for _, p := range m.parts {
		n += p
	}
	return NewGeometry(Spec{Format: m.format, N: n, K: m.k, Lanes: lanes})
}

// scalesApart is what the same matrix would take with the reference's "block" scale placement
// (lithos-metal.md §2.1): units of payload words only, and each block's scales in one dense
// region after its payload. Shown for comparison; lithos does not implement it (docs/blm.md §3).
func scalesApart(g Geometry) int64 {
	payload := int64(g.Rows*g.Lanes) * int64(roundUp(g.PayloadBytes, WordBytes))
	scales := int64(roundUp(g.Rows*g.Lanes*g.ScaleBytes, WordBytes))
	return g.Blocks * (payload + scales)
}

func commas(v int64) string {
	s := fmt.Sprint(v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func pct(pad, stored int64) string { return fmt.Sprintf("%.2f %%", 100*float64(pad)/float64(stored)) }

// renderInventory computes the padding table of docs/blm.md §9.
func renderInventory() (string, error) {
	var b strings.Builder
	b.WriteString("| model | packed matrix | format | [N, K] | × | lanes | W | P + S → U | stored bytes | packed bytes | padding | at 32 lanes |\n")
	b.WriteString("|---|---|---|---|--:|--:|--:|---|--:|--:|--:|--:|\n")
	type tot struct{ stored, packed, packed32, apart int64 }
	totals := map[string]*tot{"target": {}, "draft": {}}
	for _, m := range inventory27B {
		g, err := m.geometry(0)
		if err != nil {
			return "", err
		}
		g32, err := m.geometry(32)
		if err != nil {
			return "", err
		}
		t := totals[m.model]
		t.stored += m.count * g.StoredBytes
		t.packed += m.count * g.TotalBytes
		t.packed32 += m.count * g32.TotalBytes
		t.apart += m.count * scalesApart(g)
		fmt.Fprintf(&b, "| %s | %s | %s | [%d, %d] | %d | %d | %d | %d + %d → %d | %s | %s | %s | %s |\n",
			m.model, m.name, g.Format, g.N, g.K, m.count, g.Lanes, g.Stripe, g.PayloadBytes, g.ScaleBytes, g.UnitBytes,
			commas(m.count*g.StoredBytes), commas(m.count*g.TotalBytes), pct(g.PaddingBytes, g.StoredBytes),
			pct(g32.PaddingBytes, g32.StoredBytes))
	}
	b.WriteString("\n| total | stored bytes | packed bytes (lithos) | padding | packed at 32 lanes | padding | scales apart (not implemented) | padding |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	all := tot{}
	for _, name := range []string{"target", "draft", "both"} {
		t := totals[name]
		if name == "both" {
			t = &all
		} else {
			all.stored += t.stored
			all.packed += t.packed
			all.packed32 += t.packed32
			all.apart += t.apart
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, commas(t.stored),
			commas(t.packed), pct(t.packed-t.stored, t.stored),
			commas(t.packed32), pct(t.packed32-t.stored, t.stored),
			commas(t.apart), pct(t.apart-t.stored, t.stored))
	}
	return b.String(), nil
}

// TestInventoryTable computes the padding of every streamed matrix of the 27B target and its
// NVFP4 DSpark head and checks that docs/blm.md §9 shows exactly that table. It also checks the
// inventory's stored bytes against independent sums: the article's byte table (safetensors
// headers of nvidia/Qwen3.8-27B-NVFP4 summed by group) and the NVFP4 head's file size.
func TestInventoryTable(t *testing.T) {
	table, err := renderInventory()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/blm.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- inventory:begin -->\n", "<!-- inventory:end -->"
	_, rest, ok1 := strings.Cut(string(doc), begin)
	got, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 || got != table {
		t.Errorf("docs/blm.md §9 does not show the computed table; it should read:\n%s", table)
	}

	// Article, "What one token costs the bus": GB (1e9) to three decimals.
	sum := func(names ...string) (codes, scales int64) {
		for _, m := range inventory27B {
			for _, n := range names {
				if m.model == "target" && m.name == n {
					g, _ := m.geometry(0)
					codes += m.count * g.N * g.CodeRowBytes()
					scales += m.count * g.N * g.ScaleRowBytes()
				}
			}
		}
		return codes, scales
	}
	gb := func(v int64) float64 { return math.Round(float64(v)/1e6) / 1e3 }
	mlpCodes, mlpScales := sum("MLP gate_proj+up_proj (interleaved)", "MLP down_proj")
	gdn, _ := sum("GDN in_proj_z+in_proj_qkv", "GDN out_proj")
	attn, _ := sum("attention q_proj+k_proj+v_proj", "attention o_proj")
	headCodes, headScales := sum("lm_head")
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"MLP NVFP4 codes", gb(mlpCodes), 8.556}, {"MLP block scales", gb(mlpScales), 1.070},
		{"GDN FP8", gb(gdn), 5.536}, {"attention FP8", gb(attn), 1.678}, {"vocabulary head", gb(headCodes + headScales), 0.715},
	} {
		if c.got != c.want {
			t.Errorf("%s: %.3f GB, the article's table says %.3f", c.name, c.got, c.want)
		}
	}
	// The NVFP4 head is 1,136,258,502 bytes (article). Its matrices, plus what is not packed
	// here (markov_w1 BF16 [248320, 256]; norms, confidence bias: 68,097 BF16 values less the
	// confidence weight counted above; 37 F32 tensor scales), leave a few KB of safetensors
	// headers.
	var draft int64
	for _, m := range inventory27B {
		if m.model == "draft" {
			g, _ := m.geometry(0)
			draft += m.count * g.StoredBytes
		}
	}
	other := int64(248320*256*2) + (68097-5376)*2 + 37*4
	if hdr := 1136258502 - draft - other; hdr <= 0 || hdr > 20000 {
		t.Errorf("draft matrices %d + other tensors %d leave %d bytes of headers in the 1,136,258,502-byte file", draft, other, hdr)
	}
}
