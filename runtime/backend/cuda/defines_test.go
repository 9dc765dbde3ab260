//go:build linux && amd64

package cuda

import (
	"slices"
	"strings"
	"testing"
)

// TestDefineOptions: LITHOS_CUDA_DEFINES's pairs become NVRTC -D options in order; anything
// that is not NAME=VALUE (a lower-case or leading-digit name, no value, an option or shell text
// in the value) is refused with an error that names it; the device string carries the switch.
func TestDefineOptions(t *testing.T) {
	got, err := defineOptions("  BLMX_SX=16 FOO_2=1u\tBAR=0.5 ")
	if err != nil || !slices.Equal(got, []string{"-DBLMX_SX=16", "-DFOO_2=1u", "-DBAR=0.5"}) {
		t.Fatalf("defineOptions = %q, %v", got, err)
	}
	if got, err := defineOptions(""); err != nil || got != nil {
		t.Fatalf("empty: %q, %v", got, err)
	}
	for _, bad := range []string{"blmx_sx=1", "1X=2", "X", "X=", "X=-G", "X=1;rm", "X=a=b", "-DX=1"} {
		if _, err := defineOptions("OK=1 " + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: error %v, want one naming it", bad, err)
		}
	}
	t.Setenv(DefinesEnv, " BLMX_SX=16  ")
	if d := describe(Info{}); !strings.HasSuffix(d, ", kernels with BLMX_SX=16") {
		t.Errorf("describe = %q, want the defines at its end", d)
	}
}
