//go:build darwin

package metal

import "golang.org/x/sys/unix"

func init() { osVersion = darwinOSVersion }

// darwinOSVersion is "<kern.osproductversion> (<kern.osversion>)", either alone when the other
// cannot be read, "" when neither can.
func darwinOSVersion() string {
	product, perr := unix.Sysctl("kern.osproductversion")
	build, berr := unix.Sysctl("kern.osversion")
	switch {
	case perr == nil && berr == nil:
		return product + " (" + build + ")"
	case berr == nil:
		return build
	case perr == nil:
		return product
	}
	return ""
}
