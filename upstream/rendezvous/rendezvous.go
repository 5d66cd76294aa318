package rendezvous

import "github.com/cespare/xxhash/v2"

// weight is member's weight for key: xxhash of the member, a separator no
// HOST:PORT holds, and the key.
func weight(member, key string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(member)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(key)
	return d.Sum64()
}

// Pick is the member of members with the highest weight for key ("" when
// members is empty). The order of members does not matter; a tie (equal
// 64-bit weights) goes to the smaller member.
func Pick(key string, members []string) string {
	best, bestW := "", uint64(0)
	for i, m := range members {
		w := weight(m, key)
		if i == 0 || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}
