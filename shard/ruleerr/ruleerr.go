// Package ruleerr is the error of an operator rule list: which rule, which of
// its fields, and what is wrong with it. Package shard (node-class rules) and
// package identity (identity rules) return it, so that a caller mapping rules
// to a configuration file finds the key with errors.As instead of parsing
// the message. It depends on nothing but the standard library. It sits under
// shard, which returns it and which relay/identity, like all of relay, may
// import.
package ruleerr

import "fmt"

// RuleError is a problem with field Field (the rule's own name for it, such
// as "regex" or "node_id") of the rule at Index (from 0) of a rule list.
type RuleError struct {
	Index int
	Field string
	Err   error
}

// New is a RuleError for field of rule index, saying err.
func New(index int, field string, err error) *RuleError {
	return &RuleError{Index: index, Field: field, Err: err}
}

// Error is "rules[INDEX].FIELD: ERR".
func (e *RuleError) Error() string {
	return fmt.Sprintf("rules[%d].%s: %v", e.Index, e.Field, e.Err)
}

// Unwrap is the underlying error (a regexp error, for instance).
func (e *RuleError) Unwrap() error { return e.Err }
