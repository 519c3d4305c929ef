// Command check verifies a campaign directory against the promises of
// crash-consistent resume (package crashcheck), for bench/torture.sh.
//
//	check -d DIR -snapshot FILE          after a kill: snapshot the campaign,
//	                                     compare with FILE's, save to FILE
//	check -d DIR -snapshot FILE -final   after the campaign ended: the same,
//	                                     then the end-state checks
//	  [-impostors FILE]                  and the spans in which an impostor
//	                                     held a port (PORT FROM_NS TO_NS):
//	                                     how many attempts it failed, on stderr
//
// It prints one "violation: ..." line per broken promise and exits 1 when
// there is any, 2 when the campaign could not be read. No controller may
// run on DIR meanwhile.
package main

import (
	"flag"
	"fmt"
	"os"

	"warden/bench/crashcheck"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("d", "", "campaign directory")
	file := flag.String("snapshot", "", "snapshot file: read as the one before, then replaced")
	final := flag.Bool("final", false, "the campaign has ended: check its end state too")
	impostors := flag.String("impostors", "", "with -final: a file of the spans an impostor held a port (PORT FROM_NS TO_NS a line); attempts whose measuring ended inside one must not be complete")
	flag.Parse()
	if *dir == "" || *file == "" {
		fmt.Fprintln(os.Stderr, "check: -d DIR and -snapshot FILE are required")
		return 2
	}
	prev, err := crashcheck.Load(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		return 2
	}
	cur, vs, err := crashcheck.Take(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		return 2
	}
	if prev != nil {
		vs = append(vs, crashcheck.Compare(prev, cur)...)
	}
	if *final {
		fv, err := crashcheck.Final(*dir, cur)
		if err != nil {
			fmt.Fprintln(os.Stderr, "check:", err)
			return 2
		}
		vs = append(vs, fv...)
		if *impostors != "" {
			spans, err := crashcheck.ReadSpans(*impostors)
			if err != nil {
				fmt.Fprintln(os.Stderr, "check:", err)
				return 2
			}
			iv, caught, err := crashcheck.Impostors(*dir, spans)
			if err != nil {
				fmt.Fprintln(os.Stderr, "check:", err)
				return 2
			}
			vs = append(vs, iv...)
			fmt.Fprintf(os.Stderr, "impostors: %d spans, %d attempts failed naming a port impostor\n", len(spans), caught)
		}
	}
	if err := cur.Save(*file); err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		return 2
	}
	for _, v := range vs {
		fmt.Println("violation:", v)
	}
	if len(vs) > 0 {
		return 1
	}
	return 0
}
