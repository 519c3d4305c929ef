package sample

import (
	"bytes"
	"encoding/json"

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
	b, err := safefile.ReadTail(path, lastTailBytes)
	if err != nil {
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
