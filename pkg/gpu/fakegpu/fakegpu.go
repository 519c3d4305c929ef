package fakegpu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/gpu"
)

// EnvDir is the environment variable through which processes learn the
// directory of the fake GPUs.
const EnvDir = gpu.FakeDirEnv

// DeviceName is the product name of every fake GPU.
const DeviceName = "Fake H200"

const (
	devicesFile = "gpus.json"
	claimsDir   = "claims"
	schema      = 1
)

// ErrNoDevice is returned when a GPU index is outside the devices recorded
// in gpus.json.
var ErrNoDevice = errors.New("no such fake GPU")

// Device describes one fake GPU.
type Device struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	Name     string `json:"name"`
	TotalMiB int    `json:"total_mib"`
	// CPUs lists the CPUs close to the GPU in the Linux CPU-list format
	// ("0-15,32-47"); empty when not known.
	CPUs string `json:"cpus,omitempty"`
	// NUMANode is the GPU's NUMA node, -1 when not known. Its zero value is
	// node 0: say -1 in InitWith when there is no node. A gpus.json written
	// before the field existed reads as -1.
	NUMANode int `json:"numa_node"`
}

// UnmarshalJSON decodes a device, with NUMANode -1 when the field is absent.
func (d *Device) UnmarshalJSON(data []byte) error {
	type plain Device
	p := plain{NUMANode: -1}
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*d = Device(p)
	return nil
}

// Process is one live process holding memory on a fake GPU.
type Process struct {
	PID int
	// StartTime is the process's start time in clock ticks since boot, which
	// together with PID identifies it.
	StartTime uint64
	// UID is the uid recorded in the claim.
	UID     int
	UsedMiB int
}

type devicesDoc struct {
	Schema  int      `json:"schema"`
	Devices []Device `json:"devices"`
}

// Init creates the fake host in dir: n GPUs of totalMiB each, with no CPU
// affinity or NUMA node, and an empty claims directory per GPU. gpus.json is
// written once: if it already exists, Init returns an error that wraps
// fs.ErrExist and changes nothing.
func Init(dir string, n, totalMiB int) error {
	if n <= 0 || totalMiB <= 0 {
		return fmt.Errorf("init fake GPUs in %s: need n > 0 and totalMiB > 0, got %d and %d", dir, n, totalMiB)
	}
	devices := make([]Device, n)
	for i := range devices {
		devices[i] = Device{TotalMiB: totalMiB, NUMANode: -1}
	}
	return InitWith(dir, devices)
}

// InitWith creates the fake host in dir with the given devices, in index
// order. Index is set from the position; an empty UUID gets a random one
// ("GPU-fake-<index>-<hex>") and an empty Name DeviceName. TotalMiB must be
// positive, CPUs empty or a valid CPU list, NUMANode -1 or more. Like Init,
// it refuses (fs.ErrExist) a directory that already has gpus.json.
func InitWith(dir string, devices []Device) error {
	if len(devices) == 0 {
		return fmt.Errorf("init fake GPUs in %s: no devices", dir)
	}
	path := filepath.Join(dir, devicesFile)
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("init fake GPUs %s: %w", path, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("init fake GPUs %s: %w", path, err)
	}
	doc := devicesDoc{Schema: schema, Devices: make([]Device, len(devices))}
	for i, d := range devices {
		d.Index = i
		if d.UUID == "" {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return fmt.Errorf("init fake GPUs in %s: uuid: %w", dir, err)
			}
			d.UUID = fmt.Sprintf("GPU-fake-%d-%s", i, hex.EncodeToString(b[:]))
		}
		if d.Name == "" {
			d.Name = DeviceName
		}
		if err := d.validate(); err != nil {
			return fmt.Errorf("init fake GPUs in %s: %w", dir, err)
		}
		doc.Devices[i] = d
		if err := atomicfile.MkdirAll(filepath.Join(dir, claimsDir, strconv.Itoa(i)), 0o755); err != nil {
			return fmt.Errorf("init fake GPUs in %s: %w", dir, err)
		}
	}
	if err := atomicfile.WriteJSON(path, doc, 0o644); err != nil {
		return fmt.Errorf("init fake GPUs: %w", err)
	}
	return nil
}

// validate checks a device's figures.
func (d Device) validate() error {
	if d.TotalMiB <= 0 {
		return fmt.Errorf("GPU %d: need total_mib > 0, got %d", d.Index, d.TotalMiB)
	}
	if d.NUMANode < -1 {
		return fmt.Errorf("GPU %d: need numa_node -1 or more, got %d", d.Index, d.NUMANode)
	}
	if _, err := parseAffinity(d.CPUs); err != nil {
		return fmt.Errorf("GPU %d: %w", d.Index, err)
	}
	return nil
}

