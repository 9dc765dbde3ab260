//go:build unix

package launch

import (
	"fmt"
	"syscall"
)

// Exec replaces this process with the command's program, with environment Environ(base):
// the client then owns the terminal, the signals and the exit status. It returns only on
// failure (the program is missing or cannot be executed).
func Exec(c Command, base []string) error {
	path, err := c.Path()
	if err != nil {
		return err
	}
	argv := append([]string{c.Program}, c.Args...)
	if err := syscall.Exec(path, argv, c.Environ(base)); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}
