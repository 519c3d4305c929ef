package gates

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"warden/pkg/safefile"
)

// maxDetailItems bounds how many findings a privacy verdict names.
const maxDetailItems = 20

// chunkSize is the read size of the streaming search.
const chunkSize = 1 << 20

// maxKeySpace is how much white space the byte search for a field allows
// between the quoted key and its colon.
const maxKeySpace = 64

// PrivacyScan checks that a directory holds no private data (the seed's
// artifact contract and stop condition 8). It walks every regular file
// under dir and fails when
//
//   - a JSON or JSON-lines file has an object key equal to one of
//     forbiddenFields ("prompt", "messages", "content", "generated_text",
//     ...) at any depth. Files are parsed: the whole file as one JSON
//     value, else line by line; lines that do not parse (a log's text, a
//     torn last line) and files that are not JSON at all are searched for
//     the bytes "<field>" followed by optional white space and a colon;
//   - any file holds a run of at least private.MinLen() bytes of any
//     private value, from anywhere in the value (PrivateIndex: every such
//     run is found). Each file is searched twice: as its raw bytes, and as
//     its JSON-decoded view (unescaper: \n, \", \uXXXX... decoded, as Go
//     and Python write strings), so an escaped value is found too. A nil
//     or empty index looks for no private text.
//
// Gzip files (by their magic bytes, such as traces/*.json.gz) are searched
// decompressed; a gzip stream cut short is searched as far as it goes and
// counted in files_gzip_truncated. Other compressions are searched as
// bytes only.
//
// Bounded work: a file (decompressed) larger than maxParseBytes is not
// parsed; it is searched as a stream in 1 MiB chunks, for the private text
// and for the "<field>": bytes, and counted in files_streamed. At most
// maxParseBytes of one file is held in memory, with its parsed JSON (a few
// times that); maxParseBytes <= 0 streams every file. Successive chunks
// share their last bytes (at least MinLen), so a run that straddles two
// chunks lies wholly in one of them and is found.
//
// Symbolic links are not followed; they are counted and named in the
// detail, and they do not fail the scan by themselves. Other files that are
// not regular (sockets, FIFOs, devices) are counted and never opened. skip,
// when not nil, receives each path relative to dir (slash-separated); true
// leaves out that file, or that whole directory. A file listed but gone
// when it is opened (a record the controller rewrites beside the scan:
// its temporary file renamed into place) is no longer in the directory:
// it is counted as vanished, not unreadable.
//
// Verdicts: fail when anything private is found, naming the file, and the
// field with its JSON path, or the private value's SHA-256 prefix (never
// the text: it is private) and the view it was found in, at most 20
// findings; error when nothing was found but a file or directory could
// not be read (the directory is not proven clean); pass otherwise.
//
// Figures: files_scanned, bytes_scanned (decompressed bytes examined),
// files_parsed (files with at least one parsed JSON value), files_streamed,
// files_gzip, files_gzip_truncated, files_skipped, files_unreadable,
// files_vanished, symlinks, irregular, private_values (indexed),
// private_values_short (shorter than the leak length: no leak of that
// length can come from them), private_bytes, min_leak_bytes, findings.
//
// A fail is stop condition 8: the caller fails the run (privacy-violation),
// stops the campaign, and must not package or copy the directory. An error
// is treated as a fail for packaging and stops for review.
func PrivacyScan(dir string, forbiddenFields []string, private *PrivateIndex, skip func(relPath string) bool, maxParseBytes int64, now time.Time) Verdict {
	return PrivacyScanCached(dir, forbiddenFields, private, skip, maxParseBytes, nil, now)
}

