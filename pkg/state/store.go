package state

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// DefaultTimeout is the lock timeout used when Options.Timeout is not positive.
const DefaultTimeout = time.Second

// Options configure Open. The zero value is usable.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero or negative means
	// DefaultTimeout: the store never waits forever.
	Timeout time.Duration
	// Strict verifies every invariant (see Check) inside every write
	// transaction before it commits; a violation rolls the transaction back
	// and is returned to the caller. Tests switch it on; it reads the whole
	// database on every write.
	Strict bool
	// Now returns the wall time recorded in records and events. Nil means
	// time.Now.
	Now func() time.Time
	// NoSync skips the fsync at every commit (bbolt's NoSync). It is for
	// building large fixtures in tests and benchmarks only, never for a
	// campaign: a crash or power loss can lose committed transactions or
	// leave a file that no longer opens.
	NoSync bool
}

// Store is the campaign's durable record. Its methods are safe for
// concurrent use: bbolt allows one writer and many readers at a time.
type Store struct {
	// These fields are set by open and never change.
	db     *bolt.DB
	path   string
	strict bool
	now    func() time.Time

	// fileMu serializes the attempt methods that commit and then queue
	// state.json, so that a file is never replaced by an older record.
	fileMu sync.Mutex
	// files writes the state.json files (nil for a read-only handle).
	files *fileWriter
	// file is the database's open file, bbolt's: Sync asks the kernel
	// through it for the file system's write-back errors.
	file *os.File

	// runs holds each run as last decoded, with the bytes it was decoded
	// from (Runs).
	runsMu sync.Mutex
	runs   map[string]decodedRun
}

// Open opens or creates the database at path for reading and writing,
// upgrading its schema if it is older than this package's.
func Open(path string, opts Options) (*Store, error) {
	s, err := open(path, opts, false)
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	return s, nil
}

// OpenReadOnly opens an existing database for queries. It takes a shared
// lock, so it times out (ErrLocked) while a read-write handle holds the file:
// query a running controller through its API instead. A timeout of zero or
// less means DefaultTimeout.
func OpenReadOnly(path string, timeout time.Duration) (*Store, error) {
	s, err := open(path, Options{Timeout: timeout}, true)
	if err != nil {
		return nil, fmt.Errorf("open state %s read-only: %w", path, err)
	}
	return s, nil
}

