// Command stepgap prints, for each campaign directory given, how long its
// attempts took from their creation to their server's exec (for the
// Slurm executor: srun, the step's start, the node-side runner and its
// preflight; locally: preflight), as the minimum, median, 90th percentile
// and maximum over its attempts.
package main

import (
	"fmt"
	"os"
	"sort"
	"time"

	"warden/pkg/dirlayout"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: stepgap DIR...")
		os.Exit(2)
	}
	for _, dir := range os.Args[1:] {
		if err := report(dir); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
			os.Exit(1)
		}
	}
}

func report(dir string) error {
	s, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return err
	}
	defer s.Close()
	runs, err := s.Runs()
	if err != nil {
		return err
	}
	var gaps []float64
	executor := "local"
	for _, r := range runs {
		as, err := s.Attempts(r.ID)
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.Slurm != nil {
				executor = "slurm"
			}
			for _, p := range a.Procs {
				if p.Role == "server" {
					gaps = append(gaps, p.StartedAt.Sub(a.CreatedAt).Seconds()*1000)
				}
			}
		}
	}
	if len(gaps) == 0 {
		return fmt.Errorf("no attempt started a server")
	}
	sort.Float64s(gaps)
	q := func(f float64) float64 { return gaps[min(len(gaps)-1, int(f*float64(len(gaps))))] }
	fmt.Printf("%-6s %3d attempts: attempt created to server exec: min %.0f ms, median %.0f ms, p90 %.0f ms, max %.0f ms\n",
		executor, len(gaps), gaps[0], q(0.5), q(0.9), gaps[len(gaps)-1])
	return nil
}