// PrivacyScanCached is PrivacyScan that leaves out the files cache says
// were found clean unchanged (same path, inode, size and modification
// time) by an earlier scan with the same index and fields (the cache's
// keys hold both), and records in cache the files this scan finds clean.
// Of a file that changed since its last clean scan with the same fields,
// the lines that scan examined are not parsed or searched for forbidden
// fields again (each line's findings depend on its bytes alone; a line is
// told by a 64-bit hash with a random seed); private text is still
// searched in the whole file, across lines. A file held in memory that is
// the same file as at its last clean scan is compared with that scan in
// blocks, and only the bytes within reach of a changed block are examined
// (privacyblocks.go). Figures: files_unchanged counts the files left out,
// files_partial the files scanned by their changed blocks, bytes_unchanged
// the bytes those left out. Meant for a campaign's own files, scanned
// after every attempt, most of which (provenance copies) never change.
// cache nil is PrivacyScan.
func PrivacyScanCached(dir string, forbiddenFields []string, private *PrivateIndex, skip func(relPath string) bool, maxParseBytes int64, cache *ScanCache, now time.Time) Verdict {
	v := Verdict{Gate: "privacy", Verdict: Pass, At: now}
	s := newPrivacyScan(forbiddenFields, private, maxParseBytes)
	s.cache = cache
	v.Figures = s.fig
	if fi, err := os.Lstat(dir); err != nil {
		v.Verdict, v.Detail = Error, fmt.Sprintf("privacy scan of %s: %v", dir, err)
		return v
	} else if !fi.IsDir() {
		v.Verdict, v.Detail = Error, fmt.Sprintf("privacy scan of %s: not a directory", dir)
		return v
	}
	s.walkDir(dir, skip)
	return s.verdict(v)
}

// walkDir scans every file under dir that skip leaves in.
func (s *privacyScan) walkDir(dir string, skip func(string) bool) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		rel, rerr := filepath.Rel(dir, path)
		if rerr != nil {
			rel = path
		}
		rel = filepath.ToSlash(rel)
		if err != nil {
			s.unreadable(rel, err)
			return nil // WalkDir skips an unreadable directory itself
		}
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			s.fig["files_skipped"]++
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			s.fig["symlinks"]++
			s.symlinks = append(s.symlinks, rel)
			return nil
		case !t.IsRegular():
			s.fig["irregular"]++
			s.irregular = append(s.irregular, rel)
			return nil
		}
		if err := s.file(path, rel); errors.Is(err, fs.ErrNotExist) {
			s.fig["files_vanished"]++
		} else if err != nil {
			s.unreadable(rel, err)
		}
		return nil
	})
}

// verdict completes v from what the scan found.
func (s *privacyScan) verdict(v Verdict) Verdict {
	s.fig["findings"] = float64(len(s.findings))
	var parts []string
	if len(s.findings) > 0 {
		v.Verdict = Fail
		parts = append(parts, "private data in the attempt directory: "+listSome(s.findings))
	} else if len(s.errs) > 0 {
		v.Verdict = Error
	}
	if len(s.errs) > 0 {
		parts = append(parts, "could not scan: "+listSome(s.errs))
	}
	if len(s.symlinks) > 0 {
		parts = append(parts, "symbolic links not followed: "+listSome(s.symlinks))
	}
	if len(s.irregular) > 0 {
		parts = append(parts, "files that are not regular, not read: "+listSome(s.irregular))
	}
	v.Detail = strings.Join(parts, "; ")
	return v
}

