package gpu

// Reader reads the given fields of the GPUs with the given indices, in
// that order: the one read a backend implements.
type Reader interface {
	Read(indices []int, fields Fields) ([]Reading, error)
}

// Views gives a backend the reads its callers name, each a Read of a
// fixed set of fields. A backend embeds it, set to itself.
type Views struct{ Reader }

// Sample reads what a periodic sample reads (Sampled): memory, clocks,
// clock-event reasons, power, temperature and the processes.
func (v Views) Sample(indices []int) ([]Reading, error) { return v.Read(indices, Sampled) }

// Energy reads the energy counters alone.
func (v Views) Energy(indices []int) ([]Reading, error) { return v.Read(indices, Energy) }

// Info reads every field.
func (v Views) Info(indices []int) ([]Reading, error) { return v.Read(indices, All) }

// States turns readings of memory and processes into the gates' view of
// the GPUs. Every reading must hold memory used.
func States(rs []Reading) []State {
	out := make([]State, 0, len(rs))
	for _, r := range rs {
		st := State{Index: r.Index, UUID: r.UUID, UsedMiB: *r.MemoryUsedMiB}
		if len(r.Procs) > 0 {
			st.Procs = r.Procs // a fresh slice of this read's
		}
		out = append(out, st)
	}
	return out
}
