// Command hubinterop serves a Hub root with package lithos/hub/hubtest for tools/hubinterop/check.py,
// which drives it with huggingface_hub (the reference client) on a machine where that is installed:
//
//	CGO_ENABLED=0 go build -o bin/hubinterop ./tools/hubinterop
//	python3 tools/hubinterop/check.py --server bin/hubinterop --root testdata/hub
//
// It listens on -addr (default 127.0.0.1:0), prints the base URL as its first stdout line, and serves
// until killed. Unlike `lithos-pack hub serve` it exposes the knobs the check needs (page size, a
// separate blob host).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"lithos/hub/hubtest"
)

func main() {
	root := flag.String("root", "testdata/hub", "Hub root: ROOT/<org>/<name>/...")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	pageSize := flag.Int("page-size", 0, "tree listing page size (0: the default, 1000)")
	token := flag.String("token", "", "bearer token granted access to every gated repo")
	blobHost := flag.Bool("blob-host", false, "serve LFS blobs on a second listener at http://localhost:<port2> (a CDN-like host)")
	debug := flag.Bool("debug", false, "log every request to stderr")
	flag.Parse()
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := hubtest.Options{PageSize: *pageSize, Token: *token, Logger: logger}
	var blobLn net.Listener
	if *blobHost {
		var err error
		if blobLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			log.Fatal(err)
		}
		opts.BlobBaseURL = fmt.Sprintf("http://localhost:%d", blobLn.Addr().(*net.TCPAddr).Port)
	}
	srv, err := hubtest.New(*root, opts)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if blobLn != nil {
		go func() { log.Fatal(http.Serve(blobLn, srv)) }()
	}
	fmt.Printf("http://%s\n", ln.Addr())
	os.Stdout.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}