func newPrivacyScan(forbiddenFields []string, private *PrivateIndex, maxParseBytes int64) *privacyScan {
	s := &privacyScan{
		idx:      private,
		fields:   map[string]bool{},
		maxParse: maxParseBytes,
		chunk:    chunkSize,
		fig:      map[string]float64{},
	}
	for _, f := range forbiddenFields {
		if f != "" && !s.fields[f] {
			s.fields[f] = true
			s.fieldPats = append(s.fieldPats, []byte(strconv.Quote(f)))
		}
	}
	sort.Slice(s.fieldPats, func(i, j int) bool { return bytes.Compare(s.fieldPats[i], s.fieldPats[j]) < 0 })
	s.ident = scanIdent{fields: string(bytes.Join(s.fieldPats, []byte{0})), private: private}
	for _, p := range s.fieldPats {
		s.overlap = max(s.overlap, len(p)+maxKeySpace+1)
	}
	for _, k := range []string{"files_scanned", "bytes_scanned", "files_parsed", "files_streamed", "files_gzip",
		"files_gzip_truncated", "files_skipped", "files_unreadable", "files_vanished", "files_unchanged", "files_partial", "bytes_unchanged",
		"symlinks", "irregular", "findings",
		"private_values", "private_values_short", "private_bytes", "min_leak_bytes"} {
		s.fig[k] = 0
	}
	if !private.empty() {
		s.overlap = max(s.overlap, private.MinLen())
		s.fig["private_values"] = float64(private.Values())
		s.fig["private_values_short"] = float64(private.Short())
		s.fig["private_bytes"] = float64(private.Bytes())
		s.fig["min_leak_bytes"] = float64(private.MinLen())
	} else if private != nil {
		s.fig["private_values_short"] = float64(private.Short())
		s.fig["min_leak_bytes"] = float64(private.MinLen())
	}
	return s
}

// privacyScan is the state of one PrivacyScan; it is used by one goroutine.
type privacyScan struct {
	idx       *PrivateIndex
	fields    map[string]bool
	fieldPats [][]byte // `"field"`, sorted
	maxParse  int64
	chunk     int // read size of the streaming search
	overlap   int // bytes kept between chunks so no match straddles unseen
	fig       map[string]float64

	findings  []string
	errs      []string
	symlinks  []string
	irregular []string

	seen map[string]bool // findings of the current file, to report each once

	cache *ScanCache // nil: every file is scanned
	ident scanIdent  // what this scan looks for: part of the cache's keys
	seed  maphash.Seed
	// known are the lines of the current file an earlier clean scan
	// examined (ScanCache.lines); lines collects this scan's
	known, lines map[uint64]bool
	// cur and curIno name the current file's blocks; blocksNext are
	// those a clean scan of it leaves (nil: none, it is scanned whole next
	// time)
	cur        blocksKey
	curIno     uint64
	blocksNext *fileBlocks
}

// ScanCache remembers files a privacy scan found clean; see
// PrivacyScanCached. It is safe for concurrent use.
type ScanCache struct {
	mu    sync.Mutex // guards the maps below (clean, lines, blocks, bufs) and seed
	clean map[fileKey]bool
	// lines holds, by path, the hashes of the lines of the file's last
	// clean scan (true: the line is a JSON value), so a file that changed
	// has only its changed lines examined again (memory).
	lines map[linesKey]map[uint64]bool
	// blocks holds, by path and scan, the block hashes of the file's last
	// clean scan (privacyblocks.go)
	blocks map[blocksKey]*fileBlocks
	// bufs holds, by path, the buffer the file was last read into
	bufs map[string][]byte
	// linesOnly leaves blocks uncompared: each changed file is read whole,
	// its lines through lines (the scan before blocks, for benchmarks)
	linesOnly bool
	seed      maphash.Seed
}

// linesOf returns the lines of path's last clean scan (nil: none) and the
// seed they were hashed with.
func (c *ScanCache) linesOf(k linesKey) (map[uint64]bool, maphash.Seed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines == nil {
		c.lines, c.seed = map[linesKey]map[uint64]bool{}, maphash.MakeSeed()
	}
	return c.lines[k], c.seed
}

func (c *ScanCache) setLines(k linesKey, lines map[uint64]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines[k] = lines
}

type fileKey struct {
	path       string
	ino, size  uint64
	mtimeNanos int64
	scan       scanIdent
}

// scanIdent is what a scan looks for: the forbidden fields (sorted, as
// their patterns) and the private index. A file found clean is clean for
// that alone: after an amendment forbids another field, or with another
// index, it is scanned again.
type scanIdent struct {
	fields  string
	private *PrivateIndex
}

// linesKey names the lines of a file's last clean scan: which lines were
// examined for forbidden fields depends on the fields (private text is
// searched in the whole file every time).
type linesKey struct {
	path, fields string
}

