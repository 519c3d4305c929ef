package gates

import (
	"bytes"
	"path/filepath"

	"warden/pkg/safefile"
)

// oomMarkers are what PyTorch and the CUDA runtime print when a server runs
// out of GPU memory (torch.OutOfMemoryError's message begins "CUDA out of
// memory"; the CUDA runtime's error string is "out of memory").
var oomMarkers = [][]byte{
	[]byte("CUDA out of memory"),
	[]byte("OutOfMemoryError"),
	[]byte("CUDA error: out of memory"),
}

// oomTail is how much of the end of the server's output is searched.
const oomTail = 256 << 10

// ServerOOM returns the marker found when the end of the server's output
// in the attempt directory dir (server.err, server.out) says it ran out
// of GPU memory ("" otherwise).
func ServerOOM(dir string) string {
	for _, name := range []string{"server.err", "server.out"} {
		tail, err := safefile.ReadTail(filepath.Join(dir, name), oomTail)
		if err != nil {
			continue
		}
		for _, m := range oomMarkers {
			if bytes.Contains(tail, m) {
				return string(m)
			}
		}
	}
	return ""
}
