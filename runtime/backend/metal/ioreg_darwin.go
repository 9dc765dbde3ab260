//go:build darwin && arm64

package metal

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// IOKit and CoreFoundation entry points for the GPU core count (IORegistry property
// "gpu-core-count" of the AGXAccelerator service, as lithos-metal.md §6.3's engine and other
// tools read it: IOServiceMatching("AGXAccelerator"), IOServiceGetMatchingService,
// IORegistryEntryCreateCFProperty, CFNumberGetValue). Compile-checked only.
var (
	ioOnce sync.Once
	ioErr  error

	ioServiceMatching               func(name *byte) uintptr
	ioServiceGetMatchingService     func(mainPort uint32, matching uintptr) uint32
	ioRegistryEntryCreateCFProperty func(entry uint32, key, allocator uintptr, options uint32) uintptr
	ioObjectRelease                 func(object uint32) int32
	cfStringCreateWithCString       func(allocator uintptr, s *byte, encoding uint32) uintptr
	cfGetTypeID                     func(cf uintptr) uint64
	cfNumberGetTypeID               func() uint64
	cfNumberGetValue                func(number uintptr, typ int64, out unsafe.Pointer) bool
	cfRelease                       func(cf uintptr)
)

const (
	cfStringEncodingUTF8 = 0x08000100 // kCFStringEncodingUTF8
	cfNumberSInt64Type   = 4          // kCFNumberSInt64Type
)

func loadIOKit() error {
	ioOnce.Do(func() {
		iokit, err := purego.Dlopen("/System/Library/Frameworks/IOKit.framework/IOKit", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			ioErr = fmt.Errorf("metal: load IOKit: %w", err)
			return
		}
		cf, err := purego.Dlopen("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			ioErr = fmt.Errorf("metal: load CoreFoundation: %w", err)
			return
		}
		purego.RegisterLibFunc(&ioServiceMatching, iokit, "IOServiceMatching")
		purego.RegisterLibFunc(&ioServiceGetMatchingService, iokit, "IOServiceGetMatchingService")
		purego.RegisterLibFunc(&ioRegistryEntryCreateCFProperty, iokit, "IORegistryEntryCreateCFProperty")
		purego.RegisterLibFunc(&ioObjectRelease, iokit, "IOObjectRelease")
		purego.RegisterLibFunc(&cfStringCreateWithCString, cf, "CFStringCreateWithCString")
		purego.RegisterLibFunc(&cfGetTypeID, cf, "CFGetTypeID")
		purego.RegisterLibFunc(&cfNumberGetTypeID, cf, "CFNumberGetTypeID")
		purego.RegisterLibFunc(&cfNumberGetValue, cf, "CFNumberGetValue")
		purego.RegisterLibFunc(&cfRelease, cf, "CFRelease")
	})
	return ioErr
}

func cstr(s string) *byte { b := append([]byte(s), 0); return &b[0] }

// gpuCoreCount reads the GPU core count from the IORegistry. Errors: IOKit not loadable, no
// AGXAccelerator service, no numeric gpu-core-count property.
func gpuCoreCount() (int, error) {
	if err := loadIOKit(); err != nil {
		return 0, err
	}
	// IOServiceGetMatchingService consumes the matching dictionary; kIOMainPortDefault is 0.
	svc := ioServiceGetMatchingService(0, ioServiceMatching(cstr("AGXAccelerator")))
	if svc == 0 {
		return 0, errors.New("metal: no AGXAccelerator in the IORegistry")
	}
	defer ioObjectRelease(svc)
	key := cfStringCreateWithCString(0, cstr("gpu-core-count"), cfStringEncodingUTF8)
	if key == 0 {
		return 0, errors.New("metal: CFStringCreateWithCString failed")
	}
	defer cfRelease(key)
	v := ioRegistryEntryCreateCFProperty(svc, key, 0, 0)
	if v == 0 {
		return 0, errors.New("metal: the AGXAccelerator has no gpu-core-count")
	}
	defer cfRelease(v)
	var n int64
	if cfGetTypeID(v) != cfNumberGetTypeID() || !cfNumberGetValue(v, cfNumberSInt64Type, unsafe.Pointer(&n)) || n <= 0 || n > 1<<16 {
		return 0, errors.New("metal: gpu-core-count is not a positive number")
	}
	return int(n), nil
}