func (c *ScanCache) has(k fileKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clean[k]
}

func (c *ScanCache) add(k fileKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clean == nil {
		c.clean = map[fileKey]bool{}
	}
	c.clean[k] = true
}

func (s *privacyScan) keyOf(path string, fi fs.FileInfo) fileKey {
	k := fileKey{path: path, size: uint64(fi.Size()), mtimeNanos: fi.ModTime().UnixNano(), scan: s.ident}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.ino = st.Ino
	}
	return k
}

func (s *privacyScan) unreadable(rel string, err error) {
	s.fig["files_unreadable"]++
	s.errs = append(s.errs, fmt.Sprintf("%s: %v", rel, err))
}

func (s *privacyScan) report(rel, what string) {
	if s.seen[what] {
		return
	}
	s.seen[what] = true
	s.findings = append(s.findings, rel+": "+what)
}

// private reports every private value found in buf, in the named view.
func (s *privacyScan) private(buf []byte, rel, view string) {
	s.idx.Scan(buf, func(value int) {
		key := "value " + strconv.Itoa(value)
		if s.seen[key] {
			return // each value once per file, in the view found first
		}
		s.seen[key] = true
		s.report(rel, fmt.Sprintf("private text (%d+ bytes of private value %s, %s)", s.idx.MinLen(), s.idx.ID(value), view))
	})
}

// Views of a file's content the private text is searched in.
const (
	viewRaw     = "raw bytes"
	viewDecoded = "JSON-decoded"
)

// privateBoth searches buf raw and, when it holds a backslash, decoded.
func (s *privacyScan) privateBoth(buf []byte, rel string) {
	if s.idx.empty() {
		return
	}
	s.private(buf, rel, viewRaw)
	if bytes.IndexByte(buf, '\\') >= 0 {
		var u unescaper
		s.private(u.decode(nil, buf, true), rel, viewDecoded)
	}
}

// file scans one regular file.
func (s *privacyScan) file(path, rel string) (err error) {
	s.seen = map[string]bool{}
	f, err := safefile.Open(path) // replaced since the walk saw it: refused, not waited on
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var key fileKey
	if s.cache != nil {
		key = s.keyOf(path, fi)
		if s.cache.has(key) {
			s.fig["files_unchanged"]++
			return nil
		}
		before, errsBefore := len(s.findings), len(s.errs)
		s.known, s.seed = s.cache.linesOf(linesKey{path, s.ident.fields})
		s.lines = map[uint64]bool{}
		s.cur, s.curIno, s.blocksNext = blocksKey{path, s.ident}, key.ino, nil
		defer func() {
			if len(s.findings) == before && len(s.errs) == errsBefore && err == nil {
				s.cache.add(key)
				s.cache.setLines(linesKey{path, s.ident.fields}, s.lines)
				s.cache.setBlocks(s.cur, s.blocksNext)
			} else {
				s.cache.setBlocks(s.cur, nil) // scanned whole next time
			}
			s.known, s.lines, s.blocksNext = nil, nil, nil
		}()
	}
	s.fig["files_scanned"]++
	if done, err := s.largeFile(f, rel, fi.Size()); done {
		return err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var r io.Reader = br
	size := fi.Size()
	gz := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		if zr, err := gzip.NewReader(br); err == nil {
			defer zr.Close()
			s.fig["files_gzip"]++
			r, gz, size = zr, true, -1
		} else {
			// Not a gzip stream after all: search it as bytes.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			br.Reset(f)
		}
	}
	err = s.content(r, rel, size)
	if gz && errors.Is(err, io.ErrUnexpectedEOF) {
		s.fig["files_gzip_truncated"]++
		return nil
	}
	return err
}

