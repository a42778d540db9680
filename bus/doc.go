// Package bus owns everything NATS in quarry: the embedded nats-server that
// `quarry bus` (and `quarry manager` / `quarry dev`) runs — a single node, a
// cluster joined by routes, sites joined by gateways — or a connection to an
// external NATS; the subject scheme of SPEC §6; typed request/reply with
// deadlines and a distinct "nobody serves this" answer; chunked, checksummed
// streams under credit-based flow control for anything larger than one NATS
// message; and the per-role users and permissions of SPEC §11.
//
// bus imports nothing of ours. The messages roles exchange live in api/;
// bus only moves bytes and typed values. See DESIGN.md for why it is built
// the way it is.
package bus
