package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// Per-op tests against straightforward float64 implementations written here.

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func TestDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sz := range []struct{ n, k int }{{1, 1}, {3, 5}, {17, 33}, {300, 257}, {2048, 64}} {
		w := normals(rng, sz.n*sz.k, 1)
		m, err := Dense(w, sz.n, sz.k)
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{1, 2, 3, 4, 5, 8, 9} {
			x := normals(rng, rows*sz.k, 1)
			dst := make([]float32, rows*sz.n)
			if err := m.Mul(dst, x, rows); err != nil {
				t.Fatal(err)
			}
			var want []float64
			for r := 0; r < rows; r++ {
				want = append(want, matvec64(w, sz.n, sz.k, to64(x[r*sz.k:(r+1)*sz.k]))...)
			}
			// Each dot product: |err| ≤ k·ε·Σ|w x|; the test bounds the normwise error.
			if e, at := relErr(dst, want); e > 1e-5 {
				t.Fatalf("[%d, %d] × %d rows: relative error %.3g at %d", sz.n, sz.k, rows, e, at)
			}
		}
	}
	// The same product on one goroutine and on several.
	w := normals(rng, 4096*96, 1)
	x := normals(rng, 3*96, 1)
	m, _ := Dense(w, 4096, 96)
	a, b := make([]float32, 3*4096), make([]float32, 3*4096)
	prev := runtime.GOMAXPROCS(1)
	_ = m.Mul(a, x, 3)
	runtime.GOMAXPROCS(max(prev, 4))
	_ = m.Mul(b, x, 3)
	runtime.GOMAXPROCS(prev)
	if e, _ := relErr32(a, b); e != 0 {
		t.Fatalf("parallel and serial products differ by %.3g", e)
	}
	if err := m.Mul(make([]float32, 4095), x[:96], 1); err == nil || !strings.Contains(err.Error(), "[4096, 96]") {
		t.Fatalf("short dst: %v", err)
	}
	if _, err := Dense(w, 4096, 95); err == nil {
		t.Fatal("Dense with the wrong length: no error")
	}
}

func TestRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const n, rows = 96, 5
	x := normals(rng, n*rows, 3)
	w := uniforms(rng, n, -0.5, 0.5)
	dst := make([]float32, n*rows)
	RMSNorm(dst, x, OnePlus(w), rows, 1e-6)
	for r := 0; r < rows; r++ {
		want := rms64(to64(x[r*n:(r+1)*n]), w, true, 1e-6)
		if e, _ := relErr(dst[r*n:(r+1)*n], want); e > 3e-7 {
			t.Fatalf("row %d: relative error %.3g", r, e)
		}
	}
	// In place, plain weight, eps that matters (tiny inputs).
	tiny := make([]float32, n)
	for i := range tiny {
		tiny[i] = float32(i%7) * 1e-4
	}
	want := rms64(to64(tiny), w, false, 1e-5)
	RMSNorm(tiny, tiny, w, 1, 1e-5)
	if e, _ := relErr(tiny, want); e > 3e-7 {
		t.Fatalf("in place with eps: relative error %.3g", e)
	}
}

func TestGatedRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const d, groups = 16, 6
	x, z := normals(rng, d*groups, 2), normals(rng, d*groups, 2)
	w := uniforms(rng, d, 0.5, 1.5)
	dst := make([]float32, d*groups)
	GatedRMSNorm(dst, x, z, w, groups, 1e-6)
	for g := 0; g < groups; g++ {
		var ss float64
		for _, v := range x[g*d : (g+1)*d] {
			ss += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ss/d+1e-6)
		want := make([]float64, d)
		for i := range want {
			zi := float64(z[g*d+i])
			want[i] = float64(x[g*d+i]) * r * float64(w[i]) * zi / (1 + math.Exp(-zi))
		}
		if e, _ := relErr(dst[g*d:(g+1)*d], want); e > 5e-7 {
			t.Fatalf("group %d: relative error %.3g", g, e)
		}
	}
}

func TestL2Normalize(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	const d = 32
	x := normals(rng, 3*d, 1)
	x[2*d+5] = 0
	for i := 2 * d; i < 3*d; i++ {
		x[i] *= 1e-4 // eps 1e-6 on Σx² ≈ 3e-7 matters here
	}
	orig := append([]float32(nil), x...)
	post := float32(1 / math.Sqrt(d))
	L2Normalize(x, d, L2Eps, post)
	for g := 0; g < 3; g++ {
		var ss float64
		for _, v := range orig[g*d : (g+1)*d] {
			ss += float64(v) * float64(v)
		}
		want := make([]float64, d)
		for i := range want {
			want[i] = float64(orig[g*d+i]) / math.Sqrt(ss+1e-6) / math.Sqrt(d)
		}
		if e, _ := relErr(x[g*d:(g+1)*d], want); e > 3e-7 {
			t.Fatalf("group %d: relative error %.3g", g, e)
		}
	}
}