func open(path string, opts Options, readOnly bool) (_ *Store, err error) {
	if err := checkFile(path); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}

	// bbolt reads the file through a memory map; pages that are garbage in
	// a way checkFile cannot see may fault or panic inside bbolt. Turn both
	// into ErrCorrupt and release the lock. When bbolt.Open itself panicked
	// its memory map stays (it keeps the open file alive, so the lock is
	// dropped explicitly before closing).
	var file *os.File
	var db *bolt.DB
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			} else if file != nil {
				_ = unix.Flock(int(file.Fd()), unix.LOCK_UN)
				_ = file.Close()
			}
			err = fmt.Errorf("%w (reading it failed: %v)", ErrCorrupt, r)
		}
	}()

	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:  timeout,
		ReadOnly: readOnly,
		NoSync:   opts.NoSync && !readOnly,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w (waited %s)", ErrLocked, timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	case err != nil:
		return nil, err
	}
	if err := verifyFile(db, path); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{db: db, path: path, strict: opts.Strict, now: now, file: file}
	if readOnly {
		err = db.View(func(tx *bolt.Tx) error { return checkSchema(tx, true) })
	} else {
		err = db.Update(func(tx *bolt.Tx) error {
			if err := upgrade(tx, upgrades); err != nil {
				return err
			}
			return checkSchema(tx, false)
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if !readOnly {
		s.files = newFileWriter(s.writeStateFile, StateFileWindow)
	}
	return s, nil
}

// Close writes the state.json files still queued, then releases the
// database file and its lock. A state.json that could not be written is
// returned matching ErrStateFile, after the database is closed.
func (s *Store) Close() error {
	var files error
	if s.files != nil {
		files = s.files.close()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close state %s: %w", s.path, err)
	}
	return files
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// checkFile verifies, before bbolt maps the file, that an existing file is
// not empty, has a valid bbolt meta page and is at least as long as that
// page says. bbolt does not check the length, and reading a page past the
// end of a memory-mapped file kills the process; bbolt would initialise an
// empty file as a new database, losing what it was.
func checkFile(path string) error {
	f, size, err := openSized(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // Open creates it; OpenReadOnly reports it.
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if size == 0 {
		// Open makes a new database only where no file is: an empty one is
		// what a crash can leave of a campaign's database, never a new one.
		return fmt.Errorf("%w: the file is empty (0 bytes)", ErrCorrupt)
	}
	_, err = fileMeta(f, size)
	return err
}

// openSized opens the file at path for reading and returns its size.
func openSized(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// fileMeta returns the meta page bbolt uses (the valid one with the higher
// transaction id) of a file of size bytes.
func fileMeta(f *os.File, size int64) (meta, error) {
	// Meta page 0 is at offset 0; meta page 1 one page further. When page 0
	// is unreadable the page size is unknown: try the sizes bbolt tries.
	m0, ok0 := readMeta(f, 0)
	var m1 meta
	ok1 := false
	if ok0 {
		m1, ok1 = readMeta(f, int64(m0.pageSize))
	} else {
		for i := 0; i <= 14 && !ok1; i++ {
			m1, ok1 = readMeta(f, 1024<<i)
		}
	}
	var m meta
	switch {
	case ok0 && ok1 && m1.txid > m0.txid, !ok0 && ok1:
		m = m1
	case ok0:
		m = m0
	default:
		return meta{}, fmt.Errorf("%w: both meta pages are invalid", ErrCorrupt)
	}
	if need := int64(m.pgid) * int64(m.pageSize); size < need {
		return meta{}, fmt.Errorf("%w: truncated: the file has %d bytes, its meta page needs %d", ErrCorrupt, size, need)
	}
	return m, nil
}

// verifyFile checks every page of the open database db while its lock is
// held (no writer can change a page meanwhile): first by reading the file
// (verifyPages), then with bbolt's own Check, which reads through the
// memory map and so runs only on pages the first found sound.
func verifyFile(db *bolt.DB, path string) error {
	f, size, err := openSized(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := fileMeta(f, size)
	if err != nil {
		return err
	}
	if err := verifyPages(f, m); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() { // drained: Check's goroutine ends
			if first == nil {
				first = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
		}
		return first
	})
}

// meta holds the fields of a bbolt meta page that checkFile needs.
type meta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64 // the free list's page (noFreelist: none written)
	pgid     uint64 // high-water mark: pages in use
	txid     uint64
}

// readMeta reads and validates the bbolt meta page at off: a 16-byte page
// header, then magic, version, page size, flags (uint32 each), root bucket
// (16 bytes), freelist, pgid, txid and the FNV-64a checksum of everything
// before it (uint64 each), in the machine's byte order.
func readMeta(f *os.File, off int64) (meta, bool) {
	const (
		hdr     = 16
		sumOff  = hdr + 56
		magic   = 0xED0CDAED
		version = 2
	)
	var buf [sumOff + 8]byte
	if _, err := f.ReadAt(buf[:], off); err != nil && !errors.Is(err, io.EOF) {
		return meta{}, false
	}
	le := binary.NativeEndian
	b := buf[hdr:]
	h := fnv.New64a()
	h.Write(buf[hdr:sumOff])
	m := meta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), freelist: le.Uint64(b[32:]),
		pgid: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
	ok := le.Uint32(b[0:]) == magic && le.Uint32(b[4:]) == version &&
		le.Uint64(buf[sumOff:]) == h.Sum64() && m.pageSize >= 512
	return m, ok
}

// Bucket names.
var (
	bucketMeta       = []byte("meta")
	bucketCampaign   = []byte("campaign")
	bucketRuns       = []byte("runs")
	bucketAttempts   = []byte("attempts")
	bucketEvents     = []byte("events")
	bucketLedger     = []byte("ledger")
	bucketGates      = []byte("gates")
	bucketAmendments = []byte("amendments")
	bucketLive       = []byte("live")

	keySchemaVersion = []byte("schema_version")
	keyCampaign      = []byte("campaign")
	keyCounters      = []byte("counters")
)

// bucketsV1 are the buckets of schema version 1; the upgrade from 0 creates
// them and nothing else, whatever later versions add.
var bucketsV1 = [][]byte{bucketMeta, bucketCampaign, bucketRuns, bucketAttempts,
	bucketEvents, bucketLedger, bucketGates, bucketAmendments}

// allBuckets lists the buckets of the current schema.
var allBuckets = append(slices.Clip(bucketsV1), bucketLive)

// SchemaVersion is the schema this package writes.
const SchemaVersion = 2

// upgradeFunc upgrades the schema from version N to N+1 inside tx.
type upgradeFunc func(tx *bolt.Tx) error

// upgrades[N] upgrades version N to N+1; len(upgrades) == SchemaVersion.
var upgrades = []upgradeFunc{
	// 0 -> 1: version 0 is a file without buckets (a new file). Create them.
	func(tx *bolt.Tx) error {
		for _, name := range bucketsV1 {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	},
	// 1 -> 2: the counters record and the live index, computed from the
	// runs and attempts.
	upgradeCounters,
}

// schemaVersion returns the recorded version, 0 when there is none.
func schemaVersion(tx *bolt.Tx) (int, error) {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return 0, nil
	}
	raw := b.Get(keySchemaVersion)
	if raw == nil {
		return 0, nil
	}
	var v int
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("%w: schema_version %q: %w", ErrCorrupt, raw, err)
	}
	if v < 0 {
		// no program writes it: read-only and read-write opens both call
		// it corrupt, rather than one of them suggesting an upgrade
		return 0, fmt.Errorf("%w: schema_version %d is negative", ErrCorrupt, v)
	}
	return v, nil
}

// upgrade runs steps[v:] in tx, v being the recorded version, and records
// the new version. The caller's transaction makes it all or nothing.
func upgrade(tx *bolt.Tx, steps []upgradeFunc) error {
	v, err := schemaVersion(tx)
	if err != nil {
		return err
	}
	if v > len(steps) {
		return fmt.Errorf("%w: version %d, this program knows %d", ErrSchemaTooNew, v, len(steps))
	}
	if v == len(steps) {
		return nil
	}
	for ; v < len(steps); v++ {
		if err := steps[v](tx); err != nil {
			return fmt.Errorf("upgrade schema from version %d to %d: %w", v, v+1, err)
		}
	}
	b, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	return b.Put(keySchemaVersion, []byte(fmt.Sprint(v)))
}

// checkSchema is the quick check run at every open: the version is current,
// every bucket exists and the campaign record decodes.
func checkSchema(tx *bolt.Tx, readOnly bool) error {
	v, err := schemaVersion(tx)
	if err != nil {
		return err
	}
	switch {
	case v > SchemaVersion:
		return fmt.Errorf("%w: version %d, this program knows %d", ErrSchemaTooNew, v, SchemaVersion)
	case v < SchemaVersion && readOnly:
		return fmt.Errorf("%w: version %d, this program writes %d", ErrSchemaTooOld, v, SchemaVersion)
	case v < SchemaVersion:
		return fmt.Errorf("%w: schema version %d after upgrade", ErrCorrupt, v)
	}
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: bucket %q is missing", ErrCorrupt, name)
		}
	}
	if raw := tx.Bucket(bucketCampaign).Get(keyCampaign); raw != nil {
		var c Campaign
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("%w: campaign record: %w", ErrCorrupt, err)
		}
	}
	return nil
}

