// Package testcampaign builds the parts of a campaign directory that tests
// of several packages need, with the product's own writers, and the text
// of the stand-in protocols their harnesses run.
package testcampaign

import (
	"os"
	"path/filepath"
	"testing"

	"warden/pkg/provenance"
)

// RecordPrivateManifest writes a manifest at path, one request whose
// prompt is text, in a directory of mode 0700 made as needed, and records
// it as the only input of the campaign dir, a private manifest, in the
// campaign's provenance.
func RecordPrivateManifest(t testing.TB, dir, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"prompt": "`+text+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := provenance.Record(dir, []provenance.Entry{{Path: path, Role: "manifest", Private: true}}, provenance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := provenance.Write(dir, entries, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
}
