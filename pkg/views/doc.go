// Package views is ctlq's text: what status, runs, show and events print
// (the live view of watch is its subpackage, watch). Each view is a
// function of what the query API answers (pkg/api) and, for show, of the
// files of the attempt directories that it reads on this host: the data
// sanity blocks (sanity.json) and the end of a failed process's standard
// error (ROLE.err), which a StderrGuard shows only from under the
// campaign's runs/ directory, never through a link, never under a private
// input's directory, and never when it holds private text.
//
// Nothing here starts a process or writes a file.
package views
