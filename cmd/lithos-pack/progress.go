package main

import (
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// byteBar returns a progress callback for hub downloads: one bar over all
// bytes on stderr, silent when stderr is not a terminal (CI, pipes). done
// finishes the bar.
func byteBar(desc string) (progress func(total, delta int64), done func()) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil, func() {}
	}
	var (
		mu  sync.Mutex
		bar *progressbar.ProgressBar
	)
	progress = func(total, delta int64) {
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription(desc),
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowCount(),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
		bar.Add64(delta)
	}
	done = func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil {
			bar.Finish()
		}
	}
	return progress, done
}
