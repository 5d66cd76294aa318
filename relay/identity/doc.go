// Package identity owns node identity binding: which downstream clients may
// claim which nodes. A Binder holds operator rules tying a client
// certificate's identity (a URI SAN such as a SPIFFE ID, or a DNS SAN) to the
// node ids and node classes that identity may present, and its Authorize
// checks a stream's first request against them (it is the relay.Options
// Authorize hook).
//
// It reads only the verified peer certificate gRPC puts in the stream's
// context; it does not configure TLS, load certificates or classify nodes
// (the class it checks is the one package shard computed).
package identity
