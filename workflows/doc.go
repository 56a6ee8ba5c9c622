// Package workflows holds the flows shipped with the acemq-flow binary: the
// demo and the flows a new user runs first. Until the engine exists, the
// demo ([Demo]) is written directly against package broker.
package workflows
