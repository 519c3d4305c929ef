package gates

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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

// PrivacyScan checks that an attempt directory holds no private data (the
// seed's artifact contract and stop condition 8). It walks every regular
// file under dir and fails when
//
//   - a JSON or JSON-lines file has an object key equal to one of
//     forbiddenFields ("prompt", "messages", "content", "generated_text",
//     ...) at any depth. Files are parsed: the whole file as one JSON
//     value, else line by line; lines that do not parse (a log's text, a
//     torn last line) and files that are not JSON at all are searched for
//     the bytes "<field>" followed by optional white space and a colon;
//   - any file contains any of privateSubstrings: searched in the raw
//     bytes, in their JSON-escaped forms (as Go and Python write strings),
//     and in the decoded keys and strings of parsed JSON. Substrings
//     shorter than MinSubstringLen are not used (see there: false
//     positives).
//
// Gzip files (by their magic bytes, such as traces/*.json.gz) are searched
// decompressed; a gzip stream cut short is searched as far as it goes and
// counted in files_gzip_truncated. Other compressions are searched as
// bytes only.
//
// Bounded work: a file (decompressed) larger than maxParseBytes is not
// parsed; it is searched as a stream in 1 MiB chunks, for the substrings
// and for the "<field>": bytes, and counted in files_streamed. At most
// maxParseBytes of one file is held in memory, with its parsed JSON (a few
// times that); maxParseBytes <= 0 streams every file.
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
// field with its JSON path, or the substring's SHA-256 prefix (never the
// substring: it is private), at most 20 findings; error when nothing was
// found but a file or directory could not be read (the directory is not
// proven clean); pass otherwise.
//
// Figures: files_scanned, bytes_scanned (decompressed bytes examined),
// files_parsed (files with at least one parsed JSON value), files_streamed,
// files_gzip, files_gzip_truncated, files_skipped, files_unreadable,
// files_vanished, symlinks, irregular, substrings (used), substrings_short (dropped),
// findings.
//
// A fail is stop condition 8: the caller fails the run (privacy-violation),
// stops the campaign, and must not package or copy the directory. An error
// is treated as a fail for packaging and stops for review.
func PrivacyScan(dir string, forbiddenFields []string, privateSubstrings [][]byte, skip func(relPath string) bool, maxParseBytes int64, now time.Time) Verdict {
	v := Verdict{Gate: "privacy", Verdict: Pass, At: now}
	s := newPrivacyScan(forbiddenFields, privateSubstrings, maxParseBytes)
	v.Figures = s.fig
	if fi, err := os.Lstat(dir); err != nil {
		v.Verdict, v.Detail = Error, fmt.Sprintf("privacy scan of %s: %v", dir, err)
		return v
	} else if !fi.IsDir() {
		v.Verdict, v.Detail = Error, fmt.Sprintf("privacy scan of %s: not a directory", dir)
		return v
	}
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

func newPrivacyScan(forbiddenFields []string, privateSubstrings [][]byte, maxParseBytes int64) *privacyScan {
	m, used, short := newMatcher(privateSubstrings)
	s := &privacyScan{
		m:        m,
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
	s.overlap = max(m.maxLen, keyLen)
	for _, p := range s.fieldPats {
		s.overlap = max(s.overlap, len(p)+maxKeySpace+1)
	}
	for _, k := range []string{"files_scanned", "bytes_scanned", "files_parsed", "files_streamed", "files_gzip",
		"files_gzip_truncated", "files_skipped", "files_unreadable", "files_vanished", "symlinks", "irregular", "findings"} {
		s.fig[k] = 0
	}
	s.fig["substrings"] = float64(used)
	s.fig["substrings_short"] = float64(short)
	return s
}

// privacyScan is the state of one PrivacyScan; it is used by one goroutine.
type privacyScan struct {
	m         *matcher
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

func (s *privacyScan) substringFound(rel string, pat int) {
	id := s.m.id[pat]
	if s.seen[id] {
		return // each substring once per file, in the form found first
	}
	s.seen[id] = true
	what := "private substring " + id
	if f := s.m.form[pat]; f != "" {
		what += " (" + f + ")"
	}
	s.report(rel, what)
}

// file scans one regular file.
func (s *privacyScan) file(path, rel string) error {
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
	s.fig["files_scanned"]++
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

// content scans a file's (decompressed) content; size is -1 when unknown.
func (s *privacyScan) content(r io.Reader, rel string, size int64) error {
	if s.maxParse <= 0 || size > s.maxParse {
		s.fig["files_streamed"]++
		return s.stream(r, rel)
	}
	data, err := io.ReadAll(io.LimitReader(r, s.maxParse+1))
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
	s.fig["bytes_scanned"] += float64(len(data))
	s.m.scan(data, len(data), func(p int) { s.substringFound(rel, p) })
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
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			continue
		}
		if t[0] == '{' || t[0] == '[' {
			var v any
			if json.Unmarshal(t, &v) == nil {
				parsed = true
				s.walk(v, rel, "line "+strconv.Itoa(n)+" $")
				continue
			}
		}
		s.fieldBytes(t, len(t), rel, "line "+strconv.Itoa(n))
	}
	if parsed {
		s.fig["files_parsed"]++
	}
}

// walk reports forbidden keys at any depth, and private substrings in
// decoded keys and strings (which escapes may hide from the raw search).
func (s *privacyScan) walk(v any, rel, at string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := at + "." + k
			if s.fields[k] {
				s.report(rel, fmt.Sprintf("forbidden field %q at %s", k, p))
			}
			s.strings(k, rel)
			s.walk(x[k], rel, p)
		}
	case []any:
		for i, e := range x {
			s.walk(e, rel, at+"["+strconv.Itoa(i)+"]")
		}
	case string:
		s.strings(x, rel)
	}
}

func (s *privacyScan) strings(str, rel string) {
	if len(str) >= keyLen {
		b := []byte(str)
		s.m.scan(b, len(b), func(p int) { s.substringFound(rel, p) })
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
// overlap bytes so that a match across two chunks is seen. A read error
// ends the search after what was read is searched, and is returned.
func (s *privacyScan) stream(r io.Reader, rel string) error {
	buf := make([]byte, 0, s.chunk+s.overlap)
	for {
		var rerr error
		for len(buf) < cap(buf) && rerr == nil {
			var n int
			n, rerr = r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			s.fig["bytes_scanned"] += float64(n)
		}
		limit := len(buf)
		if rerr == nil {
			limit = len(buf) - s.overlap
		}
		s.m.scan(buf, limit, func(p int) { s.substringFound(rel, p) })
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
