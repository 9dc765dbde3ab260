// Package kernels owns lithos's GPU kernel sources (ARCHITECTURE.md §2, §3.4): one template per
// op in ops/*.kern, written once in a small C dialect, and a per-target prelude
// (prelude/cuda.h, prelude/metal.h) that maps the dialect's qualifiers, thread ids, barriers and
// warp/simdgroup reductions onto CUDA C++ (compiled by NVRTC) or the Metal Shading Language.
// Source(CUDA) and Source(Metal) generate one translation unit each from the same templates; the
// kernel signatures are generated from Go descriptions (Kernels), so the argument order, the
// parameter records (Go structs, Record) and the launch geometry (Grid) a host runtime uses are
// the ones the source was generated from. docs/metal.md and .notes/kernels.md describe the
// dialect and the calling convention; kernels/README.md the layout of this folder.
//
// Calling convention, every kernel (both targets):
//
//	argument 0: ctl     u32[]   the session's step state words (runtime/backend.StepState's
//	                            binary layout); read for the done flag and the dynamic values
//	                            a parameter names by word index, written by accept/commit
//	argument 1: params  record  the op's parameter record (Record: little-endian 4-byte words)
//	arguments 2…: the op's buffers, in Kernel.Buffers order
//
// Threadgroups (CUDA blocks) are one-dimensional with Kernel.Threads threads, a multiple of 32;
// the grid of threadgroups is three-dimensional (Grid). No kernel synchronizes threadgroups with
// each other, so every kernel is correct under any threadgroup schedule (Metal gives no
// forward-progress guarantee between threadgroups, issue 11).
//
// Imports: lithos/formats (format names), lithos/pack/blm (NewBLMParams from a geometry).
package kernels

import (
	"embed"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"lithos/formats"
)

//go:embed prelude/*.h ops/*.kern
var sources embed.FS

// Target is a kernel language.
type Target int

// Targets.
const (
	CUDA  Target = iota // CUDA C++ for NVRTC (extern "C" __global__ entry points)
	Metal               // Metal Shading Language 3.0+ (kernel functions, [[buffer(i)]] arguments)
)

func (t Target) String() string {
	switch t {
	case CUDA:
		return "cuda"
	case Metal:
		return "metal"
	}
	return fmt.Sprintf("Target(%d)", int(t))
}

// NoWord in a parameter's *_word field means "not dynamic": the kernel uses the fixed value of
// the paired field instead of a step-state word.
const NoWord = 0xFFFFFFFF

// Buffer is one buffer argument of a kernel.
//
// Aliasing: the host may bind one allocation to several arguments of a launch (including ctl,
// argument 0) unless the buffer is marked NoAlias: RMSNorm's y may be x (and z a dummy = x),
// Ewise's y may be a or b, gather's ids may be ctl, argmax_final's and sample's out may be ctl
// (.notes/kernels.md). So the generated CUDA declares a buffer __restrict__ only when NoAlias
// is set, and never declares ctl __restrict__ (review item 8: restrict on an aliased argument is
// undefined behaviour in CUDA C++). Metal has no restrict qualifier; the flag changes nothing
// there.
type Buffer struct {
	Name  string // as the template names it
	Elem  string // element type in the dialect: f32, u32, i32, u8, u64
	Write bool   // the kernel writes it (otherwise const)
	// NoAlias promises that no other argument of the launch (nor ctl) overlaps this buffer's
	// memory while the kernel runs, so CUDA may declare it __restrict__. The registry sets it
	// only on read-only weight tables (RMSNorm w, BLM w and scales, conv w, the embedding table,
	// RoPE inv_freq), which no kernel writes; a host must not
	// bind such an argument to memory another argument of the same launch writes.
	NoAlias bool
}

