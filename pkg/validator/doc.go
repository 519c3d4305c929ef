// Package validator runs a protocol's validators as bounded child
// processes: the address-space bound (BoundedArgv), the time bound
// (Timeout), and the re-run of an ended attempt's validators over its
// recorded artifacts (Revalidate), as an amendment's re-adjudication does.
// The attempt lifecycle runs them the first time, with the same bounds.
//
// It starts processes only through the caller's launcher, reads what a
// validator wrote through safefile (at most safefile.ChildLimit bytes),
// and writes nothing into an ended attempt's directory: a re-run's output
// goes to the directory the caller names. It touches no database and no
// GPU.
//
// # Environment
//
// A re-run validator sees the attempt's recorded launch variables
// (environment.json) as WARDEN_* variables, its recorded signals as
// EnvSignalsFile (signals.json in the attempt directory), and EnvSanityOut,
// where controller validate sanity writes sanity.json instead of the
// ended attempt's directory.
package validator
