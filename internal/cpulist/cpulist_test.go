package cpulist

import (
	"slices"
	"testing"
)

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in, format string
		want       []int
	}{
		{"0-3", "0-3", []int{0, 1, 2, 3}},
		{" 0,2,4-7 ", "0,2,4-7", []int{0, 2, 4, 5, 6, 7}},
		{"5,1-2,2", "1-2,5", []int{1, 2, 5}},
		{"65535", "65535", []int{65535}},
		{"0-3,8,10-11\n", "0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}},
		{"5-5", "5", []int{5}},
	} {
		got, err := Parse(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if f := Format(got); f != tc.format {
			t.Errorf("Format(%v) = %q, want %q", got, f, tc.format)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, in := range []string{"", " ", "a", "-1", "3-1", "1-x", "0-65536", "1,,2"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, got)
		}
	}
}

// Format takes CPU numbers in any order, repeats included.
func TestFormatUnsorted(t *testing.T) {
	in := []int{8, 3, 0, 1, 2, 3}
	if f := Format(in); f != "0-3,8" {
		t.Errorf("Format(%v) = %q, want 0-3,8", in, f)
	}
	if !slices.Equal(in, []int{8, 3, 0, 1, 2, 3}) {
		t.Errorf("Format changed its argument: %v", in)
	}
}
