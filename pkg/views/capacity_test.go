package views

import (
	"bytes"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/state"
)

// TestStatusCapacity: ctlq status says where each capacity search stands,
// and that a found rate is not a capacity when the search's verdicts are
// not monotonic.
func TestStatusCapacity(t *testing.T) {
	var b bytes.Buffer
	PrintStatus(&b, api.Status{Campaign: api.CampaignStatus{ID: "c", State: "stopped", CapacitySearches: []state.CapacitySearch{
		{Search: "cap/A", Judged: 6, FoundRPS: 6, NotMonotonic: "point A.open.x050 failed the SLO at 3 requests/s, below point A.open.b5 that passed it at 6 requests/s"},
		{Search: "cap/B", Judged: 1, Done: true, Stop: "below-range"},
		{Search: "cap/C", Judged: 2},
	}}})
	for _, want := range []string{
		"capacity   cap/A: found 6 requests/s (6 points judged); NOT A CAPACITY: point A.open.x050 failed the SLO at 3 requests/s, below point A.open.b5 that passed it at 6 requests/s\n",
		"capacity   cap/B: ended below-range, nothing found (1 points judged, done)\n",
		"capacity   cap/C: searching (2 points judged)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("status lacks %q:\n%s", want, b.String())
		}
	}
}