// Backend reads a fake host. It is immutable after Open.
type Backend struct {
	gpu.Views // Sample, Energy and Info: reads of b itself

	dir     string
	devices []Device
	// now reads the clock for the energy counters.
	now func() time.Time
}

// OpenOption adjusts a Backend at Open.
type OpenOption func(*Backend)

// WithClock makes the Backend read time from now instead of time.Now. The
// energy counters advance by this clock; tests pass one they move.
func WithClock(now func() time.Time) OpenOption {
	return func(b *Backend) { b.now = now }
}

// Open reads the devices of the fake host in dir.
func Open(dir string, opts ...OpenOption) (*Backend, error) {
	devices, err := readDevices(dir)
	if err != nil {
		return nil, fmt.Errorf("open fake GPUs: %w", err)
	}
	b := &Backend{dir: dir, devices: devices, now: time.Now}
	b.Views = gpu.Views{Reader: b}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// Name is "fake".
func (b *Backend) Name() string { return "fake" }

// Dir returns the directory of the fake host.
func (b *Backend) Dir() string { return b.dir }

// Count returns the number of GPUs.
func (b *Backend) Count() int { return len(b.devices) }

// Device returns GPU i, or ErrNoDevice.
func (b *Backend) Device(i int) (Device, error) {
	if i < 0 || i >= len(b.devices) {
		return Device{}, fmt.Errorf("fake GPU %d of %d: %w", i, len(b.devices), ErrNoDevice)
	}
	return b.devices[i], nil
}

// MemoryUsedMiB returns the memory held on GPU i by live processes.
func (b *Backend) MemoryUsedMiB(i int) (int, error) {
	procs, err := b.Processes(i)
	if err != nil {
		return 0, err
	}
	used := 0
	for _, p := range procs {
		used += p.UsedMiB
	}
	return used, nil
}

// Processes returns the live processes holding memory on GPU i, by pid.
// Claims of processes that are gone, zombies, or replaced by another process
// with the same pid are left out (and left on disk).
func (b *Backend) Processes(i int) ([]Process, error) {
	if _, err := b.Device(i); err != nil {
		return nil, err
	}
	claims, err := readClaims(filepath.Join(b.dir, claimsDir, strconv.Itoa(i)))
	if err != nil {
		return nil, fmt.Errorf("processes on fake GPU %d: %w", i, err)
	}
	var procs []Process
	for _, c := range claims {
		if !alive(c.PID, c.StartTime) {
			continue
		}
		procs = append(procs, Process{PID: c.PID, StartTime: c.StartTime, UID: c.UID, UsedMiB: c.MiB})
	}
	sort.Slice(procs, func(a, b int) bool { return procs[a].PID < procs[b].PID })
	return procs, nil
}

func readDevices(dir string) ([]Device, error) {
	path := filepath.Join(dir, devicesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var doc devicesDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	if doc.Schema != schema {
		return nil, fmt.Errorf("decode %s: schema %d, want %d", path, doc.Schema, schema)
	}
	for i, d := range doc.Devices {
		if d.Index != i {
			return nil, fmt.Errorf("decode %s: device at position %d has index %d", path, i, d.Index)
		}
		if err := d.validate(); err != nil {
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
	}
	return doc.Devices, nil
}

// readClaims decodes every claim file in dir. A missing directory holds no
// claims. Temporary files of an unfinished write are skipped.
func readClaims(dir string) ([]claimRecord, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read claims %s: %w", dir, err)
	}
	var claims []claimRecord
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
			continue
		}
		// A claim is named <pid>-<start time>.json: a claimant that is gone
		// is skipped without reading its file, which keeps a sample cheap
		// on a host with many old claims.
		if pid, start, ok := parseClaimName(name); ok && !alive(pid, start) {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // replaced between ReadDir and ReadFile
		}
		if err != nil {
			return nil, fmt.Errorf("read claim %s: %w", path, err)
		}
		var c claimRecord
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("decode claim %s: %w", path, err)
		}
		claims = append(claims, c)
	}
	return claims, nil
}

// parseClaimName reads the pid and start time from a claim's file name.
func parseClaimName(name string) (pid int, start uint64, ok bool) {
	p, st, found := strings.Cut(strings.TrimSuffix(name, ".json"), "-")
	if !found {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(st, 10, 64)
	return pid, start, err == nil
}
