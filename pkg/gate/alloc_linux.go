package gate

import (
	"syscall"
	"unsafe"
)

// allocWords returns n zeroed words, and the function that frees them.
// Large ones are mapped outside the Go heap and faulted in at once
// (MAP_POPULATE): Save's copy of the table is gigabytes that live for
// one Save, which the heap would keep, and count towards its next goal,
// after Save returns; unmapped, they go back to the system. It falls
// back to the heap if the mapping fails.
func allocWords(n int) ([]uint64, func()) {
	const minMapped = 1 << 17 // 1 MiB
	if n < minMapped {
		return make([]uint64, n), func() {}
	}
	b, err := syscall.Mmap(-1, 0, 8*n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		return make([]uint64, n), func() {}
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n), func() { _ = syscall.Munmap(b) }
}
