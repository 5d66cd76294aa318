package app

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// ConfigErrors is every problem found in a configuration, each a
// *ConfigError; errors.As finds the first.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets errors.As and errors.Is see each problem.
func (es ConfigErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// orNil is es as an error, nil when there is no problem.
func (es ConfigErrors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// sortByLine puts the problems in file order (those without a line, for
// keys absent from the file, last), keeping the checking order among equals.
func (es ConfigErrors) sortByLine() {
	slices.SortStableFunc(es, func(a, b *ConfigError) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // the one with a line first
		}
		return cmp.Compare(a.Line, b.Line)
	})
}

// asConfigErrors is err's problems: each of a ConfigErrors, or err alone.
func asConfigErrors(err error) ConfigErrors {
	var es ConfigErrors
	if errors.As(err, &es) {
		return es
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		return ConfigErrors{ce}
	}
	return nil
}