// largeFile scans a file of at least parallelMin bytes that is not a gzip
// stream and fits maxParse as content does, its first size bytes read in
// parts at once (readAtParallel), the rest, if it grew, after them. It
// reports whether it scanned the file; one it did not is left for the
// stream path as it was (its offset at 0).
func (s *privacyScan) largeFile(f *os.File, rel string, size int64) (bool, error) {
	if size < parallelMin || s.maxParse <= 0 || size > s.maxParse || partsOf(int(size)) == 1 {
		return false, nil
	}
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return false, nil // a gzip stream: decompressed on the way
	}
	data := s.fileBuf(size)[:size]
	whole, err := readAtParallel(f, data)
	if err == nil && whole {
		// what was appended since the size was taken comes after it
		_, err = f.Seek(size, io.SeekStart)
	}
	if err != nil || !whole { // !whole: cut meanwhile, read as it is now, from its start
		s.cache.putBuf(s.cur.path, data[:0])
		return err != nil, err
	}
	return true, s.inMemory(data, f, rel)
}

// content scans a file's (decompressed) content; size is -1 when unknown.
func (s *privacyScan) content(r io.Reader, rel string, size int64) error {
	if s.maxParse <= 0 || size > s.maxParse {
		s.fig["files_streamed"]++
		return s.stream(r, rel)
	}
	return s.inMemory(s.fileBuf(size), r, rel)
}

// fileBuf is an empty buffer for the current file's content of size bytes
// (-1: unknown) and a read's slack: sized to the file, not grown from 512
// bytes by doubling (most of reading a large file was allocating and
// zeroing), and the one its last scan read into where the cache kept it.
func (s *privacyScan) fileBuf(size int64) []byte {
	want := int(max(size, 0)) + bytes.MinRead
	b := s.cache.takeBuf(s.cur.path)
	if cap(b) < want {
		b = make([]byte, 0, want)
	}
	return b[:0]
}

// inMemory reads what r holds after data, up to maxParse+1 bytes in all,
// and scans the whole in memory, or as a stream when it is larger than
// maxParse; the buffer goes back to the cache for the file's next scan.
func (s *privacyScan) inMemory(data []byte, r io.Reader, rel string) error {
	buf := bytes.NewBuffer(data)
	_, err := buf.ReadFrom(io.LimitReader(r, s.maxParse+1-int64(len(data))))
	data = buf.Bytes()
	defer func() { s.cache.putBuf(s.cur.path, data[:0]) }()
	if int64(len(data)) > s.maxParse {
		// Grew past the limit, or a gzip stream larger than it.
		s.fig["files_streamed"]++
		return s.stream(io.MultiReader(bytes.NewReader(data), r), rel)
	}
	// A torn gzip stream still has a prefix worth searching; the caller
	// counts it.
	s.memory(data, rel)
	return err
}

// memory scans a file held in memory: substrings in the raw bytes, then
// JSON keys and strings where the content parses, and the field bytes
// where it does not.
func (s *privacyScan) memory(data []byte, rel string) {
	if s.cache != nil && !s.cache.linesOnly && s.memoryChanged(data, rel, s.cache.blocksOf(s.cur), s.curIno) {
		return
	}
	s.fig["bytes_scanned"] += float64(len(data))
	s.privateBoth(data, rel)
	var whole any
	if json.Unmarshal(data, &whole) == nil {
		s.fig["files_parsed"]++
		s.walk(whole, rel, "$")
		return
	}
	parsed := false
	n := 0
	for line := range bytes.Lines(data) {
		n++
		if t := bytes.TrimSpace(line); len(t) > 0 {
			parsed = s.lineOnce(t, rel, n, s.lines) || parsed
		}
	}
	if parsed {
		s.fig["files_parsed"]++
	}
}

// lineOnce scans the line t (trimmed, line n) unless an earlier clean scan
// of this file examined it (known: what is found in a line depends on its
// bytes alone), notes it in into (nil: nowhere), and reports whether it is
// a JSON value.
func (s *privacyScan) lineOnce(t []byte, rel string, n int, into map[uint64]bool) bool {
	if s.known == nil && into == nil {
		return s.line(t, rel, n)
	}
	h := maphash.Bytes(s.seed, t)
	js, ok := s.known[h]
	if !ok {
		js = s.line(t, rel, n)
	}
	if into != nil {
		into[h] = js
	}
	return js
}

