//go:build !unix

package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ExitError is the exit status of a client that ended with a non-zero status.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Exec runs the command's program with environment Environ(base) and this process's standard
// streams, and waits for it (there is no exec(2) here). A non-zero exit is an *ExitError.
func Exec(c Command, base []string) error {
	path, err := c.Path()
	if err != nil {
		return err
	}
	cmd := exec.Command(path, c.Args...)
	cmd.Env = c.Environ(base)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &ExitError{Code: ee.ExitCode()}
		}
		return fmt.Errorf("run %s: %w", path, err)
	}
	return nil
}
