package mountinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Paths are unescaped, the super block's options split, and a line that
// is not a mount's is passed over.
func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	table := "36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 - ext4 /dev/root rw,emergency_ro\n" +
		"not a mount\n" +
		"40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Root: "/mnt1", Point: "/mnt 2", FSType: "ext4", SuperOptions: []string{"rw", "emergency_ro"}},
		{Root: "/", Point: "/sys/fs/cgroup", FSType: "cgroup2", SuperOptions: []string{"rw"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("an absent table read without error")
	}
	if u := Unescape(`a\134b\011c\x`); u != "a\\b\tc\\x" {
		t.Fatalf("Unescape: %q", u)
	}
}
