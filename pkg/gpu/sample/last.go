package sample

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"warden/pkg/gpu"
	"warden/pkg/safefile"
)

// lastTailBytes is how much of the end of a samples file Last reads: a
// live view asks for it every second, of a file that grows all along.
const lastTailBytes = 16 << 10

// Last returns the readings of the last periodic sample (KindSample, with
// GPUs) within the last 16 KiB of the samples file at path: the latest
// the file knows of each GPU. A line that does not decode (the first one
// of the tail, cut; a last one cut by a crash) is passed over. Nil, with
// no error, when the tail holds no such sample.
func Last(path string) ([]gpu.Reading, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(0, fi.Size()-lastTailBytes)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var rec Record
		if json.Unmarshal(lines[i], &rec) == nil && rec.Kind == KindSample && len(rec.GPUs) > 0 {
			return rec.GPUs, nil
		}
	}
	return nil, nil
}
