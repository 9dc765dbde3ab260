//go:build linux && amd64

package cuda

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDefineOptions: LITHOS_CUDA_DEFINES's pairs become NVRTC -D options in order; anything
// that is not NAME=VALUE (a lower-case or leading-digit name, no value, an option or shell text
// in the value) or names a constant outside kernels.Overridable is refused with an error that
// names it; the device string carries the switch.
func TestDefineOptions(t *testing.T) {
	got, err := defineOptions("  BLMX_SX=16 BLMX_SX=12u\tBLMX_SX=0.5 ")
	if err != nil || !slices.Equal(got, []string{"-DBLMX_SX=16", "-DBLMX_SX=12u", "-DBLMX_SX=0.5"}) {
		t.Fatalf("defineOptions = %q, %v", got, err)
	}
	if got, err := defineOptions(""); err != nil || got != nil {
		t.Fatalf("empty: %q, %v", got, err)
	}
	// Malformed pairs, and names the kernels do not let a run override: one the source sets
	// unconditionally (BLMX_D), one the host sizes memory for (BLM_RING), the timeline's switch,
	// a compiler macro, a typo.
	for _, bad := range []string{"blmx_sx=1", "1X=2", "X", "X=", "X=-G", "X=1;rm", "X=a=b", "-DX=1",
		"BLMX_D=8", "BLM_RING=4", "LITHOS_TIMELINE=1", "__CUDA_ARCH__=800", "BLMX_XS=16"} {
		if _, err := defineOptions("BLMX_SX=8 " + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: error %v, want one naming it", bad, err)
		}
	}
	t.Setenv(DefinesEnv, " BLMX_SX=16  ")
	if d := describe(Info{}); !strings.HasSuffix(d, ", kernels with BLMX_SX=16") {
		t.Errorf("describe = %q, want the defines at its end", d)
	}
}

// TestModuleOptions: the options LoadKernels compiles the module with follow the environment
// (the defines, then the timeline's), and a bad define is LoadKernels's error before any compile.
func TestModuleOptions(t *testing.T) {
	t.Setenv(DefinesEnv, "")
	t.Setenv(TimelineEnv, "")
	if got, err := moduleOptions(); err != nil || len(got) != 0 {
		t.Fatalf("no switches: %q, %v", got, err)
	}
	t.Setenv(DefinesEnv, "BLMX_SX=12")
	t.Setenv(TimelineEnv, filepath.Join(t.TempDir(), "tl"))
	if got, err := moduleOptions(); err != nil || !slices.Equal(got, []string{"-DBLMX_SX=12", "-DLITHOS_TIMELINE=1"}) {
		t.Fatalf("both switches: %q, %v", got, err)
	}
	t.Setenv(DefinesEnv, "BLM_RING=4")
	if _, err := moduleOptions(); err == nil || !strings.Contains(err.Error(), "BLM_RING") {
		t.Fatalf("a define outside kernels.Overridable: %v", err)
	}
}
