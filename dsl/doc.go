// Package dsl will hold the flow description language: flows, steps,
// compensations, delays and per-run conditions, as pure values with no I/O.
// It imports neither broker nor persistence.
package dsl
