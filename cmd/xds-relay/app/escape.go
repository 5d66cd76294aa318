package app

import (
	"fmt"
	"unicode/utf8"
)

// What the admin port shows raw of client- and upstream-chosen text (node
// ids, NACK messages, resource names): everything but the characters a
// terminal or a browser would act on instead of showing. Those are
// escaped where a page or a JSON document leaves the relay, at the one
// point each is written (statusPage, writeJSON, /readyz), not field by
// field: a field added later is covered too.

// hiddenRune reports whether r changes how the text around it is shown
// rather than showing itself: C0 controls but tab and newline (ESC starts
// terminal sequences, BEL rings, CR overwrites the line), DEL, C1 controls
// (0x9B is an 8-bit CSI), and the bidirectional formatting characters
// (U+202E makes "evil" read "live"): the marks U+200E, U+200F and U+061C,
// the embeddings and overrides U+202A–U+202E and the isolates U+2066–U+2069.
func hiddenRune(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\t' && r != '\n'
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// escapeText shows each hidden rune of b as Go writes it in a string
// literal (`\x1b`, `\u202e`), for a page a person reads: the operator sees
// that the character is there and which it is. Bytes that are not UTF-8
// are kept as they are (html/template and the browser show U+FFFD).
func escapeText(b []byte) []byte {
	return escapeHidden(b, func(r rune) string {
		if r < 0x80 {
			return fmt.Sprintf(`\x%02x`, r)
		}
		return fmt.Sprintf(`\u%04x`, r)
	})
}

// escapeJSON writes each hidden rune of an encoding/json document as a
// \u escape: the document decodes to the same strings, and a terminal
// showing it is not steered. encoding/json escapes the C0 controls itself;
// hidden runes can only be inside strings, since the rest of JSON is
// printable ASCII.
func escapeJSON(b []byte) []byte {
	return escapeHidden(b, func(r rune) string { return fmt.Sprintf(`\u%04x`, r) })
}

// escapeHidden replaces each hidden rune of b by form(r); b itself when it
// has none.
func escapeHidden(b []byte, form func(rune) string) []byte {
	i := firstHidden(b)
	if i < 0 {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if hiddenRune(r) {
			out = append(out, form(r)...)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// firstHidden is the index of b's first hidden rune, or -1.
func firstHidden(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if hiddenRune(r) {
			return i
		}
		i += n
	}
	return -1
}

// EscapeHidden is s with each hidden rune written as Go writes it in a
// string literal (`\x1b`, `\u202e`), as escapeText; s itself when it has
// none. The logger's encoder uses it on every string it writes.
func EscapeHidden(s string) string {
	for _, r := range s {
		if hiddenRune(r) {
			return string(escapeText([]byte(s)))
		}
	}
	return s
}
