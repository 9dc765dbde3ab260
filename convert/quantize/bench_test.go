package quantize

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"lithos/convert"
	"lithos/formats/safetensors"
)

// benchConfig is a ~0.97 GB BF16 DSpark head: hidden 3072, 4 layers, 24/8
// heads × 128, intermediate 9216, vocab 32768, markov rank 256, 3 taps
// (485.5 M parameters; the 27B head is 1.86 G).
func benchConfig() map[string]any {
	c := tinyConfig()
	for k, v := range map[string]any{"hidden_size": 3072, "intermediate_size": 9216, "num_hidden_layers": 4,
		"num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32768,
		"markov_rank": 256, "target_hidden_size": 3072, "target_layer_ids": []int{5, 15, 25}} {
		c[k] = v
	}
	return c
}

// writeBenchHead streams a random (never zero) BF16 head to dir without
// holding it in memory: each element has a random sign and mantissa and an
// exponent spread over 2^-10 … 2^-5, so blocks have varied scales.
func writeBenchHead(b *testing.B, dir string) (srcBytes int64) {
	b.Helper()
	cfgMap := benchConfig()
	cfgJSON, _ := json.MarshalIndent(cfgMap, "", "  ")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := convert.ParseConfig(cfgJSON)
	if err != nil {
		b.Fatal(err)
	}
	inv, err := convert.Inventory(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var specs []safetensors.TensorSpec
	for _, t := range inv {
		specs = append(specs, safetensors.TensorSpec{Name: t.Name, DType: safetensors.BF16, Shape: t.Shape})
	}
	specs = safetensors.PythonOrder(specs)
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, specs, map[string]string{"format": "pt"})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for w.Remaining() > 0 {
		n := min(int64(len(buf)), w.Remaining())
		for i := int64(0); i < n; i += 8 {
			x := r.Uint64()
			for j := int64(0); j < 8 && i+j < n; j += 2 {
				v := uint16(x >> (16 * (j / 2)))
				exp := 117 + uint16(v>>7&0xFF)%6
				binary.LittleEndian.PutUint16(buf[i+j:], v&0x8000|exp<<7|v&0x7F)
			}
		}
		if _, err := w.Write(buf[:n]); err != nil {
			b.Fatal(err)
		}
		srcBytes += n
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	return srcBytes
}

// peakRSS returns VmHWM (bytes) from /proc/self/status; resetPeak asks the
// kernel to reset it (Linux ≥ 4.0). Both fail soft elsewhere.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// cpuTime returns this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQuantizeHead quantizes a ~1 GB synthetic BF16 head end to end
// (hash inputs, two passes over every linear, error statistics, write,
// fsync, hash outputs) with GOMAXPROCS workers. Reported:
//
//	GB/s          BF16 source tensor bytes (GB = 1e9) per second of wall time
//	GB/s/core     that divided by the workers
//	GB/cpu-s      source bytes per second of CPU time (user + system) the run used:
//	              per-core throughput that holds on a loaded machine
//	floor_GB/cpu-s  one core reading the same file and hashing it with SHA-256, same run
//	x_floor       CPU time of the run / CPU time of the floor
//	peak_RSS_MB   VmHWM during the run (reset just before), MB = 1e6
//
// Run: go test -run '^$' -bench QuantizeHead -benchtime 1x ./convert/quantize
func BenchmarkQuantizeHead(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	t0 := time.Now()
	srcBytes := writeBenchHead(b, src)
	b.Logf("wrote %.3f GB of BF16 tensors in %v", float64(srcBytes)/1e9, time.Since(t0).Round(time.Millisecond))

	// Floor: read the file (now in the page cache, as it is for the
	// quantizer's second pass) and hash it, on one core.
	floor := func() time.Duration {
		t := cpuTime()
		f, err := os.Open(filepath.Join(src, "model.safetensors"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
			b.Fatal(err)
		}
		return cpuTime() - t
	}
	floor() // warm the page cache
	floorT := floor()

	workers := runtime.GOMAXPROCS(0)
	runtime.GC()
	resetPeak()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := range b.N {
		out := filepath.Join(dir, "out"+strconv.Itoa(i))
		t, c := time.Now(), cpuTime()
		if _, err := Run(context.Background(), src, out, Options{ToolVersion: "bench"}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t)
		cpu += cpuTime() - c
		b.StopTimer()
		os.RemoveAll(out)
		b.StartTimer()
	}
	b.StopTimer()
	peak := peakRSS()
	per := total.Seconds() / float64(b.N)
	gbps := float64(srcBytes) / 1e9 / per
	b.ReportMetric(gbps, "GB/s")
	b.ReportMetric(gbps/float64(workers), "GB/s/core")
	cpuPer := cpu.Seconds() / float64(b.N)
	b.ReportMetric(float64(srcBytes)/1e9/cpuPer, "GB/cpu-s")
	b.ReportMetric(float64(srcBytes)/1e9/floorT.Seconds(), "floor_GB/cpu-s")
	b.ReportMetric(cpuPer/floorT.Seconds(), "x_floor")
	if peak > 0 {
		b.ReportMetric(float64(peak)/1e6, "peak_RSS_MB")
	}
	b.SetBytes(srcBytes)
}
