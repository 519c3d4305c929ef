package protocols

// SlotNames names slots, in order, for records and messages.
func SlotNames(slots []SlotInfo) []string {
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = s.Name
	}
	return out
}