func TestScalarFunctions(t *testing.T) {
	for _, x := range []float32{-30, -5, -1, -1e-3, 0, 1e-3, 0.5, 3, 19.9, 20, 20.001, 25, 88} {
		xd := float64(x)
		sp := math.Log(1 + math.Exp(xd))
		if x > 20 {
			sp = xd // PyTorch's threshold
		}
		checks := []struct {
			name      string
			got       float32
			want      float64
			tolerance float64
		}{
			{"softplus", Softplus(x), sp, 1e-7},
			{"sigmoid", Sigmoid(x), 1 / (1 + math.Exp(-xd)), 1e-7},
			{"silu", SiLU(x), xd / (1 + math.Exp(-xd)), 1e-7},
		}
		for _, c := range checks {
			if d := math.Abs(float64(c.got) - c.want); d > c.tolerance*math.Max(1, math.Abs(c.want)) {
				t.Errorf("%s(%v) = %v, want %v", c.name, x, c.got, c.want)
			}
		}
	}
	if Softplus(20.5) != 20.5 {
		t.Error("softplus above the threshold must be the identity")
	}
}

func TestGDNGates(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const h, rows = 6, 4
	a, b := normals(rng, h*rows, 3), normals(rng, h*rows, 3)
	a[3] = 30 // softplus threshold
	aLog := make([]float32, h)
	for i := range aLog {
		aLog[i] = float32(math.Log(0.01 + 16*rng.Float64()))
	}
	dt := uniforms(rng, h, -2, 2)
	beta, g := make([]float32, h*rows), make([]float32, h*rows)
	GDNGates(beta, g, a, b, NegExp(aLog), dt, rows)
	for r := 0; r < rows; r++ {
		for i := 0; i < h; i++ {
			wb := 1 / (1 + math.Exp(-float64(b[r*h+i])))
			wg := -math.Exp(float64(aLog[i])) * softplus64(float64(a[r*h+i])+float64(dt[i]))
			if math.Abs(float64(beta[r*h+i])-wb) > 1e-7 || math.Abs(float64(g[r*h+i])-wg) > 3e-7*math.Abs(wg) {
				t.Fatalf("row %d head %d: beta %v g %v, want %v %v", r, i, beta[r*h+i], g[r*h+i], wb, wg)
			}
		}
	}
}

func TestSwiGLUAndGate(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	g, u := normals(rng, 50, 3), normals(rng, 50, 3)
	dst := make([]float32, 50)
	SwiGLU(dst, g, u)
	x := append([]float32(nil), u...)
	SigmoidGate(x, g)
	for i := range dst {
		gi, ui := float64(g[i]), float64(u[i])
		if w := gi / (1 + math.Exp(-gi)) * ui; math.Abs(float64(dst[i])-w) > 3e-7*math.Max(1, math.Abs(w)) {
			t.Fatalf("swiglu[%d] = %v, want %v", i, dst[i], w)
		}
		if w := ui / (1 + math.Exp(-gi)); math.Abs(float64(x[i])-w) > 3e-7*math.Max(1, math.Abs(w)) {
			t.Fatalf("gate[%d] = %v, want %v", i, x[i], w)
		}
	}
}

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{[]float32{1, 3, 2}, 1},
		{[]float32{5, 5, 5}, 0},          // ties: lowest index, like torch.argmax
		{[]float32{-1, 4, nan, 4, 2}, 1}, // NaN skipped, tie → lowest
		{[]float32{-inf, -inf}, 0},
		{[]float32{1, inf, inf}, 1},
	} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

