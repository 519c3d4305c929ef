//go:build race

package main

// raceBuild says the test binary runs with the race detector; TestMain then
// builds the binaries under test with it too, since they, not the test
// binary, run the campaign's goroutines.
const raceBuild = true