// Kernel is one entry point of the generated source.
type Kernel struct {
	Name    string            // entry point name, "lithos_" + op (+ "_" + variant)
	Op      string            // template file ops/<Op>.kern
	Threads int               // threads per threadgroup (CUDA block), a multiple of 32
	Params  any               // a zero value of the op's parameter record type
	Buffers []Buffer          // arguments 2… in order
	Defines map[string]string // compile-time constants of this variant (#define before the body)
	CtlRW   bool              // the kernel writes ctl
	// Shared is the dynamic threadgroup memory in bytes a CUDA launch passes (and the module
	// load allows with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): the BLM kernels'
	// weight ring (BLMRingBytes). 0 for the others; Metal kernels use static threadgroup memory.
	Shared int
	// MMAOnly marks a kernel of the CUDA tensor-core path alone (the MMA-layout matrix kernels,
	// BLMXParams): the Metal source holds it only under BLM_MMA (the fiber runtime's tensor-core
	// test build, prelude/metal.h), so a Mac compiles and loads every other kernel.
	MMAOnly bool
}

// ParamsType returns the C struct name of the kernel's parameter record.
func (k Kernel) ParamsType() string { return "lithos_" + k.Op + "_params" }

// Record encodes a parameter record (one of the *Params types of this package) as the kernel
// reads it: its fields in declaration order as little-endian 4-byte words, zero-padded to a
// multiple of 16 bytes.
func Record(p any) []byte {
	v := reflect.ValueOf(p)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	n := v.NumField()
	b := make([]byte, (4*n+15)/16*16)
	for i := 0; i < n; i++ {
		f := v.Field(i)
		var w uint32
		switch f.Kind() {
		case reflect.Uint32:
			w = uint32(f.Uint())
		case reflect.Int32:
			w = uint32(int32(f.Int()))
		case reflect.Float32:
			w = math.Float32bits(float32(f.Float()))
		default:
			panic(fmt.Sprintf("kernels: %s.%s is %s; records hold only uint32, int32 and float32", v.Type().Name(), v.Type().Field(i).Name, f.Kind()))
		}
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// snake converts a Go field name to the template's name: DoneWord → done_word, LdX → ld_x.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// paramStruct returns the C declaration of a record type.
func paramStruct(name string, p any) string {
	t := reflect.TypeOf(p)
	var b strings.Builder
	fmt.Fprintf(&b, "struct %s {\n", name)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		ct := map[reflect.Kind]string{reflect.Uint32: "u32", reflect.Int32: "i32", reflect.Float32: "f32"}[f.Type.Kind()]
		if ct == "" {
			panic(fmt.Sprintf("kernels: %s.%s: unsupported field type %s", t.Name(), f.Name, f.Type))
		}
		fmt.Fprintf(&b, "    %s %s;\n", ct, snake(f.Name))
	}
	b.WriteString("};\n")
	return b.String()
}

// Kernels returns every kernel of the generated sources, in source order.
func Kernels() []Kernel { return registry }

// Lookup returns the kernel with entry point name.
func Lookup(name string) (Kernel, bool) {
	for _, k := range registry {
		if k.Name == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// Source returns the whole translation unit of target t: the target's prelude, the shared
// helpers (ops/common.kern), every op's helpers, then one entry point per Kernels() entry. It is
// deterministic (the CUDA host caches compiled modules by its hash).
func Source(t Target) string {
	var b strings.Builder
	pre := "prelude/cuda.h"
	if t == Metal {
		pre = "prelude/metal.h"
	}
	b.WriteString("// Generated by lithos/kernels (Source(" + t.String() + ")): do not edit; edit kernels/ops/*.kern.\n")
	b.WriteString(mustRead(pre))
	fmt.Fprintf(&b, "#ifndef BLM_RING\n#define BLM_RING %d\n#endif\n", BLMRing)
	fmt.Fprintf(&b, "#define BLMX_D %du\n", blmxStep) // not overridable: the host's splits assume it
	// BLMX_SX: the activation entries per thread and staging step of ops/blmx.kern (8 at 512
	// threads); overridable (Overridable) for A/B runs: the host does not depend on it
	// (docs/performance.md §3.3u: 12 and 16 were slower).
	fmt.Fprintf(&b, "#ifndef BLMX_SX\n#define BLMX_SX %du\n#endif\n", 4096/BLMXThreads)
	// BLMX_RX: the activation entries per thread that ops/blmx.kern keeps in registers until
	// they are split (0: all through threadgroup memory, the staging measured last); 12 holds
	// every 27B part but down's. Off until measured on the GPU: at the 128-register cap of 512
	// threads the entries held across the barrier may spill (docs/performance.md §3.3x), so it
	// is an A/B switch for now — overridable, the host does not depend on it.
	b.WriteString("#ifndef BLMX_RX\n#define BLMX_RX 0u\n#endif\n")
	// CONV_AB_QUADS: the input quads (four inputs each) per thread whose loads lithos_conv's
	// in_proj_ab has in flight at once (2: the 8 inputs of the pairs before it, three passes over
	// the 27B's 5,120 at 256 threads; 3 would take two, with more registers); overridable for
	// A/B runs, the host does not depend on it (docs/performance.md §3.3y).
	b.WriteString("#ifndef CONV_AB_QUADS\n#define CONV_AB_QUADS 2u\n#endif\n")
	b.WriteString(mustRead("ops/common.kern"))
	// Parameter records, once per op.
	seen := map[string]bool{}
	var ops []string
	for _, k := range registry {
		if !seen[k.Op] {
			seen[k.Op] = true
			ops = append(ops, k.Op)
			b.WriteString(paramStruct(k.ParamsType(), k.Params))
		}
	}
	// Op helpers: the part of each template before its body marker.
	for _, op := range ops {
		h, _ := splitTemplate(op)
		b.WriteString(h)
	}
	for _, k := range registry {
		if k.MMAOnly && t == Metal {
			b.WriteString("\n#if BLM_MMA")
			b.WriteString(entry(t, k))
			b.WriteString("#endif\n")
			continue
		}
		b.WriteString(entry(t, k))
	}
	return b.String()
}

// Overridable are the compile-time constants of Source that a compiler option -DNAME=VALUE may
// change for an A/B run (the CUDA backend's LITHOS_CUDA_DEFINES) without the host's knowing:
// each is defined under #ifndef, and nothing the host computes depends on it. BLM_RING is
// under #ifndef too but is not here: the host sizes the BLM kernels' threadgroup memory for it.
var Overridable = []string{"BLMX_SX", "BLMX_RX", "CONV_AB_QUADS"}

// entryMarker, as a statement of a kernel body (the generator replaces its first occurrence,
// comments included, and refuses a body with two), is where the entry
// (GRID_WAIT, GRID_LAUNCH_DEPENDENTS, the done check) goes instead of the body's top: a body
// puts before it only what reads nothing but its parameter record and its weights (constant for
// the whole run), such as the first weight loads of a matrix kernel.
const entryMarker = "LITHOS_ENTRY;"

// entryBody is body with the entry: wait for the kernel before this one (programmatic
// dependent launch; a no-op without it and on Metal: prelude GRID_WAIT), let the next one be
// scheduled, then the done check — at the body's entryMarker, or at its top when it has none;
// the timeline diagnostic's TL_BEGIN (an empty statement unless compiled in) opens it all.
// The done check goes after the step-state reads that open the body there (entryReads: its
// row count, its position), so that their loads and the done word's are in flight together —
// one round trip to the L2 instead of one per word before the body's first activation load.
// It panics on a body with more than one marker (a template error).
func entryBody(k Kernel, body string) string {
	pre := "    "
	switch n := strings.Count(body, entryMarker); n {
	case 0:
	case 1:
		i := strings.Index(body, entryMarker)
		pre, body = body[:i], body[i+len(entryMarker):]
	default:
		panic(fmt.Sprintf("kernels: ops/%s.kern has %d %s lines", k.Op, n, entryMarker))
	}
	reads := entryReads(body)
	return fmt.Sprintf("    TL_BEGIN(0x%08xu);\n", TimelineID(k.Name)) + pre + entryWait + "\n" + body[:reads] + "    " + entryDone + "\n" + body[reads:]
}

// TimelineID is the kernel id of kernel name in the timeline diagnostic's records (prelude
// TL_BEGIN): the 32-bit FNV-1a hash of the name.
func TimelineID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// The entry's two parts (entryBody).
const (
	entryWait = "GRID_WAIT(); TL_MARK(1); GRID_LAUNCH_DEPENDENTS();"
	entryDone = "if (p.done_word != NOWORD && ctl[p.done_word] != 0u) return;"
)

// entryRead is a statement a body may open with that reads a step-state word and nothing else,
// or declares threadgroup memory: what may come between the entry's wait and its done check
// (blank and comment lines between them too, but the done check goes before a comment that
// opens what follows).
var (
	entryRead  = regexp.MustCompile(`^\s*(?:const u32 \w+ = dyn_(?:rows|value)\(ctl, p\.\w+, p\.\w+\);|TG_(?:DYN_)?ARRAY\([^;]*\);)\s*$`)
	entryBlank = regexp.MustCompile(`^\s*(?://.*)?$`)
)

// entryReads is the length of body's opening lines up to the last that matches entryRead.
func entryReads(body string) int {
	n, last := 0, 0
	for n < len(body) {
		end := strings.IndexByte(body[n:], '\n')
		if end < 0 {
			end = len(body) - n
		} else {
			end++
		}
		line := strings.TrimRight(body[n:n+end], "\n")
		if entryRead.MatchString(line) {
			last = n + end
		} else if !entryBlank.MatchString(line) {
			break
		}
		n += end
	}
	return last
}

// bodyMarker separates an op template's helpers (emitted once) from its kernel body (emitted
// once per variant).
const bodyMarker = "//@@ body"

func splitTemplate(op string) (helpers, body string) {
	s := mustRead("ops/" + op + ".kern")
	i := strings.Index(s, bodyMarker)
	if i < 0 {
		panic("kernels: ops/" + op + ".kern has no " + bodyMarker + " line")
	}
	return s[:i], s[i+len(bodyMarker):]
}

func mustRead(name string) string {
	b, err := sources.ReadFile(name)
	if err != nil {
		panic("kernels: embedded " + name + ": " + err.Error())
	}
	return string(b)
}

// entry generates one kernel entry point: the signature for target t, the variant's defines,
// the thread-id variables, then the template body with the entry (entryBody: GRID_WAIT,
// GRID_LAUNCH_DEPENDENTS, the done check) at its top or at its entryMarker.
func entry(t Target, k Kernel) string {
	_, body := splitTemplate(k.Op)
	var b strings.Builder
	b.WriteString("\n// ---- " + k.Name + " (ops/" + k.Op + ".kern)\n")
	var names []string
	for n := range k.Defines {
		names = append(names, n)
	}
	sort.Strings(names)
	defs := append([]string{"THREADS", "NSG"}, names...)
	fmt.Fprintf(&b, "#define THREADS %du\n#define NSG %du\n", k.Threads, k.Threads/32)
	for _, n := range names {
		fmt.Fprintf(&b, "#define %s %s\n", n, k.Defines[n])
	}
	ctlConst := "const "
	if k.CtlRW {
		ctlConst = ""
	}
	switch t {
	case CUDA:
		fmt.Fprintf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(\n", k.Threads, k.Name)
		// ctl is never __restrict__: buffers may alias it (gather ids, argmax/sample out).
		fmt.Fprintf(&b, "    %su32* ctl,\n    const %s* __restrict__ prm", ctlConst, k.ParamsType())
		for _, buf := range k.Buffers {
			c := "const "
			if buf.Write {
				c = ""
			}
			r := ""
			if buf.NoAlias {
				r = "__restrict__ "
			}
			fmt.Fprintf(&b, ",\n    %s%s* %s%s", c, buf.Elem, r, buf.Name)
		}
		b.WriteString(")\n{\n")
		fmt.Fprintf(&b, "    const %s p = *prm;\n", k.ParamsType())
		b.WriteString("    LITHOS_THREAD_IDS;\n")
	case Metal:
		fmt.Fprintf(&b, "kernel void %s(\n", k.Name)
		fmt.Fprintf(&b, "    device %su32* ctl [[buffer(0)]],\n    constant %s& p [[buffer(1)]]", ctlConst, k.ParamsType())
		for i, buf := range k.Buffers {
			c := "const "
			if buf.Write {
				c = ""
			}
			fmt.Fprintf(&b, ",\n    device %s%s* %s [[buffer(%d)]]", c, buf.Elem, buf.Name, i+2)
		}
		b.WriteString(",\n    uint3 tg [[threadgroup_position_in_grid]],\n    uint3 ngroups [[threadgroups_per_grid]],\n" +
			"    uint tid [[thread_index_in_threadgroup]],\n    uint lane [[thread_index_in_simdgroup]],\n" +
			"    uint sg [[simdgroup_index_in_threadgroup]])\n{\n")
	}
	b.WriteString(entryBody(k, body))
	b.WriteString("}\n")
	for _, n := range defs {
		fmt.Fprintf(&b, "#undef %s\n", n)
	}
	return b.String()
}

// Formats of the BLM matrix kernels (docs/blm.md).
var blmFormats = []formats.Format{formats.NVFP4, formats.FP8, formats.BF16}

// BLMRowVariants are the activation-row capacities of the BLM matrix kernels: the kernel for
// r rows computes any 1…r rows (the count may come from a step-state word). The 16-row kernel
// (prefill chunks) runs two n-tiles of 8 tokens over each decoded weight fragment on the
// tensor-core path; its rows 0–7 are computed by the same MMAs in the same order as the 8-row
// kernel's (docs/performance.md §3.1).
var BLMRowVariants = []int{1, 2, 4, 8, 16}

// BLMKernel returns the entry point of the BLM matrix × rows kernel for a format (nvfp4,
// fp8_e4m3, bf16) and at least rows activation rows (1–16): the smallest variant that holds
// them, reading the BLM layout.
func BLMKernel(f formats.Format, rows int) (string, error) {
	return BLMKernelLayout(f, rows, BLMLayoutBLM)
}

// BLMKernelLayout is BLMKernel for the weights in layout (BLMParams.Layout): lithos_blm_* for
// the BLM layout, lithos_blmf_* for the fragment-major copy (BLMFragmentMajor; the layout is
// compiled into the kernel, so that neither carries the other's registers).
func BLMKernelLayout(f formats.Format, rows int, layout uint32) (string, error) {
	fc, ok := blmFormatCode(f)
	if !ok {
		return "", fmt.Errorf("kernels: no BLM kernel for format %s (have nvfp4, fp8_e4m3, bf16)", f)
	}
	if layout != BLMLayoutBLM && layout != BLMLayoutFragment {
		return "", fmt.Errorf("kernels: BLM kernel for layout %d: want BLMLayoutBLM or BLMLayoutFragment", layout)
	}
	for _, r := range BLMRowVariants {
		if rows >= 1 && rows <= r {
			return blmKernelName(fc, r, layout), nil
		}
	}
	return "", fmt.Errorf("kernels: BLM kernel for %d rows: want 1 to %d", rows, BLMRowVariants[len(BLMRowVariants)-1])
}

func blmKernelName(fc string, rows int, layout uint32) string {
	if layout == BLMLayoutFragment {
		return fmt.Sprintf("lithos_blmf_%s_r%d", fc, rows)
	}
	return fmt.Sprintf("lithos_blm_%s_r%d", fc, rows)
}

func blmFormatCode(f formats.Format) (string, bool) {
	switch f {
	case formats.NVFP4:
		return "nvfp4", true
	case formats.FP8:
		return "fp8", true
	case formats.BF16:
		return "bf16", true
	}
	return "", false
}

var registry = buildRegistry()

func buildRegistry() []Kernel {
	f32 := func(n string, w bool) Buffer { return Buffer{Name: n, Elem: "f32", Write: w} }
	buf := func(n, elem string, w bool) Buffer { return Buffer{Name: n, Elem: elem, Write: w} }
	weight := func(n, elem string) Buffer { return Buffer{Name: n, Elem: elem, NoAlias: true} } // read-only, never aliased
	var ks []Kernel
	ks = append(ks, Kernel{Name: "lithos_rmsnorm", Op: "rmsnorm", Threads: 256, Params: RMSNormParams{},
		Buffers: []Buffer{f32("x", false), weight("w", "f32"), f32("z", false), f32("y", true)}})
	ks = append(ks, Kernel{Name: "lithos_ewise", Op: "ewise", Threads: ewiseThreads, Params: EwiseParams{},
		Buffers: []Buffer{f32("a", false), f32("b", false), f32("y", true)}})
	for _, layout := range []uint32{BLMLayoutBLM, BLMLayoutFragment} {
		for _, f := range blmFormats {
			fc, _ := blmFormatCode(f)
			for _, r := range BLMRowVariants {
				ks = append(ks, Kernel{Name: blmKernelName(fc, r, layout), Op: "blm", Threads: BLMThreads,
					Params: BLMParams{}, Defines: map[string]string{"FMT": "FMT_" + strings.ToUpper(fc), "ROWS": fmt.Sprint(r), "LAYOUT": fmt.Sprint(layout)},
					Shared: BLMRingBytes, CtlRW: true,
					Buffers: []Buffer{weight("w", "u8"), weight("scales", "f32"), f32("x", false), f32("y", true)}})
			}
		}
	}
	for _, tiles := range []uint32{1, BLMXMaxTiles} {
		for _, f := range []formats.Format{formats.NVFP4, formats.FP8} {
			name, _ := BLMXKernelTiles(f, tiles)
			fc, _ := blmFormatCode(f)
			ks = append(ks, Kernel{Name: name, Op: "blmx", Threads: BLMXThreads, Params: BLMXParams{}, MMAOnly: true,
				Defines: map[string]string{"FMT": "FMT_" + strings.ToUpper(fc), "BLMX_SHARED": fmt.Sprintf("%du", BLMXShared),
					"BLMX_MAX_CL": fmt.Sprintf("%du", BLMMaxClusters), "BLMX_NT": fmt.Sprintf("%du", tiles)},
				Shared: BLMXShared, CtlRW: true,
				Buffers: []Buffer{weight("w", "u8"), weight("scales", "f32"), f32("x", false), f32("y", true), f32("nw", false)}}) // nw may be the scales (unread without Norm)
		}
	}
	ks = append(ks, Kernel{Name: "lithos_argmax_partial", Op: "argmax_partial", Threads: 256, Params: ArgmaxParams{},
		Buffers: []Buffer{f32("x", false), f32("part_v", true), buf("part_i", "u32", true)}})
	ks = append(ks, Kernel{Name: "lithos_argmax_final", Op: "argmax_final", Threads: 32, Params: ArgmaxParams{},
		Buffers: []Buffer{f32("part_v", false), buf("part_i", "u32", false), buf("out", "i32", true)}})
	ks = append(ks, Kernel{Name: "lithos_gdn", Op: "gdn", Threads: gdnThreads, Params: GDNParams{},
		Defines: map[string]string{"GDN_LANES": fmt.Sprintf("%du", gdnLanesPerColumn), "GDN_KS": fmt.Sprintf("%du", gdnRowsPerLane)},
		Buffers: []Buffer{f32("q", false), f32("k", false), f32("v", false), f32("beta", true), f32("g", true), f32("state", true), f32("out", true),
			f32("ga", false), f32("gb", false), f32("neg_a", false), f32("dt_bias", false)}}) // Gates 0: the last four may be any buffers
	// CONV_NORM_CHUNK: the rows the fused L2 norm takes per barrier (a verify pass's 8);
	// CONV_AB_ROWS the rows the in_proj_ab product takes per pass over its weights, CONV_AB_OUT
	// its outputs per threadgroup (ConvParams.Grid); CONV_AB_QUADS is Source's (overridable).
	ks = append(ks, Kernel{Name: "lithos_conv", Op: "conv", Threads: convThreads, Params: ConvParams{},
		Defines: map[string]string{"CONV_NORM_CHUNK": "8u", "CONV_KMAX": fmt.Sprintf("%du", ConvMaxKernel), "CONV_AB_ROWS": "8u", "CONV_AB_OUT": fmt.Sprintf("%du", convABOut)},
		Buffers: []Buffer{f32("x", false), weight("w", "f32"), f32("state", true), f32("y", true),
			f32("ax", false), weight("aw", "u16"), weight("anw", "f32"), weight("ars", "f32"), f32("ay", true)}}) // ABOut 0: the last five may be any buffers
	// The attention kernels over float32 caches and, _bf16, over BF16 ones (KV_T; AttnKernels).
	caches := []struct{ elem, suffix string }{{"f32", ""}, {"u16", "_bf16"}}
	for _, c := range caches {
		kv, suffix := c.elem, c.suffix
		ks = append(ks, Kernel{Name: "lithos_attn_partial" + suffix, Op: "attn_partial", Threads: 256, Params: AttnParams{}, CtlRW: true,
			Defines: map[string]string{"KV_T": kv, "ATTN_QS": fmt.Sprintf("%du", attnQueries)},
			Buffers: []Buffer{f32("q", false), buf("kc", kv, false), buf("vc", kv, false), f32("pm", true), f32("pl", true), f32("po", true)}})
	}
	ks = append(ks, Kernel{Name: "lithos_attn_merge", Op: "attn_merge", Threads: 128, Params: AttnParams{}, CtlRW: true,
		Buffers: []Buffer{f32("pm", false), f32("pl", false), f32("po", false), f32("gate", false), f32("out", true)}}) // Gate 0: gate may be any buffer
	for _, c := range caches {
		kv, suffix := c.elem, c.suffix
		ks = append(ks, Kernel{Name: "lithos_attn_prep" + suffix, Op: "attn_prep", Threads: attnPrepThreads, Params: AttnPrepParams{}, CtlRW: true,
			Defines: map[string]string{"PREP_REG": fmt.Sprintf("%du", attnPrepReg)},
			Buffers: []Buffer{f32("x", false), weight("qw", "f32"), weight("kw", "f32"), weight("inv_freq", "f32"),
				f32("q", true), buf("kc", kv, true), buf("vc", kv, true)}})
	}
	ks = append(ks, Kernel{Name: "lithos_kv_append", Op: "kv_append", Threads: kvAppendThreads, Params: KVAppendParams{}, CtlRW: true,
		Buffers: []Buffer{f32("k", false), f32("v", false), f32("kc", true), f32("vc", true)}})
	ks = append(ks, Kernel{Name: "lithos_gather", Op: "gather", Threads: gatherThreads, Params: GatherParams{},
		Buffers: []Buffer{buf("ids", "i32", false), weight("table", "u8"), f32("y", true)}})
	ks = append(ks, Kernel{Name: "lithos_l2norm", Op: "l2norm", Threads: 128, Params: L2NormParams{},
		Buffers: []Buffer{f32("x", true)}})
	ks = append(ks, Kernel{Name: "lithos_step", Op: "step", Threads: 32, Params: StepParams{}, CtlRW: true,
		Buffers: []Buffer{buf("targets", "i32", false), buf("eos", "i32", false), buf("ring", "u64", true)}})
	ks = append(ks, specKernels()...) // sampling and the speculative round (spec.go)
	return ks
}
