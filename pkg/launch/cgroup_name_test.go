package launch

import (
	"strings"
	"testing"
)

// Any run or campaign id maps to a valid, distinct cgroup name; a valid
// one is kept as it is.
func TestCgroupName(t *testing.T) {
	long := strings.Repeat("coloc.solo.P05.C00.saturation", 5) // 145 characters
	cases := []string{"p1.saturation.a1.server", long + ".a1.server", long + ".a2.server", "ünïcode run/with spaces", ".hidden", strings.Repeat("x", 300)}
	seen := map[string]string{}
	for _, s := range cases {
		n := CgroupName(s)
		if !validName.MatchString(n) {
			t.Errorf("CgroupName(%q) = %q, not a valid name", s, n)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%q and %q both map to %q", s, other, n)
		}
		seen[n] = s
	}
	if n := CgroupName("p1.saturation.a1.server"); n != "p1.saturation.a1.server" {
		t.Errorf("a valid name changed: %q", n)
	}
}
