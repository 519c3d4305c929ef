// Command hello is the package testbin's tests build.
package main

func main() {}