func TestEmbedding(t *testing.T) {
	table := []float32{1, 2, 3, 4, 5, 6}
	e, err := DenseEmbedding(table, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 2)
	if err := e.Row(dst, 2); err != nil || dst[0] != 5 || dst[1] != 6 {
		t.Fatalf("row 2: %v %v", dst, err)
	}
	if err := e.Row(dst, 3); err == nil {
		t.Fatal("row 3 of 3: no error")
	}
	// BF16 bytes of 1.5, −2, 0.25, 3: 0x3FC0, 0xC000, 0x3E80, 0x4040.
	b, err := BF16Embedding([]byte{0xC0, 0x3F, 0x00, 0xC0, 0x80, 0x3E, 0x40, 0x40}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Row(dst, 1); err != nil || dst[0] != 0.25 || dst[1] != 3 {
		t.Fatalf("bf16 row 1: %v %v", dst, err)
	}
	if _, err := BF16Embedding(make([]byte, 7), 2, 2); err == nil {
		t.Fatal("odd BF16 table: no error")
	}
}

func TestCausalConv1D(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const c, kernel, rows = 40, 4, 23
	w := normals(rng, c*kernel, 0.5)
	x := normals(rng, rows*c, 1)
	// Reference: the whole sequence with zero left padding.
	want := make([]float64, rows*c)
	for t0 := 0; t0 < rows; t0++ {
		for ch := 0; ch < c; ch++ {
			var acc float64
			for j := 0; j < kernel; j++ {
				if tau := t0 - kernel + 1 + j; tau >= 0 {
					acc += float64(w[ch*kernel+j]) * float64(x[tau*c+ch])
				}
			}
			want[t0*c+ch] = silu64(acc)
		}
	}
	// The same sequence streamed in pieces (1, 2, 5, 15 rows) through the two state slots.
	slots := [2][]float32{make([]float32, (kernel-1)*c), make([]float32, (kernel-1)*c)}
	s, start := 0, 0
	for _, piece := range []int{1, 2, 5, 15} {
		out := make([]float32, piece*c)
		if err := CausalConv1D(out, x[start*c:(start+piece)*c], piece, slots[s], slots[1-s], w, kernel); err != nil {
			t.Fatal(err)
		}
		if e, at := relErr(out, want[start*c:(start+piece)*c]); e > 3e-7 {
			t.Fatalf("rows %d…: relative error %.3g at %d", start, e, at)
		}
		s, start = 1-s, start+piece
	}
	// The state after the last piece holds the last kernel−1 raw inputs.
	if e, _ := relErr32(slots[s], x[(rows-kernel+1)*c:]); e != 0 {
		t.Fatal("final conv state is not the last inputs")
	}
	if err := CausalConv1D(make([]float32, c), x[:c], 1, slots[0][:c], slots[1], w, kernel); err == nil {
		t.Fatal("short state: no error")
	}
}

func TestRope(t *testing.T) {
	for _, c := range []struct {
		theta        float64
		dim, headDim int
	}{{1e7, 64, 256}, {1e6, 16, 64}, {1e4, 8, 32}} {
		r := NewRope(c.theta, c.dim)
		for i, f := range r.InvFreq {
			if want := math.Pow(c.theta, -2*float64(i)/float64(c.dim)); math.Abs(float64(f)-want) > 2e-7*want {
				t.Fatalf("θ %g: inv_freq[%d] = %v, want %v", c.theta, i, f, want)
			}
		}
		rng := rand.New(rand.NewPCG(8, 8))
		x := normals(rng, 3*c.headDim, 1)
		for _, pos := range []int{0, 1, 17, 199, 4000} {
			got := append([]float32(nil), x...)
			cos, sin := make([]float32, c.dim/2), make([]float32, c.dim/2)
			r.Tables(cos, sin, pos)
			r.Apply(got, c.headDim, cos, sin)
			var want []float64
			for h := 0; h < 3; h++ {
				v := to64(x[h*c.headDim : (h+1)*c.headDim])
				rope64(v, c.dim, c.theta, pos)
				want = append(want, v...)
			}
			if e, at := relErr(got, want); e > 3e-7 {
				t.Fatalf("θ %g dim %d pos %d: relative error %.3g at %d", c.theta, c.dim, pos, e, at)
			}
			if pos == 0 {
				if e, _ := relErr32(got, x); e != 0 {
					t.Fatal("position 0 must be the identity")
				}
			}
		}
	}
}

func TestAttend(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	s := AttnShape{Heads: 6, KVHeads: 2, HeadDim: 16}
	const p0, rows, capacity = 70, 5, 80
	kvRow := s.KVHeads * s.HeadDim
	kc, vc := normals(rng, capacity*kvRow, 2), normals(rng, capacity*kvRow, 1)
	q := normals(rng, rows*s.Heads*s.HeadDim, 2)
	scale := float32(0.25)
	// Reference: plain softmax per (row, head) over keys 0..p0+r in float64.
	want := make([]float64, rows*s.Heads*s.HeadDim)
	for r := 0; r < rows; r++ {
		for j := 0; j < s.Heads; j++ {
			g := j * s.KVHeads / s.Heads
			qv := q[(r*s.Heads+j)*s.HeadDim:]
			var sc []float64
			mx := math.Inf(-1)
			for tk := 0; tk <= p0+r; tk++ {
				var d float64
				for i := 0; i < s.HeadDim; i++ {
					d += float64(qv[i]) * float64(kc[tk*kvRow+g*s.HeadDim+i])
				}
				sc = append(sc, d*float64(scale))
				mx = math.Max(mx, d*float64(scale))
			}
			var sum float64
			for i := range sc {
				sc[i] = math.Exp(sc[i] - mx)
				sum += sc[i]
			}
			for tk, p := range sc {
				for i := 0; i < s.HeadDim; i++ {
					want[(r*s.Heads+j)*s.HeadDim+i] += p / sum * float64(vc[tk*kvRow+g*s.HeadDim+i])
				}
			}
		}
	}
	for _, part := range []int{1, 3, 16, 64, 1000} {
		out := make([]float32, rows*s.Heads*s.HeadDim)
		if err := Attend(s, out, q, rows, p0, kc, vc, scale, part); err != nil {
			t.Fatal(err)
		}
		if e, at := relErr(out, want); e > 2e-6 {
			t.Fatalf("partition %d: relative error %.3g at %d", part, e, at)
		}
	}
	if err := Attend(s, make([]float32, 10), q, rows, p0, kc, vc, scale, 64); err == nil {
		t.Fatal("short out: no error")
	}
	if err := Attend(AttnShape{Heads: 5, KVHeads: 2, HeadDim: 16}, nil, nil, 0, 0, nil, nil, 1, 64); err == nil {
		t.Fatal("heads not a multiple of KV heads: no error")
	}
}
