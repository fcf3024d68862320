// Package apicheck holds the test that keeps leasectl's public Go API to
// the packages it means to keep: see its test.
package apicheck
