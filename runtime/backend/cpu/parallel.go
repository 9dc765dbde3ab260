package cpu

// dot2x4 returns the 8 dot products of two activation rows x0, x1 with four weight rows,
// loading each element once: r[4·j + i] = x_j · w_i, each a float32 sum in index order.
func dot2x4(x0, x1, w0, w1, w2, w3 []float32) (r [8]float32) {
	n := len(x0)
	x1, w0, w1, w2, w3 = x1[:n], w0[:n], w1[:n], w2[:n], w3[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for i := 0; i < n; i++ {
		p, q := x0[i], x1[i]
		u0, u1, u2, u3 := w0[i], w1[i], w2[i], w3[i]
		a0 += p * u0
		a1 += p * u1
		a2 += p * u2
		a3 += p * u3
		b0 += q * u0
		b1 += q * u1
		b2 += q * u2
		b3 += q * u3
	}
	return [8]float32{a0, a1, a2, a3, b0, b1, b2, b3}
}
