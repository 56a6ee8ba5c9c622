// Package steps will hold reusable step building blocks for flows: call a
// function, publish a message, transform or branch with an expr-lang
// expression, wait, and run an in-process saga as one step.
package steps