// line scans one line of a file that is not one JSON value: its keys
// where it parses as JSON (and says so), its field bytes where not.
func (s *privacyScan) line(t []byte, rel string, n int) bool {
	if t[0] == '{' || t[0] == '[' {
		var v any
		if json.Unmarshal(t, &v) == nil {
			s.walk(v, rel, "line "+strconv.Itoa(n)+" $")
			return true
		}
	}
	s.fieldBytes(t, len(t), rel, "line "+strconv.Itoa(n))
	return false
}

// walk reports forbidden keys at any depth. (Private text in keys and
// strings is found in the file's JSON-decoded view.)
func (s *privacyScan) walk(v any, rel, at string) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := at + "." + k
			if s.fields[k] {
				s.report(rel, fmt.Sprintf("forbidden field %q at %s", k, p))
			}
			s.walk(x[k], rel, p)
		}
	case []any:
		for i, e := range x {
			s.walk(e, rel, at+"["+strconv.Itoa(i)+"]")
		}
	}
}

// fieldBytes looks for `"field"` followed by white space and a colon,
// starting below limit in buf.
func (s *privacyScan) fieldBytes(buf []byte, limit int, rel, where string) {
	for _, pat := range s.fieldPats {
		for off := 0; off < limit; {
			i := bytes.Index(buf[off:], pat)
			if i < 0 || off+i >= limit {
				break
			}
			j := off + i + len(pat)
			for k := 0; k < maxKeySpace && j < len(buf) && isJSONSpace(buf[j]); k++ {
				j++
			}
			if j < len(buf) && buf[j] == ':' {
				what := fmt.Sprintf("forbidden field %s", pat)
				if where != "" {
					what += " (" + where + ", bytes)"
				} else {
					what += " (bytes)"
				}
				s.report(rel, what)
				break
			}
			off += i + 1
		}
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// stream searches a file too large to parse, chunk by chunk, keeping
// overlap bytes so that a match across two chunks is seen. The JSON-decoded
// view is decoded as the chunks come and searched the same way, in a
// buffer of its own. A read error ends the search after what was read is
// searched, and is returned.
func (s *privacyScan) stream(r io.Reader, rel string) error {
	buf := make([]byte, 0, s.chunk+s.overlap)
	var dec []byte // the decoded view not yet searched, and its overlap
	var u unescaper
	keepDec := 0
	if !s.idx.empty() {
		keepDec = s.idx.MinLen()
	}
	for {
		var rerr error
		before := len(buf)
		for len(buf) < cap(buf) && rerr == nil {
			var n int
			n, rerr = r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			s.fig["bytes_scanned"] += float64(n)
		}
		final := rerr != nil
		limit := len(buf)
		if !final {
			limit = len(buf) - s.overlap
		}
		if !s.idx.empty() {
			s.private(buf, rel, viewRaw)
			if n := len(dec); len(u.pend) == 0 && bytes.IndexByte(buf[before:], '\\') < 0 {
				// Decoded, the new bytes are themselves, searched raw
				// just now: only runs that begin in the kept bytes are
				// left to search.
				dec = append(dec, buf[before:]...)
				s.private(dec[:n+min(len(dec)-n, keepDec)], rel, viewDecoded)
			} else {
				dec = u.decode(dec, buf[before:], final)
				s.private(dec, rel, viewDecoded)
			}
			if len(dec) > keepDec {
				dec = append(dec[:0], dec[len(dec)-keepDec:]...)
			}
		}
		s.fieldBytes(buf, limit, rel, "")
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		copy(buf, buf[limit:])
		buf = buf[:len(buf)-limit]
	}
}

// listSome joins at most maxDetailItems items and says how many more.
func listSome(items []string) string {
	if len(items) <= maxDetailItems {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:maxDetailItems], ", ") + fmt.Sprintf(", and %d more", len(items)-maxDetailItems)
}
