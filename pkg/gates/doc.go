// Package gates holds the campaign's checks and their verdicts. A gate
// reads what it is given (GPU snapshots, files, figures) and returns a
// Verdict; it never starts or kills a process and never writes state. The
// controller gathers the inputs, records the verdicts and acts on them.
//
// # Invariants
//
//   - A gate is a function of its arguments and, for the gates that read
//     files (EffectiveConfigDir, PrivacyScan, ReadThroughput,
//     IndexPrivate, ReadHostRecord), of what it reads. The time of a
//     verdict is the now the caller passes; no gate reads a clock.
//   - Every verdict is one of Pass, Fail, Error. Fail means the gate looked
//     and the thing is wrong; Error means the gate could not look (a bad
//     pattern, an unreadable file, an unknown affinity, a zero baseline).
//     A caller must never treat Error as Pass.
//   - Figures are plain numbers keyed by stable snake_case names; they are
//     recorded with the verdict and never renamed.
//   - Reading is bounded: startup logs are read up to MaxServerLogBytes per
//     file, files larger than the caller's limit are searched as a byte
//     stream instead of parsed, a HostRecord lists at most MaxOtherProcs
//     processes.
//
// # What a caller does with a verdict
//
// Each gate's doc comment says what its fail means. In short: preflight,
// port, CPU locality, effective config, cleanup and privacy fails stop the
// campaign (the seed's fixed stop conditions); a validator fail fails the
// run; a drain fail quarantines the run (DrainQuarantine) or fails it
// (DrainWatchdog); a co-location fail withholds the regime and sends the
// campaign to the next one; the stop rules stop new launches.
//
// # Caveats
//
//   - The privacy scan looks for keys and substrings, not meaning: a prompt
//     that was paraphrased, re-encoded in a way the scan does not try
//     (base64, another compression than gzip), or cut shorter than a
//     derived substring passes. It is a tripwire, not a proof.
//   - Gates never follow symbolic links; PrivacyScan reports them.
package gates