// update runs fn in one write transaction, verifying the invariants before
// commit in strict mode. op names the operation in errors; an error of the
// commit itself (a write or fsync the file system refused) names the
// database file too.
func (s *Store) update(op string, fn func(tx *bolt.Tx) error) error {
	committing := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if s.strict {
			if err := check(tx); err != nil {
				return err
			}
		}
		committing = true
		return nil
	})
	switch {
	case err == nil:
		return nil
	case committing:
		return fmt.Errorf("%s: commit to %s: %w", op, s.path, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// view runs fn in one read transaction. op names the operation in errors.
func (s *Store) view(op string, fn func(tx *bolt.Tx) error) error {
	if err := s.db.View(fn); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// stamp returns the current wall time, in UTC and without a monotonic
// reading, so that it compares equal after a round trip through JSON.
func (s *Store) stamp() time.Time { return s.now().UTC().Round(0) }

// monotonic returns CLOCK_MONOTONIC in nanoseconds.
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// seqKey encodes a sequence number as a big-endian key, so keys sort by number.
func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// attemptKey is run id, NUL, attempt number zero-padded to 6 digits.
func attemptKey(runID string, n int) []byte {
	return fmt.Appendf(nil, "%s\x00%06d", runID, n)
}

// attemptPrefix is the common prefix of a run's attempt keys.
func attemptPrefix(runID string) []byte { return append([]byte(runID), 0) }

// nextSeq returns 1 + the largest key of a sequence-keyed bucket.
func nextSeq(b *bolt.Bucket) uint64 {
	k, _ := b.Cursor().Last()
	if len(k) != 8 {
		return 1
	}
	return binary.BigEndian.Uint64(k) + 1
}

// put stores v as JSON under key.
func put(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// get decodes the JSON under key into v; ErrNotFound when there is none.
func get(b *bolt.Bucket, key []byte, v any) error {
	raw := b.Get(key)
	if raw == nil {
		return ErrNotFound
	}
	return decode(key, raw, v)
}

// eachRecord decodes the records of bucket b in key order and calls fn
// with each and its key. A record that does not decode, or an error from
// fn, ends the walk and is returned.
func eachRecord[T any](b *bolt.Bucket, fn func(key []byte, v T) error) error {
	return b.ForEach(func(key, raw []byte) error {
		var v T
		if err := decode(key, raw, &v); err != nil {
			return err
		}
		return fn(key, v)
	})
}

// records returns the records of bucket b in key order, keeping those
// keep accepts (nil keeps all). On an error it returns what it read
// before it.
func records[T any](b *bolt.Bucket, keep func(T) bool) ([]T, error) {
	var out []T
	err := eachRecord(b, func(_ []byte, v T) error {
		if keep == nil || keep(v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// seekRecords returns the records of bucket b from key from on, in key
// order, while in accepts their keys (nil: to the end), at most limit of
// them (<= 0: no limit).
func seekRecords[T any](b *bolt.Bucket, from []byte, in func(key []byte) bool, limit int) ([]T, error) {
	var out []T
	c := b.Cursor()
	for k, raw := c.Seek(from); k != nil && (in == nil || in(k)); k, raw = c.Next() {
		if limit > 0 && len(out) == limit {
			break
		}
		var v T
		if err := decode(k, raw, &v); err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// viewRecords is records of one bucket in a read transaction; op names
// the read in its error.
func viewRecords[T any](s *Store, op string, bucket []byte, keep func(T) bool) ([]T, error) {
	var out []T
	err := s.view(op, func(tx *bolt.Tx) (err error) {
		out, err = records(tx.Bucket(bucket), keep)
		return err
	})
	return out, err
}

// decode decodes the JSON value raw stored under key into v.
func decode(key, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode record %q: %w", key, err)
	}
	return nil
}
