package gpu

import (
	"strings"
	"testing"

	"lithos/formats"
	"lithos/kernels"
	"lithos/pack/blm"
)

// launchLog is a Queue that records its launches (Launch, and LaunchCluster when it is a
// clusterQueue).
type launchLog struct {
	fakeQueue
	calls []string
}

func (q *launchLog) Launch(k string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	q.calls = append(q.calls, "launch "+k)
	return nil
}

type clusterLog struct{ launchLog }

func (q *clusterLog) MaxCluster() int { return kernels.BLMMaxClusters }
func (q *clusterLog) LaunchCluster(k string, grid, cluster [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	q.calls = append(q.calls, "cluster "+k)
	if grid[0]%cluster[0] != 0 {
		q.calls = append(q.calls, "not whole clusters")
	}
	return nil
}

// TestClusterLaunches: a BLM record with Clusters > 1 is recorded with its cluster shape and
// launched through ClusterQueue.LaunchCluster; other records through Launch; a queue without
// clusters refuses such a program with an error naming the op instead of launching it wrong.
func TestClusterLaunches(t *testing.T) {
	g, err := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 5120, K: 17408})
	if err != nil {
		t.Fatal(err)
	}
	r, err := kernels.NewBLMParams(g, 8, kernels.EpiAdd)
	if err != nil {
		t.Fatal(err)
	}
	rc := r.WithClusters()
	p := &program{name: "test"}
	b := &builder{p: p, pfx: "fake"}
	b.what = "layer 0 down"
	b.add("lithos_blm_nvfp4_r8", rc, rc.Grid(), 1, 2, 3, 4)
	b.add("lithos_blm_nvfp4_r8", r, r.Grid(), 1, 2, 3, 4)
	rms := kernels.RMSNormParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, Groups: 1, N: 8, LdX: 8, LdZ: 8, LdY: 8}
	b.add("lithos_rmsnorm", rms, rms.Grid(), 1, 2, 3, 4)
	if b.err != nil {
		t.Fatal(b.err)
	}
	if got := [3][3]uint32{p.launches[0].cluster, p.launches[1].cluster, p.launches[2].cluster}; got != [3][3]uint32{{rc.Clusters, 1, 1}, {}, {}} {
		t.Fatalf("recorded clusters %v, want the cluster record's (%d,1,1) and none for the others", got, rc.Clusters)
	}
	p.recs.Buf = &Buffer{Ptr: 0x1000, Size: p.recs.Len()}
	ctl := &Buffer{Ptr: 0x2000, Size: 64}

	cq := &clusterLog{}
	s := &Session{s: cq, ctl: ctl}
	if err := s.enqueue(p); err != nil {
		t.Fatal(err)
	}
	if want := "cluster lithos_blm_nvfp4_r8,launch lithos_blm_nvfp4_r8,launch lithos_rmsnorm"; strings.Join(cq.calls, ",") != want {
		t.Fatalf("launches %q, want %q", strings.Join(cq.calls, ","), want)
	}

	q := &launchLog{}
	s = &Session{s: q, ctl: ctl}
	err = s.enqueue(p)
	if err == nil || !strings.Contains(err.Error(), "layer 0 down") || !strings.Contains(err.Error(), "thread-block clusters") {
		t.Fatalf("enqueue on a queue without clusters: %v, want an error naming the op and clusters", err)
	}
	if len(q.calls) != 0 {
		t.Fatalf("a queue without clusters launched %v before refusing", q.calls)
	}
}
