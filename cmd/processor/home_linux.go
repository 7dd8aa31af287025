package main

import (
	"golang.org/x/sys/unix"
)

// homeOf returns where the file at path was made: its inode number and,
// where the file system keeps it, its birth time (statx).
func homeOf(path string) (fileHome, bool, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return fileHome{}, false, err
	}
	if st.Mask&unix.STATX_INO == 0 {
		return fileHome{}, false, nil
	}
	h := fileHome{ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		h.btimeNs = uint64(st.Btime.Sec)*1e9 + uint64(st.Btime.Nsec)
	}
	return h, true, nil
}
