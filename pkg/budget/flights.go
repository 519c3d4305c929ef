package budget

import (
	"sync"
	"time"
)

// Flights are the attempts whose server holds its GPUs and that are not
// charged yet: the GPU time in flight, which a campaign's runner checks
// against the cap while runs are in flight. Attempts add and remove
// themselves from their own goroutines; the zero value is ready.
type Flights struct {
	mu sync.Mutex        // guards m
	m  map[string]flight // attempt key -> what it holds
}

type flight struct {
	gpus  int
	since time.Time
}

// Add notes that the attempt key holds gpus GPUs since since.
func (f *Flights) Add(key string, gpus int, since time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]flight{}
	}
	f.m[key] = flight{gpus, since}
}

// Remove notes that the attempt key holds no GPU any more (it is charged).
func (f *Flights) Remove(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

// GPUSeconds is the GPU time in flight at now, and how many GPUs are
// held.
func (f *Flights) GPUSeconds(now time.Time) (s float64, gpus int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.m {
		gpus += x.gpus
		if now.After(x.since) {
			s += float64(x.gpus) * now.Sub(x.since).Seconds()
		}
	}
	return s, gpus
}
